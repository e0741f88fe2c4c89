"""The record accumulator, driven by hand with a manual clock: batching, readiness, drain, memory, expiry."""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable
from typing import Any

import pytest

from common.clock import ManualClock
from log.record import read_batch
from odradek.accumulator import ProducerBatch, RecordAccumulator, record_size_upper_bound
from odradek.errors import IllegalStateError, KafkaTimeoutError
from odradek.record_future import RecordFuture
from odradek.types import RecordMetadata, TopicPartition

T0 = TopicPartition("t", 0)
T1 = TopicPartition("t", 1)
U0 = TopicPartition("u", 0)
VALUE = b"v" * 100
SIZE = record_size_upper_bound(None, VALUE, ())
LEADERS = {T0: 1, T1: 2, U0: 1}


def leader_of(tp: TopicPartition) -> int:
    return LEADERS.get(tp, -1)


def make(clock: ManualClock, **overrides: int) -> RecordAccumulator:
    settings: dict[str, Any] = {
        "batch_size": 1000,
        "linger_ms": 5,
        "buffer_memory": 100_000,
        "compression": 0,
        "delivery_timeout_ms": 1000,
    }
    settings.update(overrides)
    return RecordAccumulator(clock=clock, **settings)


def append(acc: RecordAccumulator, tp: TopicPartition = T0, value: bytes = VALUE, block_ms: float = 0) -> RecordFuture:
    future = acc.append(tp, 1_700_000_000_000, None, value, (), record_size_upper_bound(None, value, ()), block_ms)
    assert future is not None
    return future


def test_records_share_a_batch_until_batch_size() -> None:
    clock = ManualClock()
    acc = make(clock)
    for _ in range(20):
        append(acc)
    batches = acc.queued_batches(T0)
    assert len(batches) > 1
    assert all(b.size_bytes() <= 1000 for b in batches)
    assert sum(b.record_count for b in batches) == 20
    assert all(b.closed for b in batches[:-1])
    assert not batches[-1].closed


def test_a_record_larger_than_batch_size_gets_its_own_batch() -> None:
    acc = make(ManualClock(), batch_size=100)
    append(acc, value=b"x" * 500)
    append(acc, value=b"x" * 500)
    assert [b.record_count for b in acc.queued_batches(T0)] == [1, 1]


def test_linger_decides_readiness() -> None:
    clock = ManualClock()
    acc = make(clock, linger_ms=5)
    append(acc)
    check = acc.ready(leader_of, clock.monotonic_ms())
    assert check.nodes == set()
    assert check.next_check_ms == pytest.approx(5)
    clock.advance(4)
    assert acc.ready(leader_of, clock.monotonic_ms()).nodes == set()
    clock.advance(1)
    assert acc.ready(leader_of, clock.monotonic_ms()).nodes == {1}


def test_a_full_batch_is_ready_at_once() -> None:
    clock = ManualClock()
    acc = make(clock, linger_ms=10_000)
    for _ in range(12):
        append(acc)
    assert acc.ready(leader_of, clock.monotonic_ms()).nodes == {1}
    drained = acc.drain(leader_of, {1}, 1 << 20, clock.monotonic_ms())
    assert [b.closed for b in drained[1]] == [True]  # only the full one: the open one still lingers


def test_flush_makes_everything_ready() -> None:
    clock = ManualClock()
    acc = make(clock, linger_ms=10_000)
    append(acc)
    acc.begin_flush()
    assert acc.ready(leader_of, clock.monotonic_ms()).nodes == {1}
    acc.end_flush()
    assert acc.ready(leader_of, clock.monotonic_ms()).nodes == set()


