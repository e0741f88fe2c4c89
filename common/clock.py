"""Time as an injected dependency (docs/CONVENTIONS.md §2): the one clock of the project.

Cores take a :class:`Clock`; production code passes :class:`SystemClock` (or :data:`SYSTEM_CLOCK`), tests and
simulations pass :class:`ManualClock` and move it by hand. Nothing in a core calls ``time`` itself.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def time_ms(self) -> int:
        """Wall-clock milliseconds since the epoch (record timestamps, segment ages)."""
        ...

    def monotonic_ms(self) -> float:
        """Monotonic milliseconds (timeouts, intervals, lingers, backoffs); only differences are meaningful."""
        ...


class SystemClock:
    """The real clock. Thread-safe (stateless)."""

    def time_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic_ms(self) -> float:
        return time.monotonic_ns() / 1_000_000


SYSTEM_CLOCK = SystemClock()


class ManualClock:
    """A clock that moves only when told to. Not thread-safe; drive it from the test's thread."""

    def __init__(self, now_ms: int = 1_700_000_000_000) -> None:
        self._now_ms = now_ms
        self._mono_ms = 0.0

    def time_ms(self) -> int:
        return self._now_ms

    def monotonic_ms(self) -> float:
        return self._mono_ms

    def advance(self, ms: float) -> None:
        if ms < 0:
            raise ValueError(f"a clock does not go back: advance({ms})")
        self._now_ms += int(ms)
        self._mono_ms += ms
