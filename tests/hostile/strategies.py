"""Hypothesis strategies for hostile requests: structurally valid-ish Produce, Fetch, Metadata, admin and group
requests, the way a fuzzer that knows the protocol would write them (the fuzzer: ``test_fuzz.py``).

Produce carries real RecordBatch v2 batches from :mod:`log.record.builder` (any codec, keys, headers,
producer fields), then damaged: bit flips, a header field overwritten with an odd value (length, magic,
attributes, lastOffsetDelta, count, timestamps, producer fields), cut short or extended, two batches glued,
with the CRC recomputed or not. The other requests take odd offsets, epochs, sizes, ids, names, regexes and
huge values. Every request is bounded so that a healthy broker answers it at once (long polls of at most
200 ms): a slow answer is a hang, not the request's doing.
"""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from log.record import BatchBuilder
from log.record.compression import GZIP, LZ4, NONE, ZSTD
from proto import broker_pb2 as pb
from proto import controller_pb2
from tests.log.test_record_codec import recrc

FUZZ_TOPIC = "fuzz"
NOW_MS = int(time.time() * 1000)  # records are stamped around it: within the brokers' CreateTime bounds

INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
ODD_INT32 = st.sampled_from([-(2**31), -2, -1, 0, 1, 2, 7, 60, 61, 2**16, 2**31 - 2, 2**31 - 1]) | INT32
ODD_INT64 = st.sampled_from([-(2**63), -2, -1, 0, 1, 2**31, 2**62, 2**63 - 1]) | INT64
NAMES = st.sampled_from([FUZZ_TOPIC, "ledger", "__consumer_offsets", "", ".", "..", "a" * 249, "a" * 250,
                         "nope", "fuzz\x00", "fü"]) | st.text(max_size=30)  # fmt: skip
PARTITIONS = st.one_of(st.sampled_from([0, 1, 2]), st.sampled_from([0, 1, 2]), st.sampled_from([3, -1]), INT32)
FUZZ_NAME = st.one_of(st.just(FUZZ_TOPIC), st.just(FUZZ_TOPIC), st.just(FUZZ_TOPIC), NAMES)
LEADER = st.sampled_from([0, 0, 0, 1, 2])  # the fuzz topic's partitions are all led by broker 0
HEADER_FIELDS = {  # offset, struct format: every field of the 61-byte header a client writes
    "baseOffset": (0, ">q"), "batchLength": (8, ">i"), "partitionLeaderEpoch": (12, ">i"), "magic": (16, ">b"),
    "crc": (17, ">I"), "attributes": (21, ">h"), "lastOffsetDelta": (23, ">i"), "baseTimestamp": (27, ">q"),
    "maxTimestamp": (35, ">q"), "producerId": (43, ">q"), "producerEpoch": (51, ">h"), "baseSequence": (53, ">i"),
    "recordsCount": (57, ">i"),
}  # fmt: skip


@dataclass(frozen=True)
class Call:
    """One request for the fuzzer: the service (``broker`` i or ``controller``), the RPC and the message."""

    service: str
    target: int
    rpc: str
    message: Any

    def __repr__(self) -> str:
        text = str(self.message)
        return f"{self.rpc}->{self.service}{self.target}: {text[:300]}{'...' if len(text) > 300 else ''}"


@st.composite
def batches(draw: st.DrawFn) -> bytes:
    """A producer batch as the builder writes it (possibly idempotent), with its records' fields drawn."""
    pid = draw(st.sampled_from([-1, -1, 3, 1000]))
    sequence = draw(st.integers(0, 10)) if pid >= 0 else -1
    codec = draw(st.sampled_from([NONE, NONE, GZIP, LZ4, ZSTD]))
    builder = BatchBuilder(codec, producer_id=pid, producer_epoch=0 if pid >= 0 else -1, base_sequence=sequence)
    for _ in range(draw(st.integers(1, 12))):
        builder.append(
            NOW_MS + draw(st.integers(-1000, 1000)),
            draw(st.none() | st.binary(max_size=20)),
            draw(st.none() | st.binary(max_size=200)),
            draw(st.lists(st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=5)), max_size=2)),
        )
    return builder.build()


@st.composite
def damaged(draw: st.DrawFn) -> bytes:
    """A batch, damaged in one or more ways (or not at all), its CRC fixed or not."""
    data = bytearray(draw(batches()))
    for _ in range(draw(st.integers(0, 3))):
        how = draw(st.sampled_from(["flip", "field", "cut", "extend", "glue", "garbage"]))
        if how == "flip" and data:
            position = draw(st.integers(0, len(data) - 1))
            data[position] ^= 1 << draw(st.integers(0, 7))
        elif how == "field" and len(data) >= 61:
            name = draw(st.sampled_from(sorted(HEADER_FIELDS)))
            offset, fmt = HEADER_FIELDS[name]
            bits = struct.calcsize(fmt) * 8
            signed = fmt[-1].islower()
            low, high = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)
            value = draw(st.sampled_from([low, high, 0, -1 if signed else 1, 2]) | st.integers(low, high))
            struct.pack_into(fmt, data, offset, value)
        elif how == "cut" and data:
            del data[draw(st.integers(0, len(data) - 1)) :]
        elif how == "extend":
            data += draw(st.binary(min_size=1, max_size=40))
        elif how == "glue":
            data += draw(batches())
        elif how == "garbage" and len(data) > 61:
            start = draw(st.integers(61, len(data) - 1))
            data[start:] = draw(st.binary(min_size=len(data) - start, max_size=len(data) - start))
    if len(data) >= 61 and draw(st.booleans()):
        data = bytearray(recrc(data))  # the CRC vouches for the damage: only decoding the records finds it
    return bytes(data)


