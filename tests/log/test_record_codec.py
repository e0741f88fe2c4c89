"""RecordBatch v2 builder and reader: round trips, header fields, and every way a batch can be bad."""

from __future__ import annotations

import struct
from dataclasses import dataclass

import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from log.errors import CorruptRecordError, UnsupportedCompressionError
from log.record import (
    GZIP,
    HEADER_SIZE,
    LZ4,
    NONE,
    ZSTD,
    BatchBuilder,
    Record,
    assemble_batch,
    build_batch,
    iter_batches_with_records,
    iter_records,
    patch_base_offset,
    read_batch,
)
from log.record.header import ATTRIBUTES_OFFSET, CRC_OFFSET
from log.record.reader import CONTROL_KEY, CONTROL_TYPE_COMMIT

DETERMINISTIC = settings(derandomize=True, database=None, deadline=None, max_examples=60)
CODECS = [NONE, GZIP, LZ4, ZSTD]
TS = 1_700_000_000_000
RECORDS_COUNT_OFFSET = 57


@dataclass(frozen=True)
class Spec:
    """One record to append: the offset delta gap before it, and its fields."""

    gap: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


# Large values (2- and 3-byte varint lengths) are cheap repetitions: hypothesis' entropy goes to structure.
nullable_bytes = st.none() | st.binary(max_size=40) | st.integers(100, 9000).map(lambda n: b"z" * n)
header_lists = st.lists(st.tuples(st.text(max_size=6), st.none() | st.binary(max_size=10)), max_size=3)
specs = st.builds(
    Spec,
    gap=st.sampled_from([0, 0, 0, 1, 70, 9000, 2**20]),
    timestamp=st.integers(TS - 10**6, TS + 10**6) | st.integers(-(2**62), 2**62),  # deltas of any sign
    key=nullable_bytes,
    value=nullable_bytes,
    headers=header_lists.map(tuple),
)


def build(codec: int, records: list[Spec], **options: object) -> tuple[bytes, list[int]]:
    builder = BatchBuilder(codec, **options)  # type: ignore[arg-type]
    deltas = []
    for spec in records:
        if spec.gap:
            deltas.append(
                builder.append_with_offset_delta(
                    builder.record_count and deltas[-1] + 1 + spec.gap,
                    spec.timestamp,
                    spec.key,
                    spec.value,
                    spec.headers,
                )
            )
        else:
            deltas.append(builder.append(spec.timestamp, spec.key, spec.value, spec.headers))
    return builder.build(), deltas


def recrc(batch: bytes | bytearray) -> bytes:
    """The batch with its CRC recomputed: corruption the CRC cannot see, left for the decoder."""
    out = bytearray(batch)
    struct.pack_into(">I", out, CRC_OFFSET, crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
    return bytes(out)


@DETERMINISTIC
@given(st.sampled_from(CODECS), st.lists(specs, min_size=1, max_size=30), st.integers(0, 2**62))
def test_round_trip(codec: int, records: list[Spec], base_offset: int) -> None:
    batch, deltas = build(codec, records, base_offset=base_offset)
    header, decoded = read_batch(batch)
    assert deltas == sorted(set(deltas))
    assert deltas[0] == 0
    assert header.compression == codec
    assert header.base_offset == base_offset
    assert header.records_count == len(records)
    assert header.last_offset_delta == deltas[-1]
    assert header.base_timestamp == records[0].timestamp
    assert header.max_timestamp == max(r.timestamp for r in records)
    expected = [
        (base_offset + d, s.timestamp, s.key, s.value, s.headers)
        for d, s in zip(deltas, records, strict=True)
    ]
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in decoded] == expected
    assert not any(r.is_control or r.is_transactional or r.is_log_append_time for r in decoded)


@DETERMINISTIC
@given(st.lists(specs, min_size=1, max_size=30))
def test_estimated_size_is_the_exact_uncompressed_size(records: list[Spec]) -> None:
    builder = BatchBuilder()
    sizes = [builder.estimated_size_bytes()]
    for spec in records:
        builder.append(spec.timestamp, spec.key, spec.value, spec.headers)
        sizes.append(builder.estimated_size_bytes())
    assert sizes[0] == HEADER_SIZE
    assert sizes == sorted(sizes)
    assert len(builder.build()) == sizes[-1]


def test_many_records_in_one_batch() -> None:
    values = [b"v%d" % i for i in range(20_000)]  # offset deltas beyond the 2-byte varint tables
    batch = build_batch(values, timestamp_ms=TS, base_offset=5)
    _, decoded = read_batch(batch)
    assert [r.value for r in decoded] == values
    assert decoded[-1].offset == 5 + 19_999


