"""Long polls that wait without a thread: an ``asyncio`` wakeup any thread may fire, and the bounded set of
FetchMetadata calls waiting for an offset. Pure ``asyncio`` and ``threading`` (no gRPC): the controller
server wires the waiters to its apply listener without importing gRPC.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

MAX_WAITING_FETCHES = 1024
"""FetchMetadata long polls that may wait at once on a controller (one per broker is the normal load);
more answer at once, with what there is."""


async def run_blocking(pool: concurrent.futures.Executor, fn: Callable[..., T], *args: Any) -> T:
    """Run ``fn(*args)`` on the short-request pool and await its result (a long poll's reads)."""
    return await asyncio.get_running_loop().run_in_executor(pool, fn, *args)


class Wakeup:
    """An ``asyncio`` future that any thread may complete: what a waiting long poll awaits.

    Made on the loop (``Wakeup()`` inside a coroutine); ``wake`` from any thread, any number of times. A wake on
    the loop's own thread (an append completing the fetches it satisfied) sets the future at once; from another
    thread it goes through ``call_soon_threadsafe`` (a write to the loop's self-pipe). :meth:`wait` arms one
    timer handle and awaits the future itself (no ``wait_for`` task, no ``shield``): a long poll is on the way
    of every replicated and consumed record.
    """

    __slots__ = ("_loop", "_thread", "_future", "_timed_out")

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._thread = threading.get_ident()
        self._future: asyncio.Future[None] = self._loop.create_future()
        self._timed_out = False

    def wake(self) -> None:
        if threading.get_ident() == self._thread:
            self._set()
            return
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            self._loop.call_soon_threadsafe(self._set)

    def _set(self) -> None:
        if not self._future.done():
            self._future.set_result(None)

    def _expire(self) -> None:
        if not self._future.done():
            self._timed_out = True
            self._future.set_result(None)

    async def wait(self, timeout_s: float) -> bool:
        """True when woken before ``timeout_s`` passed."""
        if self._future.done():
            return not self._timed_out
        timer = self._loop.call_later(max(timeout_s, 0.0), self._expire)
        try:
            await self._future
        finally:
            timer.cancel()
        return not self._timed_out


class OffsetWaiters:
    """The FetchMetadata long polls waiting for an offset, woken by the apply of newer records.

    At most ``limit`` wait at once (:meth:`add` answers None beyond: that call does not wait). Thread-safety:
    ``add`` and ``remove`` from the event loop, ``notify`` from the Raft thread (``on_apply``) or the stopping
    thread; one lock guards the map.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._waiting: dict[int, tuple[int, Wakeup]] = {}

    def add(self, offset: int, wakeup: Wakeup) -> Wakeup | None:
        """Wait for the record at ``offset`` with ``wakeup``; None (do not wait) when ``limit`` already wait."""
        with self._lock:
            if len(self._waiting) >= self.limit:
                return None
            self._waiting[id(wakeup)] = (offset, wakeup)
            return wakeup

    def remove(self, wakeup: Wakeup) -> None:
        with self._lock:
            self._waiting.pop(id(wakeup), None)

    def notify(self, end_offset: int | None) -> None:
        """Wake every waiter whose offset now exists (``end_offset`` > it); all of them when None (stopping)."""
        with self._lock:
            due = [w for offset, w in self._waiting.values() if end_offset is None or offset < end_offset]
        for wakeup in due:
            wakeup.wake()

    def __len__(self) -> int:
        with self._lock:
            return len(self._waiting)