@st.composite
def produces(draw: st.DrawFn, brokers: int) -> Call:
    topics = []
    for _ in range(draw(st.integers(1, 2))):
        partitions = [
            pb.ProducePartitionData(partition=draw(PARTITIONS), records=draw(damaged()))
            for _ in range(draw(st.integers(1, 2)))
        ]
        topics.append(pb.ProduceTopicData(name=draw(FUZZ_NAME), partitions=partitions))
    request = pb.ProduceRequest(acks=draw(st.sampled_from([-1, -1, 1, 1, 0, 2])), topics=topics,
                                timeout_ms=draw(st.sampled_from([2000, 2000, 0, 1, -5, 2**31 - 1])))  # fmt: skip
    return Call("broker", draw(LEADER) % brokers, "Produce", request)


@st.composite
def fetches(draw: st.DrawFn, brokers: int) -> Call:
    partitions = [
        pb.FetchPartition(
            partition=draw(PARTITIONS), fetch_offset=draw(st.integers(0, 30) | ODD_INT64),
            partition_max_bytes=draw(ODD_INT32), current_leader_epoch=draw(st.sampled_from([-1, 0, 1]) | INT32),
            log_start_offset=draw(ODD_INT64), last_fetched_epoch=draw(ODD_INT32),
        )
        for _ in range(draw(st.integers(1, 3)))
    ]  # fmt: skip
    request = pb.FetchRequest(
        replica_id=draw(st.one_of(st.just(-1), st.just(-1), st.just(-1), st.sampled_from([0, 1, 2, 99]), INT32)),
        replica_epoch=draw(ODD_INT64),
        max_wait_ms=draw(st.sampled_from([0, 1, 100, 200, -1, -(2**31)])), min_bytes=draw(ODD_INT32),
        max_bytes=draw(ODD_INT32), isolation_level=draw(st.sampled_from([0, 1, 2, -1])),
        topics=[pb.FetchTopic(name=draw(FUZZ_NAME), partitions=partitions)],
    )  # fmt: skip
    return Call("broker", draw(LEADER) % brokers, "Fetch", request)


@st.composite
def metadata(draw: st.DrawFn, brokers: int) -> Call:
    kind = draw(st.sampled_from(["metadata", "list_offsets", "describe_configs", "epochs"]))
    if kind == "metadata":
        message: Any = pb.MetadataRequest(topics=draw(st.lists(NAMES, max_size=5)), all_topics=draw(st.booleans()))
        rpc = "Metadata"
    elif kind == "list_offsets":
        message = pb.ListOffsetsRequest(replica_id=draw(st.sampled_from([-1, 0, 5]) | INT32), partitions=[
            pb.ListOffsetsPartition(topic=draw(NAMES), partition=draw(st.sampled_from([0, 1, -1]) | INT32),
                                    timestamp=draw(st.sampled_from([-1, -2, -3, -4, 0, NOW_MS]) | ODD_INT64),
                                    current_leader_epoch=draw(ODD_INT32))
        ])  # fmt: skip
        rpc = "ListOffsets"
    elif kind == "describe_configs":
        resource = pb.DescribeConfigsRequest.Resource(resource_type=draw(st.sampled_from(["topic", "broker", "x", ""])),
                                                      resource_name=draw(NAMES))  # fmt: skip
        message, rpc = pb.DescribeConfigsRequest(resources=[resource]), "DescribeConfigs"
    else:
        message = pb.OffsetsForLeaderEpochRequest(replica_id=draw(st.sampled_from([-1, 0, 1]) | INT32), partitions=[
            pb.OffsetForLeaderPartition(topic=draw(NAMES), partition=draw(st.sampled_from([0, 1]) | INT32),
                                        current_leader_epoch=draw(ODD_INT32), leader_epoch=draw(ODD_INT32))
        ])  # fmt: skip
        rpc = "OffsetsForLeaderEpoch"
    return Call("broker", draw(st.integers(0, brokers - 1)), rpc, message)


