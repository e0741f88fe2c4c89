"""The read tasks' I/O against a real cluster, without Spark: ``read_ranges`` reads the ranges of several
partitions together with the worker's one consumer, exactly their offsets, task after task."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pytest

from odradek import Admin, NewTopic
from spark import clients
from spark.options import parse_source_options
from spark.planning import OffsetRange
from spark.reading import read_range, read_ranges
from tests.broker.cluster import Cluster
from tests.spark.helpers import produce, topic_name

pytestmark = pytest.mark.spark

PARTITIONS = 3
PER_PARTITION = 12


@pytest.fixture(scope="module", autouse=True)
def close_cached_clients() -> Iterator[None]:
    """The reads cache their consumer in the process (as in a Spark worker, closed at its exit): closed after
    this module, so that no client of it outlives the tests (its stream's watchdog thread)."""
    yield
    clients.close_all()


@pytest.fixture(scope="module")
def topic(cluster: Cluster) -> str:
    name = topic_name("read-ranges")
    with Admin({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
        admin.create_topics([NewTopic(name, PARTITIONS, 1)])
    for p in range(PARTITIONS):
        produce(cluster, name, [f"{p}-{i}".encode() for i in range(PER_PARTITION)], partition=p)
    return name


def rows(batches: list[pa.RecordBatch]) -> list[tuple[int, int, bytes]]:
    table = pa.Table.from_batches(batches)
    columns = (table[name].to_pylist() for name in ("partition", "offset", "value"))
    return list(zip(*columns, strict=True))


def expected(*ranges: OffsetRange) -> list[tuple[int, int, bytes]]:
    return sorted((r.partition, o, f"{r.partition}-{o}".encode()) for r in ranges for o in range(r.start, r.end))


def test_several_partitions_are_read_together_and_only_within_their_ranges(cluster: Cluster, topic: str) -> None:
    options = parse_source_options({"bootstrap.servers": cluster.bootstrap_servers, "subscribe": topic}, streaming=True)
    ranges = [OffsetRange(topic, 0, 2, 7), OffsetRange(topic, 1, 0, 4), OffsetRange(topic, 2, 5, 5),
              OffsetRange(topic, 0, 9, 11)]  # fmt: skip
    got = rows(list(read_ranges(options, ranges)))
    assert sorted(got) == expected(*ranges)
    for p in range(PARTITIONS):  # each partition's records in offset order
        offsets = [o for q, o, _ in got if q == p]
        assert offsets == sorted(offsets)
    for batch in read_ranges(options, ranges):  # one partition per Arrow batch
        assert len(set(batch.column("partition").to_pylist())) == 1


def test_the_next_task_of_a_worker_reads_its_own_offsets_with_the_same_consumer(cluster: Cluster, topic: str) -> None:
    """Between tasks the worker's consumer keeps its (paused) assignment: what it fetched ahead for one task
    never leaks into the next, whatever partitions and offsets that one reads."""
    options = parse_source_options({"bootstrap.servers": cluster.bootstrap_servers, "subscribe": topic}, streaming=True)
    tasks = [
        [OffsetRange(topic, 0, 0, 5), OffsetRange(topic, 1, 0, 5)],
        [OffsetRange(topic, 1, 3, 6), OffsetRange(topic, 2, 0, 2)],
        [OffsetRange(topic, 0, 1, 3)],
        [OffsetRange(topic, 0, 5, PER_PARTITION), OffsetRange(topic, 2, 2, PER_PARTITION)],
    ]
    for task in tasks:
        assert sorted(rows(list(read_ranges(options, task)))) == expected(*task)
    assert sorted(rows(list(read_range(options, OffsetRange(topic, 1, 7, 9))))) == expected(OffsetRange(topic, 1, 7, 9))