def test_with_a_request_in_flight_a_partial_batch_waits_for_the_answer() -> None:
    """Fewer, fuller requests: with 5 requests allowed in flight, a partition that has one out sends its
    open batch only once it is full, or at a flush, or after the answer (then linger applies again)."""
    clock = ManualClock()
    acc = make(clock, linger_ms=0, max_in_flight_per_partition=5)
    append(acc)
    assert [b.record_count for b in acc.drain(leader_of, {1}, 1 << 20, clock.monotonic_ms())[1]] == [1]
    append(acc)  # linger 0, but a request of T0 is in flight
    clock.advance(50)
    check = acc.ready(leader_of, clock.monotonic_ms())
    assert check.nodes == set()
    assert check.next_check_ms == float("inf")  # nothing to time: the answer wakes the sender
    assert acc.drain(leader_of, {1}, 1 << 20, clock.monotonic_ms()) == {}
    acc.begin_flush()
    assert acc.ready(leader_of, clock.monotonic_ms()).nodes == {1}
    acc.end_flush()
    while len(acc.queued_batches(T0)) == 1:
        append(acc)  # until the batch is full (1000 bytes): then it goes out beside the one in flight
    drained = acc.drain(leader_of, {1}, 1 << 20, clock.monotonic_ms())[1]
    assert drained[0].closed
    assert acc.in_flight(T0) == 2
    acc.unmute(T0)
    acc.unmute(T0)
    append(acc)
    assert acc.ready(leader_of, clock.monotonic_ms()).nodes == {1}  # nothing in flight: linger 0 sends at once


def test_unknown_leader_is_reported() -> None:
    clock = ManualClock()
    acc = make(clock, linger_ms=0)
    append(acc, TopicPartition("nowhere", 0))
    check = acc.ready(leader_of, clock.monotonic_ms())
    assert check.unknown_leaders
    assert check.nodes == set()


def test_drain_groups_by_leader_and_mutes() -> None:
    clock = ManualClock()
    acc = make(clock, linger_ms=0)
    append(acc, T0)
    append(acc, T1)
    append(acc, U0)
    drained = acc.drain(leader_of, {1, 2}, 1 << 20, clock.monotonic_ms())
    assert {b.tp for b in drained[1]} == {T0, U0}
    assert [b.tp for b in drained[2]] == [T1]
    append(acc, T0)  # muted while in flight: not drained again
    assert acc.drain(leader_of, {1, 2}, 1 << 20, clock.monotonic_ms()) == {}
    assert acc.ready(leader_of, clock.monotonic_ms()).nodes == set()
    acc.unmute(T0)
    assert [b.tp for b in acc.drain(leader_of, {1}, 1 << 20, clock.monotonic_ms())[1]] == [T0]


def test_drain_takes_several_batches_of_a_partition_in_order_up_to_the_request_size() -> None:
    clock = ManualClock()
    acc = make(clock, linger_ms=0)
    futures = [append(acc) for _ in range(40)]
    drained = acc.drain(leader_of, {1}, 3000, clock.monotonic_ms())[1]
    assert 1 < len(drained) < len(acc.queued_batches(T0)) + len(drained)
    assert sum(b.size_bytes() for b in drained) <= 3000
    taken = sum(b.record_count for b in drained)
    offset = 0
    for batch in drained:  # the drained batches hold the first records, in order
        batch.complete(offset)
        offset += batch.record_count
    assert [f.result(0).offset for f in futures[:taken]] == list(range(taken))
    assert not any(f.done() for f in futures[taken:])


def test_drain_always_takes_one_batch_even_if_larger_than_the_request_size() -> None:
    clock = ManualClock()
    acc = make(clock, linger_ms=0)
    append(acc)
    assert len(acc.drain(leader_of, {1}, 10, clock.monotonic_ms())[1]) == 1


def test_reenqueued_batches_wait_for_backoff_and_keep_their_order() -> None:
    clock = ManualClock()
    acc = make(clock, linger_ms=0, batch_size=200)
    for _ in range(3):
        append(acc)
    first = acc.drain(leader_of, {1}, 1 << 20, clock.monotonic_ms())[1]
    assert len(first) == 3
    append(acc)  # a later record, queued behind the retries
    for batch in first:
        batch.attempts = 1
    acc.reenqueue(first, clock.monotonic_ms() + 100)
    acc.unmute(T0)
    check = acc.ready(leader_of, clock.monotonic_ms())
    assert check.nodes == set()
    assert check.next_check_ms == pytest.approx(100)
    clock.advance(100)
    again = acc.drain(leader_of, {1}, 1 << 20, clock.monotonic_ms())[1]
    assert again[:3] == first


def test_batches_expire_after_the_delivery_timeout() -> None:
    clock = ManualClock()
    acc = make(clock, linger_ms=10_000, delivery_timeout_ms=1000)
    append(acc)
    clock.advance(999)
    assert acc.expire(clock.monotonic_ms()) == []
    clock.advance(1)
    expired = acc.expire(clock.monotonic_ms())
    assert len(expired) == 1
    assert acc.queued_batches(T0) == []