@st.composite
def admin(draw: st.DrawFn, brokers: int) -> Call:
    kind = draw(st.sampled_from(["create", "partitions", "configs"]))
    if kind == "create":
        topic = controller_pb2.TopicToCreate(
            name=draw(st.sampled_from(["fz-" + str(draw(st.integers(0, 50)))]) | NAMES),
            num_partitions=draw(st.sampled_from([-1, 1, 2, 0, 10**6, 2**31 - 1]) | st.integers(-3, 3)),
            replication_factor=draw(st.sampled_from([-1, 1, 3, 0, 4, 2**15]) | st.integers(-3, 3)),
            configs=draw(st.dictionaries(st.sampled_from(["segment.bytes", "cleanup.policy", "retention.ms",
                                                          "message.timestamp.after.max.ms", "x"]),
                                         st.sampled_from(["1", "-1", "compact", "delete,compact", "9" * 30, ""]),
                                         max_size=2)),
        )  # fmt: skip
        message: Any = controller_pb2.CreateTopicsRequest(topics=[topic], validate_only=draw(st.booleans()),
                                                          timeout_ms=5000)  # fmt: skip
        rpc = "CreateTopics"
    elif kind == "partitions":
        grow = controller_pb2.CreatePartitionsRequest.Topic(name=draw(NAMES), count=draw(ODD_INT32))
        message, rpc = controller_pb2.CreatePartitionsRequest(topics=[grow], validate_only=True, timeout_ms=5000), \
            "CreatePartitions"  # fmt: skip
    else:
        resource = controller_pb2.AlterConfigsRequest.Resource(
            resource_type=draw(st.sampled_from(["topic", "broker", "cluster", "nope"])), resource_name=draw(NAMES),
            entries=[controller_pb2.ConfigEntry(key=draw(st.sampled_from(["retention.ms", "min.insync.replicas",
                                                                          "max.broker.partitions", "zz"])),
                                                value=draw(st.sampled_from(["-1", "0", "abc", "99999999999"])))],
        )  # fmt: skip
        message, rpc = controller_pb2.AlterConfigsRequest(resources=[resource], validate_only=True), "AlterConfigs"
    return Call("broker", draw(st.integers(0, brokers - 1)), rpc, message)


REGEXES = st.sampled_from([r"(a+)+$", r"fuzz|ledger", "(", r"(a)\1", ".*", "[", "(?=x)", "a{99999}", "\\", ""])


@st.composite
def groups(draw: st.DrawFn, brokers: int) -> Call:
    group = draw(st.sampled_from(["fz-group", "", "x" * 300]) | st.text(max_size=20))
    kind = draw(st.sampled_from(["heartbeat", "commit", "fetch", "coordinator", "describe"]))
    if kind == "heartbeat":
        message: Any = pb.ConsumerGroupHeartbeatRequest(
            group_id=group, member_id=draw(st.sampled_from(["", "m"]) | st.text(max_size=10)),
            member_epoch=draw(st.sampled_from([0, -1, -2, 1, -3]) | INT32),
            rebalance_timeout_ms=draw(st.sampled_from([-1, 0, 30000]) | INT32),
            subscribed_topic_names=draw(st.lists(NAMES, max_size=3)), subscription_changed=draw(st.booleans()),
            subscribed_topic_regex=draw(REGEXES | st.text(max_size=20)),
            server_assignor=draw(st.sampled_from(["", "uniform", "range", "nope"])),
            session_timeout_ms=draw(st.sampled_from([0, 45000, 1, -1]) | INT32),
            instance_id=draw(st.sampled_from(["", "i1"])),
        )  # fmt: skip
        rpc = "ConsumerGroupHeartbeat"
    elif kind == "commit":
        partition = pb.OffsetCommitRequest.Partition(
            partition=draw(st.sampled_from([0, -1]) | INT32), committed_offset=draw(ODD_INT64),
            committed_leader_epoch=draw(ODD_INT32),
            committed_metadata=draw(st.text(max_size=50) | st.just("m" * 5000)),
        )  # fmt: skip
        topic = pb.OffsetCommitRequest.Topic(name=draw(NAMES), partitions=[partition])
        message = pb.OffsetCommitRequest(group_id=group, member_id=draw(st.text(max_size=8)),
                                         member_epoch=draw(ODD_INT32), topics=[topic])  # fmt: skip
        rpc = "OffsetCommit"
    elif kind == "fetch":
        message, rpc = pb.OffsetFetchRequest(group_id=group), "OffsetFetch"
    elif kind == "coordinator":
        message = pb.FindCoordinatorRequest(key_type=draw(st.sampled_from([0, 1, -1])),
                                            keys=draw(st.lists(st.just(group), max_size=2)))  # fmt: skip
        rpc = "FindCoordinator"
    else:
        message, rpc = pb.ConsumerGroupDescribeRequest(group_ids=[group]), "ConsumerGroupDescribe"
    return Call("broker", draw(st.integers(0, brokers - 1)), rpc, message)


def calls(brokers: int) -> st.SearchStrategy[Call]:
    """Any hostile request, weighted towards Produce (the richest input) and Fetch."""
    return st.one_of(
        produces(brokers), produces(brokers), produces(brokers), fetches(brokers), fetches(brokers),
        metadata(brokers), admin(brokers), groups(brokers),
    )  # fmt: skip
