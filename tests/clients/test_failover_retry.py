"""The producer after a leader dies (issue 16's failover figure): a retried batch goes to a new leader at once
(Kafka's KIP-951), instead of waiting out the backoff it got from the dead one."""

from __future__ import annotations

import time
from collections.abc import Callable

from common.clock import ManualClock
from odradek.backoff import ExponentialBackoff
from odradek.config import ProducerConfig
from odradek.net import ClusterClient
from odradek.producer import Producer
from odradek.sender import Sender
from tests.clients.fake_broker import FakeCluster
from tests.clients.test_accumulator import T0, append, make


def test_a_retry_goes_to_a_new_leader_without_its_backoff() -> None:
    clock = ManualClock()
    acc = make(clock, linger_ms=0)
    append(acc)
    sent = acc.drain(lambda tp: 1, {1}, 1 << 20, clock.monotonic_ms())[1]
    for batch in sent:
        batch.attempts = 3
    acc.reenqueue(sent, clock.monotonic_ms() + 800)  # broker 1 died: the fourth backoff
    acc.unmute(T0)
    assert acc.ready(lambda tp: 1, clock.monotonic_ms()).nodes == set()  # still broker 1: wait
    assert acc.ready(lambda tp: 2, clock.monotonic_ms()).nodes == {2}  # the metadata names broker 2: go now
    assert acc.drain(lambda tp: 2, {2}, 1 << 20, clock.monotonic_ms())[2] == sent


class _Cluster:
    def __init__(self) -> None:
        self.leaders = {T0: 1}

    def leader(self, tp: object) -> int:
        return self.leaders.get(tp, -1)  # type: ignore[call-overload]


class _Client:
    """What the sender's pass reads of the ClusterClient; broker 1's stub fails as a dead broker does."""

    def __init__(self) -> None:
        self.cluster = _Cluster()
        self.updates = 0

    def request_update(self) -> None:
        self.updates += 1

    def maybe_refresh(self) -> bool:
        return False

    def metadata_due_in_ms(self, now_ms: float) -> float:
        return 100.0

    def stub_for(self, node: int) -> None:
        return None  # the broker is gone: the request fails as on a refused connection


def test_metadata_is_refreshed_every_pass_while_the_leader_is_unreachable() -> None:
    clock = ManualClock()
    acc = make(clock, linger_ms=0)
    client = _Client()
    config = ProducerConfig.from_mapping({"bootstrap.servers": "127.0.0.1:9092", "enable.idempotence": False})
    sender = Sender(client=client, accumulator=acc, config=config, clock=clock,  # type: ignore[arg-type]
                    backoff=ExponentialBackoff(100, 1000, jitter=0.0))  # fmt: skip
    append(acc)
    sender.run_once()  # sent to broker 1, failed at once: a retry in 100 ms
    after_failure = client.updates
    assert after_failure >= 1
    for _ in range(3):
        clock.advance(20)
        sender.run_once()  # backing off: the metadata is asked again each pass, to find the next leader
    assert client.updates >= after_failure + 3


def test_a_request_stuck_at_a_replaced_leader_goes_to_the_new_one(make_cluster: Callable[..., FakeCluster]) -> None:
    """A paused leader (SIGSTOP) answers nothing; once the metadata names another leader the producer cancels
    the stuck request and sends the batch there, long before request.timeout.ms (30 s here)."""
    cluster = make_cluster((1, 2))
    cluster.create_topic("t", 1, leaders=[2])
    with Producer({"bootstrap.servers": cluster.bootstrap, "request.timeout.ms": 30_000}) as p:
        assert p.send("t", b"a").result(10).offset == 0
        with cluster.lock:
            cluster.paused.add(2)
        try:
            future = p.send("t", b"b")
            time.sleep(0.3)  # the request is stuck at broker 2
            cluster.set_leader(T0, 1)
            assert future.result(15).offset == 1  # written by broker 1 (the fake shares one log)
        finally:
            with cluster.lock:
                cluster.paused.clear()
    assert any(node == 1 and rpc == "Produce" for node, rpc, _ in cluster.calls)


def test_a_metadata_refresh_asks_a_suspected_broker_last(make_cluster: Callable[..., FakeCluster]) -> None:
    """A paused broker answers no Metadata either: once suspected, the refresh asks the others first, so the
    producer learns the new leader instead of waiting request.timeout.ms on the paused one."""
    cluster = make_cluster((1, 2))
    cluster.create_topic("t", 1, leaders=[2])
    client = ClusterClient(bootstrap_servers=[cluster.bootstrap.split(",")[1]], request_timeout_ms=30_000)
    try:
        client.add_topics(["t"])
        client.refresh()
        with cluster.lock:
            cluster.paused.add(2)
        cluster.set_leader(T0, 1)
        for _ in range(4):  # whichever broker the rotation starts with
            client.suspect(2)
            started = time.monotonic()
            assert client.refresh().leader(T0) == 1
            assert time.monotonic() - started < 15  # not the paused broker's 30 s
            client.request_update()
    finally:
        with cluster.lock:
            cluster.paused.clear()
        client.close()
