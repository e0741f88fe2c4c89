"""The leader's record validator (``log.record.validator``, rules V1-V6) against the full reader.

The property that matters: a batch the leader accepts is one every consumer can decode (the reader
finds the same records); a batch it refuses raises one of the log's errors, never anything else.
"""

from __future__ import annotations

import gzip
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from log.errors import CorruptRecordError, InvalidRecordError, InvalidTimestampError, LogError
from log.record import GZIP, LZ4, NONE, ZSTD, BatchBuilder, assemble_batch, build_batch, read_batch
from log.record.header import ATTR_TRANSACTIONAL, HEADER_SIZE, validate_batch
from log.record.validator import RecordPolicy, validate_producer_batch
from tests.log.test_record_codec import RECORDS_COUNT_OFFSET, recrc

TS = 1_700_000_000_000
CODECS = [NONE, GZIP, LZ4, ZSTD]
POLICY = RecordPolicy(TS)
DETERMINISTIC = settings(derandomize=True, database=None, deadline=None, max_examples=200)
HOUR_MS = 3_600_000


def validate(batch: bytes, policy: RecordPolicy = POLICY) -> int:
    return validate_producer_batch(batch, 0, validate_batch(batch), policy)


def single(record_hex: str, **fields: int) -> bytes:
    """A batch of one hand-written record, with a valid CRC (fields override the header's)."""
    header = dict(last_offset_delta=0, base_timestamp=TS, max_timestamp=TS, producer_id=-1, producer_epoch=-1,
                  base_sequence=-1, records_count=1, attributes=0)  # fmt: skip
    header.update(fields)
    return assemble_batch(bytes.fromhex(record_hex), compression=NONE, base_offset=0, partition_leader_epoch=-1,
                          **header)  # fmt: skip


records = st.lists(
    st.tuples(
        st.integers(TS - 10**6, TS + 10**6),
        st.none() | st.binary(max_size=30),
        st.none() | st.binary(max_size=300),
        st.lists(st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=5)), max_size=2),
    ),
    min_size=1,
    max_size=40,
)


Item = tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]


def built(codec: int, items: list[Item]) -> bytes:
    builder = BatchBuilder(codec)
    for timestamp, key, value, headers in items:
        builder.append(timestamp, key, value, headers)
    return builder.build()


@DETERMINISTIC
@given(st.sampled_from(CODECS), records)
def test_producer_batches_pass_and_give_their_largest_timestamp(codec: int, items: list[Item]) -> None:
    batch = built(codec, items)
    assert validate(batch) == max(t for t, *_ in items)


@DETERMINISTIC
@given(st.sampled_from(CODECS), records, st.data())
def test_what_the_leader_accepts_every_reader_decodes(codec: int, items: list[Item], data: st.DataObject) -> None:
    """V4: damage under a valid CRC is refused with a log error, or the batch still decodes fully."""
    batch = bytearray(built(codec, items))
    for _ in range(data.draw(st.integers(1, 4))):
        batch[data.draw(st.integers(HEADER_SIZE, len(batch) - 1))] = data.draw(st.integers(0, 255))
    damaged = recrc(batch)
    try:
        header = validate_batch(damaged)
        validate_producer_batch(damaged, 0, header, RecordPolicy(TS, 2**62, 2**62))
    except LogError:
        return
    _, decoded = read_batch(damaged)
    assert [r.offset for r in decoded] == list(range(len(items)))


def test_v1_control_batches_and_transactional_ones_without_a_producer_are_refused() -> None:
    control = BatchBuilder(producer_id=5, producer_epoch=0, base_sequence=0, is_control=True)
    control.append(TS, b"\x00\x00\x00\x01", b"")
    with pytest.raises(InvalidRecordError, match="control batch"):
        validate(control.build())
    txn = BatchBuilder(producer_id=5, producer_epoch=0, base_sequence=0, is_transactional=True)
    txn.append(TS, None, b"v")
    validate(txn.build())  # the producer state decides whether it may be written (S10, S11)
    records = build_batch([b"v"], timestamp_ms=TS)[HEADER_SIZE:]
    orphan = assemble_batch(records, compression=0, attributes=ATTR_TRANSACTIONAL, base_offset=0,
                            partition_leader_epoch=-1, last_offset_delta=0, base_timestamp=TS, max_timestamp=TS,
                            producer_id=-1, producer_epoch=-1, base_sequence=-1, records_count=1)  # fmt: skip
    with pytest.raises(InvalidRecordError, match="transactional without a producer id"):
        validate(orphan)


@pytest.mark.parametrize(
    ("producer_id", "epoch", "sequence"),
    [(-2, -1, -1), (-(2**63), 0, 0), (5, -1, 0), (5, 0, -1)],
)
def test_v2_producer_fields_must_agree(producer_id: int, epoch: int, sequence: int) -> None:
    batch = build_batch([b"v"], timestamp_ms=TS, producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence)
    with pytest.raises(InvalidRecordError, match="producer"):
        validate(batch)


@pytest.mark.parametrize(("epoch", "sequence"), [(-1, -1), (-1, 0), (0, 7)])
def test_v2_without_a_producer_id_the_epoch_and_sequence_are_not_looked_at(epoch: int, sequence: int) -> None:
    """As Kafka: aiokafka writes base sequence 0 in a batch without a producer id."""
    batch = build_batch([b"v"], timestamp_ms=TS, producer_id=-1, producer_epoch=epoch, base_sequence=sequence)
    assert validate(batch) == TS


