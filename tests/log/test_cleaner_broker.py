"""The cleaner inside real brokers: a compacted topic read from the beginning gives each key's final value.

Two brokers, a topic with ``cleanup.policy=compact``, replication factor 2 (both replicas clean their
own log below the high watermark), small segments, and ``log.cleaner.backoff.ms=100``. Many updates per
key are produced (idempotent producer, acks=all); the test waits (bounded) until both replicas' cleaners
have cleaned all they can (``cleaner-offset-checkpoint`` at the active segment's base offset: after that
no pass changes the log), then consumes from the beginning.

Waiting for less (a checkpoint past half the log, as this test once did) raced with the cleaner: a pass
that ended just past half while the producer was still writing satisfied the wait, yet left more than
half the records uncleaned (the "older values are gone" check failed), and a pass finishing between the
read and the checkpoint read made already-read uncleaned offsets count as cleaned.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from log.checkpoint import read_checkpoint
from log.cleaner.manager import CHECKPOINT_FILE, FIRST_DIRTY_KEY
from log.segment import LOG_SUFFIX, parse_base_offset
from odradek import Consumer, ConsumerRecord, Producer, TopicPartition
from tests.broker.cluster import Cluster

pytestmark = pytest.mark.slow

KEYS = 20
UPDATES = 60
TOPIC = "compacted"


def first_dirty_offset(cluster: Cluster, broker: int) -> int:
    path = cluster.brokers[broker].data_dir / f"{TOPIC}-0" / CHECKPOINT_FILE
    saved = read_checkpoint(path) if path.exists() else None
    return (saved or {}).get(FIRST_DIRTY_KEY, 0)


def active_segment_base(cluster: Cluster, broker: int) -> int:
    """The base offset of the replica's active (last) segment, which the cleaner never touches."""
    names = [p.name for p in (cluster.brokers[broker].data_dir / f"{TOPIC}-0").iterdir()]
    return max(b for n in names if n.endswith(LOG_SUFFIX) and (b := parse_base_offset(n)) is not None)


def consume_from_beginning(bootstrap: str, end_offset: int, timeout_s: float = 60.0) -> list[ConsumerRecord]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition(TOPIC, 0)])
        out: list[ConsumerRecord] = []
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not (out and out[-1].offset >= end_offset - 1):
            out.extend(consumer.poll(timeout_ms=100))
        return out
    finally:
        consumer.close()


def test_compacted_topic_keeps_each_keys_final_value(tmp_path: Path) -> None:
    config = {"log.cleaner.backoff.ms": "100", "log.retention.check.interval.ms": "1000"}
    with Cluster(tmp_path, brokers=2, broker_config=config) as cluster:
        cluster.create_topic(
            TOPIC,
            partitions=1,
            replication_factor=2,
            configs={"cleanup.policy": "compact", "segment.bytes": "2048", "min.cleanable.dirty.ratio": "0.01"},
        )
        producer = Producer(
            {"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", "linger.ms": 0, "batch.size": 256}
        )
        final: dict[bytes, bytes | None] = {}
        try:
            for update in range(UPDATES):
                for k in range(KEYS):
                    key = b"key-%02d" % k
                    value = None if (k == 3 and update == UPDATES - 1) else b"value-%02d-%03d" % (k, update)
                    producer.send(TOPIC, key=key, value=value, partition=0)
                    final[key] = value
                producer.flush(timeout=30)
            end_offset = producer.send(TOPIC, key=b"last", value=b"x", partition=0).result(timeout=30).offset + 1
            final[b"last"] = b"x"
        finally:
            producer.close(timeout=30)
        total = KEYS * UPDATES + 1
        for broker in (0, 1):
            cluster.wait_for(
                lambda b=broker: first_dirty_offset(cluster, b) >= active_segment_base(cluster, b),  # type: ignore[misc]
                60.0,
                f"broker {broker} cleaned all it can (up to its active segment)",
            )
        cleaned_end = min(first_dirty_offset(cluster, b) for b in (0, 1))  # before the read: cleaned when read
        assert cleaned_end > total // 2, "most of the log is below the active segment (segment.bytes=2048)"
        records = consume_from_beginning(cluster.bootstrap_servers, end_offset)
        assert records[-1].offset == end_offset - 1
        assert len(records) < total // 2, "older values are gone"
        offsets = [r.offset for r in records]
        assert offsets == sorted(set(offsets))
        values: dict[bytes | None, bytes | None] = {}
        for r in records:
            values[r.key] = r.value
        assert values == final, "reading from the beginning gives each key's final value (and the tombstone)"
        cleaned_keys = [r.key for r in records if r.offset < cleaned_end]
        assert len(cleaned_keys) == len(set(cleaned_keys)), "one record per key in the cleaned part"
