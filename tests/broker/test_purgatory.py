"""The purgatory (Kafka's DelayedOperationPurgatory): completion exactly once, watching, expiry, the bound."""

from __future__ import annotations

import threading
import time

import pytest

from broker import purgatory as purgatory_module
from broker.purgatory import DeadlineHeap, DelayedOperation, Purgatory
from common.clock import ManualClock, SystemClock


class Counting(DelayedOperation):
    """Completes once ``ready`` is set; counts its hooks."""

    def __init__(self, delay_ms: float, ready: threading.Event | None = None) -> None:
        super().__init__(delay_ms)
        self.ready = ready or threading.Event()
        self.completions = 0
        self.expirations = 0
        self.tries = 0

    def try_complete(self) -> bool:
        self.tries += 1
        return self.ready.is_set() and self.force_complete()

    def on_complete(self) -> None:
        self.completions += 1

    def on_expiration(self) -> None:
        self.expirations += 1


def test_an_operation_that_can_complete_at_once_is_never_watched() -> None:
    purgatory: Purgatory[Counting] = Purgatory("test", ManualClock(), 10)
    op = Counting(1000)
    op.ready.set()
    assert purgatory.try_complete_else_watch(op, ["k"])
    assert op.completions == 1
    assert op.is_completed
    assert not op.expired
    assert purgatory.size == 0
    assert purgatory.watched("k") == 0


def test_a_watched_operation_completes_on_check_and_leaves_every_key() -> None:
    purgatory: Purgatory[Counting] = Purgatory("test", ManualClock(), 10)
    op = Counting(1000)
    assert not purgatory.try_complete_else_watch(op, ["a", "b"])
    assert purgatory.size == 1
    assert purgatory.watched("a") == 1
    assert purgatory.watched("b") == 1
    assert purgatory.check_and_complete("a") == 0  # not ready: stays
    op.ready.set()
    assert purgatory.check_and_complete("b") == 1
    assert op.completions == 1
    assert op.expirations == 0
    assert purgatory.size == 0
    assert purgatory.watched("a") == 0
    assert purgatory.watched("b") == 0
    assert purgatory.check_and_complete("a") == 0


def test_check_and_complete_only_tries_operations_of_its_key() -> None:
    purgatory: Purgatory[Counting] = Purgatory("test", ManualClock(), 10)
    a, b = Counting(1000), Counting(1000)
    purgatory.try_complete_else_watch(a, ["a"])
    purgatory.try_complete_else_watch(b, ["b"])
    tries_b = b.tries
    a.ready.set()
    b.ready.set()
    assert purgatory.check_and_complete("a") == 1
    assert b.tries == tries_b
    assert not b.is_completed


def test_expiry_by_a_manual_clock() -> None:
    clock = ManualClock()
    purgatory: Purgatory[Counting] = Purgatory("test", clock, 10)
    early, late = Counting(100), Counting(300)
    purgatory.try_complete_else_watch(early, ["k"])
    purgatory.try_complete_else_watch(late, ["k"])
    assert purgatory.next_deadline_ms() == clock.monotonic_ms() + 100
    clock.advance(99)
    assert purgatory.expire_due() == 0
    clock.advance(1)
    assert purgatory.expire_due() == 1
    assert early.expired
    assert early.completions == 1
    assert early.expirations == 1
    assert not late.is_completed
    assert purgatory.watched("k") == 1
    clock.advance(200)
    assert purgatory.expire_due() == 1
    assert late.expired
    assert purgatory.size == 0
    assert purgatory.next_deadline_ms() is None


def test_a_completed_operation_does_not_expire() -> None:
    clock = ManualClock()
    purgatory: Purgatory[Counting] = Purgatory("test", clock, 10)
    op = Counting(100)
    purgatory.try_complete_else_watch(op, ["k"])
    op.ready.set()
    purgatory.check_and_complete("k")
    clock.advance(1000)
    assert purgatory.expire_due() == 0
    assert op.completions == 1
    assert op.expirations == 0
    assert not op.expired


def test_the_second_try_after_watching_catches_an_event_in_between() -> None:
    """Kafka's order: try, watch, try again. An event between the first try and the watch (when nobody
    would check the key for it) must not leave the operation waiting."""
    purgatory: Purgatory[Counting] = Purgatory("test", ManualClock(), 10)

    class ReadyOnSecondTry(Counting):
        def try_complete(self) -> bool:
            self.tries += 1
            return self.tries >= 2 and self.force_complete()

    op = ReadyOnSecondTry(1000)
    assert purgatory.try_complete_else_watch(op, ["k"])
    assert op.completions == 1
    assert purgatory.size == 0