@DETERMINISTIC
@given(
    st.lists(nullable_bytes, min_size=1, max_size=50),
    st.booleans(),
    st.sampled_from(CODECS),
)
def test_build_batch_matches_the_builder(values: list[bytes | None], keyed: bool, codec: int) -> None:
    keys = [None if i % 3 == 0 else b"key-%d" % i for i in range(len(values))] if keyed else None
    builder = BatchBuilder(codec, producer_id=7, producer_epoch=1, base_sequence=40)
    for i, value in enumerate(values):
        builder.append(TS, keys[i] if keys else None, value)
    fast = build_batch(
        values,
        keys=keys,
        timestamp_ms=TS,
        compression=codec,
        producer_id=7,
        producer_epoch=1,
        base_sequence=40,
    )
    if codec in (NONE, GZIP, LZ4):  # deterministic compressors: identical bytes
        assert fast == builder.build()
    assert [r.value for r in read_batch(fast)[1]] == values


def test_header_fields_and_attributes() -> None:
    builder = BatchBuilder(
        LZ4,
        base_offset=100,
        partition_leader_epoch=7,
        producer_id=12345,
        producer_epoch=3,
        base_sequence=2**31 - 1,
        is_transactional=True,
        log_append_time=True,
    )
    builder.append(TS + 5, b"k", b"v")
    builder.append(TS + 9, None, b"w")
    header, decoded = read_batch(builder.build())
    assert (header.partition_leader_epoch, header.producer_id, header.producer_epoch) == (7, 12345, 3)
    assert header.is_transactional
    assert header.is_log_append_time
    assert not header.is_control
    assert header.last_sequence == 0  # the sequence wraps past int32 max
    assert [r.timestamp for r in decoded] == [TS + 9, TS + 9]  # LogAppendTime: every record has maxTimestamp
    assert all(r.is_transactional and r.is_log_append_time for r in decoded)


def test_control_batches_are_decoded_and_marked() -> None:
    builder = BatchBuilder(producer_id=4, producer_epoch=0, is_transactional=True, is_control=True)
    builder.append(TS, CONTROL_KEY.pack(0, CONTROL_TYPE_COMMIT), b"\x00\x00\x00\x00\x00\x05")
    header, [marker] = read_batch(builder.build())
    assert header.is_control
    assert marker.is_control
    assert marker.control_type() == CONTROL_TYPE_COMMIT
    with pytest.raises(CorruptRecordError, match="not a well-formed control record"):
        Record(0, TS, b"k", None, (), 0).control_type()


def test_builder_rejects_misuse() -> None:
    with pytest.raises(ValueError, match="empty"):
        BatchBuilder().build()
    with pytest.raises(ValueError, match="producer id"):
        BatchBuilder(is_transactional=True)
    builder = BatchBuilder()
    builder.append(TS, None, b"a")
    with pytest.raises(ValueError, match="offset delta 0 must be at least 1"):
        builder.append_with_offset_delta(0, TS, None, b"b")
    with pytest.raises(ValueError, match="out of range"):
        _built_with(producer_epoch=2**15)  # producerEpoch is an int16
    bad = BatchBuilder()
    bad.append(TS, None, "text")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="bytes or None"):
        bad.build()
    built = BatchBuilder()
    built.append(TS, None, None)
    built.build()
    with pytest.raises(RuntimeError, match="already"):
        built.build()


def test_a_rejected_record_leaves_the_builder_unchanged() -> None:
    builder = BatchBuilder()
    with pytest.raises(TypeError):
        builder.append(1.5, None, b"float timestamp")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="empty"):
        builder.build()
    builder.append(TS, None, b"kept")
    size = builder.estimated_size_bytes()
    with pytest.raises(ValueError, match="int64"):
        builder.append(TS - 2**63 - 1, None, b"timestamp delta beyond int64")
    with pytest.raises(ValueError, match="int64"):
        builder.append_with_offset_delta(9, TS + 2**63, None, b"again")
    builder.append(TS + 1, None, b"also kept")
    assert builder.record_count == 2
    assert builder.estimated_size_bytes() > size
    header, decoded = read_batch(builder.build())
    assert (header.base_timestamp, header.max_timestamp, header.last_offset_delta) == (TS, TS + 1, 1)
    assert [(r.offset, r.value) for r in decoded] == [(0, b"kept"), (1, b"also kept")]


def _built_with(**options: int) -> bytes:
    builder = BatchBuilder(**options)  # type: ignore[arg-type]
    builder.append(TS, None, b"x")
    return builder.build()


def test_reads_bytearray_memoryview_and_an_offset_into_a_buffer() -> None:
    one = build_batch([b"a", b"b"], timestamp_ms=TS, base_offset=0)
    two = build_batch([b"c"], timestamp_ms=TS, base_offset=2)
    buf = one + two
    for view in (buf, bytearray(buf), memoryview(buf)):
        header, decoded = read_batch(view, len(one))
        assert header.base_offset == 2
        assert [r.value for r in decoded] == [b"c"]


