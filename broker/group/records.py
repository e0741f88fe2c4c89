"""The ``__consumer_offsets`` record codecs: keyed records, one key per fact, compacted to the latest value.

Following Kafka's schema ideas (``GroupCoordinatorRecordSerde``): a record's key starts with an int16
*key version* that says which record type it is; its value starts with an int16 *value version* (0 here).
A null value is a tombstone: the fact is gone (log compaction keeps the latest record per key, and removes
tombstones after ``delete.retention.ms``). Key types keep Kafka's numbers::

    type  key                                   value (version 0)
    1     OffsetCommitKey(group, topic, part)   offset int64, leader_epoch int32, metadata string,
                                                commit_timestamp_ms int64
    3     GroupMetadataKey(group)               group_epoch int32
    5     MemberMetadataKey(group, member)      instance_id, rack_id, client_id, client_host string,
                                                subscribed_topic_names [string], subscribed_topic_regex string,
                                                rebalance_timeout_ms int32, session_timeout_ms int32,
                                                server_assignor string
    8     CurrentAssignmentKey(group, member)   member_epoch int32, previous_member_epoch int32, state int8,
                                                assigned [TopicPartitions], pending_revocation [TopicPartitions]

Primitive layouts (big-endian, as Kafka's protocol): ``string`` = int16 length + UTF-8 bytes;
``[x]`` = int32 count + items; ``TopicPartitions`` = topic string + [int32 partition].

A key or value that does not parse raises :class:`RecordFormatError` (the loader treats the partition as
corrupt: it refuses to coordinate from it rather than skip facts).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from broker.coordinator_fields import FieldReader, FieldWriter, RecordFormatError

TopicPartition = tuple[str, int]

OFFSET_COMMIT_KEY = 1
GROUP_METADATA_KEY = 3
MEMBER_METADATA_KEY = 5
CURRENT_ASSIGNMENT_KEY = 8
VALUE_VERSION = 0

# ------------------------------------------------------------------------------------------ records


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    group_id: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class OffsetCommitValue:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    group_id: str


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    group_epoch: int


@dataclass(frozen=True, slots=True)
class MemberMetadataKey:
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class MemberMetadataValue:
    instance_id: str
    rack_id: str
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    server_assignor: str


@dataclass(frozen=True, slots=True)
class CurrentAssignmentKey:
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class CurrentAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: int  # MemberState value
    assigned: frozenset[TopicPartition] = field(default_factory=frozenset)
    pending_revocation: frozenset[TopicPartition] = field(default_factory=frozenset)


Key = OffsetCommitKey | GroupMetadataKey | MemberMetadataKey | CurrentAssignmentKey
Value = OffsetCommitValue | GroupMetadataValue | MemberMetadataValue | CurrentAssignmentValue


@dataclass(frozen=True, slots=True)
class CoordinatorRecord:
    """One ``__consumer_offsets`` record; ``value`` None is a tombstone."""

    key: Key
    value: Value | None

    def encode(self) -> tuple[bytes, bytes | None]:
        return encode_key(self.key), None if self.value is None else encode_value(self.value)


# --------------------------------------------------------------------------------------- encoding


def encode_key(key: Key) -> bytes:
    w = FieldWriter()
    if isinstance(key, OffsetCommitKey):
        w.i16(OFFSET_COMMIT_KEY).string(key.group_id).string(key.topic).i32(key.partition)
    elif isinstance(key, GroupMetadataKey):
        w.i16(GROUP_METADATA_KEY).string(key.group_id)
    elif isinstance(key, MemberMetadataKey):
        w.i16(MEMBER_METADATA_KEY).string(key.group_id).string(key.member_id)
    else:
        w.i16(CURRENT_ASSIGNMENT_KEY).string(key.group_id).string(key.member_id)
    return w.bytes()


def encode_value(value: Value) -> bytes:
    w = FieldWriter().i16(VALUE_VERSION)
    if isinstance(value, OffsetCommitValue):
        w.i64(value.offset).i32(value.leader_epoch).string(value.metadata).i64(value.commit_timestamp_ms)
    elif isinstance(value, GroupMetadataValue):
        w.i32(value.group_epoch)
    elif isinstance(value, MemberMetadataValue):
        w.string(value.instance_id).string(value.rack_id).string(value.client_id).string(value.client_host)
        w.strings(value.subscribed_topic_names).string(value.subscribed_topic_regex)
        w.i32(value.rebalance_timeout_ms).i32(value.session_timeout_ms).string(value.server_assignor)
    else:
        w.i32(value.member_epoch).i32(value.previous_member_epoch).i8(value.state)
        w.partitions(value.assigned).partitions(value.pending_revocation)
    return w.bytes()


def decode_key(data: bytes) -> Key:
    r = FieldReader(data, "__consumer_offsets key")
    version = r.i16()
    key: Key
    if version in (0, OFFSET_COMMIT_KEY):  # Kafka's offset keys are versions 0 and 1, same fields
        key = OffsetCommitKey(r.string(), r.string(), r.i32())
    elif version == GROUP_METADATA_KEY:
        key = GroupMetadataKey(r.string())
    elif version == MEMBER_METADATA_KEY:
        key = MemberMetadataKey(r.string(), r.string())
    elif version == CURRENT_ASSIGNMENT_KEY:
        key = CurrentAssignmentKey(r.string(), r.string())
    else:
        raise RecordFormatError(f"__consumer_offsets key version {version} is unknown")
    r.end()
    return key


def decode_value(key: Key, data: bytes) -> Value:
    r = FieldReader(data, f"__consumer_offsets value of {key}")
    version = r.i16()
    if version != VALUE_VERSION:
        raise RecordFormatError(f"value version {version} of {key} is unknown")
    value: Value
    if isinstance(key, OffsetCommitKey):
        value = OffsetCommitValue(r.i64(), r.i32(), r.string(), r.i64())
    elif isinstance(key, GroupMetadataKey):
        value = GroupMetadataValue(r.i32())
    elif isinstance(key, MemberMetadataKey):
        value = MemberMetadataValue(
            r.string(), r.string(), r.string(), r.string(), r.strings(), r.string(), r.i32(), r.i32(), r.string()
        )
    else:
        value = CurrentAssignmentValue(r.i32(), r.i32(), r.i8(), r.partitions(), r.partitions())
    r.end()
    return value


def decode_record(key: bytes | None, value: bytes | None) -> CoordinatorRecord:
    if key is None:
        raise RecordFormatError("__consumer_offsets record without a key")
    decoded = decode_key(key)
    return CoordinatorRecord(decoded, None if value is None else decode_value(decoded, value))
