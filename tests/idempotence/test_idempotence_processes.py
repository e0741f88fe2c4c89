"""Idempotence with real controller and broker processes on 127.0.0.1 (issue 7's integration tests):

* a Produce answer lost on purpose (a proxy in front of the broker) -> the producer retries -> one copy;
* the same across a broker restart, clean and kill -9: the retry after the restart is still recognized,
  so the producer state survived (snapshot at close / at roll, then replay of the log tail);
* kill -9 of the partition leader mid-stream, right after two of its answers were lost (RF=3,
  min.insync.replicas=2, acks=all): the consumed stream has neither duplicates nor gaps (and, as a
  control, it has duplicates without idempotence).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from common.clock import SystemClock
from controller.ports import free_ports
from log.config import LogConfig
from log.log import Log
from log.producer_state_file import list_snapshots, load
from odradek import Admin, Consumer, Producer, TopicPartition
from tests.broker.cluster import Cluster, behind_proxies
from tests.idempotence.proxy import LossyProxy
from tests.support.launcher import wait_until

pytestmark = pytest.mark.slow

T0 = TopicPartition("t", 0)


@pytest.fixture
def proxied(tmp_path: Path) -> Iterator[tuple[Cluster, LossyProxy]]:
    """One broker advertised behind a :class:`LossyProxy`; small segments so that the log rolls."""
    cluster = Cluster(tmp_path, brokers=1, start=False)
    (port,) = free_ports(1)
    proxy = LossyProxy(f"127.0.0.1:{port}", cluster.brokers[0].address)
    cluster.brokers[0].argv += ["--advertised", proxy.listen]
    try:
        cluster.start()
        cluster.create_topic("t", partitions=1, replication_factor=1, configs={"segment.bytes": "2048"})
        yield cluster, proxy
    finally:
        cluster.stop()
        proxy.close()


def consume(bootstrap: str, tps: list[TopicPartition], expected: int) -> list[bytes]:
    """Every record of ``tps`` up to their log end offsets (at least ``expected`` of them), duplicates included."""
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        ends = admin.list_offsets({tp: "latest" for tp in tps})
    assert sum(ends.values()) >= expected, ends
    consumer = Consumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest"})
    try:
        consumer.assign(tps)
        out: list[bytes] = []

        def at_the_end() -> bool:
            out.extend(r.value or b"" for r in consumer.poll(timeout_ms=200))
            return all(consumer.position(tp) >= ends[tp] for tp in tps)

        wait_until(at_the_end, 60, f"the log end offsets {ends}")
        return out
    finally:
        consumer.close()


def offline_producer_state(data_dir: Path) -> tuple[dict[int, tuple[int, int]], list[int]]:
    """``{producer id: (epoch, last sequence)}`` and the snapshot offsets of t-0, read from the stopped broker."""
    log = Log.open(data_dir / "t-0", LogConfig(segment_bytes=2048), SystemClock())
    try:
        return {e.producer_id: (e.producer_epoch, e.last_seq) for e in load(log)}, list_snapshots(log.dir)
    finally:
        log.close()


def test_a_lost_answer_is_retried_and_written_once(proxied: tuple[Cluster, LossyProxy]) -> None:
    cluster, proxy = proxied
    with Producer({"bootstrap.servers": proxy.listen, "linger.ms": 0, "retry.backoff.ms": 20}) as p:
        for i in range(20):
            if i % 5 == 2:
                proxy.lose_answers(1)
            assert p.send("t", b"%d" % i).result(30).offset == i
    assert proxy.lost == 4
    assert consume(proxy.listen, [T0], 20) == [b"%d" % i for i in range(20)]


@pytest.mark.parametrize("how", ["clean", "kill"])
def test_a_retry_after_a_broker_restart_is_still_a_duplicate(proxied: tuple[Cluster, LossyProxy], how: str) -> None:
    cluster, proxy = proxied
    config = {"bootstrap.servers": proxy.listen, "linger.ms": 0, "retry.backoff.ms": 2000,
              "retry.backoff.max.ms": 2000, "request.timeout.ms": 5000}  # fmt: skip
    with Producer(config) as p:
        for i in range(60):  # ~100 bytes a batch: the 2 KiB segments roll, so snapshots are written
            p.send("t", b"%d" % i + b"-" * 80).result(30)
        proxy.lose_answers(1)
        lost = p.send("t", b"lost-answer")
        wait_until(lambda: proxy.lost == 1, 10, "the Produce answer to be lost")
        if how == "clean":
            cluster.stop_broker(0)
        else:
            cluster.kill_broker(0)
        cluster.start_broker(0)  # the retry (2 s backoff) finds the restarted broker
        assert lost.result(60).offset == 60  # the original offset: recognized after the restart
        assert p.send("t", b"after").result(30).offset == 61
    values = consume(proxy.listen, [T0], 62)
    assert values == [b"%d" % i + b"-" * 80 for i in range(60)] + [b"lost-answer", b"after"]
    cluster.stop_broker(0)
    state, snapshots = offline_producer_state(cluster.brokers[0].data_dir)
    assert list(state.values()) == [(0, 61)]  # one producer, epoch 0 (never bumped), 62 records
    assert snapshots  # written when the log rolled and at close


@pytest.fixture
def proxied_three(tmp_path: Path) -> Iterator[tuple[Cluster, list[LossyProxy]]]:
    """Three brokers, each advertised behind its own :class:`LossyProxy` (clients and followers use them). The
    proxy forwards unary calls only: followers fetch with unary Fetch calls (no ReplicaFetch stream)."""
    cluster = Cluster(tmp_path, brokers=3, start=False, broker_config={"replica.fetch.stream.enable": "false"})
    proxies = behind_proxies(cluster, LossyProxy)
    try:
        cluster.start()
        cluster.create_topic("t", partitions=1, replication_factor=3, configs={"min.insync.replicas": "2"})
        yield cluster, proxies
    finally:
        cluster.stop()
        for proxy in proxies:
            proxy.close()


@pytest.mark.parametrize("idempotence", [True, False])
def test_kill_9_of_the_leader_mid_stream_gives_no_duplicates_and_no_gaps(
    proxied_three: tuple[Cluster, list[LossyProxy]], idempotence: bool
) -> None:
    """RF=3, min.insync.replicas=2, acks=all. Mid-stream the leader's next two answers are lost (the records
    are on the in-sync followers: acks=all answered) and the leader is killed with SIGKILL: the producer
    retries on the new leader, whose producer state came from replication. Without idempotence (the
    control run) the retries write those records twice."""
    cluster, proxies = proxied_three
    total = 2000
    config = {"bootstrap.servers": ",".join(p.listen for p in proxies), "linger.ms": 2, "batch.size": 2048,
              "retry.backoff.ms": 1000, "retry.backoff.max.ms": 1000, "request.timeout.ms": 10000,
              "enable.idempotence": idempotence}  # fmt: skip
    acked = threading.Semaphore(0)
    lossy: LossyProxy | None = None
    leader = -1
    with Producer(config) as p:
        futures = []
        for i in range(total):
            future = p.send("t", b"%06d" % i)
            future.add_done_callback(lambda _f: acked.release())
            futures.append(future)
            if i == total // 3:
                for _ in range(total // 6):
                    assert acked.acquire(timeout=60)  # the stream is flowing
                leader = cluster.leader("t", 0)
                lossy = proxies[leader]
                lossy.lose_answers(2)  # retried after 1 s: by then the leader is gone
            if lossy is not None and lossy.lost == 2 and cluster.brokers[leader].alive():
                cluster.kill_broker(leader)
        assert lossy is not None
        wait_until(lambda: lossy.lost == 2, 60, "two Produce answers lost")  # noqa: B023 (called at once)
        if cluster.brokers[leader].alive():
            cluster.kill_broker(leader)
        offsets = [f.result(120).offset for f in futures]
    survivors = [proxies[b].listen for b in range(3) if b != leader]
    values = consume(",".join(survivors), [T0], total)
    if idempotence:
        assert offsets == sorted(offsets)
        assert len(set(offsets)) == total
        assert values == [b"%06d" % i for i in range(total)]
    else:
        assert sorted(set(values)) == [b"%06d" % i for i in range(total)]  # no gap either way
        assert len(values) > total  # but duplicates
    cluster.start_broker(leader)
