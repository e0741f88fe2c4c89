"""The streams (a follower's ReplicaFetch, a consumer's FetchStream, a producer's ProduceStream) broken by the
path between real processes (``common.streams``): three brokers, each advertised behind a
:class:`~tests.broker.stream_proxy.StreamProxy`, a 1-partition topic with RF 3, an idempotent acks=all
producer and a consumer, both through the proxies.

* every stream reset after a few answers (UNAVAILABLE, as a restarted peer or a reset connection looks):
  followers, producer and consumer open new streams and go on; every record is acknowledged and read once, in
  order, and the ISR stays whole (``replica.lag.time.max.ms`` is short, so a stalled follower would leave it);
* every stream refused at once with INTERNAL (a path that breaks streams but not unary calls): they fall back
  to unary calls after a few tries, with the same outcome.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from common.streams import BROKEN_STREAMS
from odradek import Admin, Consumer, Producer, TopicPartition
from tests.broker.cluster import Cluster, behind_proxies
from tests.broker.stream_proxy import StreamProxy

pytestmark = pytest.mark.slow

T0 = TopicPartition("t", 0)
LAG_MS = 3000  # replica.lag.time.max.ms: a follower stalled this long leaves the ISR
RECORDS = 600


@pytest.fixture
def proxied(tmp_path: Path) -> Iterator[tuple[Cluster, list[StreamProxy]]]:
    cluster = Cluster(tmp_path, brokers=3, start=False, broker_config={"replica.lag.time.max.ms": str(LAG_MS)})
    proxies = behind_proxies(cluster, StreamProxy)
    try:
        cluster.start()
        cluster.create_topic("t", partitions=1, replication_factor=3, configs={"min.insync.replicas": "2"})
        yield cluster, proxies
    finally:
        cluster.stop()
        for proxy in proxies:
            proxy.close()


def produce_and_read(proxies: list[StreamProxy]) -> tuple[list[int], list[bytes | None]]:
    """RECORDS records at ~100/s (longer than LAG_MS), acks=all, idempotent; their offsets and what a consumer
    reading from the start got."""
    bootstrap = ",".join(p.listen for p in proxies)
    config = {"bootstrap.servers": bootstrap, "linger.ms": 0, "request.timeout.ms": 5000,
              "delivery.timeout.ms": 60000, "retry.backoff.ms": 50}  # fmt: skip
    consumer = Consumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest", "fetch.max.wait.ms": 200,
                         "request.timeout.ms": 5000})  # fmt: skip
    values: list[bytes | None] = []
    try:
        consumer.assign([T0])
        with Producer(config) as p:
            futures = []
            for i in range(RECORDS):
                futures.append(p.send("t", b"%05d" % i))
                if i % 10 == 9:
                    time.sleep(0.1)
                    values += [r.value for r in consumer.poll(0)]
            offsets = [f.result(60).offset for f in futures]
        deadline = time.monotonic() + 60
        while len(values) < RECORDS and time.monotonic() < deadline:
            values += [r.value for r in consumer.poll(500)]
    finally:
        consumer.close()
    return offsets, values


def isr(proxies: list[StreamProxy]) -> list[int]:
    with Admin({"bootstrap.servers": ",".join(p.listen for p in proxies)}) as admin:
        return sorted(admin.describe_topics(["t"])["t"].partitions[0].isr)


def test_streams_reset_by_the_path_are_opened_again_without_loss_or_duplicates(
    proxied: tuple[Cluster, list[StreamProxy]],
) -> None:
    cluster, proxies = proxied
    for proxy in proxies:
        proxy.mode, proxy.break_after = "break", 5
    offsets, values = produce_and_read(proxies)
    assert offsets == list(range(RECORDS))  # each acknowledged once, in order: no duplicate was written
    assert values == [b"%05d" % i for i in range(RECORDS)]
    assert isr(proxies) == [0, 1, 2]
    leader = proxies[cluster.leader("t", 0)]
    for method in ("ReplicaFetch", "ProduceStream", "FetchStream"):
        # Each stream breaks once, right after its 5th answer: three broken streams are three opened, two of
        # them after a break (reset, and opened again). Not "more opened than broken": the last stream of a
        # client that has nothing more to send (the closed producer, a follower in its retry backoff when the
        # counters are read) may have broken after its last answer, with no request since to open another.
        assert leader.broken[method] >= 3, (method, leader.broken, leader.streams)
        assert leader.streams[method] >= leader.broken[method], (method, leader.broken, leader.streams)


def test_streams_refused_by_the_path_fall_back_to_unary_calls(proxied: tuple[Cluster, list[StreamProxy]]) -> None:
    cluster, proxies = proxied
    for proxy in proxies:
        proxy.mode = "refuse"
    offsets, values = produce_and_read(proxies)
    assert offsets == list(range(RECORDS))
    assert values == [b"%05d" % i for i in range(RECORDS)]
    assert isr(proxies) == [0, 1, 2]
    leader = proxies[cluster.leader("t", 0)]
    # two followers (their streams from before broken, then each refused a few times), one producer, one
    # consumer: each tried its stream a few times, then made unary calls
    assert 1 <= leader.streams["ReplicaFetch"] <= 2 * (BROKEN_STREAMS + 1), leader.streams
    assert leader.broken["ReplicaFetch"] >= 2, leader.broken
    assert 1 <= leader.streams["ProduceStream"] <= BROKEN_STREAMS, leader.streams
    assert 1 <= leader.streams["FetchStream"] <= BROKEN_STREAMS, leader.streams
    assert leader.unary["Fetch"] >= 10, leader.unary
    assert leader.unary["Produce"] >= 10, leader.unary
