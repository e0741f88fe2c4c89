"""Helpers of the Spark suite: topic names, producing test records, reading a topic back."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import Any

from odradek import Consumer, Producer, TopicPartition
from odradek.types import ConsumerRecord, Header
from tests.broker.cluster import Cluster

_names = itertools.count()


def topic_name(prefix: str) -> str:
    return f"{prefix}-{next(_names)}"


def produce(
    cluster: Cluster,
    topic: str,
    values: Iterable[bytes],
    *,
    key: bytes | None = None,
    partition: int | None = None,
    headers: Sequence[Header] | None = None,
    timestamp_ms: int | None = None,
) -> list[tuple[int, int]]:
    """Send ``values`` (acks=all) and return their (partition, offset) in order."""
    with Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 1}) as producer:
        futures = [
            producer.send(topic, value=v, key=key, partition=partition, headers=headers, timestamp_ms=timestamp_ms)
            for v in values
        ]
        return [(md.partition, md.offset) for md in (f.result(timeout=30) for f in futures)]


def consume_all(
    cluster: Cluster, topic: str, partitions: int, expected: int, timeout_s: float = 30.0
) -> list[ConsumerRecord]:
    """Every record of ``topic`` (waiting, bounded, until there are ``expected``)."""
    config = {"bootstrap.servers": cluster.bootstrap_servers, "auto.offset.reset": "earliest"}
    records: list[ConsumerRecord] = []
    with Consumer(config) as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])

        def enough() -> bool:
            records.extend(consumer.poll(timeout_ms=200))
            return len(records) >= expected

        cluster.wait_for(enough, timeout_s, f"{expected} records in {topic}")
        records.extend(consumer.poll(timeout_ms=200))
    return records


def reader(spark: Any, cluster: Cluster, **options: str) -> Any:
    """``spark.read.format("odradek")`` with the cluster's bootstrap servers and ``options``."""
    r = spark.read.format("odradek").option("bootstrap.servers", cluster.bootstrap_servers)
    for key, value in options.items():
        r = r.option(key, value)
    return r


def stream_reader(spark: Any, cluster: Cluster, **options: str) -> Any:
    r = spark.readStream.format("odradek").option("bootstrap.servers", cluster.bootstrap_servers)
    for key, value in options.items():
        r = r.option(key, value)
    return r


def finish(query: Any, timeout_s: float = 240.0) -> Any:
    """Wait (bounded) for an availableNow query to end; it is stopped in any case. Raises its failure."""
    try:
        done = query.awaitTermination(timeout_s)  # raises StreamingQueryException if the query failed
        assert done, f"the query did not finish within {timeout_s} s; last progress: {query.lastProgress}"
        return query
    finally:
        query.stop()
