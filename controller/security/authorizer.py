"""The authorizer: Kafka's ``StandardAuthorizer`` decision rules over an immutable set of ACL bindings.

Rules (Kafka's ``StandardAuthorizerData.authorize``; the tests in ``tests/security/test_authorizer.py``
cite them):

* Z1. A super user (``super.users``, principals separated by ``;``) is allowed everything.
* Z2. The ACLs that count for a request are those whose pattern applies to the resource (LITERAL equal name,
  LITERAL ``*``, PREFIXED prefix of the name), whose principal is the caller's or ``User:*`` (for a ``User:``
  caller), and whose host is the caller's or ``*``.
* Z3. DENY wins: one counting DENY of the operation (or ALL) denies, whatever allows it.
* Z4. Otherwise one counting ALLOW of the operation, of ALL or of an operation implying it (``acl.py`` A3)
  allows.
* Z5. Otherwise, when no ACL at all applies to the resource (whoever it names), the answer is
  ``allow.everyone.if.no.acl.found`` (false by default); when some ACL applies, the answer is deny.

The authorizer is a value: built from the ACL bindings of one metadata image, never mutated, shared by
threads without locks. A new image builds a new authorizer.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from metadata.acl import (
    WILDCARD_HOST,
    WILDCARD_PRINCIPAL,
    WILDCARD_RESOURCE,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    allowing_operations,
    parse_principal,
)

SUPER_USERS_CONFIG = "super.users"
ALLOW_EVERYONE_CONFIG = "allow.everyone.if.no.acl.found"


def parse_super_users(value: str) -> frozenset[str]:
    """Kafka's ``super.users``: principals separated by ``;`` (``User:admin;User:CN=broker-1``)."""
    users = frozenset(part.strip() for part in value.split(";") if part.strip())
    for user in users:
        parse_principal(user)
    return users


_Key = tuple[ResourceType, str]


def _index(bindings: Iterable[AclBinding], pattern_type: PatternType) -> Mapping[_Key, tuple[AclBinding, ...]]:
    out: dict[_Key, list[AclBinding]] = {}
    for binding in bindings:
        if binding.pattern.pattern_type is pattern_type:
            out.setdefault((binding.pattern.resource_type, binding.pattern.name), []).append(binding)
    return {key: tuple(value) for key, value in out.items()}


@dataclass(frozen=True, slots=True)
class Authorizer:
    """Decides whether a principal may perform an operation on a resource (rules Z1-Z5).

    Immutable; safe to share between threads. ``authorize`` costs a dictionary lookup per prefix of the
    resource name plus the ACLs found, so a request's check does not grow with the number of ACLs elsewhere.
    """

    bindings: frozenset[AclBinding] = frozenset()
    super_users: frozenset[str] = frozenset()
    allow_everyone_if_no_acl_found: bool = False
    _literal: Mapping[_Key, tuple[AclBinding, ...]] = field(init=False, repr=False, compare=False)
    _prefixed: Mapping[_Key, tuple[AclBinding, ...]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_literal", _index(self.bindings, PatternType.LITERAL))
        object.__setattr__(self, "_prefixed", _index(self.bindings, PatternType.PREFIXED))

    def with_bindings(self, bindings: Iterable[AclBinding]) -> Authorizer:
        """The same settings over another set of ACLs (a new metadata image)."""
        return Authorizer(frozenset(bindings), self.super_users, self.allow_everyone_if_no_acl_found)

    def _applicable(self, resource_type: ResourceType, name: str) -> list[AclBinding]:
        """Z2's first part: every ACL whose pattern applies to the resource."""
        found: list[AclBinding] = []
        found.extend(self._literal.get((resource_type, name), ()))
        if name != WILDCARD_RESOURCE:
            found.extend(self._literal.get((resource_type, WILDCARD_RESOURCE), ()))
        for end in range(1, len(name) + 1):
            found.extend(self._prefixed.get((resource_type, name[:end]), ()))
        return found

    def authorize(
        self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType, name: str
    ) -> bool:
        """Whether ``principal`` connecting from ``host`` may perform ``operation`` on the resource (Z1-Z5)."""
        if principal in self.super_users:
            return True  # Z1
        applicable = self._applicable(resource_type, name)
        if not applicable:
            return self.allow_everyone_if_no_acl_found  # Z5
        allowing = allowing_operations(operation)
        is_user = principal.startswith("User:")
        allowed = False
        for binding in applicable:
            entry = binding.entry
            if entry.principal != principal and (entry.principal != WILDCARD_PRINCIPAL or not is_user):
                continue  # Z2
            if entry.host != host and entry.host != WILDCARD_HOST:
                continue  # Z2
            if entry.permission_type is AclPermissionType.DENY:
                if entry.operation is operation or entry.operation is AclOperation.ALL:
                    return False  # Z3
            elif entry.operation in allowing:
                allowed = True  # Z4 (keep looking: a DENY still wins)
        return allowed  # Z4, or Z5's deny

    def authorize_any(
        self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType
    ) -> bool:
        """Whether ``principal`` may perform ``operation`` on at least one resource of the type.

        Kafka's ``authorizeByResourceType`` (used for IDEMPOTENT_WRITE and ``CreateTopics`` on any topic):
        allowed when some ALLOW for the principal (or ``User:*``) exists whose resource no DENY of the same
        principal covers wholly (a LITERAL ``*`` or PREFIXED DENY of a prefix of the ALLOW's name).
        """
        if principal in self.super_users:
            return True
        allowing = allowing_operations(operation)
        is_user = principal.startswith("User:")

        def counts(binding: AclBinding) -> bool:
            entry = binding.entry
            return (
                binding.pattern.resource_type is resource_type
                and (entry.principal == principal or (entry.principal == WILDCARD_PRINCIPAL and is_user))
                and entry.host in (host, WILDCARD_HOST)
            )

        denies = [
            b for b in self.bindings
            if counts(b) and b.entry.permission_type is AclPermissionType.DENY
            and b.entry.operation in (operation, AclOperation.ALL)
        ]
        for binding in self.bindings:
            if not counts(binding) or binding.entry.permission_type is not AclPermissionType.ALLOW:
                continue
            if binding.entry.operation not in allowing:
                continue
            if not any(_covers(deny, binding) for deny in denies):
                return True
        return self.allow_everyone_if_no_acl_found and not any(
            b.pattern.resource_type is resource_type for b in self.bindings
        )


def _covers(deny: AclBinding, allow: AclBinding) -> bool:
    """Whether ``deny``'s pattern denies every resource ``allow``'s pattern allows."""
    d, a = deny.pattern, allow.pattern
    if d.pattern_type is PatternType.LITERAL:
        if d.name == WILDCARD_RESOURCE:
            return True
        return a.pattern_type is PatternType.LITERAL and a.name == d.name
    return a.name.startswith(d.name) and not (a.pattern_type is PatternType.LITERAL and a.name == WILDCARD_RESOURCE)
