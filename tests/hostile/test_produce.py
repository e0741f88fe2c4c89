"""Hostile Produce requests (issue 15): the attacks it names and every class of bad batch, one test each,
against real processes. Each asserts the error names what is wrong, then :func:`check_healthy` (every
process up, a fresh acks=all produce succeeds, every acknowledged record still readable at its offset)."""

from __future__ import annotations

import gzip
import struct
import time

import grpc
import lz4.frame
import pytest
import zstandard

from log.record import HEADER_SIZE, BatchBuilder, assemble_batch, build_batch
from log.record.compression import DEFAULT_MAX_DECOMPRESSED_BYTES, GZIP, LZ4, NONE, ZSTD
from log.segment import LOG_SUFFIX
from proto import broker_pb2 as pb
from tests.broker.cluster import Cluster
from tests.hostile.health import (
    CALL_TIMEOUT_S,
    Ledger,
    check_healthy,
    good_batch,
    live_leader,
    produce_raw,
    read_partition,
)
from tests.log.test_record_codec import recrc

pytestmark = pytest.mark.hostile

TOPIC = "produce-attacks"
LENGTH, MAGIC, ATTRIBUTES, LAST_OFFSET_DELTA, MAX_TIMESTAMP, RECORDS_COUNT = 8, 16, 21, 23, 35, 57


@pytest.fixture(scope="module")
def topic(cluster: Cluster) -> str:
    cluster.create_topic(TOPIC, 2, 3)
    return TOPIC


def refused(cluster: Cluster, topic: str, records: bytes, code: str, *words: str) -> None:
    """Produce ``records`` (acks=all) and expect ``code`` with every one of ``words`` in the message, nothing
    written (the partition's end offset unchanged)."""
    before = end_offset(cluster, topic)
    answer = produce_raw(cluster, topic, 0, records)
    assert answer.error.code == code, answer.error
    for word in words:
        assert word in answer.error.message, answer.error.message
    assert end_offset(cluster, topic) == before


def end_offset(cluster: Cluster, topic: str) -> int:
    """The high watermark of ``topic``-0 (every append here is acks=all: the log end offset too)."""
    request = pb.ListOffsetsRequest(replica_id=-1, partitions=[pb.ListOffsetsPartition(topic=topic, partition=0,
                                                                                       timestamp=-1)])  # fmt: skip
    stub = cluster.broker_stub(live_leader(cluster, topic, 0))
    return int(stub.ListOffsets(request, timeout=CALL_TIMEOUT_S).partitions[0].offset)


def patched(batch: bytes, offset: int, fmt: str, value: int, *, crc: bool = True) -> bytes:
    out = bytearray(batch)
    struct.pack_into(fmt, out, offset, value)
    return recrc(out) if crc else bytes(out)


# --- the attacks of the issue -------------------------------------------------------------------------


@pytest.mark.parametrize("length", [-12, -61, -(2**31), 0, 48])
def test_a_negative_or_short_batch_length_is_corrupt_message(
    cluster: Cluster, ledger: Ledger, topic: str, length: int
) -> None:
    """batchLength -12 made the leader loop forever on the partition lock: refused at once now."""
    refused(cluster, topic, patched(good_batch(), LENGTH, ">i", length, crc=False), "CORRUPT_MESSAGE")
    produce_raw(cluster, topic, 0, good_batch())  # the partition is free
    check_healthy(cluster, ledger)


def test_garbage_records_under_a_valid_crc_are_refused_and_consumers_unharmed(
    cluster: Cluster, ledger: Ledger, topic: str
) -> None:
    batch = bytearray(good_batch([b"a" * 40, b"b" * 40]))
    batch[HEADER_SIZE + 3 :] = b"\x80" * (len(batch) - HEADER_SIZE - 3)  # varints that never end
    refused(cluster, topic, recrc(batch), "CORRUPT_MESSAGE", "batch 0")
    assert all(v is not None for v in read_partition(cluster, topic, 0, end_offset(cluster, topic)).values())
    check_healthy(cluster, ledger)