def test_muted_partitions_do_not_expire_behind_an_in_flight_batch() -> None:
    clock = ManualClock()
    acc = make(clock, linger_ms=0, delivery_timeout_ms=1000)
    append(acc)
    acc.drain(leader_of, {1}, 1 << 20, clock.monotonic_ms())
    append(acc)
    clock.advance(5000)
    assert acc.expire(clock.monotonic_ms()) == []


def test_buffer_memory_back_pressure_times_out() -> None:
    clock = ManualClock()
    acc = make(clock, batch_size=1000, buffer_memory=2000)
    append(acc, T0)
    append(acc, T1)
    with pytest.raises(KafkaTimeoutError, match=r"failed to allocate 1000 bytes within max.block.ms \(0 ms\)"):
        append(acc, U0, block_ms=0)
    assert acc.available_memory() == 0


def test_buffer_memory_is_returned_and_wakes_a_blocked_append() -> None:
    clock = ManualClock()
    acc = make(clock, batch_size=1000, buffer_memory=1000, linger_ms=0)
    append(acc, T0)
    batch = acc.drain(leader_of, {1}, 1 << 20, clock.monotonic_ms())[1][0]
    done = threading.Event()
    result: list[RecordFuture] = []

    def blocked() -> None:
        result.append(append(acc, T1, block_ms=60_000))
        done.set()

    thread = threading.Thread(target=blocked)
    thread.start()
    assert not done.wait(0.05)
    assert acc.ready(leader_of, clock.monotonic_ms()).nodes == set()  # T0 is in flight; nothing else queued
    batch.complete(0)
    acc.deallocate(batch)
    assert done.wait(5)
    thread.join(5)
    assert len(result) == 1
    assert acc.available_memory() == 0


def test_close_fails_blocked_appends_and_rejects_new_ones() -> None:
    clock = ManualClock()
    acc = make(clock, batch_size=1000, buffer_memory=1000)
    append(acc, T0)
    errors: list[BaseException] = []

    def blocked() -> None:
        try:
            append(acc, T1, block_ms=60_000)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=blocked)
    thread.start()
    acc.close()
    thread.join(5)
    assert isinstance(errors[0], IllegalStateError)
    with pytest.raises(IllegalStateError, match="closed"):
        append(acc, T0)


def test_abort_on_new_batch_leaves_no_trace() -> None:
    clock = ManualClock()
    acc = make(clock)
    assert acc.append(T0, 0, None, VALUE, (), SIZE, 0, True) is None
    assert acc.queued_batches(T0) == []
    append(acc)
    assert acc.append(T0, 0, None, VALUE, (), SIZE, 0, True) is not None
    while acc.append(T0, 0, None, VALUE, (), SIZE, 0, True) is not None:
        pass
    assert len(acc.queued_batches(T0)) == 1  # full, and no second batch was opened


def test_a_rejected_record_returns_its_memory() -> None:
    acc = make(ManualClock())
    with pytest.raises(TypeError):
        acc.append(T0, 0, None, VALUE, [("k", "not bytes")], SIZE, 0)  # type: ignore[list-item]
    assert acc.queued_batches(T0) == []
    assert acc.available_memory() == 100_000


def test_batch_builds_once_and_completes_futures_with_offsets() -> None:
    clock = ManualClock()
    acc = make(clock, linger_ms=0)
    futures = [acc.append(T0, 1000 + i, b"k", b"v%d" % i, (("h", b"x"),), 50, 0) for i in range(3)]
    batch = acc.drain(leader_of, {1}, 1 << 20, clock.monotonic_ms())[1][0]
    data = batch.build()
    assert batch.build() is data
    header, records = read_batch(data)
    assert [(r.timestamp, r.key, r.value, r.headers) for r in records] == [
        (1000 + i, b"k", b"v%d" % i, (("h", b"x"),)) for i in range(3)
    ]
    batch.complete(42)
    assert [f.result(0) for f in futures if f] == [RecordMetadata("t", 0, 42 + i, 1000 + i) for i in range(3)]


def test_log_append_time_and_acks_zero_metadata() -> None:
    batch = ProducerBatch(T0, 0, 0.0, 0)
    futures = [batch.append(5, None, b"a", ()), batch.append(6, None, b"b", ())]
    batch.complete(-1, log_append_time_ms=99)
    assert [f.result() for f in futures] == [RecordMetadata("t", 0, -1, 99)] * 2