def test_iter_records_spans_batches_and_skips_a_trailing_partial_batch() -> None:
    batches = [
        build_batch([b"%d" % i, None], timestamp_ms=TS, base_offset=2 * i, compression=c)
        for i, c in enumerate(CODECS)
    ]
    buf = b"".join(batches)
    assert [r.offset for r in iter_records(buf)] == list(range(8))
    for cut in (1, 11, 12, HEADER_SIZE, len(batches[-1]) - 1):
        assert [r.offset for r in iter_records(buf[:-cut])] == list(range(6))
    assert [h.base_offset for h, _ in iter_batches_with_records(memoryview(buf))] == [0, 2, 4, 6]


def test_base_offset_patch_keeps_the_crc_valid() -> None:
    batch = bytearray(build_batch([b"x", b"y"], timestamp_ms=TS))
    patch_base_offset(batch, 0, 1000)
    assert [r.offset for r in read_batch(batch)[1]] == [1000, 1001]


# --- corruption --------------------------------------------------------------------------------------

SAMPLE = build_batch([b"alpha", None, b"gamma"], keys=[b"k1", b"k2", None], timestamp_ms=TS)


@DETERMINISTIC
@given(st.integers(CRC_OFFSET, len(SAMPLE) - 1), st.integers(1, 255))
def test_any_flipped_byte_under_the_crc_is_detected(position: int, flip: int) -> None:
    damaged = bytearray(SAMPLE)
    damaged[position] ^= flip
    # A flip in recordsCount or lastOffsetDelta may trip a sanity check before the CRC does.
    with pytest.raises(CorruptRecordError, match="CRC|records_count|last_offset_delta"):
        read_batch(damaged)


@pytest.mark.parametrize("position", [CRC_OFFSET, ATTRIBUTES_OFFSET, HEADER_SIZE, len(SAMPLE) - 1])
def test_flipped_byte_fails_the_crc(position: int) -> None:
    damaged = bytearray(SAMPLE)
    damaged[position] ^= 0x01
    with pytest.raises(CorruptRecordError, match="fails its CRC"):
        read_batch(damaged)
    with pytest.raises(CorruptRecordError, match="fails its CRC"):
        list(iter_records(SAMPLE + damaged))


def test_bad_magic_and_truncation() -> None:
    damaged = bytearray(SAMPLE)
    damaged[16] = 1
    with pytest.raises(CorruptRecordError, match="magic 1"):
        read_batch(damaged)
    for size in (0, 11, 12, HEADER_SIZE - 1, HEADER_SIZE, len(SAMPLE) - 1):
        with pytest.raises(CorruptRecordError):
            read_batch(SAMPLE[:size])


def _single_record_batch(record_body: bytes, records_count: int = 1, last_offset_delta: int = 0) -> bytes:
    """A batch around hand-written record bytes, with a valid CRC."""
    return assemble_batch(
        record_body,
        compression=NONE,
        attributes=0,
        base_offset=0,
        partition_leader_epoch=-1,
        last_offset_delta=last_offset_delta,
        base_timestamp=TS,
        max_timestamp=TS,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        records_count=records_count,
    )


@pytest.mark.parametrize(
    ("record_hex", "message"),
    [
        ("8080808080800100", "longer than 5 bytes"),  # overlong record length varint
        ("0c000000090102036100", "invalid key length -5"),  # keyLength -5
        ("0c0000000103016100", "invalid value length -2"),  # valueLength -2
        ("7e000000010100", "does not fit"),  # length 63 > the 6 bytes that remain
        ("02000000", "hold at most 0"),  # 4 bytes cannot hold a record (at least 7): the header check refuses
        ("0c000000010101", "invalid header count -1"),  # headersCount -1
        ("140000000101020461ff01", "not UTF-8"),  # one header, key 0x61 0xff
        ("0e0000000101000000", "should end at byte"),  # length 7 but the fields take 6
        ("0c0000000102610000", "should end at byte"),  # length 6 but the fields take 7
        ("0c00" + "ff" * 10 + "01", "longer than 10 bytes"),  # 11-byte timestampDelta
        ("0c000000017e00", "run past the end"),  # a 63-byte value in a 6-byte record at the end
    ],
)
def test_malformed_records_under_a_valid_crc(record_hex: str, message: str) -> None:
    with pytest.raises(CorruptRecordError, match=message):
        read_batch(_single_record_batch(bytes.fromhex(record_hex)))


