"""``controller.long_poll.Wakeup``: what every parked long poll (a follower's, a consumer's Fetch, a Produce waiting
for acks=all, a controller's FetchMetadata) awaits."""

from __future__ import annotations

import asyncio
import threading

from controller.long_poll import Wakeup


def test_a_wake_on_the_loop_thread_ends_the_wait_without_a_round_through_the_self_pipe() -> None:
    async def main() -> tuple[bool, bool]:
        wakeup = Wakeup()
        loop = asyncio.get_running_loop()
        threadsafe_calls = []
        real = loop.call_soon_threadsafe
        loop.call_soon_threadsafe = lambda *args: (threadsafe_calls.append(args), real(*args))[1]  # type: ignore[method-assign]
        loop.call_soon(wakeup.wake)
        woken = await wakeup.wait(30.0)
        return woken, not threadsafe_calls

    woken, direct = asyncio.run(main())
    assert woken
    assert direct


def test_a_wake_from_another_thread_ends_the_wait() -> None:
    async def main() -> bool:
        wakeup = Wakeup()
        threading.Timer(0.05, wakeup.wake).start()
        return await wakeup.wait(30.0)

    assert asyncio.run(main())


def test_without_a_wake_the_wait_times_out_and_a_late_wake_changes_nothing() -> None:
    async def main() -> tuple[bool, bool, bool]:
        wakeup = Wakeup()
        first = await wakeup.wait(0.05)
        wakeup.wake()  # after the timeout: the answer stays "not woken"
        await asyncio.sleep(0)
        again = await wakeup.wait(0.05)
        loop = asyncio.get_running_loop()
        return first, again, bool(loop._scheduled and any(not h.cancelled() for h in loop._scheduled))  # type: ignore[attr-defined]

    first, again, timers_left = asyncio.run(main())
    assert not first
    assert not again
    assert not timers_left


def test_a_wake_before_the_wait_is_not_lost_and_the_timer_is_cancelled() -> None:
    async def main() -> tuple[bool, bool]:
        wakeup = Wakeup()
        wakeup.wake()
        woken = await wakeup.wait(30.0)
        other = Wakeup()
        task = asyncio.ensure_future(other.wait(30.0))
        await asyncio.sleep(0)
        other.wake()
        await task
        loop = asyncio.get_running_loop()
        live = [h for h in loop._scheduled if not h.cancelled()]  # type: ignore[attr-defined]
        return woken and task.result(), not live

    woken, no_timer = asyncio.run(main())
    assert woken
    assert no_timer


def test_a_cancelled_wait_leaves_no_timer_and_a_later_wake_is_harmless() -> None:
    async def main() -> bool:
        wakeup = Wakeup()
        task = asyncio.ensure_future(wakeup.wait(30.0))
        await asyncio.sleep(0)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        wakeup.wake()
        await asyncio.sleep(0)
        loop = asyncio.get_running_loop()
        return not [h for h in loop._scheduled if not h.cancelled()]  # type: ignore[attr-defined]

    assert asyncio.run(main())
