"""Replication between broker processes: 3 brokers, RF=3, min.insync.replicas=2, acks=all.

Followers fetch from the leader (``broker/replica_fetcher.py``), so acks=all completes once the ISR has the
records; kill -9 of the leader elects a new leader from the ISR that holds every acknowledged record; with
two of three brokers gone, acks=all produce fails with NOT_ENOUGH_REPLICAS instead of succeeding, and once
they restart the leader brings them back into the ISR (AlterPartition, ``broker/isr_manager.py``).
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from pathlib import Path

import grpc
import pytest

from log.record import build_batch, iter_batches
from log.record.reader import read_batch
from tests.broker.cluster import Cluster
from tests.broker.test_broker_processes import fetch, produce

pytestmark = pytest.mark.slow

START_MS = 1_700_000_000_000
CONTROLLER_CONFIG = {"broker.session.timeout.ms": "3000"}
TOPIC_CONFIG = {"min.insync.replicas": "2"}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with Cluster(tmp_path, brokers=3, controller_config=CONTROLLER_CONFIG) as c:
        yield c


def values_at(cluster: Cluster, broker: int, topic: str) -> list[bytes]:
    """Every record value below the high watermark of ``broker`` (the leader), in offset order."""
    out: list[bytes] = []
    offset = 0
    while True:
        got = fetch(cluster.broker_stub(broker), topic, 0, offset)
        assert not got.error.code, got.error
        if not got.records:
            return out
        for pos, header in iter_batches(got.records):
            _, records = read_batch(got.records, pos)
            out += [r.value or b"" for r in records]
            offset = header.next_offset


def produce_all(cluster: Cluster, topic: str, value: bytes, want: str | None = None) -> str | bool:
    """acks=all to whoever leads now; the error code ('' once acknowledged), or whether it is ``want``."""
    code = _produce_all(cluster, topic, value)
    return code if want is None else code == want


def _produce_all(cluster: Cluster, topic: str, value: bytes) -> str:
    leader = cluster.leader(topic, 0, via=_alive(cluster))
    if leader < 0:
        return "LEADER_NOT_AVAILABLE"
    try:
        answer = produce(cluster.broker_stub(leader), topic, 0, build_batch([value], timestamp_ms=START_MS), acks=-1)
    except grpc.RpcError as e:
        return f"RPC:{e.code()}"
    return str(answer.error.code)


def _alive(cluster: Cluster) -> int:
    return next(i for i, b in enumerate(cluster.brokers) if b.alive())


def test_acks_all_survives_kill_9_of_the_leader(cluster: Cluster) -> None:
    cluster.create_topic("r", replication_factor=3, configs=TOPIC_CONFIG)
    acked = []
    for i in range(20):
        value = f"before-{i}".encode()
        assert produce_all(cluster, "r", value) == ""
        acked.append(value)
    old_leader = cluster.leader("r")
    cluster.kill_broker(old_leader)
    survivor = next(i for i in range(3) if i != old_leader)

    def new_leader() -> bool:
        leader = cluster.leader("r", via=survivor)
        return leader >= 0 and leader != old_leader

    cluster.wait_for(new_leader, 30, "a new leader from the ISR")
    for i in range(20):
        value = f"after-{i}".encode()
        cluster.wait_for(partial(produce_all, cluster, "r", value, want=""), 30, f"acks=all of {value!r}")
        acked.append(value)
    got = values_at(cluster, cluster.leader("r", via=survivor), "r")
    # Every acknowledged record, in order. A retried produce (no idempotence yet) may add a second copy of
    # a value whose first attempt was written but not acknowledged; only the first copy counts.
    assert list(dict.fromkeys(v for v in got if v in acked)) == acked
    assert all(got.count(v) == 1 for v in acked[:20])  # acknowledged at the first attempt: exactly once


def test_two_of_three_gone_refuses_acks_all_and_a_restart_recovers_the_isr(cluster: Cluster) -> None:
    cluster.create_topic("r2", replication_factor=3, configs=TOPIC_CONFIG)
    assert produce_all(cluster, "r2", b"first") == ""
    leader = cluster.leader("r2")
    victims = [i for i in range(3) if i != leader]
    for victim in victims:
        cluster.kill_broker(victim)
    cluster.wait_for(lambda: produce_all(cluster, "r2", b"x") == "NOT_ENOUGH_REPLICAS", 30, "NOT_ENOUGH_REPLICAS")
    for victim in victims:
        cluster.start_broker(victim)

    def isr_is_full() -> bool:
        return len(cluster.partition_metadata("r2", 0, via=leader).isr) == 3

    cluster.wait_for(isr_is_full, 30, "the ISR back to three replicas")
    assert produce_all(cluster, "r2", b"after") == ""


def test_controlled_shutdown_moves_leadership_and_the_preferred_leader_comes_back(tmp_path: Path) -> None:
    """The first acks=all after a controlled shutdown succeeds at once (issue 16's stall: the new leader
    proposed the leaving broker back into the ISR, and the refusal never woke the produce; ISR8 and the
    wake after every AlterPartition answer, ``tests/replication/test_isr_manager.py``)."""
    config = {**CONTROLLER_CONFIG, "leader.imbalance.check.interval.seconds": "1"}
    with Cluster(tmp_path, brokers=3, controller_config=config) as cluster:
        cluster.create_topic("p", replication_factor=3, configs=TOPIC_CONFIG)
        preferred = cluster.partition_metadata("p", 0).replicas[0]
        assert cluster.leader("p") == preferred
        acked = [f"v{i}".encode() for i in range(10)]
        for value in acked[:5]:
            assert produce_all(cluster, "p", value) == ""
        other = (preferred + 1) % 3
        code = cluster.stop_broker(preferred)  # SIGTERM: controlled shutdown first
        assert code == 0, f"broker {preferred} exited {code}:\n{cluster.brokers[preferred].errors(6000)}"
        assert cluster.leader("p", via=other) not in (preferred, -1)
        for value in acked[5:]:
            assert produce_all(cluster, "p", value) == "", f"acks=all of {value!r} after the controlled shutdown"
        cluster.start_broker(preferred)
        cluster.wait_for(lambda: cluster.leader("p", via=other) == preferred, 30, "the preferred leader back")
        assert values_at(cluster, preferred, "p") == acked  # every value exactly once, in order
