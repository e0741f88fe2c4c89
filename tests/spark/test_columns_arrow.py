"""Arrow batches from decoded columns: the same batch, schema and values as from record objects (no Spark needed)."""

from __future__ import annotations

import pytest

from odradek.fetcher import RecordColumns
from odradek.types import ConsumerRecord
from spark.reading import _below
from spark.schema import ARROW_SCHEMA, ARROW_SCHEMA_WITH_HEADERS, columns_to_record_batch, to_record_batch


def chunk(first: int, count: int, ts_type: int = 0) -> RecordColumns:
    offsets = list(range(first, first + count))
    return RecordColumns(
        "t",
        3,
        ts_type,
        offsets,
        [1_700_000_000_000 + o for o in offsets],
        [None if o % 2 else b"k%d" % o for o in offsets],
        [None if o % 5 == 4 else b"v%d" % o for o in offsets],
        [(("h", b"%d" % o), ("n", None)) if o % 3 else () for o in offsets],
    )


def records(chunks: list[RecordColumns]) -> list[ConsumerRecord]:
    return [
        ConsumerRecord(c.topic, c.partition, o, t, k, v, h, c.timestamp_type)
        for c in chunks
        for o, t, k, v, h in zip(c.offsets, c.timestamps, c.keys, c.values, c.headers, strict=True)
    ]


@pytest.mark.parametrize("include_headers", [False, True])
@pytest.mark.parametrize("shape", [[(0, 7, 0)], [(0, 4, 0), (4, 3, 1), (9, 2, 0)]])
def test_columns_give_the_same_arrow_batch_as_records(include_headers: bool, shape: list[tuple[int, int, int]]) -> None:
    chunks = [chunk(first, count, ts_type) for first, count, ts_type in shape]
    got = columns_to_record_batch(chunks, include_headers)
    assert got.schema == (ARROW_SCHEMA_WITH_HEADERS if include_headers else ARROW_SCHEMA)
    assert got.to_pylist() == to_record_batch(records(chunks), include_headers).to_pylist()
    assert got.num_rows == sum(count for _, count, _ in shape)


def test_below_cuts_at_the_range_end() -> None:
    chunks = [chunk(0, 4), chunk(4, 4), chunk(8, 4)]
    assert _below(chunks, 100) == chunks
    assert [c.offsets for c in _below(chunks, 6)] == [[0, 1, 2, 3], [4, 5]]
    assert [c.offsets for c in _below(chunks, 4)] == [[0, 1, 2, 3]]
    assert _below(chunks, 0) == []
    assert [c.values for c in _below([chunk(0, 4)], 2)] == [[b"v0", b"v1"]]
