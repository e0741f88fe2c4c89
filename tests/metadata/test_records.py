"""The metadata records and their binary encoding (metadata/records.py)."""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from metadata.errors import InvalidMetadataRecordError, MetadataDecodeError, MetadataError
from metadata.record_codec import RECORD_TYPES, decode_record, encode_record
from metadata.records import (
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
    RemoveTopic,
    Topic,
    UnfenceBroker,
    UnregisterBroker,
)
from proto import metadata_pb2 as pb
from tests.metadata.strategies import RECORD_STRATEGIES, any_record

SETTINGS = settings(
    derandomize=True, deadline=None, max_examples=150, suppress_health_check=[HealthCheck.too_slow]
)
ALL_TYPES = sorted(RECORD_TYPES.values(), key=lambda c: c.TYPE_ID)
TID = "6f1b7a38-5a1f-4c1e-9a53-2b8f0a8c1d10"
INC = "0c8e2b1e-3d7a-4f0a-8e0f-9b6c5d4e3f21"


def decodes_or_refuses(data: bytes) -> None:
    """Rule: decode_record either returns a valid record or raises MetadataDecodeError, nothing else."""
    try:
        record = decode_record(data)
    except MetadataDecodeError:
        return
    assert decode_record(encode_record(record)) == record


# --- round trips -------------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", ALL_TYPES, ids=lambda c: c.__name__)
@SETTINGS
@given(data=st.data())
def test_every_record_type_round_trips_exactly(cls: type[Any], data: st.DataObject) -> None:
    """Rule: decode_record(encode_record(r)) == r, same type, for every record type and any legal fields;
    and the encoding is canonical (re-encoding the decoded record gives the same bytes)."""
    record = data.draw(RECORD_STRATEGIES[cls])
    encoded = encode_record(record)
    decoded = decode_record(encoded)
    assert type(decoded) is cls
    assert decoded == record
    assert encode_record(decoded) == encoded
    assert encoded[:2] == bytes([cls.TYPE_ID, cls.VERSION])


def test_type_ids_are_fixed() -> None:
    """Rule: type ids are part of the log format and never change (Kafka's api keys where it has the record)."""
    assert {cls.__name__: cls.TYPE_ID for cls in RECORD_TYPES.values()} == {
        "RegisterBroker": 0,
        "UnregisterBroker": 1,
        "Topic": 2,
        "Partition": 3,
        "Config": 4,
        "PartitionChange": 5,
        "FenceBroker": 7,
        "UnfenceBroker": 8,
        "RemoveTopic": 9,
        "FeatureLevel": 12,
        "ProducerIds": 15,
        "BrokerControlledShutdown": 17,
        "NoOp": 20,
        "LeaderChange": 64,
        "UserScramCredential": 11,
        "AccessControlEntry": 18,
        "RemoveAccessControlEntry": 19,
        "RemoveUserScramCredential": 22,
    }
    assert all(cls.VERSION == 0 for cls in RECORD_TYPES.values())


def test_encoding_is_compact() -> None:
    """Rule: two header bytes, then protobuf; UUIDs as 16 raw bytes, a missing leader (-1) as one byte."""
    assert encode_record(NoOp()) == b"\x14\x00"
    assert len(encode_record(FenceBroker(3, 7))) == 2 + 4
    assert len(encode_record(RemoveTopic(TID))) == 2 + 18
    assert len(encode_record(PartitionChange(TID, 0, leader=-1))) == 2 + 18 + 2


def test_optional_fields_keep_presence() -> None:
    """Rule: an empty ISR differs from an unchanged ISR; a None rack or value from an empty string."""
    records: list[MetadataRecord] = [
        PartitionChange(TID, 0, isr=()),
        PartitionChange(TID, 0, isr=None, leader=0),
        PartitionChange(TID, 0, leader=0, replicas=(1,)),
        RegisterBroker(1, INC, 1, rack=""),
        RegisterBroker(1, INC, 1, rack=None),
        Config(ConfigResourceType.CLUSTER, "", "k", ""),
        Config(ConfigResourceType.CLUSTER, "", "k", None),
    ]
    for record in records:
        assert decode_record(encode_record(record)) == record


