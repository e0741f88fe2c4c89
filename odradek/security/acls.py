"""ACL bindings and filters as clients see them (Kafka's ``AclBinding``, ``AclBindingFilter``).

The enums, Kafka's numeric codes, are the ones the cluster side uses too (``common/acls.py``). The cluster
validates every binding; these types only carry them.
"""

from __future__ import annotations

from dataclasses import dataclass

from common.acls import AclOperation as AclOperation  # the codes, here for the clients' modules
from common.acls import AclPermissionType as AclPermissionType
from common.acls import PatternType as PatternType
from common.acls import ResourceType as ResourceType
from proto import security_pb2 as pb


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
