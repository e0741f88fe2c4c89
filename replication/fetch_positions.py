"""Byte positions of a partition replica, for DelayedFetch's "enough bytes arrived" test (``fetch.min.bytes``).

Two counters of the bytes appended since the partition was opened: at the log end (what followers may read)
and at the high watermark (what consumers may read). Appends above the high watermark remember where they
end (offset, cumulative bytes) until the high watermark passes them; a consumer's fetch compares the count
at the high watermark now with the one it saw when it started waiting. Bounded (docs/CONVENTIONS.md §8): over
:data:`MAX_PENDING_POSITIONS` remembered appends the oldest are dropped and the count at the high watermark
moves up (coarser, never wrong in the direction that matters: a waiting fetch may answer early, never late).

Not thread-safe: the owning partition calls it under its lock.
"""

from __future__ import annotations

from collections import deque

MAX_PENDING_POSITIONS = 100_000  # appends above the high watermark whose byte positions are remembered


class AppendedBytes:
    """The two counters (see the module docstring)."""

    __slots__ = ("appended", "at_high_watermark", "_pending")

    def __init__(self) -> None:
        self.appended = 0  # cumulative bytes at the log end
        self.at_high_watermark = 0  # cumulative bytes at the high watermark
        self._pending: deque[tuple[int, int]] = deque()

    def on_leader_append(self, end_offset: int, size_bytes: int) -> None:
        """A leader append ending before ``end_offset`` (its last offset + 1)."""
        self.appended += size_bytes
        self._pending.append((end_offset, self.appended))

    def on_follower_append(self, size_bytes: int) -> None:
        self.appended += size_bytes

    def on_follower_high_watermark(self, high_watermark: int, log_end_offset: int) -> None:
        """As follower (nothing pending is counted there): everything counts once the HW is at the log end."""
        if high_watermark >= log_end_offset:
            self.at_high_watermark = self.appended

    def on_high_watermark(self, high_watermark: int, log_end_offset: int) -> None:
        """The high watermark is now ``high_watermark``: the appends below it count for consumers."""
        pending = self._pending
        while pending and pending[0][0] <= high_watermark:
            self.at_high_watermark = pending.popleft()[1]
        while len(pending) > MAX_PENDING_POSITIONS:
            self.at_high_watermark = pending.popleft()[1]
        if high_watermark >= log_end_offset:
            self.at_high_watermark = self.appended

    def reset(self) -> None:
        """After a truncation or a restart: nothing pending, consumers see everything appended so far."""
        self._pending.clear()
        self.at_high_watermark = self.appended
