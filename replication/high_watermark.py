"""The leader's view of follower progress and the high watermark it derives.

High-watermark rules (Kafka's ``Partition.maybeIncrementLeaderHW``, ``UnifiedLog.maybeIncrementHighWatermark``
and ``Replica.updateFetchStateOrThrow``; the tests in ``tests/broker/test_partition.py`` cite them):

* HW1. The high watermark is the smallest log end offset over the ISR (the leader's own included).
* HW2. The high watermark never goes back: a smaller candidate leaves it where it is.
* HW3. ``log_start_offset <= high_watermark <= log_end_offset`` of the leader, always.
* HW4. A follower's log end offset is the fetch offset of its latest Fetch request; an ISR member that has
  not fetched since this broker became leader has an unknown offset (-1) and holds the high watermark.
* HW5. With the ISR = {leader} the high watermark is the leader's log end offset after every append.
* HW6. A follower is caught up at a fetch whose offset reaches the leader's log end offset as it was at the
  follower's previous fetch (``last_caught_up_ms``, what ISR shrinking reads; Kafka's KIP-501 rule).
* HW7. A fetch from a new life of a follower (another broker epoch) starts its progress afresh: what the
  previous life reported says nothing of the log the broker came back with (KIP-903).
* HW8. With eligible leader replicas (KIP-966) the high watermark does not move while the ISR is smaller
  than ``min.insync.replicas``: the members that left it (the ELR) then hold every committed record, so the
  controller may elect one of them (``controller/core/elections.py`` E6) without losing any.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from replication.errors import NotLeaderOrFollowerError

UNKNOWN_OFFSET = -1


@dataclass(slots=True)
class ReplicaProgress:
    """What the leader knows of one follower (HW4, HW6)."""

    log_end_offset: int = UNKNOWN_OFFSET
    last_fetch_ms: float = -1.0
    last_caught_up_ms: float = -1.0
    leader_end_offset_at_last_fetch: int = UNKNOWN_OFFSET
    broker_epoch: int = -1  # of the follower's life that reported this progress (HW7)


@dataclass(slots=True)
class HighWatermark:
    """The leader's view of its replicas and the high watermark it derives (rules HW1-HW6 above).

    Pure: no I/O, no clock (callers pass ``now_ms``). Not thread-safe: a :class:`Partition` owns it and calls
    it under its lock.
    """

    leader_id: int
    isr: frozenset[int]
    high_watermark: int
    leader_log_end_offset: int
    followers: dict[int, ReplicaProgress] = field(default_factory=dict)
    min_isr: int = 0  # HW8: no move while the ISR is smaller (0: eligible leader replicas off)

    @classmethod
    def start(
        cls, leader_id: int, replicas: Iterable[int], isr: Iterable[int], high_watermark: int, leader_leo: int,
        min_isr: int = 0,
    ) -> HighWatermark:  # fmt: skip
        """The state of a broker that just became leader: followers unknown (HW4), HW as it was (capped, HW3)."""
        followers = {r: ReplicaProgress() for r in replicas if r != leader_id}
        state = cls(leader_id, frozenset(isr), min(high_watermark, leader_leo), leader_leo, followers, min_isr)
        state.advance()
        return state

    def on_leader_append(self, log_end_offset: int) -> bool:
        """The leader's log grew; True when the high watermark moved."""
        assert log_end_offset >= self.leader_log_end_offset, "a leader's log end offset never goes back"
        self.leader_log_end_offset = log_end_offset
        return self.advance()

    def on_follower_fetch(self, replica_id: int, fetch_offset: int, now_ms: float, broker_epoch: int = -1) -> bool:
        """Follower ``replica_id`` fetched from ``fetch_offset`` (HW4, HW6, HW7); True when the HW moved."""
        progress = self.followers.get(replica_id)
        if progress is None:
            raise NotLeaderOrFollowerError(f"broker {replica_id} is not a replica of this partition")
        if broker_epoch != progress.broker_epoch:
            progress = self.followers[replica_id] = ReplicaProgress(broker_epoch=broker_epoch)
        if fetch_offset >= self.leader_log_end_offset:
            progress.last_caught_up_ms = now_ms
        elif fetch_offset >= progress.leader_end_offset_at_last_fetch >= 0:
            progress.last_caught_up_ms = max(progress.last_caught_up_ms, progress.last_fetch_ms)
        progress.log_end_offset = fetch_offset
        progress.last_fetch_ms = now_ms
        progress.leader_end_offset_at_last_fetch = self.leader_log_end_offset
        return self.advance()

    def update_isr(self, isr: Iterable[int], replicas: Iterable[int]) -> bool:
        """A new ISR (and replica set) from the metadata image; True when the HW moved (a shrink may move it)."""
        replicas = set(replicas)
        self.isr = frozenset(isr)
        for gone in set(self.followers) - replicas:
            del self.followers[gone]
        for new in replicas - set(self.followers) - {self.leader_id}:
            self.followers[new] = ReplicaProgress()
        return self.advance()

    def candidate(self) -> int | None:
        """HW1: the smallest log end offset over the ISR; None while an ISR member's offset is unknown, or the
        ISR is smaller than ``min_isr`` (HW8)."""
        if len(self.isr | {self.leader_id}) < self.min_isr:
            return None
        offsets = [self.leader_log_end_offset]
        for member in self.isr:
            if member == self.leader_id:
                continue
            progress = self.followers.get(member)
            if progress is None or progress.log_end_offset == UNKNOWN_OFFSET:
                return None
            offsets.append(progress.log_end_offset)
        return min(offsets)

    def advance(self) -> bool:
        """Move the high watermark to the candidate if that is forward (HW2); True when it moved."""
        candidate = self.candidate()
        if candidate is None or candidate <= self.high_watermark:
            return False
        assert candidate <= self.leader_log_end_offset, "HW3: the high watermark never passes the leader's end"
        self.high_watermark = candidate
        return True

    def follower_offsets(self) -> Mapping[int, int]:
        return {r: p.log_end_offset for r, p in self.followers.items()}
