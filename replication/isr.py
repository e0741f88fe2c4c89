"""The leader's ISR rules: when to shrink, when to expand, and the ISR while an AlterPartition is pending.

A plain class with no I/O and no clock of its own (``now_ms`` is passed in). The leader proposes a change
with :meth:`IsrState.propose_shrink` / :meth:`IsrState.propose_expand`, which return the AlterPartition
request to send to the active controller; the controller's answer (or a newer metadata image) is the truth.

Rules (Kafka's ``Partition.maybeShrinkIsr`` / ``maybeExpandIsr`` / ``PendingPartitionChange``; the tests in
``tests/replication/test_isr.py`` cite them):

* ISR1. A follower in the ISR is out of sync when its log end offset differs from the leader's and it has
  not been caught up (HW6) for longer than ``replica.lag.time.max.ms``; a follower that has not fetched
  since this leader began counts from the moment it began.
* ISR2. A replica outside the ISR joins when its log end offset reaches both the high watermark and the
  start offset of the leader's current epoch (so it holds everything this leader wrote before it joined).
* ISR3. One change in flight at a time; while it is pending, no other is proposed.
* ISR4. While a change is pending the high watermark uses the larger ISR (the union of the committed and the
  proposed one): a shrink takes effect only once committed, an expansion at once.
* ISR5. The leader never removes itself; a shrink never proposes an empty ISR.
* ISR6. The committed ISR is what the controller says: an accepted AlterPartition, or a metadata image
  with a partition epoch newer than the pending change's, ends the pending state. A refusal that settles
  nothing about the proposal (INELIGIBLE_REPLICA, INVALID_REQUEST) ends it and keeps the committed ISR. A
  refusal because the leader's view is stale (INVALID_UPDATE_VERSION, FENCED_LEADER_EPOCH) or no answer at
  all keeps the change pending -- it may have been applied, its answer lost -- until the metadata says
  (Kafka's ``handleAlterPartitionError``); reverting to the smaller committed ISR there would let the high
  watermark pass records a member the controller already counts in does not have (found by the simulation).
* ISR7. An expansion names the broker epoch of the life whose fetches showed the follower caught up (HW7);
  the controller refuses it when that is not the follower's current registration (KIP-903: a broker that
  came back with a shorter log must not be counted in by what its previous life reported).
* ISR8. The leader proposes no expansion with a replica its metadata shows fenced, in controlled shutdown,
  or registered with another broker epoch than the one it fetched with (KIP-841): the controller would
  refuse it, and while the proposal is pending the high watermark would wait for a replica that is
  leaving (ISR4) -- what stalled acks=all after a controlled shutdown.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from replication.high_watermark import UNKNOWN_OFFSET, ReplicaProgress


@dataclass(frozen=True, slots=True)
class AlterPartitionRequest:
    """What to send to the controller: the proposed ISR, against the partition epoch the leader has seen."""

    leader_id: int
    leader_epoch: int
    partition_epoch: int
    new_isr: tuple[int, ...]
    joining_broker_epochs: tuple[tuple[int, int], ...] = ()  # (broker id, broker epoch) of joiners (ISR7)


def out_of_sync(
    isr: Iterable[int],
    leader_id: int,
    followers: Mapping[int, ReplicaProgress],
    leader_log_end_offset: int,
    now_ms: float,
    lag_max_ms: float,
    leader_since_ms: float,
) -> frozenset[int]:
    """ISR1: the ISR members that have lagged longer than ``lag_max_ms``."""
    lagging = set()
    for member in isr:
        if member == leader_id:
            continue  # ISR5
        progress = followers.get(member)
        if progress is None:
            continue
        if progress.log_end_offset == leader_log_end_offset:
            continue
        caught_up = max(progress.last_caught_up_ms, leader_since_ms)
        if now_ms - caught_up > lag_max_ms:
            lagging.add(member)
    return frozenset(lagging)


def may_join(progress: ReplicaProgress, high_watermark: int, leader_epoch_start_offset: int) -> bool:
    """ISR2: a follower at this progress has everything committed and everything this epoch wrote before."""
    leo = progress.log_end_offset
    return leo != UNKNOWN_OFFSET and leo >= high_watermark and leo >= leader_epoch_start_offset


@dataclass(slots=True)
class IsrState:
    """The committed ISR, the partition epoch it belongs to, and the change pending at the controller.

    Not thread-safe: the partition that owns it calls it under its lock.
    """

    leader_id: int
    leader_epoch: int
    partition_epoch: int
    isr: frozenset[int]
    pending: AlterPartitionRequest | None = None

    @property
    def maximal_isr(self) -> frozenset[int]:
        """ISR4: the ISR the high watermark uses."""
        if self.pending is None:
            return self.isr
        return self.isr | frozenset(self.pending.new_isr)

    def propose_shrink(self, lagging: Iterable[int]) -> AlterPartitionRequest | None:
        """ISR3, ISR5: drop ``lagging`` from the ISR; None when nothing to do or a change is pending."""
        lagging = set(lagging) - {self.leader_id}
        if self.pending is not None or not lagging & self.isr:
            return None
        return self._propose(self.isr - lagging)

    def propose_expand(self, replica_id: int, broker_epoch: int = -1) -> AlterPartitionRequest | None:
        """ISR3, ISR7: add ``replica_id`` (seen caught up in life ``broker_epoch``); None when already in or a
        change is pending."""
        if self.pending is not None or replica_id in self.isr:
            return None
        return self._propose(self.isr | {replica_id}, ((replica_id, broker_epoch),))

    def _propose(self, new_isr: frozenset[int], joining: tuple[tuple[int, int], ...] = ()) -> AlterPartitionRequest:
        assert self.leader_id in new_isr, "ISR5: the leader stays in the ISR it proposes"
        self.pending = AlterPartitionRequest(
            self.leader_id, self.leader_epoch, self.partition_epoch, tuple(sorted(new_isr)), joining
        )
        return self.pending

    def on_response(
        self, request: AlterPartitionRequest, accepted: bool, isr: Iterable[int], epoch: int, *, settled: bool = True
    ) -> bool:
        """ISR6: the controller answered ``request`` (``settled`` False: refused for a stale view, or not
        answered at all -- the change stays pending); True when the committed ISR changed."""
        if self.pending != request:
            return False  # an answer to a change already superseded
        if not accepted and not settled:
            return False
        self.pending = None
        if not accepted:
            return False
        return self._commit(frozenset(isr), epoch)

    def on_metadata(self, isr: Iterable[int], partition_epoch: int) -> bool:
        """ISR6: the metadata image says ``isr`` at ``partition_epoch``; True when the committed ISR changed."""
        if partition_epoch < self.partition_epoch:
            return False
        if self.pending is not None and partition_epoch > self.pending.partition_epoch:
            self.pending = None
        return self._commit(frozenset(isr), partition_epoch)

    def _commit(self, isr: frozenset[int], partition_epoch: int) -> bool:
        if partition_epoch < self.partition_epoch:
            return False
        changed = isr != self.isr
        self.isr = isr
        self.partition_epoch = partition_epoch
        return changed
