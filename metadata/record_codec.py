"""The compact binary encoding of the ``__cluster_metadata`` records (:mod:`metadata.records`).

Wire format of one record (``encode_record`` / ``decode_record``)::

    type_id   u8     which record follows: RegisterBroker.TYPE_ID, ...
    version   u8     the record's schema version (0 for every record today)
    message   bytes  the record's protobuf message (proto/metadata.proto), to the end of the buffer

Decoding is strict: an unknown type id or version, bytes protobuf rejects, fields the version does not
define (protobuf "unknown fields") and field values no record may hold all raise
:class:`MetadataDecodeError`, never another exception.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from google.protobuf import unknown_fields
from google.protobuf.message import Message

from metadata.acl import AccessControlEntry as AclEntry
from metadata.acl import AclBinding, AclOperation, AclPermissionType, PatternType, ResourcePattern, ResourceType
from metadata.errors import InvalidMetadataRecordError, MetadataDecodeError
from metadata.records import (
    AccessControlEntry,
    BrokerControlledShutdown,
    Config,
    ConfigResourceType,
    Endpoint,
    FeatureLevel,
    FenceBroker,
    LeaderChange,
    MetadataRecord,
    NoOp,
    Partition,
    PartitionChange,
    ProducerIds,
    RegisterBroker,
    RemoveAccessControlEntry,
    RemoveTopic,
    RemoveUserScramCredential,
    Topic,
    UnfenceBroker,
    UnregisterBroker,
    UserScramCredential,
)
from metadata.scram import MECHANISM_BY_CODE, MECHANISMS, ScramCredential
from proto import metadata_pb2 as pb

_HEADER = struct.Struct(
    ">"
    "B"  # type_id: which record follows
    "B"  # version: the record's schema version
)


def _uuid_bytes(value: str) -> bytes:
    return uuid.UUID(value).bytes


def _uuid_str(value: bytes) -> str:
    if len(value) != 16:
        raise InvalidMetadataRecordError(f"a UUID is 16 bytes, got {len(value)}")
    return str(uuid.UUID(bytes=value))


_RESOURCE_TO_PB = {
    ConfigResourceType.TOPIC: pb.CONFIG_RESOURCE_TYPE_TOPIC,
    ConfigResourceType.BROKER: pb.CONFIG_RESOURCE_TYPE_BROKER,
    ConfigResourceType.CLUSTER: pb.CONFIG_RESOURCE_TYPE_CLUSTER,
}
_RESOURCE_FROM_PB = {v: k for k, v in _RESOURCE_TO_PB.items()}


def _register_broker_to_pb(r: RegisterBroker) -> pb.RegisterBrokerRecord:
    msg = pb.RegisterBrokerRecord(
        broker_id=r.broker_id,
        incarnation_id=_uuid_bytes(r.incarnation_id),
        broker_epoch=r.broker_epoch,
        endpoints=[pb.Endpoint(name=e.name, host=e.host, port=e.port) for e in r.endpoints],
        fenced=r.fenced,
        in_controlled_shutdown=r.in_controlled_shutdown,
    )
    if r.rack is not None:
        msg.rack = r.rack
    return msg


def _register_broker_from_pb(m: pb.RegisterBrokerRecord) -> RegisterBroker:
    return RegisterBroker(
        m.broker_id,
        _uuid_str(m.incarnation_id),
        m.broker_epoch,
        tuple(Endpoint(e.name, e.host, e.port) for e in m.endpoints),
        m.rack if m.HasField("rack") else None,
        m.fenced,
        m.in_controlled_shutdown,
    )


def _partition_change_to_pb(r: PartitionChange) -> pb.PartitionChangeRecord:
    msg = pb.PartitionChangeRecord(topic_id=_uuid_bytes(r.topic_id), partition=r.partition)
    if r.leader is not None:
        msg.leader = r.leader
    if r.isr is not None:
        msg.isr.SetInParent()  # present even when empty: an empty ISR differs from "unchanged"
        msg.isr.ids.extend(r.isr)
    if r.replicas is not None:
        msg.replicas.SetInParent()
        msg.replicas.ids.extend(r.replicas)
    if r.elr is not None:
        msg.eligible_leader_replicas.SetInParent()
        msg.eligible_leader_replicas.ids.extend(r.elr)
    if r.last_known_elr is not None:
        msg.last_known_elr.SetInParent()
        msg.last_known_elr.ids.extend(r.last_known_elr)
    return msg


def _partition_change_from_pb(m: pb.PartitionChangeRecord) -> PartitionChange:
    return PartitionChange(
        _uuid_str(m.topic_id),
        m.partition,
        isr=tuple(m.isr.ids) if m.HasField("isr") else None,
        leader=m.leader if m.HasField("leader") else None,
        replicas=tuple(m.replicas.ids) if m.HasField("replicas") else None,
        elr=tuple(m.eligible_leader_replicas.ids) if m.HasField("eligible_leader_replicas") else None,
        last_known_elr=tuple(m.last_known_elr.ids) if m.HasField("last_known_elr") else None,
    )


def _config_to_pb(r: Config) -> pb.ConfigRecord:
    msg = pb.ConfigRecord(
        resource_type=_RESOURCE_TO_PB[r.resource_type], resource_name=r.resource_name, key=r.key
    )
    if r.value is not None:
        msg.value = r.value
    return msg


def _config_from_pb(m: pb.ConfigRecord) -> Config:
    resource_type = _RESOURCE_FROM_PB.get(m.resource_type)
    if resource_type is None:
        raise InvalidMetadataRecordError(f"Config: unknown resource type {m.resource_type}")
    return Config(resource_type, m.resource_name, m.key, m.value if m.HasField("value") else None)


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
        id=_uuid_bytes(r.acl_id), resource_type=p.resource_type, resource_name=p.name,
        pattern_type=p.pattern_type, principal=e.principal, host=e.host, operation=e.operation,
        permission_type=e.permission_type,
    )  # fmt: skip


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


@dataclass(frozen=True, slots=True)
class _Codec:
    message: type[Message]
    to_pb: Callable[[Any], Message]
    from_pb: Callable[[Any], MetadataRecord]


_BrokerEpochType = type[UnregisterBroker | FenceBroker | UnfenceBroker | BrokerControlledShutdown]


def _broker_epoch_codec(cls: _BrokerEpochType, message: type[Message]) -> _Codec:
    return _Codec(
        message,
        lambda r: message(broker_id=r.broker_id, broker_epoch=r.broker_epoch),
        lambda m: cls(m.broker_id, m.broker_epoch),
    )


_CODECS: dict[type[Any], _Codec] = {
    RegisterBroker: _Codec(pb.RegisterBrokerRecord, _register_broker_to_pb, _register_broker_from_pb),
    UnregisterBroker: _broker_epoch_codec(UnregisterBroker, pb.UnregisterBrokerRecord),
    FenceBroker: _broker_epoch_codec(FenceBroker, pb.FenceBrokerRecord),
    UnfenceBroker: _broker_epoch_codec(UnfenceBroker, pb.UnfenceBrokerRecord),
    BrokerControlledShutdown: _broker_epoch_codec(
        BrokerControlledShutdown, pb.BrokerControlledShutdownRecord
    ),
    Topic: _Codec(
        pb.TopicRecord,
        lambda r: pb.TopicRecord(name=r.name, topic_id=_uuid_bytes(r.topic_id)),
        lambda m: Topic(m.name, _uuid_str(m.topic_id)),
    ),
    Partition: _Codec(
        pb.PartitionRecord,
        lambda r: pb.PartitionRecord(
            topic_id=_uuid_bytes(r.topic_id),
            partition=r.partition,
            replicas=r.replicas,
            isr=r.isr,
            leader=r.leader,
            leader_epoch=r.leader_epoch,
            partition_epoch=r.partition_epoch,
            eligible_leader_replicas=r.elr,
            last_known_elr=r.last_known_elr,
        ),
        lambda m: Partition(
            _uuid_str(m.topic_id),
            m.partition,
            tuple(m.replicas),
            tuple(m.isr),
            m.leader,
            m.leader_epoch,
            m.partition_epoch,
            tuple(m.eligible_leader_replicas),
            tuple(m.last_known_elr),
        ),
    ),
    PartitionChange: _Codec(pb.PartitionChangeRecord, _partition_change_to_pb, _partition_change_from_pb),
    RemoveTopic: _Codec(
        pb.RemoveTopicRecord,
        lambda r: pb.RemoveTopicRecord(topic_id=_uuid_bytes(r.topic_id)),
        lambda m: RemoveTopic(_uuid_str(m.topic_id)),
    ),
    Config: _Codec(pb.ConfigRecord, _config_to_pb, _config_from_pb),
    ProducerIds: _Codec(
        pb.ProducerIdsRecord,
        lambda r: pb.ProducerIdsRecord(
            broker_id=r.broker_id, broker_epoch=r.broker_epoch, next_producer_id=r.next_producer_id
        ),
        lambda m: ProducerIds(m.broker_id, m.broker_epoch, m.next_producer_id),
    ),
    FeatureLevel: _Codec(
        pb.FeatureLevelRecord,
        lambda r: pb.FeatureLevelRecord(name=r.name, level=r.level),
        lambda m: FeatureLevel(m.name, m.level),
    ),
    NoOp: _Codec(pb.NoOpRecord, lambda r: pb.NoOpRecord(), lambda m: NoOp()),
    LeaderChange: _Codec(
        pb.LeaderChangeRecord,
        lambda r: pb.LeaderChangeRecord(term=r.term, leader_id=r.leader_id, leader_address=r.leader_address),
        lambda m: LeaderChange(m.term, m.leader_id, m.leader_address),
    ),
    UserScramCredential: _Codec(pb.UserScramCredentialRecord, _scram_to_pb, _scram_from_pb),
    RemoveUserScramCredential: _Codec(
        pb.RemoveUserScramCredentialRecord,
        lambda r: pb.RemoveUserScramCredentialRecord(name=r.name, mechanism=_mechanism_code(r.mechanism)),
        lambda m: RemoveUserScramCredential(m.name, _mechanism_name(m.mechanism)),
    ),
    AccessControlEntry: _Codec(pb.AccessControlEntryRecord, _acl_to_pb, _acl_from_pb),
    RemoveAccessControlEntry: _Codec(
        pb.RemoveAccessControlEntryRecord,
        lambda r: pb.RemoveAccessControlEntryRecord(id=_uuid_bytes(r.acl_id)),
        lambda m: RemoveAccessControlEntry(_uuid_str(m.id)),
    ),
}

RECORD_TYPES: Mapping[int, type[Any]] = MappingProxyType({cls.TYPE_ID: cls for cls in _CODECS})
"""Every record class by its type id."""
assert len(RECORD_TYPES) == len(_CODECS), "two record classes share a type id"


def encode_record(record: MetadataRecord) -> bytes:
    """The bytes of ``record``: type id, version, protobuf message (see the module docstring)."""
    codec = _CODECS.get(type(record))
    if codec is None:
        raise TypeError(f"not a metadata record: {record!r}")
    message: bytes = codec.to_pb(record).SerializeToString()
    return _HEADER.pack(record.TYPE_ID, record.VERSION) + message


def decode_record(data: bytes | bytearray | memoryview) -> MetadataRecord:
    """The record ``encode_record`` turned into ``data``; :class:`MetadataDecodeError` if there is none."""
    if len(data) < _HEADER.size:
        raise MetadataDecodeError(f"a metadata record is at least {_HEADER.size} bytes, got {len(data)}")
    type_id, version = _HEADER.unpack_from(data)
    cls = RECORD_TYPES.get(type_id)
    if cls is None:
        raise MetadataDecodeError(f"unknown metadata record type {type_id}")
    if version != cls.VERSION:
        raise MetadataDecodeError(f"{cls.__name__} version {version} is not supported (only {cls.VERSION})")
    codec = _CODECS[cls]
    message = codec.message()
    try:
        message.ParseFromString(bytes(data[_HEADER.size :]))
    except Exception as exc:  # a trust boundary: protobuf's exception types vary by backend
        raise MetadataDecodeError(f"{cls.__name__} v{version}: malformed message: {exc}") from exc
    unknown = _unknown_field_numbers(message)
    if unknown:
        raise MetadataDecodeError(f"{cls.__name__} v{version} has fields it does not define: {unknown}")
    try:
        return codec.from_pb(message)
    except InvalidMetadataRecordError as exc:
        raise MetadataDecodeError(f"{cls.__name__} v{version}: {exc}") from exc


def _unknown_field_numbers(message: Message) -> list[int]:
    """Field numbers in ``message`` (and its sub-messages) that its schema does not define."""
    unknown = unknown_fields.UnknownFieldSet(message)
    found = [int(unknown[i].field_number) for i in range(len(unknown))]
    for field, value in message.ListFields():
        if field.message_type is None:
            continue
        children: Iterable[Message] = value if field.is_repeated else (value,)
        for child in children:
            found += _unknown_field_numbers(child)
    return found
