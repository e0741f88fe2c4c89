"""The security records of ``__cluster_metadata``, with Kafka's type ids: SCRAM credentials and ACLs.

=====  ==================================  ==========================================================
type   record                              effect on the image
=====  ==================================  ==========================================================
11     :class:`UserScramCredential`        sets one user's credential for one mechanism
22     :class:`RemoveUserScramCredential`  removes it (the user must have it)
18     :class:`AccessControlEntry`         adds one ACL binding under a new random id
19     :class:`RemoveAccessControlEntry`   removes the binding with that id (it must exist)
=====  ==================================  ==========================================================

``controller.records`` registers their codecs with the other records'; the protobuf messages are in
``proto/metadata.proto``. Each record validates its fields when built (``acl.py`` A1-A2, ``scram.py`` S1).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from controller._validate import check_str, check_uuid, fail
from controller.errors import InvalidMetadataRecordError
from controller.security.acl import (
    AccessControlEntry as AclEntry,
)
from controller.security.acl import (
    AclBinding,
    AclError,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from controller.security.scram import MECHANISM_BY_CODE, MECHANISMS, ScramCredential, ScramError
from proto import metadata_pb2 as pb


def _check_mechanism(rec: object, mechanism: str) -> None:
    if mechanism not in MECHANISMS:
        fail(rec, f"unknown SCRAM mechanism {mechanism!r}")


@dataclass(frozen=True, slots=True)
class UserScramCredential:
    """User ``name``'s SCRAM credential for ``credential.mechanism`` (Kafka's UserScramCredentialRecord)."""

    TYPE_ID: ClassVar[int] = 11
    VERSION: ClassVar[int] = 0
    name: str
    credential: ScramCredential

    def __post_init__(self) -> None:
        check_str(self, "name", nonempty=True)
        try:
            self.credential.validate()
        except ScramError as exc:
            fail(self, str(exc))


@dataclass(frozen=True, slots=True)
class RemoveUserScramCredential:
    """User ``name`` loses its credential for ``mechanism``."""

    TYPE_ID: ClassVar[int] = 22
    VERSION: ClassVar[int] = 0
    name: str
    mechanism: str

    def __post_init__(self) -> None:
        check_str(self, "name", nonempty=True)
        _check_mechanism(self, self.mechanism)


@dataclass(frozen=True, slots=True)
class AccessControlEntry:
    """ACL ``binding`` under the id ``acl_id`` (Kafka's AccessControlEntryRecord)."""

    TYPE_ID: ClassVar[int] = 18
    VERSION: ClassVar[int] = 0
    acl_id: str
    binding: AclBinding

    def __post_init__(self) -> None:
        check_uuid(self, "acl_id", allow_nil=False)
        try:
            self.binding.validate()
        except AclError as exc:
            fail(self, str(exc))


@dataclass(frozen=True, slots=True)
class RemoveAccessControlEntry:
    """The ACL with id ``acl_id`` is removed."""

    TYPE_ID: ClassVar[int] = 19
    VERSION: ClassVar[int] = 0
    acl_id: str

    def __post_init__(self) -> None:
        check_uuid(self, "acl_id", allow_nil=False)


SecurityRecord = UserScramCredential | RemoveUserScramCredential | AccessControlEntry | RemoveAccessControlEntry


# --- protobuf conversion ------------------------------------------------------------------------------


def _mechanism_code(mechanism: str) -> int:
    return MECHANISMS[mechanism][1]


def _mechanism_name(code: int) -> str:
    name = MECHANISM_BY_CODE.get(code)
    if name is None:
        raise InvalidMetadataRecordError(f"unknown SCRAM mechanism code {code}")
    return name


def _enum(cls: Any, value: int, what: str) -> Any:
    try:
        return cls(value)
    except ValueError:
        raise InvalidMetadataRecordError(f"unknown {what} code {value}") from None


def _acl_to_pb(r: AccessControlEntry) -> pb.AccessControlEntryRecord:
    p, e = r.binding.pattern, r.binding.entry
    return pb.AccessControlEntryRecord(
        id=uuid.UUID(r.acl_id).bytes, resource_type=p.resource_type, resource_name=p.name,
        pattern_type=p.pattern_type, principal=e.principal, host=e.host, operation=e.operation,
        permission_type=e.permission_type,
    )  # fmt: skip


def _uuid_str(value: bytes) -> str:
    if len(value) != 16:
        raise InvalidMetadataRecordError(f"a UUID is 16 bytes, got {len(value)}")
    return str(uuid.UUID(bytes=value))


def _acl_from_pb(m: pb.AccessControlEntryRecord) -> AccessControlEntry:
    pattern = ResourcePattern(
        _enum(ResourceType, m.resource_type, "resource type"), m.resource_name,
        _enum(PatternType, m.pattern_type, "pattern type"),
    )  # fmt: skip
    entry = AclEntry(
        m.principal, m.host, _enum(AclOperation, m.operation, "operation"),
        _enum(AclPermissionType, m.permission_type, "permission type"),
    )  # fmt: skip
    return AccessControlEntry(_uuid_str(m.id), AclBinding(pattern, entry))


def _scram_to_pb(r: UserScramCredential) -> pb.UserScramCredentialRecord:
    c = r.credential
    return pb.UserScramCredentialRecord(
        name=r.name, mechanism=_mechanism_code(c.mechanism), salt=c.salt, stored_key=c.stored_key,
        server_key=c.server_key, iterations=c.iterations,
    )  # fmt: skip


def _scram_from_pb(m: pb.UserScramCredentialRecord) -> UserScramCredential:
    credential = ScramCredential(_mechanism_name(m.mechanism), m.salt, m.stored_key, m.server_key, m.iterations)
    return UserScramCredential(m.name, credential)


#: record class -> (protobuf message class, to protobuf, from protobuf), for ``controller.records``.
CODECS: dict[type[Any], tuple[type[Any], Callable[[Any], Any], Callable[[Any], Any]]] = {
    UserScramCredential: (pb.UserScramCredentialRecord, _scram_to_pb, _scram_from_pb),
    RemoveUserScramCredential: (
        pb.RemoveUserScramCredentialRecord,
        lambda r: pb.RemoveUserScramCredentialRecord(name=r.name, mechanism=_mechanism_code(r.mechanism)),
        lambda m: RemoveUserScramCredential(m.name, _mechanism_name(m.mechanism)),
    ),
    AccessControlEntry: (pb.AccessControlEntryRecord, _acl_to_pb, _acl_from_pb),
    RemoveAccessControlEntry: (
        pb.RemoveAccessControlEntryRecord,
        lambda r: pb.RemoveAccessControlEntryRecord(id=uuid.UUID(r.acl_id).bytes),
        lambda m: RemoveAccessControlEntry(_uuid_str(m.id)),
    ),
}
