"""The typed records of the ``__cluster_metadata`` log and their compact binary encoding.

One frozen, slotted dataclass per record type, each with a fixed ``TYPE_ID`` (Kafka's api key where Kafka
has the same record) and a schema ``VERSION``. A record validates its own fields when built, so every
record that exists can be encoded; whether it fits the current image is :mod:`controller.image`'s call.

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
from enum import StrEnum
from types import MappingProxyType
from typing import Any, ClassVar

from google.protobuf import unknown_fields
from google.protobuf.message import Message

from controller._validate import (
    INT16_MAX,
    INT32_MAX,
    INT64_MAX,
    check_bool,
    check_int,
    check_str,
    check_topic_name,
    check_uuid,
    coerce_ids,
    fail,
)
from controller.errors import InvalidMetadataRecordError, MetadataDecodeError
from controller.security.records import CODECS as _SECURITY_CODECS
from controller.security.records import AccessControlEntry as AccessControlEntry
from controller.security.records import RemoveAccessControlEntry as RemoveAccessControlEntry
from controller.security.records import RemoveUserScramCredential as RemoveUserScramCredential
from controller.security.records import UserScramCredential as UserScramCredential
from proto import metadata_pb2 as pb

NO_LEADER = -1
"""``leader`` of a partition that has none (offline)."""
PRODUCER_ID_BLOCK_SIZE = 1000
"""Producer ids the controller hands a broker at a time, like Kafka's ``PRODUCER_ID_BLOCK_SIZE``."""

_HEADER = struct.Struct(
    ">"
    "B"  # type_id: which record follows
    "B"  # version: the record's schema version
)


# --- the records ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A listener of a broker: clients of listener ``name`` connect to ``host:port``."""

    name: str
    host: str
    port: int

    def __post_init__(self) -> None:
        check_str(self, "name", nonempty=True)
        check_str(self, "host", nonempty=True)
        check_int(self, "port", 0, 65535)

    @property
    def address(self) -> str:
        """``host:port`` (``[host]:port`` for an IPv6 literal)."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @classmethod
    def parse(cls, name: str, address: str) -> Endpoint:
        """The endpoint of listener ``name`` at ``address`` (``host:port`` or ``[ipv6]:port``)."""
        host, sep, port = address.rpartition(":")
        if not sep or not port.isdigit():
            raise InvalidMetadataRecordError(f"Endpoint: {address!r} is not host:port")
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        return cls(name, host, int(port))


@dataclass(frozen=True, slots=True)
class RegisterBroker:
    """A broker joined (or rejoined, with a higher ``broker_epoch``); it starts fenced.

    ``broker_epoch`` is assigned by the controller and grows with each registration of the same id.
    ``fenced`` and ``in_controlled_shutdown`` let a snapshot restore a registration as it stood.
    """

    TYPE_ID: ClassVar[int] = 0
    VERSION: ClassVar[int] = 0
    broker_id: int
    incarnation_id: str
    broker_epoch: int
    endpoints: tuple[Endpoint, ...] = ()
    rack: str | None = None
    fenced: bool = True
    in_controlled_shutdown: bool = False

    def __post_init__(self) -> None:
        check_int(self, "broker_id", 0, INT32_MAX)
        check_uuid(self, "incarnation_id")
        check_int(self, "broker_epoch", 0, INT64_MAX)
        if not isinstance(self.endpoints, tuple | list) or not all(
            isinstance(e, Endpoint) for e in self.endpoints
        ):
            fail(self, f"endpoints must be a tuple of Endpoint, got {self.endpoints!r}")
        object.__setattr__(self, "endpoints", tuple(self.endpoints))
        names = [e.name for e in self.endpoints]
        if len(set(names)) != len(names):
            fail(self, f"endpoints name a listener twice: {names}")
        check_str(self, "rack", optional=True)
        check_bool(self, "fenced")
        check_bool(self, "in_controlled_shutdown")


@dataclass(frozen=True, slots=True)
class _BrokerEpochRecord:
    """Shared shape of the records that name one registration of a broker: id and epoch."""

    broker_id: int
    broker_epoch: int

    def __post_init__(self) -> None:
        check_int(self, "broker_id", 0, INT32_MAX)
        check_int(self, "broker_epoch", 0, INT64_MAX)


@dataclass(frozen=True, slots=True)
class UnregisterBroker(_BrokerEpochRecord):
    """The broker's registration ``broker_epoch`` is removed from the cluster."""

    TYPE_ID: ClassVar[int] = 1
    VERSION: ClassVar[int] = 0