def test_v3_a_producer_batch_is_dense_and_not_empty() -> None:
    gaps = BatchBuilder()
    gaps.append(TS, None, b"a")
    gaps.append_with_offset_delta(3, TS, None, b"b")
    with pytest.raises(InvalidRecordError, match="count = lastOffsetDelta"):
        validate(gaps.build())
    empty = single("", records_count=0)
    with pytest.raises(InvalidRecordError, match="count = lastOffsetDelta"):
        validate(empty)


@pytest.mark.parametrize(
    ("record_hex", "message"),
    [
        ("0c000000010100", ""),  # the well-formed baseline
        ("0c000002010100", "offset delta 1, expected 0"),
        ("0c000000090100", "key length -5"),
        ("0c000000010300", "value length -2"),
        ("0c000000010101", "header count -1"),
        ("0e" + "00000001010201", "header 0 has key length -1"),  # one header, null key
        ("14" + "0000000101" + "02" + "04" + "61ff" + "01", "not UTF-8"),  # one header, key 0x61 0xff
        ("0e0000000101000000", "should end at byte"),  # length 7, fields take 6
        ("0a000000010100", "should end at byte"),  # length 5: shorter than any record
        ("7e000000010100", "should end at byte"),  # length 63: past the section
        ("0c00" + "ff" * 10 + "01", "longer than 10 bytes"),  # an 11-byte timestampDelta
        ("0c000000010100" + "00", "1 bytes after its 1 records"),
    ],
)
def test_v4_malformed_records_under_a_valid_crc(record_hex: str, message: str) -> None:
    batch = single(record_hex)
    if not message:
        assert validate(batch) == TS
        return
    with pytest.raises(CorruptRecordError, match=message):
        validate(batch)


def test_v4_a_batch_claiming_more_records_than_it_holds_is_refused() -> None:
    """The attack of issue 15: a 2**31 - 1 record count with a valid CRC."""
    batch = bytearray(build_batch([b"x" * 200], timestamp_ms=TS))
    struct.pack_into(">i", batch, RECORDS_COUNT_OFFSET, 2**31 - 1)
    struct.pack_into(">i", batch, 23, 2**31 - 2)  # lastOffsetDelta to match: dense as far as the header says
    with pytest.raises(CorruptRecordError, match="claims 2147483647 records"):
        validate(recrc(batch))
    compressed = bytearray(build_batch([b"x" * 200], timestamp_ms=TS, compression=ZSTD))
    struct.pack_into(">i", compressed, RECORDS_COUNT_OFFSET, 2**31 - 1)
    struct.pack_into(">i", compressed, 23, 2**31 - 2)
    with pytest.raises(CorruptRecordError, match="run past the end"):
        validate(recrc(compressed))


def test_v4_a_decompression_bomb_is_corrupt_not_memory() -> None:
    section = gzip.compress(b"\x00" * (8 << 20))  # 8 MiB of zeros in ~8 KiB
    batch = single(section.hex(), attributes=GZIP)
    with pytest.raises(CorruptRecordError, match="more than the 1048576-byte limit"):
        validate(batch, RecordPolicy(TS, max_decompressed_bytes=1 << 20))


def test_v4_many_gzip_members_decode_in_order() -> None:
    """Kafka's GZIPInputStream reads concatenated members; so does the validator (in linear time)."""
    one = BatchBuilder()
    for i in range(500):
        one.append(TS, None, b"%d" % i)
    section = one.build()[HEADER_SIZE:]
    members = b"".join(gzip.compress(section[i : i + 7], mtime=0) for i in range(0, len(section), 7))
    batch = single(members.hex(), attributes=GZIP, records_count=500, last_offset_delta=499)
    assert validate(batch) == TS


def test_v5_timestamps_outside_the_bounds_are_refused() -> None:
    policy = RecordPolicy(TS, timestamp_before_max_ms=HOUR_MS, timestamp_after_max_ms=HOUR_MS)
    assert validate(build_batch([b"a", b"b"], timestamp_ms=TS - HOUR_MS), policy) == TS - HOUR_MS
    assert validate(build_batch([b"a"], timestamp_ms=TS + HOUR_MS), policy) == TS + HOUR_MS
    late = BatchBuilder()
    late.append(TS, None, b"a")
    late.append(TS + HOUR_MS + 1, None, b"b")
    with pytest.raises(InvalidTimestampError, match=f"Timestamp {TS + HOUR_MS + 1} of message with offset delta 1"):
        validate(late.build(), policy)
    with pytest.raises(InvalidTimestampError, match="out of range"):
        validate(build_batch([b"a"], timestamp_ms=TS - HOUR_MS - 1), policy)
    nanos = build_batch([b"a"], timestamp_ms=TS * 1_000_000)  # a producer writing nanoseconds: KIP-937's case
    with pytest.raises(InvalidTimestampError):
        validate(nanos, RecordPolicy(TS, timestamp_after_max_ms=HOUR_MS))


def test_v5_no_timestamp_and_log_append_time_pass() -> None:
    policy = RecordPolicy(TS, timestamp_before_max_ms=0, timestamp_after_max_ms=0)
    assert validate(build_batch([b"a"], timestamp_ms=-1), policy) == -1
    append_time = RecordPolicy(TS, 0, 0, log_append_time=True)
    assert validate(build_batch([b"a"], timestamp_ms=12), append_time) == 12


def test_v6_compacted_topics_need_keys() -> None:
    compact = RecordPolicy(TS, require_keys=True)
    assert validate(build_batch([b"v"], keys=[b"k"], timestamp_ms=TS), compact) == TS
    for codec in CODECS:
        batch = build_batch([b"v", b"w"], keys=[b"k", None], timestamp_ms=TS, compression=codec)
        with pytest.raises(InvalidRecordError, match="without key .*record 1"):
            validate(batch, compact)
