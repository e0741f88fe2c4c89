"""ACL bindings and filters to and from their protobuf messages (``proto/security.proto``)."""

from __future__ import annotations

from typing import Any

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
)
from proto import security_pb2 as pb


def _enum(cls: Any, value: int, what: str) -> Any:
    try:
        return cls(value)
    except ValueError:
        raise AclError(f"unknown {what} code {value}") from None


def binding_to_pb(binding: AclBinding) -> pb.AclBinding:
    p, e = binding.pattern, binding.entry
    return pb.AclBinding(
        resource_type=p.resource_type, resource_name=p.name, pattern_type=p.pattern_type, principal=e.principal,
        host=e.host, operation=e.operation, permission_type=e.permission_type,
    )  # fmt: skip


def binding_from_pb(message: pb.AclBinding) -> AclBinding:
    """The binding of ``message``, validated (A1, A2); AclError otherwise."""
    binding = AclBinding(
        ResourcePattern(
            _enum(ResourceType, message.resource_type, "resource type"), message.resource_name,
            _enum(PatternType, message.pattern_type, "pattern type"),
        ),
        AccessControlEntry(
            message.principal, message.host, _enum(AclOperation, message.operation, "operation"),
            _enum(AclPermissionType, message.permission_type, "permission type"),
        ),
    )  # fmt: skip
    binding.validate()
    return binding


def filter_from_pb(message: pb.AclFilter) -> AclBindingFilter:
    """The filter of ``message``, validated; AclError otherwise."""
    result = AclBindingFilter(
        resource_type=_enum(ResourceType, message.resource_type, "resource type"),
        name=message.resource_name if message.HasField("resource_name") else None,
        pattern_type=_enum(PatternType, message.pattern_type, "pattern type"),
        principal=message.principal if message.HasField("principal") else None,
        host=message.host if message.HasField("host") else None,
        operation=_enum(AclOperation, message.operation, "operation"),
        permission_type=_enum(AclPermissionType, message.permission_type, "permission type"),
    )
    result.validate()
    return result