# ------------------------------------------------------------------------- RecordFuture contract


def _batch_of_futures(n: int) -> tuple[ProducerBatch, list[RecordFuture]]:
    batch = ProducerBatch(T0, 0, 0.0, 0)
    return batch, [batch.append(1, None, b"x", ()) for _ in range(n)]


def test_record_futures_behave_like_futures_on_success() -> None:
    batch, futures = _batch_of_futures(3)
    seen: list[RecordMetadata] = []
    futures[1].add_done_callback(lambda f: seen.append(f.result()))
    assert not any(f.done() for f in futures)
    waiter = threading.Thread(target=lambda: concurrent.futures.wait(futures, timeout=5))
    waiter.start()
    threading.Timer(0.02, batch.complete, args=(10,)).start()
    done, pending = concurrent.futures.wait(futures, timeout=5)
    waiter.join(5)
    assert done == set(futures)
    assert not pending
    assert seen == [RecordMetadata("t", 0, 11, 1)]
    assert [f.result(0) for f in concurrent.futures.as_completed(futures, timeout=1)]
    assert futures[0].exception(0) is None
    late: list[int] = []
    futures[2].add_done_callback(lambda f: late.append(f.result().offset))
    assert late == [12]


def test_record_futures_behave_like_futures_on_failure() -> None:
    batch, futures = _batch_of_futures(2)
    seen: list[BaseException | None] = []
    futures[0].add_done_callback(lambda f: seen.append(f.exception()))
    error = KafkaTimeoutError("expired")
    threading.Timer(0.02, batch.fail, args=(error,)).start()
    with pytest.raises(KafkaTimeoutError, match="expired"):
        futures[1].result(timeout=5)
    assert seen == [error]
    assert futures[0].exception(0) is error
    done, _ = concurrent.futures.wait(futures, timeout=0, return_when=concurrent.futures.FIRST_EXCEPTION)
    assert done == set(futures)


def test_record_futures_cannot_be_cancelled_and_complete_once() -> None:
    batch, futures = _batch_of_futures(1)
    assert futures[0].cancel() is False
    assert not futures[0].cancelled()
    batch.complete(0)
    batch.fail(RuntimeError("late"))
    assert futures[0].result(0).offset == 0


def test_callbacks_run_in_send_order_whatever_order_they_were_added_in() -> None:
    batch, futures = _batch_of_futures(4)
    calls: list[tuple[str, int]] = []

    def note(tag: str) -> Callable[[concurrent.futures.Future[RecordMetadata]], None]:
        return lambda f: calls.append((tag, f.result(0).offset))

    def broken(f: concurrent.futures.Future[RecordMetadata]) -> None:
        raise RuntimeError("a broken callback")

    futures[3].add_done_callback(note("a"))
    futures[1].add_done_callback(broken)  # logged; the other callbacks still run
    futures[1].add_done_callback(note("b"))
    futures[0].add_done_callback(note("c"))
    futures[3].add_done_callback(note("d"))
    batch.complete(100)
    assert calls == [("c", 100), ("b", 101), ("a", 103), ("d", 103)]


def test_a_batch_is_settled_once_its_callbacks_have_run() -> None:
    """Futures are done before their callbacks run (concurrent.futures); waiting for the batch (what flush
    does) also waits for the callbacks, as Kafka's flush does."""
    batch, futures = _batch_of_futures(2)
    entered, release = threading.Event(), threading.Event()
    ran: list[int] = []

    def slow(f: concurrent.futures.Future[RecordMetadata]) -> None:
        entered.set()
        release.wait(5)
        ran.append(f.result(0).offset)

    futures[1].add_done_callback(slow)
    completing = threading.Thread(target=batch.complete, args=(0,))
    completing.start()
    assert entered.wait(5)
    assert futures[0].done()
    assert futures[1].done()
    assert batch.wait(0.01) is False  # the callback is still running
    release.set()
    assert batch.wait(5) is True
    assert ran == [1]
    completing.join(5)


def test_only_the_producer_completes_a_record_future() -> None:
    batch, futures = _batch_of_futures(1)
    for attempt in (
        lambda: futures[0].set_result(RecordMetadata("t", 0, 5, 5)),
        lambda: futures[0].set_exception(RuntimeError("no")),
        futures[0].set_running_or_notify_cancel,
    ):
        with pytest.raises(concurrent.futures.InvalidStateError):
            attempt()
    assert not futures[0].done()
    batch.complete(3)
    assert futures[0].result(0) == RecordMetadata("t", 0, 3, 1)
    assert "state=finished returned RecordMetadata" in repr(futures[0])


