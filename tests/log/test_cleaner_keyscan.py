"""``log.cleaner.keyscan.record_keys`` against the full reader.

Where the reader accepts a batch, the scanner gives the same keys and offsets. Where the reader
refuses one, the scanner raises CorruptRecordError or (damage inside a value or header, which it skips
by the record's length) answers: never another exception.
"""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from log.cleaner.keyscan import record_keys
from log.errors import CorruptRecordError
from log.record import BatchBuilder, parse_header, read_batch
from log.record.builder import assemble_batch
from log.record.header import HEADER_SIZE
from tests.log.conftest import CODEC_GZIP, CODEC_LZ4, CODEC_NONE, CODEC_ZSTD

records = st.lists(
    st.tuples(
        st.one_of(st.none(), st.binary(max_size=300)),  # key
        st.one_of(st.none(), st.binary(max_size=300)),  # value
        st.integers(-(2**40), 2**40),  # timestamp delta
        st.integers(0, 3),  # offset gap
    ),
    min_size=1,
    max_size=20,
)


def build(recs: list[tuple[bytes | None, bytes | None, int, int]], codec: int) -> bytes:
    builder = BatchBuilder(compression=codec, base_offset=1000)
    offset_delta = 0
    for key, value, ts, gap in recs:
        offset_delta += gap
        builder.append_with_offset_delta(offset_delta, 1_700_000_000_000 + ts, key, value, [("h", value)])
        offset_delta += 1
    return builder.build()


@settings(max_examples=150, deadline=None)
@given(recs=records, codec=st.sampled_from([CODEC_NONE, CODEC_GZIP, CODEC_LZ4, CODEC_ZSTD]))
def test_same_keys_and_offsets_as_the_reader(
    recs: list[tuple[bytes | None, bytes | None, int, int]], codec: int
) -> None:
    batch = build(recs, codec)
    expected = [(r.key, r.offset) for r in read_batch(batch)[1]]
    assert record_keys(batch, parse_header(batch)) == expected


@settings(max_examples=150, deadline=None)
@given(recs=records, data=st.data())
def test_damaged_records_raise_nothing_but_corrupt_record_error(
    recs: list[tuple[bytes | None, bytes | None, int, int]], data: st.DataObject
) -> None:
    batch = build(recs, CODEC_NONE)
    header = parse_header(batch)
    section = bytearray(batch[HEADER_SIZE:])
    cut = data.draw(st.integers(0, len(section)), label="cut")
    if data.draw(st.booleans(), label="truncate"):
        section = section[:cut]
    elif section:
        section[min(cut, len(section) - 1)] ^= data.draw(st.integers(1, 255), label="xor")
    damaged = assemble_batch(
        bytes(section),
        compression=CODEC_NONE,
        attributes=header.attributes,
        base_offset=header.base_offset,
        partition_leader_epoch=header.partition_leader_epoch,
        last_offset_delta=header.last_offset_delta,
        base_timestamp=header.base_timestamp,
        max_timestamp=header.max_timestamp,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        records_count=header.records_count,
    )  # a valid CRC over damaged records: only the record checks can catch it
    try:
        expected = [(r.key, r.offset) for r in read_batch(damaged)[1]]
    except CorruptRecordError:
        with contextlib.suppress(CorruptRecordError):
            record_keys(damaged, parse_header(damaged))
        return
    assert record_keys(damaged, parse_header(damaged)) == expected


def test_a_flipped_bit_fails_the_crc() -> None:
    batch = bytearray(build([(b"k", b"v", 0, 0)], CODEC_NONE))
    batch[-1] ^= 1
    with pytest.raises(CorruptRecordError, match="CRC"):
        record_keys(bytes(batch), parse_header(batch))
