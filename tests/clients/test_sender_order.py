"""Request order (odradek/sender.py): the sender thread starts each Produce call itself, so one broker's
requests leave in the order they were drained -- with idempotence, a partition's sequences in order, the
order its leader appends them in (log.producer_state S8 holds a batch that overtakes another on the broker)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from common.streams import OrderedStream
from log.record import parse_header
from odradek import Producer, TopicPartition
from odradek.errors import NetworkError
from odradek.net import ClusterClient
from tests.clients.fake_broker import FakeCluster
from tests.support.launcher import wait_until


def test_produce_calls_start_on_the_sender_thread_in_sequence_order(
    cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[tuple[str, list[int]]] = []  # (thread name, base sequences of the request)
    real_start = ClusterClient.start_ordered

    def recording_start(self: ClusterClient, stub_method: Any, request: Any, timeout_s: float) -> Any:
        sequences = [parse_header(p.records).base_sequence for t in request.topics for p in t.partitions]
        started.append((threading.current_thread().name, sequences))
        return real_start(self, stub_method, request, timeout_s)

    monkeypatch.setattr(ClusterClient, "start_ordered", recording_start)
    cluster.create_topic("t")
    config = {"bootstrap.servers": cluster.bootstrap, "linger.ms": 0, "batch.size": 100, "client.id": "ordered"}
    with Producer(config) as p:
        p.send("t", b"warm").result(10)
        cluster.produce_gate.clear()  # answers held: the next requests pile up in flight
        futures = []
        for i in range(5):
            futures.append(p.send("t", b"r%d" % i + b"x" * 60))
            wait_until(lambda: cluster.produce_active > i, 5, f"{i + 1} requests in flight")  # noqa: B023
        cluster.produce_gate.set()
        assert [f.result(10).offset for f in futures] == [1, 2, 3, 4, 5]
    # The fake broker has no ProduceStream: the first request, refused on the stream (UNIMPLEMENTED), is sent
    # again as a unary call by the stream's reader thread (common.streams, before any later request);
    # every later one is started by the sender thread.
    assert started[0][0] == "odradek-producer-sender-ordered-" + cluster.bootstrap.split(",")[0] + "-reader"
    assert {name for name, _ in started[1:]} == {"odradek-producer-sender-ordered"}
    # The fake broker's handlers race for its lock and refuse a batch that overtook another (no S8 hold
    # there): such a P5 resend comes after the first six.
    assert [sequences for _, sequences in started][:6] == [[0], [1], [2], [3], [4], [5]]


@pytest.mark.parametrize("acks", ["all", "0"])
def test_a_call_that_cannot_start_is_retried_or_fails_its_records(
    cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch, acks: str
) -> None:
    """A request refused before it leaves (a closed channel, ...) counts as a lost connection: retried, or with
    acks=0 (nothing is retried) its records fail; no future is left hanging. (The sender starts each request
    on the broker's ProduceStream, ``OrderedStream.start``, which raises what opening the stream or starting
    the unary call raised.)"""
    real_start = OrderedStream.start
    starts: list[int] = []

    def failing_first(self: OrderedStream, request: Any, timeout: float) -> Any:
        starts.append(1)
        if len(starts) == 1:
            raise ValueError("Cannot invoke RPC on closed channel!")
        return real_start(self, request, timeout)

    monkeypatch.setattr(OrderedStream, "start", failing_first)
    cluster.create_topic("t")
    config = {"bootstrap.servers": cluster.bootstrap, "linger.ms": 0, "retry.backoff.ms": 10, "acks": acks}
    with Producer(config) as p:
        future = p.send("t", b"a")
        if acks == "0":
            with pytest.raises(NetworkError, match="closed channel"):
                future.result(10)
        else:
            assert future.result(10).offset == 0
    assert [r.value for r in cluster.records(TopicPartition("t", 0))] == ([] if acks == "0" else [b"a"])


def test_a_held_batch_goes_out_before_the_callbacks_of_the_answer_that_frees_it(cluster: FakeCluster) -> None:
    """A batch held while its partition's request is in flight is sent as soon as that answer is taken, before
    the answered records' futures and callbacks run (they are the application's time, not the record's)."""
    cluster.create_topic("t", 1)
    with Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 0}) as p:
        p.send("t", b"warm").result(timeout=10)
        sender: Any = p._sender
        in_flight_at_callback: list[int] = []
        with cluster.lock:
            cluster.paused.add(1)  # the leader holds its answer to the first record
        first = p.send("t", b"first")
        first.add_done_callback(lambda _: in_flight_at_callback.append(len(sender._requests)))
        wait_until(lambda: len(sender._requests) == 1, timeout_s=10, what="the first record's request in flight")
        second = p.send("t", b"second")  # held: its partition has a request in flight
        with cluster.lock:
            cluster.paused.discard(1)
            cluster.lock.notify_all()
        assert first.result(timeout=10).offset == 1
        assert second.result(timeout=10).offset == 2
    assert in_flight_at_callback == [1]  # the second record's request was out when the first's callback ran
