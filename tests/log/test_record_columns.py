"""Columnar decoding: exactly the record reader's values and exactly its errors, column by column."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from log.errors import CorruptRecordError
from log.record import GZIP, HEADER_SIZE, LZ4, NONE, ZSTD, BatchBuilder, build_batch, read_batch
from log.record.columns import Columns, iter_batch_columns, read_batch_columns
from log.record.reader import iter_batches_with_records
from tests.log.test_record_codec import (
    CODECS,
    DETERMINISTIC,
    RECORDS_COUNT_OFFSET,
    TS,
    Spec,
    _single_record_batch,
    build,
    recrc,
    specs,
)


def as_rows(columns: Columns) -> list[tuple[object, ...]]:
    lengths = {len(c) for c in (columns.offsets, columns.timestamps, columns.keys, columns.values, columns.headers)}
    assert lengths == {len(columns)}
    return list(zip(columns.offsets, columns.timestamps, columns.keys, columns.values, columns.headers, strict=True))


def reader_rows(batch: bytes, **options: int) -> list[tuple[object, ...]]:
    _, records = read_batch(batch, **options)
    return [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in records]


@DETERMINISTIC
@given(st.sampled_from(CODECS), st.lists(specs, min_size=1, max_size=30), st.integers(0, 2**62), st.booleans())
def test_columns_equal_the_records(codec: int, records: list[Spec], base_offset: int, append_time: bool) -> None:
    batch, _ = build(codec, records, base_offset=base_offset, log_append_time=append_time)
    header, columns = read_batch_columns(batch)
    assert header == read_batch(batch)[0]
    assert as_rows(columns) == reader_rows(batch)
    assert columns.attributes == header.attributes
    assert columns.is_log_append_time == append_time
    if append_time:
        assert set(columns.timestamps) == {header.max_timestamp}


def test_a_thousand_records_and_every_varint_width() -> None:
    values = [None, b"", b"v" * 63, b"v" * 64, b"v" * 8191, b"v" * 8192, b"v" * 70_000] * 150
    keys = [b"k" * (i % 200) if i % 3 else None for i in range(len(values))]
    for codec in (NONE, GZIP, LZ4, ZSTD):
        batch = build_batch(values, keys=keys, timestamp_ms=TS, compression=codec, base_offset=7)
        _, columns = read_batch_columns(batch)
        assert columns.values == values
        assert columns.keys == keys
        assert columns.offsets == list(range(7, 7 + len(values)))
        assert as_rows(columns) == reader_rows(batch)


def test_buffers_offsets_into_them_and_a_trailing_partial_batch() -> None:
    first = build_batch([b"a", b"b"], timestamp_ms=TS)
    second = build_batch([b"c"], timestamp_ms=TS + 5, base_offset=2, compression=ZSTD)
    data = first + second + second[:20]
    batches = list(iter_batch_columns(bytearray(data)))
    assert [c.values for _, c in batches] == [[b"a", b"b"], [b"c"]]
    assert [h for h, _ in batches] == [h for h, _ in iter_batches_with_records(data)]
    _, from_view = read_batch_columns(memoryview(data), len(first))
    assert from_view.offsets == [2]
    assert from_view.timestamps == [TS + 5]


def test_control_batches_are_marked() -> None:
    builder = BatchBuilder(producer_id=9, producer_epoch=0, is_transactional=True, is_control=True)
    builder.append(TS, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00")
    _, columns = read_batch_columns(builder.build())
    assert columns.is_control
    assert not Columns(0).is_control


def _same_outcome(batch: bytes, **options: int) -> None:
    """Both decoders succeed with the same rows, or both raise CorruptRecordError with the same message."""
    try:
        expected: list[tuple[object, ...]] | str = reader_rows(batch, **options)
    except CorruptRecordError as exc:
        expected = str(exc)
    if isinstance(expected, str):
        with pytest.raises(CorruptRecordError) as raised:
            read_batch_columns(batch, **options)
        assert str(raised.value) == expected
    else:
        assert as_rows(read_batch_columns(batch, **options)[1]) == expected


@pytest.mark.parametrize(
    "record_hex",
    [
        "8080808080800100",
        "0c000000090102036100",
        "0c0000000103016100",
        "7e000000010100",
        "02000000",
        "0c000000010101",
        "140000000101020461ff01",
        "0e0000000101000000",
        "0c0000000102610000",
        "0c00" + "ff" * 10 + "01",
        "0c000000017e00",
        "0c0000000c010100",  # offsetDelta 6 > lastOffsetDelta 0
        "0c000000010100" + "0c000002010100",  # one record more than declared
    ],
)
def test_malformed_records_give_the_readers_error(record_hex: str) -> None:
    batch = _single_record_batch(bytes.fromhex(record_hex))
    with pytest.raises(CorruptRecordError):
        read_batch_columns(batch)
    _same_outcome(batch)


def test_records_count_mismatch_gives_the_readers_error() -> None:
    record = bytes.fromhex("1c0000000110" + "61" * 8 + "00")  # one record with an 8-byte value: 15 bytes
    batch = _single_record_batch(record, records_count=2, last_offset_delta=1)  # room for 2 by the header check
    with pytest.raises(CorruptRecordError, match="declares 2 records but holds 1"):
        read_batch_columns(batch)
    _same_outcome(batch)


@settings(derandomize=True, database=None, deadline=None, max_examples=300)
@given(st.sampled_from(CODECS), st.data())
def test_damage_under_a_valid_crc_gives_the_readers_outcome(codec: int, data: st.DataObject) -> None:
    batch = bytearray(
        build_batch([b"alpha", None, b"x" * 300], keys=[b"k", None, b"kk"], timestamp_ms=TS, compression=codec)
    )
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(HEADER_SIZE, len(batch) - 1))
        batch[position] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        del batch[data.draw(st.integers(HEADER_SIZE, len(batch) - 1)) :]
        struct.pack_into(">i", batch, 8, len(batch) - 12)
    if data.draw(st.booleans()):
        struct.pack_into(">i", batch, RECORDS_COUNT_OFFSET, data.draw(st.integers(0, 5)))
    _same_outcome(recrc(batch), max_decompressed_bytes=64 * 1024)
