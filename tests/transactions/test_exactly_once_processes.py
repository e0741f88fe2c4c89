"""Exactly-once consume-transform-produce through failures (issue 18's proof): real brokers (3, replication
factor 3), the application as its own process (``tests/transactions/eos_app.py``). While it runs, the
application is killed (kill -9) and started again, the transaction coordinator's broker is killed and comes
back, a partition leader of the output is killed and comes back, and the application is paused (a zombie)
while a new instance takes over. A read_committed reader of the output then sees every input record's result
exactly once, and none of an aborted transaction; the zombie, resumed, is fenced (exits 3)."""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from odradek import Consumer, Producer, TopicPartition
from proto import broker_pb2
from tests.broker.cluster import Cluster

RECORDS = 1500  # the input, in all: most of it at the start, then CHUNK before each wait for commits
EVERY = 20  # input records per transaction, at most
PARTITIONS = 3
CONFIG = {
    "transaction.state.log.num.partitions": "3",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "offsets.topic.num.partitions": "3",
    "offsets.topic.replication.factor": "3",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
}
TXN_ID = "eos-app"


class App:
    """One run of the application process; its stdout lines are collected by a thread."""

    def __init__(self, cluster: Cluster, root: Path, name: str) -> None:
        self.lines: list[str] = []
        self._cond = threading.Condition()
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        argv = [sys.executable, "-m", "tests.transactions.eos_app", "--bootstrap-servers", cluster.bootstrap_servers,
                "--transactional-id", TXN_ID, "--expect", str(RECORDS), "--every", str(EVERY), "--pause-ms", "30"]
        self.err = open(root / f"{name}.err", "wb")  # noqa: SIM115 (closed by stop)
        self.out_path = root / f"{name}.out"  # its stdout lines, written at stop (for a failure's post-mortem)
        self.popen = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self.err, env=env, text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            with self._cond:
                self.lines.append(line.strip())
                self._cond.notify_all()

    def commits(self) -> int:
        with self._cond:
            return sum(1 for line in self.lines if line.startswith("committed"))

    def wait_commits(self, more: int, feed: Input, timeout_s: float = 60.0) -> None:
        """Wait for ``more`` commits after this call, fed the input they need first: the application may have
        read all the input there was while the test waited for a broker, and then has nothing to commit."""
        target = self.commits() + more
        feed.send(more * EVERY)
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while sum(1 for line in self.lines if line.startswith("committed")) < target:
                if self.popen.poll() is not None and not self._reader.is_alive():
                    raise AssertionError(f"the application exited {self.popen.returncode}: {self.lines[-5:]}")
                remaining = deadline - time.monotonic()
                assert remaining > 0, f"no {more} more commits within {timeout_s} s: {self.lines[-5:]}"
                self._cond.wait(remaining)

    def wait_exit(self, timeout_s: float = 120.0) -> int:
        code = self.popen.wait(timeout_s)
        self._reader.join(5)
        return code

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGCONT)
            self.popen.kill()
            self.popen.wait(10)
        self._reader.join(10)  # EOF once the process is gone
        if self.popen.stdout is not None:
            self.popen.stdout.close()
        self.err.close()
        with self._cond:
            self.out_path.write_text("\n".join(self.lines) + "\n")


class Input:
    """The input topic's records, sent in parts: record i is ``k<i>`` / ``v<i>`` on partition i % PARTITIONS."""

    def __init__(self, cluster: Cluster) -> None:
        self._producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 5})
        self.sent = 0

    def send(self, n: int) -> None:
        """The next ``n`` records (fewer when that would pass RECORDS), written when this returns."""
        first, self.sent = self.sent, min(RECORDS, self.sent + n)
        futures = [self._producer.send("in", key=f"k{i:05d}".encode(), value=f"v{i}".encode(), partition=i % PARTITIONS)
                   for i in range(first, self.sent)]  # fmt: skip
        self._producer.flush(60)
        for future in futures:
            future.result(timeout=0)

    def close(self) -> None:
        self._producer.close()