@dataclass(frozen=True, slots=True)
class FenceBroker(_BrokerEpochRecord):
    """The broker may no longer lead or be in an ISR (its heartbeats stopped, or it asked)."""

    TYPE_ID: ClassVar[int] = 7
    VERSION: ClassVar[int] = 0


@dataclass(frozen=True, slots=True)
class UnfenceBroker(_BrokerEpochRecord):
    """The broker caught up with the metadata log and may serve again."""

    TYPE_ID: ClassVar[int] = 8
    VERSION: ClassVar[int] = 0


@dataclass(frozen=True, slots=True)
class BrokerControlledShutdown(_BrokerEpochRecord):
    """The broker is shutting down in order: move its leaderships away, then fence it.

    Kafka's ``BrokerRegistrationChangeRecord`` (type 17) narrowed to its in-controlled-shutdown flag; the
    flag is only ever set, and cleared by the broker's next registration.
    """

    TYPE_ID: ClassVar[int] = 17
    VERSION: ClassVar[int] = 0


@dataclass(frozen=True, slots=True)
class Topic:
    """A topic named ``name`` with the never-reused id ``topic_id``; its partitions follow."""

    TYPE_ID: ClassVar[int] = 2
    VERSION: ClassVar[int] = 0
    name: str
    topic_id: str

    def __post_init__(self) -> None:
        check_topic_name(self, "name")
        check_uuid(self, "topic_id", allow_nil=False)


@dataclass(frozen=True, slots=True)
class Partition:
    """Partition ``partition`` of topic ``topic_id`` as it stands: replicas, ISR, leader and epochs.

    ``leader`` is ``NO_LEADER`` (-1) or a member of ``isr``, which is a subset of ``replicas``.
    """

    TYPE_ID: ClassVar[int] = 3
    VERSION: ClassVar[int] = 0
    topic_id: str
    partition: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int = 0
    partition_epoch: int = 0
    elr: tuple[int, ...] = ()  # KIP-966 eligible leader replicas: out of the ISR, still holding the HW
    last_known_elr: tuple[int, ...] = ()  # KIP-966: left the ELR by an unclean shutdown

    def __post_init__(self) -> None:
        check_uuid(self, "topic_id", allow_nil=False)
        check_int(self, "partition", 0, INT32_MAX)
        coerce_ids(self, "replicas", nonempty=True)
        coerce_ids(self, "isr")
        coerce_ids(self, "elr")
        coerce_ids(self, "last_known_elr")
        check_int(self, "leader", NO_LEADER, INT32_MAX)
        check_int(self, "leader_epoch", 0, INT32_MAX)
        check_int(self, "partition_epoch", 0, INT32_MAX)
        if not set(self.isr) <= set(self.replicas):
            fail(self, f"isr {list(self.isr)} is not a subset of replicas {list(self.replicas)}")
        if self.leader != NO_LEADER and self.leader not in self.isr:
            fail(self, f"leader {self.leader} is not in the isr {list(self.isr)}")
        if not set(self.elr) <= set(self.replicas) or set(self.elr) & set(self.isr):
            fail(self, f"elr {list(self.elr)} must be replicas {list(self.replicas)} outside the isr {list(self.isr)}")


@dataclass(frozen=True, slots=True)
class PartitionChange:
    """A change of one partition; ``None`` fields are unchanged, at least one is set.

    Applying it bumps ``partition_epoch`` by one, and ``leader_epoch`` by one when the leader changes.
    """

    TYPE_ID: ClassVar[int] = 5
    VERSION: ClassVar[int] = 0
    topic_id: str
    partition: int
    isr: tuple[int, ...] | None = None
    leader: int | None = None
    replicas: tuple[int, ...] | None = None
    elr: tuple[int, ...] | None = None  # KIP-966
    last_known_elr: tuple[int, ...] | None = None  # KIP-966

    def __post_init__(self) -> None:
        check_uuid(self, "topic_id", allow_nil=False)
        check_int(self, "partition", 0, INT32_MAX)
        coerce_ids(self, "isr", optional=True)
        if self.leader is not None:
            check_int(self, "leader", NO_LEADER, INT32_MAX)
        coerce_ids(self, "replicas", optional=True, nonempty=True)
        coerce_ids(self, "elr", optional=True)
        coerce_ids(self, "last_known_elr", optional=True)
        fields = (self.isr, self.leader, self.replicas, self.elr, self.last_known_elr)
        if all(f is None for f in fields):
            fail(self, "changes nothing: set isr, leader, replicas, elr or last_known_elr")