def test_sequences_become_tuples() -> None:
    """Rule: records hold tuples, so a record built from lists equals its decoded copy."""
    record = Partition(TID, 0, [1, 2], [2], 2)  # type: ignore[arg-type]
    assert record.replicas == (1, 2)
    assert record.isr == (2,)
    assert decode_record(encode_record(record)) == record
    broker = RegisterBroker(1, INC, 1, [Endpoint("A", "h", 1)])  # type: ignore[arg-type]
    assert broker.endpoints == (Endpoint("A", "h", 1),)


def test_records_are_frozen() -> None:
    record = FenceBroker(1, 2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.broker_id = 3  # type: ignore[misc]
    other: object = UnfenceBroker(1, 2)
    assert record != other  # same fields, different record


def test_endpoint_address_round_trips() -> None:
    for name, address in [("PLAINTEXT", "127.0.0.1:9092"), ("EXTERNAL", "[::1]:19092"), ("X", "kafka-0:0")]:
        assert Endpoint.parse(name, address).address == address
    assert Endpoint.parse("X", "[::1]:5").host == "::1"
    with pytest.raises(InvalidMetadataRecordError, match="host:port"):
        Endpoint.parse("X", "no-port")


def test_encode_refuses_non_records() -> None:
    with pytest.raises(TypeError, match="not a metadata record"):
        encode_record("NoOp")  # type: ignore[arg-type]


# --- garbage in, MetadataDecodeError out ---------------------------------------------------------------


@SETTINGS
@given(st.binary(max_size=300))
def test_garbage_decodes_or_raises_decode_error(data: bytes) -> None:
    """Rule: garbage never raises anything but MetadataDecodeError."""
    decodes_or_refuses(data)


@SETTINGS
@given(st.sampled_from(sorted(RECORD_TYPES)), st.binary(max_size=300))
def test_garbage_behind_a_valid_header_decodes_or_raises_decode_error(type_id: int, body: bytes) -> None:
    """Rule: as above, with the header right so that protobuf and field checks see the garbage."""
    decodes_or_refuses(bytes([type_id, 0]) + body)


@SETTINGS
@given(any_record, st.data())
def test_damaged_records_decode_or_raise_decode_error(record: Any, data: st.DataObject) -> None:
    """Rule: a truncated or bit-flipped record never raises anything but MetadataDecodeError."""
    encoded = encode_record(record)
    cut = data.draw(st.integers(0, len(encoded)))
    decodes_or_refuses(encoded[:cut])
    position = data.draw(st.integers(0, len(encoded) - 1))
    flipped = bytearray(encoded)
    flipped[position] ^= 1 << data.draw(st.integers(0, 7))
    decodes_or_refuses(bytes(flipped))


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "at least 2 bytes"),
        (b"\x00", "at least 2 bytes"),
        (b"\x06\x00", "unknown metadata record type 6"),
        (b"\xff\x00", "unknown metadata record type 255"),
        (b"\x14\x01", "NoOp version 1 is not supported"),
        (b"\x14\x00\xf8\x07\x01", r"fields it does not define: \[127\]"),  # field 127, varint 1
        (b"\x02\x00\x0a\x02\xc3\x28", "malformed message"),  # a topic name that is not UTF-8
        (b"\x09\x00\x0a\x0f" + bytes(15), "a UUID is 16 bytes"),
        (b"\x09\x00\x0a\x10" + bytes(16), "nil UUID"),
        (b"\x04\x00", "unknown resource type 0"),
        (b"\x07\x00\x08\x7f\x10", "malformed message"),  # truncated varint
    ],
)
def test_specific_garbage_names_the_problem(data: bytes, message: str) -> None:
    with pytest.raises(MetadataDecodeError, match=message):
        decode_record(data)


def test_unknown_fields_in_nested_messages_are_refused() -> None:
    """Rule: a version-0 record carries only version-0 fields, at any depth."""
    msg = pb.RegisterBrokerRecord(broker_id=1, incarnation_id=uuid.UUID(INC).bytes, broker_epoch=1)
    endpoint = pb.Endpoint(name="A", host="h", port=1).SerializeToString() + b"\xf8\x07\x01"
    data = b"\x00\x00" + msg.SerializeToString() + b"\x22" + bytes([len(endpoint)]) + endpoint
    with pytest.raises(MetadataDecodeError, match="does not define"):
        decode_record(data)
    assert decode_record(b"\x00\x00" + msg.SerializeToString()) == RegisterBroker(1, INC, 1, fenced=False)


