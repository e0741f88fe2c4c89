"""``broker.loop_listener.IdleTimer`` on a real event loop: ``connections.max.idle.ms`` of a framed listener's
connection counts only while no request is in progress, any request resets it, and it closes once, within a
timer tick of the idle time."""

from __future__ import annotations

import asyncio

from broker.loop_listener import IdleTimer

TIMEOUT_S = 0.2


def closings(script: object) -> list[float]:
    """Run ``script(timer)`` (a coroutine function) on a fresh loop; when the timer closed, in seconds from its
    start (empty: never)."""
    closed: list[float] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        timer = IdleTimer(loop, TIMEOUT_S, lambda: closed.append(loop.time() - started))
        try:
            await script(timer)  # type: ignore[operator]
        finally:
            timer.cancel()

    asyncio.run(main())
    return closed


def test_an_idle_connection_closes_after_the_idle_time_once() -> None:
    async def script(_timer: IdleTimer) -> None:
        await asyncio.sleep(TIMEOUT_S * 4)

    closed = closings(script)
    assert len(closed) == 1
    assert TIMEOUT_S <= closed[0] < TIMEOUT_S * 2


def test_a_request_in_progress_is_not_idle_and_the_idle_time_counts_from_its_answer() -> None:
    async def script(timer: IdleTimer) -> None:
        timer.busy()
        await asyncio.sleep(TIMEOUT_S * 3)  # a long poll, longer than the idle time
        timer.idle()
        await asyncio.sleep(TIMEOUT_S * 3)

    closed = closings(script)
    assert len(closed) == 1
    assert TIMEOUT_S * 4 <= closed[0] < TIMEOUT_S * 5  # the idle time after the answer, plus at most one tick


def test_requests_closer_than_the_idle_time_keep_the_connection_open() -> None:
    async def script(timer: IdleTimer) -> None:
        for _ in range(8):  # 8 x 0.6 of the idle time: well past it in all, never idle for all of it
            await asyncio.sleep(TIMEOUT_S * 0.6)
            timer.busy()
            timer.idle()

    assert closings(script) == []


def test_pipelined_requests_are_busy_until_the_last_answer() -> None:
    async def script(timer: IdleTimer) -> None:
        timer.busy()
        timer.busy()
        timer.idle()  # one of two answered: still busy
        await asyncio.sleep(TIMEOUT_S * 3)
        timer.idle()
        await asyncio.sleep(TIMEOUT_S * 0.5)

    assert closings(script) == []


def test_cancel_stops_it() -> None:
    async def script(timer: IdleTimer) -> None:
        timer.cancel()
        await asyncio.sleep(TIMEOUT_S * 3)

    assert closings(script) == []
