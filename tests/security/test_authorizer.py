"""The authorizer's rules Z1-Z5 (``controller/security/authorizer.py``) and the ACL data rules A1-A3."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.security.authorizer import Authorizer, parse_super_users
from metadata.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclError,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
    allowing_operations,
)

ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
Op = AclOperation


def acl(
    principal: str, op: AclOperation, perm: AclPermissionType = ALLOW, name: str = "orders",
    rtype: ResourceType = TOPIC, ptype: PatternType = LIT, host: str = "*",
) -> AclBinding:
    return AclBinding(ResourcePattern(rtype, name, ptype), AccessControlEntry(principal, host, op, perm))


def authz(*bindings: AclBinding, supers: str = "", everyone: bool = False) -> Authorizer:
    return Authorizer(frozenset(bindings), parse_super_users(supers), everyone)


def test_z1_super_user_is_allowed_everything_even_against_a_deny() -> None:
    a = authz(acl("User:admin", Op.ALL, DENY), supers="User:admin; User:CN=broker-1")
    assert a.authorize("User:admin", "10.0.0.1", Op.DELETE, TOPIC, "orders")
    assert a.authorize("User:CN=broker-1", "10.0.0.1", Op.CLUSTER_ACTION, CLUSTER, "kafka-cluster")
    assert not a.authorize("User:bob", "10.0.0.1", Op.DELETE, TOPIC, "orders")


def test_z5_no_acl_for_the_resource_follows_allow_everyone_if_no_acl_found() -> None:
    assert not authz().authorize("User:bob", "h", Op.READ, TOPIC, "orders")
    assert authz(everyone=True).authorize("User:bob", "h", Op.READ, TOPIC, "orders")
    # an ACL on the resource for someone else: no longer "no ACL found", so bob is denied even with everyone=True
    a = authz(acl("User:alice", Op.READ), everyone=True)
    assert not a.authorize("User:bob", "h", Op.READ, TOPIC, "orders")
    assert a.authorize("User:bob", "h", Op.READ, TOPIC, "payments")  # other resource: no ACL found


def test_z2_patterns_literal_prefixed_and_wildcard_resource() -> None:
    a = authz(
        acl("User:alice", Op.READ, name="orders"),
        acl("User:bob", Op.READ, name="pay", ptype=PRE),
        acl("User:carol", Op.READ, name="*"),
    )
    assert a.authorize("User:alice", "h", Op.READ, TOPIC, "orders")
    assert not a.authorize("User:alice", "h", Op.READ, TOPIC, "orders2")
    assert a.authorize("User:bob", "h", Op.READ, TOPIC, "payments")
    assert a.authorize("User:bob", "h", Op.READ, TOPIC, "pay")
    assert not a.authorize("User:bob", "h", Op.READ, TOPIC, "orders")
    assert a.authorize("User:carol", "h", Op.READ, TOPIC, "anything")
    assert not a.authorize("User:carol", "h", Op.READ, GROUP, "anything")  # another resource type
    # a PREFIXED "*" is an ordinary prefix, not a wildcard
    b = authz(acl("User:dan", Op.READ, name="*", ptype=PRE))
    assert not b.authorize("User:dan", "h", Op.READ, TOPIC, "orders")
    assert b.authorize("User:dan", "h", Op.READ, TOPIC, "*x")


def test_z2_wildcard_principal_and_hosts() -> None:
    a = authz(acl("User:*", Op.WRITE, host="10.0.0.1"))
    assert a.authorize("User:anyone", "10.0.0.1", Op.WRITE, TOPIC, "orders")
    assert not a.authorize("User:anyone", "10.0.0.2", Op.WRITE, TOPIC, "orders")
    assert not a.authorize("Group:x", "10.0.0.1", Op.WRITE, TOPIC, "orders")  # User:* names users only


def test_z3_deny_wins_over_allow_from_any_pattern() -> None:
    a = authz(
        acl("User:alice", Op.ALL, name="*"),
        acl("User:alice", Op.WRITE, DENY, name="ord", ptype=PRE),
    )
    assert not a.authorize("User:alice", "h", Op.WRITE, TOPIC, "orders")
    assert a.authorize("User:alice", "h", Op.READ, TOPIC, "orders")
    assert a.authorize("User:alice", "h", Op.WRITE, TOPIC, "payments")
    b = authz(acl("User:alice", Op.READ), acl("User:*", Op.ALL, DENY, host="10.9.9.9"))
    assert b.authorize("User:alice", "h", Op.READ, TOPIC, "orders")
    assert not b.authorize("User:alice", "10.9.9.9", Op.READ, TOPIC, "orders")


def test_z4_a3_implied_operations_allow_but_a_deny_implies_nothing() -> None:
    for op in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER):
        assert authz(acl("User:a", op)).authorize("User:a", "h", Op.DESCRIBE, TOPIC, "orders")
    assert authz(acl("User:a", Op.ALTER_CONFIGS)).authorize("User:a", "h", Op.DESCRIBE_CONFIGS, TOPIC, "orders")
    assert not authz(acl("User:a", Op.CREATE)).authorize("User:a", "h", Op.DESCRIBE, TOPIC, "orders")
    assert not authz(acl("User:a", Op.DESCRIBE)).authorize("User:a", "h", Op.READ, TOPIC, "orders")
    # DENY READ does not deny DESCRIBE, which an ALLOW of WRITE implies
    a = authz(acl("User:a", Op.WRITE), acl("User:a", Op.READ, DENY))
    assert a.authorize("User:a", "h", Op.DESCRIBE, TOPIC, "orders")
    assert not a.authorize("User:a", "h", Op.READ, TOPIC, "orders")


def test_authorize_any_by_resource_type() -> None:
    a = authz(acl("User:a", Op.WRITE, name="orders"))
    assert a.authorize_any("User:a", "h", Op.WRITE, TOPIC)
    assert not a.authorize_any("User:b", "h", Op.WRITE, TOPIC)
    denied = authz(acl("User:a", Op.WRITE, name="orders"), acl("User:a", Op.WRITE, DENY, name="ord", ptype=PRE))
    assert not denied.authorize_any("User:a", "h", Op.WRITE, TOPIC)
    partly = authz(acl("User:a", Op.WRITE, name="o", ptype=PRE), acl("User:a", Op.WRITE, DENY, name="orders"))
    assert partly.authorize_any("User:a", "h", Op.WRITE, TOPIC)
    assert authz(everyone=True).authorize_any("User:x", "h", Op.WRITE, TOPIC)


def test_a1_a2_validation() -> None:
    acl("User:a", Op.READ).validate()
    bad = [
        acl("alice", Op.READ),  # no principal type
        acl("User:", Op.READ),
        acl("User:a", Op.ANY),
        acl("User:a", Op.READ, AclPermissionType.ANY),
        acl("User:a", Op.READ, ptype=PatternType.MATCH),
        acl("User:a", Op.READ, name=""),
        acl("User:a", Op.CREATE, rtype=CLUSTER, name="other"),
        acl("User:a", Op.CLUSTER_ACTION, rtype=TOPIC),  # A2: not valid on a topic
        acl("User:a", Op.WRITE, rtype=GROUP, name="g"),
        acl("User:a", Op.READ, host=""),
    ]
    for binding in bad:
        with pytest.raises(AclError):
            binding.validate()
    acl("User:a", Op.CLUSTER_ACTION, rtype=CLUSTER, name="kafka-cluster").validate()


def test_filters_any_literal_and_match() -> None:
    lit = acl("User:a", Op.READ, name="orders")
    pre = acl("User:a", Op.READ, name="ord", ptype=PRE)
    wild = acl("User:b", Op.WRITE, name="*")
    other = acl("User:a", Op.READ, name="payments")
    everything = [lit, pre, wild, other]

    def select(f: AclBindingFilter) -> set[AclBinding]:
        f.validate()
        return {b for b in everything if f.matches(b)}

    assert select(AclBindingFilter()) == set(everything)
    assert select(AclBindingFilter(TOPIC, "orders", PatternType.LITERAL)) == {lit}
    assert select(AclBindingFilter(TOPIC, "ord", PatternType.ANY)) == {pre}
    assert select(AclBindingFilter(TOPIC, "orders", PatternType.MATCH)) == {lit, pre, wild}
    assert select(AclBindingFilter(principal="User:b")) == {wild}
    assert select(AclBindingFilter(operation=Op.READ, permission_type=ALLOW)) == {lit, pre, other}
    with pytest.raises(AclError):
        AclBindingFilter(pattern_type=PatternType.MATCH).validate()


# --- the indexed authorizer against a direct reading of the rules, on random ACL sets ---------------------

NAMES = st.sampled_from(["orders", "ord", "o", "*", "payments", "pay", ""])
PRINCIPALS = st.sampled_from(["User:alice", "User:bob", "User:*"])
OPS = st.sampled_from([Op.ALL, Op.READ, Op.WRITE, Op.DELETE, Op.ALTER, Op.DESCRIBE, Op.ALTER_CONFIGS,
                       Op.DESCRIBE_CONFIGS, Op.CREATE])
BINDINGS = st.builds(
    lambda p, op, perm, name, pt, host: acl(p, op, perm, name=name or "o", ptype=pt, host=host),
    PRINCIPALS, OPS, st.sampled_from([ALLOW, DENY]), NAMES, st.sampled_from([LIT, PRE]), st.sampled_from(["*", "h1"]),
)


def reference(bindings: set[AclBinding], supers: set[str], everyone: bool, principal: str, host: str,
              op: AclOperation, name: str) -> bool:
    """Z1-Z5 read literally, with no index."""
    if principal in supers:
        return True

    def applies(b: AclBinding) -> bool:
        p = b.pattern
        if p.pattern_type is LIT:
            return p.name in (name, "*")
        return name.startswith(p.name)

    on_resource = [b for b in bindings if applies(b)]
    if not on_resource:
        return everyone
    mine = [b for b in on_resource if b.entry.principal in (principal, "User:*") and b.entry.host in (host, "*")]
    if any(b.entry.permission_type is DENY and b.entry.operation in (op, Op.ALL) for b in mine):
        return False
    implied = {Op.DESCRIBE: {Op.READ, Op.WRITE, Op.DELETE, Op.ALTER}, Op.DESCRIBE_CONFIGS: {Op.ALTER_CONFIGS}}
    return any(
        b.entry.permission_type is ALLOW
        and (b.entry.operation in (op, Op.ALL) or b.entry.operation in implied.get(op, ()))
        for b in mine
    )


@settings(max_examples=300, deadline=None)
@given(
    bindings=st.sets(BINDINGS, max_size=8),
    everyone=st.booleans(),
    principal=st.sampled_from(["User:alice", "User:bob", "User:carol"]),
    host=st.sampled_from(["h1", "h2"]),
    op=OPS.filter(lambda o: o is not Op.ALL),
    name=st.sampled_from(["orders", "ord", "o", "*", "payments", "pay", "x"]),
)
def test_authorizer_agrees_with_the_rules_read_literally(
    bindings: set[AclBinding], everyone: bool, principal: str, host: str, op: AclOperation, name: str
) -> None:
    a = Authorizer(frozenset(bindings), frozenset({"User:root"}), everyone)
    assert a.authorize(principal, host, op, TOPIC, name) == reference(bindings, {"User:root"}, everyone, principal,
                                                                       host, op, name)
    assert a.authorize("User:root", host, op, TOPIC, name)


def test_allowing_operations_table() -> None:
    assert allowing_operations(Op.DESCRIBE) == {Op.DESCRIBE, Op.ALL, Op.READ, Op.WRITE, Op.DELETE, Op.ALTER}
    assert allowing_operations(Op.WRITE) == {Op.WRITE, Op.ALL}