def test_a_batch_claiming_2_31_records_is_refused_and_rolls_no_segment(
    cluster: Cluster, ledger: Ledger, topic: str
) -> None:
    """A count of 2^31-1 (with lastOffsetDelta to match) used to make a segment per append, until the broker
    ran out of file descriptors."""
    leader = live_leader(cluster, topic, 0)
    directory = cluster.brokers[leader].data_dir / f"{topic}-0"
    segments = sorted(p.name for p in directory.iterdir() if p.suffix == LOG_SUFFIX)
    claim = patched(good_batch(), RECORDS_COUNT, ">i", 2**31 - 1, crc=False)
    claim = patched(claim, LAST_OFFSET_DELTA, ">i", 2**31 - 2)
    for _ in range(5):
        refused(cluster, topic, claim, "CORRUPT_MESSAGE", "2147483647")
    assert sorted(p.name for p in directory.iterdir() if p.suffix == LOG_SUFFIX) == segments
    check_healthy(cluster, ledger)


def test_gzip_of_many_tiny_members_is_decoded_in_linear_time(cluster: Cluster, ledger: Ledger, topic: str) -> None:
    """A valid gzip batch of 24,000 members (one per 3 bytes of records; GZIPInputStream reads them all, so it is
    accepted) cost quadratic time to inflate; it is answered well within the call timeout now."""
    builder = BatchBuilder()
    now = int(time.time() * 1000)
    for i in range(6000):
        builder.append(now, None, b"%05d" % i)
    section = builder.build()[HEADER_SIZE:]
    members = b"".join(gzip.compress(section[i : i + 3], mtime=0) for i in range(0, len(section), 3))
    assert 900_000 > len(members) > 500_000
    batch = assemble_batch(members, compression=NONE, attributes=GZIP, base_offset=0, partition_leader_epoch=-1,
                           last_offset_delta=5999, base_timestamp=now, max_timestamp=now, producer_id=-1,
                           producer_epoch=-1, base_sequence=-1, records_count=6000)  # fmt: skip
    answer = produce_raw(cluster, topic, 1, batch)
    assert not answer.error.code, answer.error
    found = read_partition(cluster, topic, 1, answer.base_offset + 6000)
    assert [found[answer.base_offset + i] for i in (0, 5999)] == [b"00000", b"05999"]
    check_healthy(cluster, ledger)


@pytest.mark.parametrize("codec", [GZIP, LZ4, ZSTD])
def test_a_decompression_bomb_is_corrupt_message(cluster: Cluster, ledger: Ledger, topic: str, codec: int) -> None:
    zeros = b"\x00" * (DEFAULT_MAX_DECOMPRESSED_BYTES + 1)
    if codec == GZIP:
        section = gzip.compress(zeros, compresslevel=9)
    elif codec == LZ4:
        section = lz4.frame.compress(zeros, compression_level=16, store_size=False)
    else:
        section = zstandard.ZstdCompressor(write_content_size=False).compress(zeros)
    now = int(time.time() * 1000)
    batch = assemble_batch(section, compression=NONE, attributes=codec, base_offset=0, partition_leader_epoch=-1,
                           last_offset_delta=0, base_timestamp=now, max_timestamp=now, producer_id=-1,
                           producer_epoch=-1, base_sequence=-1, records_count=1)  # fmt: skip
    assert len(batch) < 1 << 20
    refused(cluster, topic, batch, "CORRUPT_MESSAGE", f"more than the {DEFAULT_MAX_DECOMPRESSED_BYTES}-byte limit")
    check_healthy(cluster, ledger)


# --- every class of bad batch -------------------------------------------------------------------------


def test_a_bad_magic_is_corrupt_message(cluster: Cluster, ledger: Ledger, topic: str) -> None:
    refused(cluster, topic, patched(good_batch(), MAGIC, ">b", 1, crc=False), "CORRUPT_MESSAGE", "magic 1")
    check_healthy(cluster, ledger)


def test_a_bad_crc_is_corrupt_message(cluster: Cluster, ledger: Ledger, topic: str) -> None:
    damaged = bytearray(good_batch([b"payload"]))
    damaged[-2] ^= 0x40
    refused(cluster, topic, bytes(damaged), "CORRUPT_MESSAGE", "CRC")
    check_healthy(cluster, ledger)


@pytest.mark.parametrize("shape", ["truncated", "trailing", "empty", "header-only"])
def test_malformed_framing_is_refused(cluster: Cluster, ledger: Ledger, topic: str, shape: str) -> None:
    batch = good_batch([b"x" * 100])
    records, code, word = {
        "truncated": (batch[:-10], "CORRUPT_MESSAGE", "remain"),
        "trailing": (batch + b"\x00" * 5, "CORRUPT_MESSAGE", "trailing"),
        "empty": (b"", "INVALID_RECORD", "no record batch"),
        "header-only": (batch[:HEADER_SIZE], "CORRUPT_MESSAGE", "remain"),
    }[shape]
    refused(cluster, topic, records, code, word)
    check_healthy(cluster, ledger)