@pytest.mark.parametrize(
    "message",
    [
        pb.PartitionRecord(topic_id=uuid.UUID(TID).bytes, replicas=[1, 2], isr=[3], leader=3),
        pb.PartitionRecord(topic_id=uuid.UUID(TID).bytes, replicas=[1, 1], isr=[1], leader=1),
        pb.PartitionRecord(topic_id=uuid.UUID(TID).bytes, replicas=[], isr=[], leader=-1),
        pb.PartitionRecord(topic_id=uuid.UUID(TID).bytes, replicas=[1], isr=[1], leader=1, leader_epoch=-1),
        pb.FenceBrokerRecord(broker_id=-1, broker_epoch=1),
        pb.TopicRecord(name="..", topic_id=uuid.UUID(TID).bytes),
        pb.ConfigRecord(resource_type=pb.CONFIG_RESOURCE_TYPE_BROKER, resource_name="x", key="k"),
        pb.ConfigRecord(resource_type=99, resource_name="", key="k"),  # type: ignore[arg-type]
        pb.ProducerIdsRecord(broker_id=1, broker_epoch=1, next_producer_id=0),
        pb.PartitionChangeRecord(topic_id=uuid.UUID(TID).bytes, partition=0),
    ],
    ids=lambda m: type(m).__name__,
)
def test_well_formed_messages_with_illegal_values_are_refused(message: Any) -> None:
    """Rule: decoding applies the same field checks as building a record."""
    type_id = {
        pb.PartitionRecord: 3,
        pb.FenceBrokerRecord: 7,
        pb.TopicRecord: 2,
        pb.ConfigRecord: 4,
        pb.ProducerIdsRecord: 15,
        pb.PartitionChangeRecord: 5,
    }[type(message)]
    with pytest.raises(MetadataDecodeError):
        decode_record(bytes([type_id, 0]) + message.SerializeToString())


# --- field checks when building records -------------------------------------------------------------


@pytest.mark.parametrize(
    "build",
    [
        lambda: FenceBroker(-1, 0),
        lambda: FenceBroker(True, 0),
        lambda: UnregisterBroker(1, 2**63),
        lambda: RegisterBroker(1, INC.upper(), 1),
        lambda: RegisterBroker(1, "not-a-uuid", 1),
        lambda: RegisterBroker(1, INC, 1, (Endpoint("A", "h", 1), Endpoint("A", "g", 2))),
        lambda: RegisterBroker(1, INC, 1, fenced=1),  # type: ignore[arg-type]
        lambda: RegisterBroker(1, INC, 1, rack="\ud800"),
        lambda: Endpoint("A", "h", 65536),
        lambda: Endpoint("", "h", 1),
        lambda: Topic("..", TID),
        lambda: Topic("a" * 250, TID),
        lambda: Topic("a/b", TID),
        lambda: Topic("a", str(uuid.UUID(int=0))),
        lambda: Partition(TID, 0, (), (), -1),
        lambda: Partition(TID, 0, (1, 1), (1,), 1),
        lambda: Partition(TID, 0, (1, 2), (3,), 3),
        lambda: Partition(TID, 0, (1, 2), (1,), 2),
        lambda: Partition(TID, -1, (1,), (1,), 1),
        lambda: Partition(TID, 0, (1,), (1,), -2),
        lambda: PartitionChange(TID, 0),
        lambda: PartitionChange(TID, 0, replicas=()),
        lambda: PartitionChange(TID, 0, isr=(1, 1)),
        lambda: Config(ConfigResourceType.BROKER, "01", "k", "v"),
        lambda: Config(ConfigResourceType.CLUSTER, "x", "k", "v"),
        lambda: Config(ConfigResourceType.TOPIC, "", "k", "v"),
        lambda: Config("topic", "t", "k", "v"),  # type: ignore[arg-type]
        lambda: Config(ConfigResourceType.CLUSTER, "", "", "v"),
        lambda: ProducerIds(1, 1, 0),
        lambda: FeatureLevel("metadata.version", 2**15),
        lambda: FeatureLevel("", 1),
        lambda: LeaderChange(-1, 0),
        lambda: BrokerControlledShutdown(1, -1),
    ],
)
def test_illegal_field_values_are_refused_when_building(build: Any) -> None:
    """Rule: every record that exists can be encoded: illegal fields fail at construction."""
    with pytest.raises(InvalidMetadataRecordError) as info:
        build()
    assert isinstance(info.value, MetadataError)
    assert isinstance(info.value, ValueError)