def coordinator_index(cluster: Cluster) -> int:
    answer = cluster.broker_stub(0).FindCoordinator(broker_pb2.FindCoordinatorRequest(key_type=1, keys=[TXN_ID]),
                                                    timeout=10)  # fmt: skip
    node = answer.coordinators[0].node_id
    return next(i for i, b in enumerate(cluster.brokers) if b.node_id == node)


def live_index(cluster: Cluster, avoid: int) -> int:
    return next(i for i, b in enumerate(cluster.brokers) if i != avoid and b.alive())


@pytest.mark.slow
def test_exactly_once_through_kills_failovers_and_a_zombie(tmp_path: Path) -> None:
    apps: list[App] = []
    with Cluster(tmp_path, brokers=3, broker_config=CONFIG) as cluster:
        for topic in ("in", "out"):
            cluster.create_topic(topic, partitions=PARTITIONS, replication_factor=3,
                                 configs={"min.insync.replicas": "2"})  # fmt: skip
        feed = Input(cluster)
        feed.send(RECORDS - (5 + 5 + 5 + 3 + 5 + 3 + 3) * EVERY)  # the rest feeds the waits for commits below
        try:
            apps.append(App(cluster, tmp_path, "app-0"))
            apps[-1].wait_commits(5, feed)
            apps[-1].popen.kill()  # 1. the application dies mid-run
            apps[-1].wait_exit(10)
            apps.append(App(cluster, tmp_path, "app-1"))
            apps[-1].wait_commits(5, feed)
            coordinator = coordinator_index(cluster)  # 2. the transaction coordinator's broker dies
            cluster.kill_broker(coordinator)
            apps[-1].wait_commits(5, feed, timeout_s=90)
            cluster.start_broker(coordinator)
            apps[-1].wait_commits(3, feed)
            out_leader = cluster.leader("out", 0, via=live_index(cluster, -1))  # 3. an output leader dies
            victim = next(i for i, b in enumerate(cluster.brokers) if b.node_id == out_leader)
            cluster.kill_broker(victim)
            apps[-1].wait_commits(5, feed, timeout_s=90)
            cluster.start_broker(victim)
            apps[-1].wait_commits(3, feed)
            zombie = apps[-1]  # 4. paused, replaced, resumed
            zombie.popen.send_signal(signal.SIGSTOP)
            apps.append(App(cluster, tmp_path, "app-2"))
            apps[-1].wait_commits(3, feed)
            assert feed.sent == RECORDS
            zombie.popen.send_signal(signal.SIGCONT)
            assert zombie.wait_exit(60) == 3, zombie.lines[-5:]
            assert any(line.startswith("fenced") for line in zombie.lines)
            assert apps[-1].wait_exit(180) == 0, apps[-1].lines[-5:]
            assert apps[-1].lines[-1] == "done"
            records = read_committed_output(cluster)
        finally:
            for app in apps:
                app.stop()
            feed.close()
    values = [v for _, _, v in records]
    counts = collections.Counter(values)
    duplicates = [v for v, n in counts.items() if n > 1]
    where = {v: [(p, o) for p, o, w in records if w == v] for v in duplicates[:3]}
    assert not duplicates, f"{len(duplicates)} results read more than once, e.g. at (partition, offset) {where}"
    expected = {f"k{i:05d}:V{i}".encode() for i in range(RECORDS)}
    assert set(counts) == expected, f"missing {len(expected - set(counts))}, unexpected {len(set(counts) - expected)}"


def read_committed_output(cluster: Cluster) -> list[tuple[int, int, bytes]]:
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "isolation.level": "read_committed",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})  # fmt: skip
    tps = [TopicPartition("out", p) for p in range(PARTITIONS)]
    consumer.assign(tps)
    values: list[tuple[int, int, bytes]] = []
    quiet_since = time.monotonic()
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            batch = consumer.poll(300)
            values.extend((r.partition, r.offset, r.value or b"") for r in batch)
            if batch:
                quiet_since = time.monotonic()
            elif len(values) >= RECORDS and time.monotonic() - quiet_since > 2:
                break
    finally:
        consumer.close()
    return values