def test_as_completed_yields_futures_completed_by_another_thread() -> None:
    first, mine = _batch_of_futures(2)
    second, theirs = _batch_of_futures(1)
    first.complete(0)  # done before as_completed starts, the others after
    threading.Timer(0.02, second.fail, args=(KafkaTimeoutError("expired"),)).start()
    seen = []
    for future in concurrent.futures.as_completed([*mine, *theirs], timeout=5):
        seen.append(future)
    assert set(seen) == {*mine, *theirs}
    assert isinstance(theirs[0].exception(0), KafkaTimeoutError)


def test_an_idempotent_batch_is_built_once_with_its_producer_fields() -> None:
    batch = ProducerBatch(T0, 0, 0.0, 0)
    batch.append(7, None, b"a", ())
    batch.append(8, None, b"b", ())
    batch.producer_id, batch.producer_epoch, batch.base_sequence = 42, 3, 10
    header, records = read_batch(batch.build())  # read_batch checks the CRC
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (42, 3, 10)
    assert [r.value for r in records] == [b"a", b"b"]
    assert batch.record_count == 2
    batch.producer_epoch, batch.base_sequence = 4, 0  # an epoch bump: the same records, restamped
    header, _ = read_batch(batch.build())
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (42, 4, 0)


def test_waiting_on_one_future_is_not_woken_by_another_batch() -> None:
    first, mine = _batch_of_futures(1)
    other, theirs = _batch_of_futures(1)
    threading.Timer(0.01, other.complete, args=(0,)).start()
    threading.Timer(0.05, first.complete, args=(7,)).start()
    assert mine[0].result(timeout=5).offset == 7
    assert theirs[0].result(timeout=5).offset == 0


def test_wakeup_called_when_a_batch_opens() -> None:
    calls: list[int] = []
    wake: Callable[[], None] = lambda: calls.append(1)  # noqa: E731
    acc = RecordAccumulator(
        batch_size=1000,
        linger_ms=5,
        buffer_memory=10_000,
        compression=0,
        delivery_timeout_ms=1000,
        clock=ManualClock(),
        wakeup=wake,
    )
    append(acc)
    append(acc)
    assert calls == [1]


def test_a_new_batch_held_for_the_request_in_flight_does_not_wake_the_sender_and_a_ready_one_does() -> None:
    """The answer of the request in flight wakes the sender; a batch held for it needs no wake-up of its own.
    A batch that becomes sendable (a full one behind it, or nothing in flight any more) still wakes it."""
    calls: list[int] = []
    clock = ManualClock()
    acc = RecordAccumulator(batch_size=1000, linger_ms=0, buffer_memory=100_000, compression=0,
                            delivery_timeout_ms=1000, clock=clock, wakeup=lambda: calls.append(1))  # fmt: skip
    append(acc)
    assert calls == [1]  # nothing in flight: the sender sends it
    acc.drain(leader_of, {1}, 1 << 20, clock.monotonic_ms())
    append(acc)
    assert calls == [1]  # held for the answer: no wake-up
    assert acc.ready(leader_of, clock.monotonic_ms()).nodes == set()
    while len(acc.queued_batches(T0)) == 1:  # fill it: the record that does not fit closes it and opens another
        append(acc)
    assert calls == [1, 1]  # a full batch goes out at once, in flight or not
    acc.unmute(T0)
    acc.drain(leader_of, {1}, 1 << 20, clock.monotonic_ms())  # both batches out; the answer of the first comes
    acc.unmute(T0)
    acc.unmute(T0)
    append(acc)
    assert calls == [1, 1, 1]  # nothing in flight any more: a new batch wakes the sender again


def test_a_muted_partition_past_its_delivery_timeout_does_not_make_the_sender_spin() -> None:
    clock = ManualClock()
    acc = make(clock, linger_ms=0, delivery_timeout_ms=1000)
    append(acc)
    acc.drain(leader_of, {1}, 1 << 20, clock.monotonic_ms())
    append(acc)
    clock.advance(5000)
    check = acc.ready(leader_of, clock.monotonic_ms())
    assert check.nodes == set()
    assert check.next_check_ms == float("inf")  # nothing to do until the answer comes
