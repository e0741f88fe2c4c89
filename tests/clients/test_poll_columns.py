"""Columnar polling: CompletedFetch.take_columns and Consumer.poll_columns give exactly what take/poll give."""

from __future__ import annotations

import time

import pytest

from log.record import build_batch
from odradek import Consumer, TopicPartition
from odradek.errors import CorruptMessageError
from odradek.fetcher import CompletedFetch, RecordColumns
from odradek.types import ConsumerRecord
from tests.clients.fake_broker import FakeCluster
from tests.clients.test_consumer import consumer, fill
from tests.clients.test_fetcher import T0, batch

T1 = TopicPartition("t", 1)


def rows(chunks: list[RecordColumns]) -> list[ConsumerRecord]:
    out = []
    for c in chunks:
        assert len({len(c.offsets), len(c.timestamps), len(c.keys), len(c.values), len(c.headers)}) == 1
        assert c.offsets == sorted(c.offsets)
        for o, t, k, v, h in zip(c.offsets, c.timestamps, c.keys, c.values, c.headers, strict=True):
            out.append(ConsumerRecord(c.topic, c.partition, o, t, k, v, h, c.timestamp_type))
    return out


def both_ways(data: bytes, position: int, step: int) -> tuple[list[ConsumerRecord], list[ConsumerRecord]]:
    """Take everything in steps of ``step`` with take() and with take_columns(); check positions agree."""
    by_record, by_column = CompletedFetch(T0, data, 1 << 20), CompletedFetch(T0, data, 1 << 20)
    records: list[ConsumerRecord] = []
    chunks: list[RecordColumns] = []
    p1 = p2 = position
    while not by_record.exhausted or not by_column.exhausted:
        before = len(records)
        p1 = by_record.take(p1, step, records)
        p2, taken = by_column.take_columns(p2, step, chunks)
        assert (p1, taken) == (p2, len(records) - before)
        assert taken <= step
    assert repr(by_record.error) == repr(by_column.error)
    return records, rows(chunks)


@pytest.mark.parametrize("step", [1, 3, 7, 1000])
@pytest.mark.parametrize("position", [0, 2, 5, 11, 13])
def test_take_columns_matches_take(step: int, position: int) -> None:
    data = (
        batch(0, 5)
        + batch(5, 1, control=True)
        + batch(6, 4, log_append_time=True)
        + build_batch([b"a", None, b"c"], keys=[None, b"k", b"k"], timestamp_ms=7, compression=4, base_offset=10)
    )
    records, columns = both_ways(data + data[:30], position, step)
    assert columns == records
    assert [r.offset for r in records] == [o for o in [0, 1, 2, 3, 4, 6, 7, 8, 9, 10, 11, 12] if o >= position]


def test_take_columns_stops_at_a_corrupt_batch() -> None:
    bad = bytearray(batch(3, 3))
    bad[-1] ^= 1
    records, columns = both_ways(batch(0, 3) + bytes(bad), 0, 100)
    assert [r.offset for r in columns] == [0, 1, 2] == [r.offset for r in records]


def test_a_whole_batch_hands_its_lists_over_and_a_part_is_copied() -> None:
    fetch = CompletedFetch(T0, batch(0, 4), 1 << 20)
    chunks: list[RecordColumns] = []
    assert fetch.take_columns(0, 3, chunks) == (3, 3)
    assert fetch.take_columns(3, 3, chunks) == (4, 1)
    assert [c.offsets for c in chunks] == [[0, 1, 2], [3]]
    assert chunks[0].head(2).values == [b"0", b"1"]
    assert len(chunks[1]) == 1


def poll_columns_until(c: Consumer, count: int, timeout_s: float = 10) -> list[RecordColumns]:
    deadline = time.monotonic() + timeout_s
    chunks: list[RecordColumns] = []
    while sum(map(len, chunks)) < count and time.monotonic() < deadline:
        chunks.extend(c.poll_columns(timeout_ms=100))
    return chunks


def test_poll_columns_reads_every_partition_within_max_poll_records(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 2)
    fill(cluster, T0, 95, per_batch=30)
    fill(cluster, T1, 40, per_batch=7, start_ms=5_000)
    with consumer(cluster, **{"max.poll.records": 20}) as c:
        c.assign([T0, T1])
        chunks: list[RecordColumns] = []
        while sum(map(len, chunks)) < 135:
            polled = c.poll_columns(timeout_ms=2000)
            assert polled
            assert sum(map(len, polled)) <= 20
            chunks.extend(polled)
        got = rows(chunks)
        assert c.position(T0) == 95
        assert c.position(T1) == 40
        assert c.poll_columns(timeout_ms=50) == []
    t0 = [r for r in got if r.partition == 0]
    t1 = [r for r in got if r.partition == 1]
    assert [(r.offset, r.value, r.timestamp) for r in t0] == [(i, b"%d" % i, 1_000 + i) for i in range(95)]
    assert [(r.offset, r.value, r.timestamp) for r in t1] == [(i, b"%d" % i, 5_000 + i) for i in range(40)]


def test_poll_columns_from_a_seek_position(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 1)
    fill(cluster, T0, 30, per_batch=10)
    with consumer(cluster) as c:
        c.assign([T0])
        c.seek(T0, 13)
        assert [r.offset for r in rows(poll_columns_until(c, 17))] == list(range(13, 30))


def test_poll_columns_raises_a_corrupt_batch(cluster: FakeCluster) -> None:
    cluster.create_topic("t", 1)
    fill(cluster, T0, 5)
    bad = bytearray(build_batch([b"a", b"b"], timestamp_ms=1))
    bad[-1] ^= 0xFF  # breaks the CRC
    with cluster.lock:
        part = cluster.partition(T0)
        part.batches.append((5, 7, 1, bytes(bad)))
        part.log_end_offset = 7
    with consumer(cluster) as c:
        c.assign([T0])
        assert [r.offset for r in rows(poll_columns_until(c, 5))] == list(range(5))
        with pytest.raises(CorruptMessageError):
            poll_columns_until(c, 1)
        assert c.position(T0) == 5