@dataclass(frozen=True, slots=True)
class RemoveTopic:
    """The topic, its partitions and its configs are deleted."""

    TYPE_ID: ClassVar[int] = 9
    VERSION: ClassVar[int] = 0
    topic_id: str

    def __post_init__(self) -> None:
        check_uuid(self, "topic_id", allow_nil=False)


class ConfigResourceType(StrEnum):
    """What a config belongs to; the values are the strings the Admin API uses."""

    TOPIC = "topic"
    BROKER = "broker"  # resource_name: the broker id in decimal
    CLUSTER = "cluster"  # resource_name: "" (Kafka's cluster-wide default broker config)


@dataclass(frozen=True, slots=True)
class Config:
    """Sets config ``key`` of a resource to ``value``; ``value=None`` deletes the key."""

    TYPE_ID: ClassVar[int] = 4
    VERSION: ClassVar[int] = 0
    resource_type: ConfigResourceType
    resource_name: str
    key: str
    value: str | None

    def __post_init__(self) -> None:
        if not isinstance(self.resource_type, ConfigResourceType):
            fail(self, f"resource_type must be a ConfigResourceType, got {self.resource_type!r}")
        if self.resource_type is ConfigResourceType.TOPIC:
            check_topic_name(self, "resource_name")
        elif self.resource_type is ConfigResourceType.BROKER:
            name = self.resource_name
            if not (
                isinstance(name, str)
                and name.isdecimal()
                and name.isascii()
                and str(int(name)) == name
                and int(name) <= INT32_MAX
            ):
                fail(self, f"a broker config's resource_name must be a broker id, got {name!r}")
        elif self.resource_name != "":
            fail(self, f"a cluster config's resource_name must be '', got {self.resource_name!r}")
        check_str(self, "key", nonempty=True)
        check_str(self, "value", optional=True)


@dataclass(frozen=True, slots=True)
class ProducerIds:
    """Broker ``broker_id`` got the producer ids up to ``next_producer_id``, the next block's start."""

    TYPE_ID: ClassVar[int] = 15
    VERSION: ClassVar[int] = 0
    broker_id: int
    broker_epoch: int
    next_producer_id: int

    def __post_init__(self) -> None:
        check_int(self, "broker_id", 0, INT32_MAX)
        check_int(self, "broker_epoch", 0, INT64_MAX)
        check_int(self, "next_producer_id", 1, INT64_MAX)


@dataclass(frozen=True, slots=True)
class FeatureLevel:
    """The finalized level of feature ``name`` (e.g. ``metadata.version``); level 0 removes it."""

    TYPE_ID: ClassVar[int] = 12
    VERSION: ClassVar[int] = 0
    name: str
    level: int

    def __post_init__(self) -> None:
        check_str(self, "name", nonempty=True)
        check_int(self, "level", 0, INT16_MAX)


@dataclass(frozen=True, slots=True)
class NoOp:
    """Advances the metadata offset and nothing else (a heartbeat of the log)."""

    TYPE_ID: ClassVar[int] = 20
    VERSION: ClassVar[int] = 0


@dataclass(frozen=True, slots=True)
class LeaderChange:
    """Controller ``leader_id`` became active in Raft term ``term``: written before it acts.

    Kafka writes this as a control record (``LeaderChangeMessage``); here it is an ordinary record with
    a type id outside Kafka's metadata record keys.
    """

    TYPE_ID: ClassVar[int] = 64
    VERSION: ClassVar[int] = 0
    term: int
    leader_id: int
    leader_address: str = ""  # host:port of its Controller gRPC service ("" when unknown)

    def __post_init__(self) -> None:
        check_int(self, "term", 0, INT64_MAX)
        check_int(self, "leader_id", 0, INT32_MAX)
        check_str(self, "leader_address")


MetadataRecord = (
    RegisterBroker
    | UnregisterBroker
    | FenceBroker
    | UnfenceBroker
    | BrokerControlledShutdown
    | Topic
    | Partition
    | PartitionChange
    | RemoveTopic
    | Config
    | ProducerIds
    | FeatureLevel
    | NoOp
    | LeaderChange
    | UserScramCredential
    | RemoveUserScramCredential
    | AccessControlEntry
    | RemoveAccessControlEntry
)
"""Any record of the ``__cluster_metadata`` log."""


# --- protobuf conversion ---------------------------------------------------------------------------


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
}

_CODECS.update({cls: _Codec(*codec) for cls, codec in _SECURITY_CODECS.items()})

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
