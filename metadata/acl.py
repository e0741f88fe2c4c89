"""ACL bindings as data: resource patterns, access control entries, and the filters that select them.

The names and numeric codes are Kafka's (``org.apache.kafka.common.acl`` and ``...resource``), so that an ACL
record in ``__cluster_metadata`` and a ``kafka-acls`` command line mean here what they mean there:

* an :class:`AclBinding` is a :class:`ResourcePattern` (resource type, name, LITERAL or PREFIXED) with an
  :class:`AccessControlEntry` (principal ``Type:name``, host, operation, ALLOW or DENY);
* an :class:`AclBindingFilter` selects bindings for ``acls list`` and ``acls remove``: ANY matches every
  value of a field, and the pattern type MATCH selects every pattern that *applies to* a resource name
  (the LITERAL name itself, the LITERAL wildcard ``*`` and every PREFIXED pattern the name starts with).

Rules the tests cite:

* A1. A binding holds concrete values only: no UNKNOWN, ANY or MATCH in it (Kafka's ``AclControlManager
  .validateNewAcl``); a principal is ``Type:name`` with both parts non-empty; a CLUSTER resource is named
  ``kafka-cluster``; the LITERAL name ``*`` is the wildcard resource, a PREFIXED ``*`` is an ordinary prefix.
* A2. An operation is valid on a resource type only as ``kafka-acls`` allows it (:data:`VALID_OPERATIONS`).
* A3. Implied operations (Kafka's ``AclEntry``/``StandardAuthorizerData``): an ALLOW of READ, WRITE, DELETE or
  ALTER also allows DESCRIBE; an ALLOW of ALTER_CONFIGS also allows DESCRIBE_CONFIGS. A DENY implies nothing
  beyond its own operation. ALL stands for every operation, for ALLOW and DENY alike.
"""

from __future__ import annotations

from dataclasses import dataclass

from common.acls import CLUSTER_RESOURCE_NAME as CLUSTER_RESOURCE_NAME  # the codes, here for the cluster's modules
from common.acls import AclOperation as AclOperation
from common.acls import AclPermissionType as AclPermissionType
from common.acls import PatternType as PatternType
from common.acls import ResourceType as ResourceType

WILDCARD_RESOURCE = "*"
WILDCARD_PRINCIPAL = "User:*"
WILDCARD_HOST = "*"


class AclError(ValueError):
    """A binding or filter that no ACL may hold (Kafka's INVALID_REQUEST)."""

    code = "INVALID_REQUEST"



_O = AclOperation
#: A2: the operations ``kafka-acls`` accepts on each resource type (``AclCommand.ResourceToValidOps``).
VALID_OPERATIONS: dict[ResourceType, frozenset[AclOperation]] = {
    ResourceType.TOPIC: frozenset(
        {_O.READ, _O.WRITE, _O.CREATE, _O.DESCRIBE, _O.DELETE, _O.ALTER, _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS,
         _O.ALL}
    ),
    ResourceType.GROUP: frozenset({_O.READ, _O.DESCRIBE, _O.DELETE, _O.ALL}),
    ResourceType.CLUSTER: frozenset(
        {_O.CREATE, _O.CLUSTER_ACTION, _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS, _O.IDEMPOTENT_WRITE, _O.ALTER,
         _O.DESCRIBE, _O.ALL}
    ),
    ResourceType.TRANSACTIONAL_ID: frozenset({_O.DESCRIBE, _O.WRITE, _O.ALL}),
}

#: A3: operation -> the operations whose ALLOW also allows it.
IMPLIED_BY: dict[AclOperation, frozenset[AclOperation]] = {
    _O.DESCRIBE: frozenset({_O.READ, _O.WRITE, _O.DELETE, _O.ALTER}),
    _O.DESCRIBE_CONFIGS: frozenset({_O.ALTER_CONFIGS}),
}


def allowing_operations(operation: AclOperation) -> frozenset[AclOperation]:
    """A3: the ACL operations whose ALLOW allows ``operation`` (itself, ALL and the ones implying it)."""
    return frozenset({operation, AclOperation.ALL}) | IMPLIED_BY.get(operation, frozenset())


