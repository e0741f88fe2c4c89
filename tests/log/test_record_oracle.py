"""The oracle: kafka-python's independent RecordBatch v2 codec and ours must agree, both ways.

kafka-python 3.0.12 (``kafka.record.default_records``) shares no code with ours. Every batch we build
it must read back field for field, every batch it builds we must read back, and where the format is
deterministic (uncompressed sections, and the records inside any compressed section) the bytes must
be identical. kafka-python's builder writes baseOffset 0 and partitionLeaderEpoch 0, and sends a
batch uncompressed when compression would not make it smaller; the tests account for both.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from log.record import (
    GZIP,
    HEADER_SIZE,
    LZ4,
    NONE,
    SNAPPY,
    ZSTD,
    BatchBuilder,
    build_batch,
    decompress,
    iter_records,
    read_batch,
)
from log.record.reader import CONTROL_KEY, CONTROL_TYPE_ABORT

with warnings.catch_warnings():
    # kafka-python's package import calls importlib.resources.read_text, deprecated since Python 3.11.
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

ORACLE = settings(derandomize=True, database=None, deadline=None, max_examples=100)
CODECS = [NONE, GZIP, SNAPPY, LZ4, ZSTD]  # snappy: kafka-python with python-snappy (cramjam)
TS = 1_700_000_000_000


@dataclass(frozen=True)
class Spec:
    gap: int  # offset deltas skipped before this record
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


@dataclass(frozen=True)
class Producer:
    producer_id: int
    producer_epoch: int
    base_sequence: int
    is_transactional: bool


nullable_bytes = (
    st.none() | st.binary(max_size=30) | st.integers(64, 9000).map(lambda n: bytes([n % 251]) * n)
)
specs = st.builds(
    Spec,
    gap=st.sampled_from([0, 0, 0, 1, 100, 70_000]),
    timestamp=st.integers(TS - 10**5, TS + 10**5) | st.integers(-(2**61), 2**61),
    key=nullable_bytes,
    value=nullable_bytes,
    headers=st.lists(st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=8)), max_size=3).map(
        tuple
    ),
)
producers = st.just(Producer(-1, -1, -1, False)) | st.builds(
    Producer,
    producer_id=st.integers(0, 2**63 - 1),
    producer_epoch=st.integers(0, 2**15 - 1),
    base_sequence=st.integers(0, 2**31 - 1),
    is_transactional=st.booleans(),
)


def offset_deltas(records: list[Spec]) -> list[int]:
    deltas: list[int] = []
    for spec in records:
        deltas.append(deltas[-1] + 1 + spec.gap if deltas else 0)
    return deltas


def ours(codec: int, records: list[Spec], producer: Producer, **options: Any) -> bytes:
    builder = BatchBuilder(
        codec,
        producer_id=producer.producer_id,
        producer_epoch=producer.producer_epoch,
        base_sequence=producer.base_sequence,
        is_transactional=producer.is_transactional,
        **options,
    )
    for delta, spec in zip(offset_deltas(records), records, strict=True):
        builder.append_with_offset_delta(delta, spec.timestamp, spec.key, spec.value, spec.headers)
    return builder.build()


def theirs(codec: int, records: list[Spec], producer: Producer) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=producer.is_transactional,
        producer_id=producer.producer_id,
        producer_epoch=producer.producer_epoch,
        base_sequence=producer.base_sequence,
        batch_size=2**31 - 1,
    )
    for delta, spec in zip(offset_deltas(records), records, strict=True):
        builder.append(delta, spec.timestamp, spec.key, spec.value, list(spec.headers))
    return bytes(builder.build())


def expected(records: list[Spec]) -> list[tuple[object, ...]]:
    deltas = offset_deltas(records)
    return [(d, s.timestamp, s.key, s.value, s.headers) for d, s in zip(deltas, records, strict=True)]


@ORACLE
@given(st.sampled_from(CODECS), st.lists(specs, min_size=1, max_size=25), producers)
def test_kafka_python_reads_what_we_build(codec: int, records: list[Spec], producer: Producer) -> None:
    batch = DefaultRecordBatch(ours(codec, records, producer))
    assert batch.validate_crc()
    assert batch.compression_type == codec
    assert (batch.base_offset, batch.magic, batch.records_count) == (0, 2, len(records))
    assert batch.last_offset_delta == offset_deltas(records)[-1]
    assert (batch.first_timestamp, batch.max_timestamp) == (
        records[0].timestamp,
        max(s.timestamp for s in records),
    )
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (
        producer.producer_id,
        producer.producer_epoch,
        producer.base_sequence,
    )
    assert batch.is_transactional == producer.is_transactional
    assert not batch.is_control_batch
    decoded = [(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in batch]
    assert decoded == expected(records)


@ORACLE
@given(st.sampled_from(CODECS), st.lists(specs, min_size=1, max_size=25), producers)
def test_we_read_what_kafka_python_builds(codec: int, records: list[Spec], producer: Producer) -> None:
    raw = theirs(codec, records, producer)
    header, decoded = read_batch(raw)
    assert header.compression == DefaultRecordBatch(raw).compression_type  # codec, or none if it did not pay
    assert header.records_count == len(records)
    assert header.last_offset_delta == offset_deltas(records)[-1]
    assert (header.base_timestamp, header.max_timestamp) == (
        records[0].timestamp,
        max(s.timestamp for s in records),
    )
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (
        producer.producer_id,
        producer.producer_epoch,
        producer.base_sequence,
    )
    assert header.is_transactional == producer.is_transactional
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in decoded] == expected(records)


@ORACLE
@given(st.lists(specs, min_size=1, max_size=25), producers)
def test_uncompressed_batches_are_byte_identical(records: list[Spec], producer: Producer) -> None:
    assert ours(NONE, records, producer, partition_leader_epoch=0) == theirs(NONE, records, producer)


@ORACLE
@given(st.sampled_from([GZIP, LZ4, ZSTD]), st.lists(specs, min_size=1, max_size=25), producers)
def test_compressed_batches_hold_byte_identical_records(
    codec: int, records: list[Spec], producer: Producer
) -> None:
    mine = ours(codec, records, producer, partition_leader_epoch=0)
    other = theirs(codec, records, producer)
    other_codec = read_batch(other)[0].compression
    assert decompress(codec, mine[HEADER_SIZE:]) == decompress(other_codec, other[HEADER_SIZE:])
    assert mine[12:17] == other[12:17]  # partitionLeaderEpoch and magic
    assert mine[23:HEADER_SIZE] == other[23:HEADER_SIZE]  # lastOffsetDelta .. recordsCount
    if codec == ZSTD and other_codec == ZSTD:  # same library, level and options: the same frame
        assert mine == other


@pytest.mark.parametrize("codec", CODECS)
def test_value_only_fast_path_matches_kafka_python(codec: int) -> None:
    values = [b"%05d" % i * 20 for i in range(1000)] + [None]
    records = [Spec(0, TS, None, v, ()) for v in values]
    mine = build_batch(values, timestamp_ms=TS, compression=codec, partition_leader_epoch=0)
    other = theirs(codec, records, Producer(-1, -1, -1, False))
    if codec in (NONE, ZSTD):
        assert mine == other
    assert [(r.offset, r.value) for r in DefaultRecordBatch(mine)] == list(enumerate(values))
    assert [r.value for r in iter_records(other + mine)] == values + values


def test_kafka_python_reads_our_control_batch() -> None:
    builder = BatchBuilder(producer_id=9, producer_epoch=2, is_transactional=True, is_control=True)
    builder.append(TS, CONTROL_KEY.pack(0, CONTROL_TYPE_ABORT), b"\x00\x00\x00\x00\x00\x07")
    batch = DefaultRecordBatch(builder.build())
    assert batch.is_control_batch
    assert batch.is_transactional
    [marker] = list(batch)
    assert marker.abort
    assert marker.version == 0


def test_log_append_time_agrees() -> None:
    builder = BatchBuilder(log_append_time=True)
    for delta in (0, 30, 10):
        builder.append(TS + delta, None, b"v")
    raw = builder.build()
    theirs_view = [(r.timestamp, r.timestamp_type) for r in DefaultRecordBatch(raw)]
    assert theirs_view == [(TS + 30, 1)] * 3
    assert [r.timestamp for r in read_batch(raw)[1]] == [TS + 30] * 3
