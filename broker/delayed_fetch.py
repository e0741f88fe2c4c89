"""DelayedFetch: a Fetch that waits for data (the long poll), as a purgatory operation.

A fetch that found fewer than ``min_bytes`` waits, watched under each of its partitions. It completes
(Kafka's ``DelayedFetch.tryComplete``, cases in order) when, for any fetched partition:

A. this broker no longer has the partition, or is no longer its leader;
B. the leader epoch changed since the fetch began (a new term: the fetch must be answered and redone);
C. the fetch offset fell out of range: below the log start offset (retention moved it) or above the log
   end offset (truncation);
or, over all partitions together:
D. the bytes that became readable since the fetch began (for consumers: below the high watermark; for
   followers: to the log end), plus what the first read found, each capped at the partition's
   ``partition_max_bytes``, reach ``min_bytes``;
or
E. ``max_wait_ms`` passed (the purgatory's timer).

Completing only wakes the waiting request, which reads again and answers: the reads happen on the
request's own thread (or its event loop: ``ready_bytes``, the bytes case D counted, tells the gRPC service
whether the read is small enough for the loop), never on the producer's or the timer's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from broker.purgatory import DelayedOperation
from replication.partition import Partition
from replication.views import FetchPosition, Role

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class FetchStatus:
    """One fetched partition as the fetch began: where it stood (``start``) and what the first read found."""

    key: TopicPartition
    fetch_offset: int
    partition_max_bytes: int
    start: FetchPosition
    initial_bytes: int


class DelayedFetch(DelayedOperation):
    """A waiting Fetch; see the module docstring for its completion cases.

    Thread-safety: as any :class:`DelayedOperation`; it reads partitions through their own locks.
    """

    def __init__(
        self,
        max_wait_ms: float,
        min_bytes: int,
        for_replica: bool,
        statuses: Sequence[FetchStatus],
        lookup: Callable[[TopicPartition], Partition | None],
    ) -> None:
        super().__init__(max_wait_ms)
        self.min_bytes = min_bytes
        self.for_replica = for_replica
        self.statuses = tuple(statuses)
        self._lookup = lookup
        self.reason = ""
        self.ready_bytes = 0  # case D: the bytes counted when it completed (0 for the other cases)

    @property
    def keys(self) -> list[TopicPartition]:
        return [s.key for s in self.statuses]

    def try_complete(self) -> bool:
        accumulated = 0
        for status in self.statuses:
            partition = self._lookup(status.key)
            if partition is None:
                return self._done_because(f"A: {status.key} is gone")
            now = partition.fetch_position(self.for_replica)
            if now.role is not Role.LEADER:
                return self._done_because(f"A: no longer leader of {status.key}")
            if now.leader_epoch != status.start.leader_epoch:
                return self._done_because(f"B: the leader epoch of {status.key} changed")
            if not now.log_start_offset <= status.fetch_offset <= now.log_end_offset:
                return self._done_because(f"C: offset {status.fetch_offset} of {status.key} is out of range")
            if now.offset > status.fetch_offset or status.initial_bytes:
                arrived = max(0, now.appended_bytes - status.start.appended_bytes)
                accumulated += min(status.initial_bytes + arrived, status.partition_max_bytes)
        if accumulated >= self.min_bytes:
            self.ready_bytes = accumulated  # before completing: the woken request reads it at once
            return self._done_because(f"D: {accumulated} bytes >= min_bytes {self.min_bytes}")
        return False

    def _done_because(self, reason: str) -> bool:
        completed = self.force_complete()
        if completed:
            self.reason = reason
        return completed

    def on_complete(self) -> None:
        """Nothing to build: the waiting request thread reads again once woken."""

    def on_expiration(self) -> None:
        self.reason = self.reason or "E: max_wait_ms passed"


class HeldFetch(DelayedOperation):
    """A follower's fetch parked by its fetch session (``broker.fetch_session``), held by the purgatory under no
    key (``Purgatory.hold``): the session's listener hears of every change to the session's partitions and
    decides whether the follower must be answered (records past its position, another leader or epoch, a
    position out of range: cases A to D for ``min_bytes`` 1), so nothing else tries it; the purgatory's timer
    expires it (case E) and a shutdown answers it. The fetch completes once the session :meth:`wake` s it.

    Thread-safety: as any :class:`DelayedOperation`; :meth:`wake` from any thread.
    """

    def __init__(self, max_wait_ms: float) -> None:
        super().__init__(max_wait_ms)
        self.reason = ""
        self.ready_bytes = 0  # what the changes that woke it added past the positions read (as DelayedFetch's)
        self._woken = False

    def wake(self, ready_bytes: int) -> bool:
        """A change the follower must act on, with ``ready_bytes`` more to read: complete now; True when this
        call completed it."""
        with self._check_lock:
            if self.is_completed:
                return False
            self.ready_bytes += ready_bytes
            self.reason = "A-D: a change the follower must act on (its session's listener)"
            self._woken = True
            return self.try_complete()

    def try_complete(self) -> bool:
        return self._woken and self.force_complete()

    def on_complete(self) -> None:
        """Nothing to build: the waiting request reads again once woken."""

    def on_expiration(self) -> None:
        self.reason = self.reason or "E: max_wait_ms passed"
