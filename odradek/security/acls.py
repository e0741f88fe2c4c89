"""ACL bindings and filters as clients see them (Kafka's ``AclBinding``, ``AclBindingFilter``).

The enums carry Kafka's numeric codes, the same as the cluster side's ``metadata/acl.py`` (clients
cannot import it; ``tests/security/test_admin_types.py`` checks that the two agree). The cluster validates
every binding; these types only carry them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from proto import security_pb2 as pb


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


CLUSTER_NAME = "kafka-cluster"


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL: on ``resource_type`` ``name`` (``pattern_type``), ``principal`` from ``host`` is ALLOWed or
    DENYed ``operation``."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType

    def to_pb(self) -> pb.AclBinding:
        return pb.AclBinding(
            resource_type=self.resource_type, resource_name=self.name, pattern_type=self.pattern_type,
            principal=self.principal, host=self.host, operation=self.operation,
            permission_type=self.permission_type,
        )  # fmt: skip

    @classmethod
    def from_pb(cls, m: pb.AclBinding) -> AclBinding:
        return cls(
            ResourceType(m.resource_type), m.resource_name, PatternType(m.pattern_type), m.principal, m.host,
            AclOperation(m.operation), AclPermissionType(m.permission_type),
        )  # fmt: skip

    def __str__(self) -> str:
        """Like ``kafka-acls --list``: ``(principal=User:a, host=*, operation=READ, permissionType=ALLOW)``."""
        return (
            f"(principal={self.principal}, host={self.host}, operation={self.operation.name}, "
            f"permissionType={self.permission_type.name})"
        )


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """Selects ACLs: None / ANY in a field matches every value (see ``docs/SECURITY.md``)."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission_type: AclPermissionType = AclPermissionType.ANY

    def to_pb(self) -> pb.AclFilter:
        m = pb.AclFilter(
            resource_type=self.resource_type, pattern_type=self.pattern_type, operation=self.operation,
            permission_type=self.permission_type,
        )  # fmt: skip
        if self.name is not None:
            m.resource_name = self.name
        if self.principal is not None:
            m.principal = self.principal
        if self.host is not None:
            m.host = self.host
        return m
