"""``BrokerService.produce_then`` and ``fetch_then`` (what the ``DATA`` and ``REPLICATION`` listeners answer with)
against a real broker's data plane (``BrokerHarness``) on an event loop in a thread: an acks=all Produce answered
once the follower's fetch reports the records, or with REQUEST_TIMED_OUT at its timeout; a consumer's long poll
woken by an append; what answers at once answers inside the call; a cancelled request is never answered."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from broker.service import BrokerService
from proto import broker_pb2 as pb
from tests.broker.conftest import BrokerHarness, batch

FOLLOWER = 1
WAIT_S = 10.0
QUIET_S = 0.3


class Served:
    """The service on a loop thread: each call runs there, its answers collected in order."""

    def __init__(self, h: BrokerHarness, loop: asyncio.AbstractEventLoop, service: BrokerService) -> None:
        self.h = h
        self.loop = loop
        self.service = service
        self._changed = threading.Condition()
        self.answers: dict[str, list[Any]] = {}

    def start(self, name: str, call: Callable[[Any, Callable[[Any], None]], Callable[[], None]], request: Any) -> Any:
        """``call(request, done)`` on the loop; returns (answered inside the call, the cancel function)."""

        def done(outcome: Any) -> None:
            with self._changed:
                self.answers.setdefault(name, []).append(outcome)
                self._changed.notify_all()

        async def run() -> tuple[bool, Callable[[], None]]:
            cancel = call(request, done)
            return name in self.answers, cancel

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(WAIT_S)

    def cancel(self, cancel: Callable[[], None]) -> None:
        self.loop.call_soon_threadsafe(cancel)

    def answer(self, name: str, timeout_s: float = WAIT_S) -> Any:
        with self._changed:
            assert self._changed.wait_for(lambda: name in self.answers, timeout_s), f"{name} was not answered"
            (outcome,) = self.answers[name]
            return outcome

    def unanswered(self, name: str) -> bool:
        with self._changed:
            return not self._changed.wait_for(lambda: name in self.answers, QUIET_S)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    h = BrokerHarness(tmp_path / "broker")
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="test-service-loop", daemon=True)
    thread.start()
    pool = ThreadPoolExecutor(2, thread_name_prefix="test-service-pool")
    try:
        h.register(FOLLOWER)
        h.create_topic("rf2", replicas=[0, FOLLOWER])
        h.create_topic("rf1")
        yield Served(h, loop, BrokerService(h.ctx, "PLAINTEXT", pool))
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(WAIT_S)
        loop.close()
        pool.shutdown(wait=True)
        h.close()


def produce(topic: str, acks: int = -1, timeout_ms: int = 5000) -> pb.ProduceRequest:
    request = pb.ProduceRequest(acks=acks, timeout_ms=timeout_ms)
    request.topics.add(name=topic).partitions.add(partition=0, records=batch([b"a", b"b"]))
    return request


def fetch(h: BrokerHarness, topic: str, offset: int, replica_id: int = -1, max_wait_ms: int = 5000) -> pb.FetchRequest:
    request = pb.FetchRequest(replica_id=replica_id, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20)
    if replica_id >= 0:
        request.replica_epoch = h.broker_epoch(replica_id)
    request.topics.add(name=topic).partitions.add(partition=0, fetch_offset=offset, partition_max_bytes=1 << 20)
    return request


def partition_of(response: Any) -> Any:
    assert not isinstance(response, BaseException), response
    return response.topics[0].partitions[0]


def test_an_acks_all_produce_is_answered_once_the_follower_reports_the_records(served: Served) -> None:
    h, service = served.h, served.service
    at_once, _ = served.start("produce", service.produce_then, produce("rf2"))
    assert not at_once
    assert served.unanswered("produce")  # appended, waiting for the ISR
    assert h.partition("rf2").log_end_offset == 2
    served.start("carry", service.fetch_then, fetch(h, "rf2", 0, FOLLOWER))
    assert partition_of(served.answer("carry")).records  # the follower gets the records...
    assert served.unanswered("produce")  # ...and has not reported them yet
    served.start("report", service.fetch_then, fetch(h, "rf2", 2, FOLLOWER, max_wait_ms=50))
    answer = partition_of(served.answer("produce"))
    assert (answer.error.code, answer.base_offset) == ("", 0)
    assert partition_of(served.answer("report")).high_watermark == 2


def test_an_acks_all_produce_the_isr_does_not_get_times_out(served: Served) -> None:
    served.start("produce", served.service.produce_then, produce("rf2", timeout_ms=200))
    answer = partition_of(served.answer("produce"))
    assert answer.error.code == "REQUEST_TIMED_OUT"
    assert answer.base_offset == 0  # written, not acknowledged by every in-sync replica


def test_what_needs_no_wait_is_answered_inside_the_call(served: Served) -> None:
    at_once, _ = served.start("acks1", served.service.produce_then, produce("rf1", acks=1))
    assert at_once
    assert partition_of(served.answer("acks1")).base_offset == 0
    at_once, _ = served.start("alone", served.service.produce_then, produce("rf1"))  # acks=all, ISR = {leader}
    assert at_once
    assert partition_of(served.answer("alone")).base_offset == 2
    at_once, _ = served.start("end", served.service.fetch_then, fetch(served.h, "rf1", 4, max_wait_ms=0))
    assert at_once  # nothing to read and no wait: the read on the loop
    assert partition_of(served.answer("end")).high_watermark == 4
    at_once, _ = served.start("read", served.service.fetch_then, fetch(served.h, "rf1", 0))
    assert not at_once  # records to read: the first read runs on a worker
    assert partition_of(served.answer("read")).records


def test_a_consumers_long_poll_is_woken_by_an_append(served: Served) -> None:
    h, service = served.h, served.service
    at_once, _ = served.start("poll", service.fetch_then, fetch(h, "rf1", 0))
    assert not at_once
    assert served.unanswered("poll")
    served.start("produce", service.produce_then, produce("rf1", acks=1))
    answer = partition_of(served.answer("poll", timeout_s=2.0))  # well before its 5 s max wait
    assert answer.high_watermark == 2
    assert answer.records


def test_a_cancelled_request_is_never_answered(served: Served) -> None:
    h, service = served.h, served.service
    _, cancel_poll = served.start("poll", service.fetch_then, fetch(h, "rf1", 0, max_wait_ms=200))
    _, cancel_produce = served.start("produce", service.produce_then, produce("rf2", timeout_ms=200))
    served.cancel(cancel_poll)
    served.cancel(cancel_produce)
    served.start("append", service.produce_then, produce("rf1", acks=1))  # would wake the poll
    assert served.unanswered("poll")
    assert served.unanswered("produce")  # past its timeout too
    assert h.partition("rf2").log_end_offset == 2  # the append stays, as a cancelled Produce call's does