def test_offset_deltas_must_grow_and_stay_within_last_offset_delta() -> None:
    # length 6, attributes 0, timestampDelta 0, offsetDelta, null key, null value, no headers
    record = "0c0000{delta}010100"
    twice_zero = bytes.fromhex(record.format(delta="00") * 2)
    with pytest.raises(CorruptRecordError, match="offset delta 0 follows 0"):
        read_batch(_single_record_batch(twice_zero, records_count=2, last_offset_delta=1))
    negative = bytes.fromhex(record.format(delta="01"))  # offsetDelta -1
    with pytest.raises(CorruptRecordError, match="offset delta -1 follows -1"):
        read_batch(_single_record_batch(negative))
    beyond = bytes.fromhex(record.format(delta="06"))  # offsetDelta 3, lastOffsetDelta 0
    with pytest.raises(CorruptRecordError, match="offset delta 3 exceeds lastOffsetDelta 0"):
        read_batch(_single_record_batch(beyond))


def test_records_count_must_match_the_records() -> None:
    two = BatchBuilder()  # values long enough that the header's size check lets 3 records through
    two.append(TS, None, b"a" * 20)
    two.append_with_offset_delta(20, TS, None, b"b" * 20)
    batch = bytearray(two.build())
    struct.pack_into(">i", batch, RECORDS_COUNT_OFFSET, 3)
    with pytest.raises(CorruptRecordError, match="declares 3 records but holds 2"):
        read_batch(recrc(batch))
    body = len(batch) - HEADER_SIZE  # 54 bytes: room for 7 records of the smallest size (7 bytes)
    struct.pack_into(">i", batch, RECORDS_COUNT_OFFSET, 8)  # within lastOffsetDelta 20, but 8 x 7 > 54 bytes
    with pytest.raises(CorruptRecordError, match=f"claims 8 records but its {body} bytes of records hold at most 7"):
        read_batch(recrc(batch))
    struct.pack_into(">i", batch, RECORDS_COUNT_OFFSET, 1)
    with pytest.raises(CorruptRecordError, match="bytes after its 1 records"):
        read_batch(recrc(batch))


@pytest.mark.parametrize("codec", [GZIP, LZ4, ZSTD])
def test_corrupt_compressed_section_under_a_valid_crc(codec: int) -> None:
    batch = bytearray(build_batch([b"payload %d" % i for i in range(50)], timestamp_ms=TS, compression=codec))
    middle = (HEADER_SIZE + len(batch)) // 2
    batch[middle:] = b"\xff" * (len(batch) - middle)  # the second half of the frame is garbage
    with pytest.raises(CorruptRecordError):
        read_batch(recrc(batch))


@pytest.mark.parametrize("codec", [GZIP, LZ4, ZSTD])
def test_decompression_bomb_in_a_batch(codec: int) -> None:
    builder = BatchBuilder(codec)
    builder.append(TS, None, bytes(3 * 1024 * 1024))
    batch = builder.build()
    assert len(batch) < 200_000
    with pytest.raises(CorruptRecordError, match="limit"):
        read_batch(batch, max_decompressed_bytes=1024 * 1024)
    with pytest.raises(CorruptRecordError, match="limit"):
        list(iter_records(batch, max_decompressed_bytes=1024 * 1024))
    assert len(read_batch(batch)[1][0].value or b"") == 3 * 1024 * 1024


@pytest.mark.parametrize("codec_id", [5, 7])
def test_unsupported_codec_in_a_batch(codec_id: int) -> None:
    batch = assemble_batch(
        b"\x00",
        compression=NONE,
        attributes=codec_id,
        base_offset=0,
        partition_leader_epoch=-1,
        last_offset_delta=0,
        base_timestamp=TS,
        max_timestamp=TS,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        records_count=1,
    )
    with pytest.raises(UnsupportedCompressionError):
        read_batch(batch)


@settings(derandomize=True, database=None, deadline=None, max_examples=400)
@given(st.sampled_from(CODECS), st.data())
def test_damage_under_a_valid_crc_raises_only_corrupt_record_error(codec: int, data: st.DataObject) -> None:
    """Whatever a producer writes under a correct CRC, decoding either succeeds or says CORRUPT_MESSAGE."""
    batch = bytearray(build_batch([b"alpha", None], keys=[b"k", None], timestamp_ms=TS, compression=codec))
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(HEADER_SIZE, len(batch) - 1))
        batch[position] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        del batch[data.draw(st.integers(HEADER_SIZE, len(batch) - 1)) :]
        struct.pack_into(">i", batch, 8, len(batch) - 12)
    try:
        _, decoded = read_batch(recrc(batch), max_decompressed_bytes=64 * 1024)
    except CorruptRecordError:
        return
    assert len(decoded) == struct.unpack_from(">i", batch, RECORDS_COUNT_OFFSET)[0]