def parse_principal(principal: str) -> tuple[str, str]:
    """``"User:alice"`` -> ``("User", "alice")``; A1: both parts non-empty (Kafka's ``SecurityUtils``)."""
    principal_type, sep, name = principal.partition(":")
    if not sep or not principal_type or not name:
        raise AclError(f"principal {principal!r} is not of the form Type:name (for example User:alice)")
    return principal_type, name


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    """What an ACL applies to: a resource type, a name and how the name matches (LITERAL or PREFIXED)."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType

    def validate(self) -> None:
        """A1: concrete values only; a CLUSTER resource is named ``kafka-cluster``."""
        if self.resource_type not in VALID_OPERATIONS:
            raise AclError(f"resource type {self.resource_type.name} cannot hold ACLs")
        if self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise AclError(f"pattern type {self.pattern_type.name} is not LITERAL or PREFIXED")
        if not self.name:
            raise AclError("a resource name must not be empty")
        if self.resource_type is ResourceType.CLUSTER and (
            self.name != CLUSTER_RESOURCE_NAME or self.pattern_type is not PatternType.LITERAL
        ):
            raise AclError(f"the CLUSTER resource is the LITERAL name {CLUSTER_RESOURCE_NAME!r}")

    def applies_to(self, resource_type: ResourceType, name: str) -> bool:
        """Whether this pattern covers the resource ``name`` (what the authorizer and MATCH filters use)."""
        if resource_type is not self.resource_type:
            return False
        if self.pattern_type is PatternType.LITERAL:
            return self.name == name or self.name == WILDCARD_RESOURCE
        if self.pattern_type is PatternType.PREFIXED:
            return name.startswith(self.name)
        return False


@dataclass(frozen=True, slots=True)
class AccessControlEntry:
    """Who (principal, host) may or may not (permission) do what (operation)."""

    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType

    def validate(self) -> None:
        """A1: concrete values only; the principal is ``Type:name``; the host is not empty."""
        parse_principal(self.principal)
        if not self.host:
            raise AclError("an ACL host must not be empty (use * for every host)")
        if self.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
            raise AclError(f"operation {self.operation.name} cannot be granted or denied")
        if self.permission_type not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
            raise AclError(f"permission type {self.permission_type.name} is not ALLOW or DENY")


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL: a resource pattern with an access control entry."""

    pattern: ResourcePattern
    entry: AccessControlEntry

    def validate(self) -> None:
        """A1 and A2."""
        self.pattern.validate()
        self.entry.validate()
        if self.entry.operation not in VALID_OPERATIONS[self.pattern.resource_type]:
            valid = ", ".join(sorted(op.name for op in VALID_OPERATIONS[self.pattern.resource_type]))
            raise AclError(
                f"operation {self.entry.operation.name} is not valid on a {self.pattern.resource_type.name} "
                f"resource (valid: {valid})"
            )


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """Selects ACL bindings: ``None`` (ANY) in a field matches every value of it.

    ``pattern_type`` ANY matches every pattern type with the same name; MATCH selects every pattern that
    applies to the resource ``name`` (LITERAL equal, LITERAL ``*``, PREFIXED prefixes of it).
    """

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission_type: AclPermissionType = AclPermissionType.ANY

    def validate(self) -> None:
        """No UNKNOWN field; MATCH needs a resource type and a name to match against."""
        for field_name, value in (
            ("resource type", self.resource_type), ("pattern type", self.pattern_type),
            ("operation", self.operation), ("permission type", self.permission_type),
        ):
            if value == 0:
                raise AclError(f"an ACL filter's {field_name} must not be UNKNOWN")
        if self.pattern_type is PatternType.MATCH and (self.name is None or self.resource_type is ResourceType.ANY):
            raise AclError("the pattern type MATCH needs a resource type and a resource name")
        if self.principal is not None:
            parse_principal(self.principal)

    def matches(self, binding: AclBinding) -> bool:
        """Whether ``binding`` is selected by this filter."""
        return self._matches_pattern(binding.pattern) and self._matches_entry(binding.entry)

    def _matches_pattern(self, pattern: ResourcePattern) -> bool:
        if self.resource_type is not ResourceType.ANY and pattern.resource_type is not self.resource_type:
            return False
        if self.pattern_type is PatternType.MATCH:
            assert self.name is not None  # validate()
            return pattern.applies_to(pattern.resource_type, self.name)
        if self.pattern_type is not PatternType.ANY and pattern.pattern_type is not self.pattern_type:
            return False
        return self.name is None or pattern.name == self.name

    def _matches_entry(self, entry: AccessControlEntry) -> bool:
        return (
            (self.principal is None or entry.principal == self.principal)
            and (self.host is None or entry.host == self.host)
            and (self.operation is AclOperation.ANY or entry.operation is self.operation)
            and (self.permission_type is AclPermissionType.ANY or entry.permission_type is self.permission_type)
        )
