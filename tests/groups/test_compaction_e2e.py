"""Log compaction end to end: a real broker's cleaner on a ``cleanup.policy=compact`` topic, read by a consumer.

Compaction keeps the latest value per key (offsets keep their values, with gaps), and a consumer that
reads the topic from the beginning ends with each key's final value. The cleaner runs every 100 ms here.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from odradek import Consumer, Producer, TopicPartition
from tests.broker.cluster import Cluster
from tests.support.launcher import wait_until

pytestmark = pytest.mark.slow

KEYS = 20
ROUNDS = 50  # 1,000 records, 50 values per key
TOPIC_CONFIG = {"cleanup.policy": "compact", "segment.bytes": "4096", "min.cleanable.dirty.ratio": "0.01"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    config = {"log.cleaner.backoff.ms": "100"}
    with Cluster(tmp_path_factory.mktemp("compaction"), brokers=1, broker_config=config) as c:
        yield c


def read_all(cluster: Cluster, tp: TopicPartition) -> list[tuple[int, bytes | None, bytes | None]]:
    """Every record of ``tp`` from the beginning to the high watermark: (offset, key, value)."""
    with Consumer({"bootstrap.servers": cluster.bootstrap_servers, "auto.offset.reset": "earliest"}) as c:
        c.assign([tp])
        end = c.end_offsets([tp])[tp]
        out: list[tuple[int, bytes | None, bytes | None]] = []
        for _ in range(200):
            if c.position(tp) >= end:
                break
            out.extend((r.offset, r.key, r.value) for r in c.poll(timeout_ms=100))
        assert c.position(tp) >= end, "could not read the partition to its end"
        return out


def test_compaction_keeps_the_latest_value_per_key(cluster: Cluster) -> None:
    cluster.create_topic("compacted", partitions=1, replication_factor=1, configs=TOPIC_CONFIG)
    tp = TopicPartition("compacted", 0)
    with Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 0, "batch.size": 1024}) as p:
        sent = []
        for i in range(KEYS * ROUNDS):
            sent.append(p.send("compacted", key=b"k%d" % (i % KEYS), value=b"v%d" % i, partition=0))
            if i % 20 == 19:  # small appends: one append larger than segment.bytes is refused
                p.flush(30)
        assert [f.result(timeout=60).offset for f in sent] == list(range(KEYS * ROUNDS))
    final = {b"k%d" % k: b"v%d" % ((ROUNDS - 1) * KEYS + k) for k in range(KEYS)}
    total = KEYS * ROUNDS
    compacted = wait_until(
        lambda: (records := read_all(cluster, tp)) and len(records) < total // 4 and records,
        60.0,
        "the cleaner to compact the log",
    )
    offsets = [o for o, _, _ in compacted]
    assert offsets == sorted(offsets)  # offsets are kept: increasing, with gaps
    assert offsets[-1] == total - 1
    last: dict[bytes | None, bytes | None] = {}
    for offset, key, value in compacted:
        assert value == b"v%d" % offset  # every surviving record is the one written at that offset
        last[key] = value
    assert last == final  # reading from the beginning gives each key's final value