def test_without_a_first_try_an_operation_is_watched_then_tried_once() -> None:
    """``first_try=False`` (the caller just looked, as a fetch's read did): one try, after the watch, so an event
    since the caller looked completes it; one that cannot complete waits with no second try."""
    purgatory: Purgatory[Counting] = Purgatory("test", ManualClock(), 10)
    waiting = Counting(1000)
    assert not purgatory.try_complete_else_watch(waiting, ["k"], first_try=False)
    assert (waiting.tries, purgatory.watched("k")) == (1, 1)
    ready = Counting(1000)
    ready.ready.set()  # the event came after the caller looked
    assert purgatory.try_complete_else_watch(ready, ["k"], first_try=False)
    assert (ready.tries, ready.completions, ready.expired) == (1, 1, False)
    assert purgatory.watched("k") == 1  # it left the key it was watched under
    waiting.ready.set()
    assert purgatory.check_and_complete("k") == 1
    assert purgatory.size == 0


def test_over_the_bound_an_operation_answers_at_once() -> None:
    purgatory: Purgatory[Counting] = Purgatory("test", ManualClock(), 2)
    first, second, third = Counting(1000), Counting(1000), Counting(1000)
    assert not purgatory.try_complete_else_watch(first, ["k"])
    assert not purgatory.try_complete_else_watch(second, ["k"])
    assert purgatory.try_complete_else_watch(third, ["k"])
    assert third.completions == 1
    assert third.expired
    assert purgatory.size == 2
    first.ready.set()
    purgatory.check_and_complete("k")
    fourth = Counting(1000)
    assert not purgatory.try_complete_else_watch(fourth, ["k"])  # room again
    assert purgatory.size == 2


def test_shutdown_answers_every_waiting_operation() -> None:
    purgatory: Purgatory[Counting] = Purgatory("test", ManualClock(), 10)
    ops = [Counting(1000) for _ in range(3)]
    for i, op in enumerate(ops):
        purgatory.try_complete_else_watch(op, [i])
    purgatory.shutdown()
    assert all(op.completions == 1 and op.expired for op in ops)
    late = Counting(1000)
    assert purgatory.try_complete_else_watch(late, ["k"])  # after shutdown nothing waits
    assert late.completions == 1


def test_a_held_operation_is_only_timed_bounded_and_answered_at_shutdown() -> None:
    """``hold``: no key, so no check tries it; its timer expires it, the bound answers it at once, a shutdown
    answers it, and its owner's completion takes it out of the purgatory."""
    clock = ManualClock()
    purgatory: Purgatory[Counting] = Purgatory("test", clock, 3)
    timed, owned, stopped = Counting(100), Counting(1000), Counting(1000)
    for op in (timed, owned, stopped):
        op.ready.set()  # a check that tried it would complete it
        assert not purgatory.hold(op)
    assert purgatory.size == 3
    assert purgatory.check_and_complete("k") == 0
    assert (timed.tries, owned.tries, stopped.tries) == (0, 0, 0)
    over = Counting(1000)
    assert purgatory.hold(over)  # over the bound: at once, as expired
    assert over.completions == 1
    assert over.expired
    clock.advance(100)
    assert purgatory.expire_due() == 1
    assert timed.expired
    assert timed.expirations == 1
    assert owned.force_complete()  # its owner
    assert not owned.expired
    assert owned.completions == 1
    assert purgatory.size == 1
    purgatory.shutdown()
    assert stopped.completions == 1
    assert stopped.expired
    assert purgatory.size == 0
    assert purgatory.next_deadline_ms() is None
    late = Counting(1000)
    assert purgatory.hold(late)  # after shutdown nothing waits
    assert late.completions == 1


def test_completion_runs_exactly_once_under_concurrent_checks_and_expiry() -> None:
    """Many threads check the same keys while the timer expires the operations at the same moment: every
    operation completes exactly once (on_complete once; on_expiration only if the timer won)."""
    clock = ManualClock()
    purgatory: Purgatory[Counting] = Purgatory("race", clock, 100_000)
    ready = threading.Event()
    ops = [Counting(10, ready) for _ in range(2000)]
    for i, op in enumerate(ops):
        assert not purgatory.try_complete_else_watch(op, [i % 7, "all"])
    clock.advance(10)  # every operation is due, and ready: checks and expiry race
    ready.set()
    start = threading.Barrier(9)

    def checker(key: object) -> None:
        start.wait()
        for _ in range(3):
            purgatory.check_and_complete(key)

    def expirer() -> None:
        start.wait()
        purgatory.expire_due()

    threads = [threading.Thread(target=checker, args=(k,)) for k in [*range(7)]]
    threads.append(threading.Thread(target=checker, args=("all",)))
    threads.append(threading.Thread(target=expirer))
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert all(op.completions == 1 for op in ops)
    assert all(op.expirations == (1 if op.expired else 0) for op in ops)
    assert purgatory.size == 0
    assert purgatory.watched("all") == 0