def test_a_control_batch_from_a_client_is_invalid_record(cluster: Cluster, ledger: Ledger, topic: str) -> None:
    now = int(time.time() * 1000)
    control = BatchBuilder(producer_id=3, producer_epoch=0, base_sequence=0, is_control=True)
    control.append(now, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00")
    refused(cluster, topic, control.build(), "INVALID_RECORD", "control")
    check_healthy(cluster, ledger)


def test_a_transactional_batch_outside_a_verified_transaction_is_invalid_txn_state(
    cluster: Cluster, ledger: Ledger, topic: str
) -> None:
    """Transactional batches are legal now, but only inside a transaction the coordinator verified for this
    partition (KIP-890 part 1): a made-up producer id has none."""
    now = int(time.time() * 1000)
    transactional = BatchBuilder(producer_id=3, producer_epoch=0, base_sequence=0, is_transactional=True)
    transactional.append(now, None, b"v")
    refused(cluster, topic, transactional.build(), "INVALID_TXN_STATE", "no verified transaction")
    check_healthy(cluster, ledger)


@pytest.mark.parametrize(("pid", "epoch", "seq"), [(-7, -1, -1), (11, -1, 0), (11, 0, -5)])
def test_inconsistent_producer_fields_are_invalid_record(
    cluster: Cluster, ledger: Ledger, topic: str, pid: int, epoch: int, seq: int
) -> None:
    batch = good_batch(producer_id=pid, producer_epoch=epoch, base_sequence=seq)
    refused(cluster, topic, batch, "INVALID_RECORD", "producer")
    check_healthy(cluster, ledger)


def test_a_timestamp_past_message_timestamp_after_max_ms_is_invalid_timestamp(
    cluster: Cluster, ledger: Ledger, topic: str
) -> None:
    """Kafka 4.0's default: at most one hour ahead of the broker's clock (a producer writing nanoseconds)."""
    nanos = int(time.time() * 1000) * 1_000_000
    refused(cluster, topic, build_batch([b"v"], timestamp_ms=nanos), "INVALID_TIMESTAMP", "out of range",
            "message.timestamp.after.max.ms=3600000")  # fmt: skip
    check_healthy(cluster, ledger)


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_an_unknown_codec_is_unsupported_compression_type(
    cluster: Cluster, ledger: Ledger, topic: str, codec: int
) -> None:
    batch = patched(good_batch(), ATTRIBUTES, ">h", codec)
    refused(cluster, topic, batch, "UNSUPPORTED_COMPRESSION_TYPE", f"codec id {codec}")
    check_healthy(cluster, ledger)


def test_a_batch_above_max_message_bytes_is_message_too_large(cluster: Cluster, ledger: Ledger, topic: str) -> None:
    refused(cluster, topic, good_batch([b"z" * 1_100_000]), "MESSAGE_TOO_LARGE", "max.message.bytes=1048588")
    check_healthy(cluster, ledger)


def test_a_request_above_socket_request_max_bytes_is_refused_by_grpc(
    cluster: Cluster, ledger: Ledger, topic: str
) -> None:
    """socket.request.max.bytes is 4 MiB here: a larger request never reaches a handler."""
    with pytest.raises(grpc.RpcError) as exc:
        produce_raw(cluster, topic, 0, good_batch([b"y" * 900_000]) * 5)
    assert exc.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    check_healthy(cluster, ledger)


@pytest.mark.parametrize(("acks", "name", "code"), [
    (2, TOPIC, "INVALID_REQUIRED_ACKS"), (-1, "__consumer_offsets", "INVALID_TOPIC_EXCEPTION"),
    (-1, "no-such-topic", "UNKNOWN_TOPIC_OR_PARTITION"),
])  # fmt: skip
def test_bad_produce_parameters_are_refused(
    cluster: Cluster, ledger: Ledger, topic: str, acks: int, name: str, code: str
) -> None:
    request = pb.ProduceRequest(acks=acks, timeout_ms=1000, topics=[pb.ProduceTopicData(
        name=name, partitions=[pb.ProducePartitionData(partition=0, records=good_batch())])])  # fmt: skip
    via = live_leader(cluster, topic, 0)
    answer = cluster.broker_stub(via).Produce(request, timeout=CALL_TIMEOUT_S).topics[0].partitions[0]
    assert answer.error.code == code, answer.error
    check_healthy(cluster, ledger)