def test_wait_returns_for_waiters_before_and_after_completion_and_times_out_before() -> None:
    """``wait`` makes its event only when a thread waits (an operation nobody waits for has none): a thread
    waiting before the completion is woken by it, a wait after it returns at once, one before it times out."""
    op = Counting(1000)
    assert op.wait(0.01) is False  # not completed: the wait times out
    woken: list[bool] = []
    waiter = threading.Thread(target=lambda: woken.append(op.wait(30)))
    waiter.start()
    time.sleep(0.05)  # the waiter is (most likely) inside its wait; either way it must see the completion
    op.ready.set()
    assert op.safe_try_complete()
    waiter.join(30)
    assert woken == [True]
    assert op.wait(0) is True
    never_waited = Counting(1000, op.ready)
    assert never_waited.safe_try_complete()
    assert never_waited.wait(0) is True


def test_force_complete_races_from_many_threads() -> None:
    op = Counting(1000)
    barrier = threading.Barrier(16)
    results: list[bool] = []

    def race() -> None:
        barrier.wait()
        results.append(op.force_complete())

    threads = [threading.Thread(target=race) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert results.count(True) == 1
    assert op.completions == 1


def test_the_reaper_thread_expires_with_the_real_clock() -> None:
    purgatory: Purgatory[Counting] = Purgatory("real", SystemClock(), 10)
    purgatory.start()
    try:
        op = Counting(50)
        purgatory.try_complete_else_watch(op, ["k"])
        assert op.wait(10.0), "the reaper never expired the operation"
        assert op.expired
        assert op.expirations == 1
    finally:
        purgatory.shutdown()


def test_the_reaper_is_woken_only_by_a_deadline_earlier_than_its_next_look(monkeypatch: pytest.MonkeyPatch) -> None:
    """Parking an operation wakes the reaper thread only when its deadline comes before the reaper's next look
    (a thread switch per parked long poll otherwise); an earlier deadline still expires on time."""
    monkeypatch.setattr(purgatory_module, "_REAPER_MAX_SLEEP_S", 600.0)  # it would sleep out the long deadline
    purgatory: Purgatory[Counting] = Purgatory("real", SystemClock(), 100)
    notified = []
    real_notify = purgatory._cond.notify
    monkeypatch.setattr(purgatory._cond, "notify", lambda n=1: (notified.append(n), real_notify(n)))
    long = Counting(300_000)
    purgatory.try_complete_else_watch(long, ["a"])  # before the reaper starts: its first look is for this one
    purgatory.start()
    try:
        deadline = time.monotonic() + 10
        while purgatory._reaper_looks_ms < 0 and time.monotonic() < deadline:  # until the reaper waits for it
            time.sleep(0.01)
        assert purgatory._reaper_looks_ms > 0, "the reaper never went to sleep"
        before = len(notified)
        later = [Counting(400_000) for _ in range(20)]
        for op in later:
            purgatory.try_complete_else_watch(op, ["b"])
        assert len(notified) == before, "a later deadline woke the reaper"
        short = Counting(50)
        purgatory.try_complete_else_watch(short, ["c"])
        assert len(notified) == before + 1
        assert short.wait(10.0), "the earlier deadline did not wake the reaper"
        assert short.expired
        assert not long.is_completed
        assert not any(op.is_completed for op in later)
    finally:
        purgatory.shutdown()


def test_a_deadline_heap_drops_completed_operations() -> None:
    heap = DeadlineHeap()
    ops = [Counting(0) for _ in range(3000)]
    for i, op in enumerate(ops):
        heap.add(op, float(i))
    for op in ops[:2500]:
        op.force_complete()
    heap.purge(live=500)
    assert len(heap) == 500
    assert heap.next_deadline() == 2500.0
    assert heap.pop_due(2501.0) == ops[2500:2502]


def test_keys_are_required() -> None:
    purgatory: Purgatory[Counting] = Purgatory("test", ManualClock(), 10)
    with pytest.raises(ValueError, match="at least one key"):
        purgatory.try_complete_else_watch(Counting(10), [])


def test_wait_returns_when_completed_from_another_thread() -> None:
    purgatory: Purgatory[Counting] = Purgatory("test", ManualClock(), 10)
    op = Counting(10_000)
    purgatory.try_complete_else_watch(op, ["k"])
    waiter_done = threading.Event()

    def waiter() -> None:
        op.wait(30)
        waiter_done.set()

    thread = threading.Thread(target=waiter)
    thread.start()
    time.sleep(0.01)
    assert not waiter_done.is_set()
    op.ready.set()
    purgatory.check_and_complete("k")
    thread.join(10)
    assert waiter_done.is_set()
