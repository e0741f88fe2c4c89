"""One partition on one broker (Kafka's ``Partition``): its role, the registration it follows, replicas, ISR
and high watermark. It owns, and drives under one lock (docs/CONVENTIONS.md §1, one module per piece):
:class:`~replication.unified_log.UnifiedLog` (the log with its producer state and leader-epoch cache),
:class:`~replication.high_watermark.HighWatermark` (HW1-HW8) and :class:`~replication.isr.IsrState`
(ISR1-ISR8), :class:`~replication.sequence_wait.HeldBatchWait` (S8) and
:class:`~replication.fetch_positions.AppendedBytes` (DelayedFetch positions).

Error names are Kafka's: NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH,
OFFSET_NOT_AVAILABLE, plus the log's (CORRUPT_MESSAGE, MESSAGE_TOO_LARGE, OFFSET_OUT_OF_RANGE).

The class is written in two modules (docs/CONVENTIONS.md §10): this one has the transitions (role and ISR
changes, the follower's truncation and appends, the leader's appends, config changes, retention, close);
:mod:`replication.partition_reads` has the fields, the lock and the reads (its base class
:class:`~replication.partition_reads.PartitionReads`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping

from log.append import AppendInfo, ValidatedAppend
from log.config import LogConfig
from log.record.control import EndTransactionMarker
from replication.epoch_cache import EpochEndOffset
from replication.errors import (
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    PartitionError,
)
from replication.high_watermark import HighWatermark
from replication.isr import AlterPartitionRequest, IsrState, may_join, out_of_sync
from replication.partition_reads import PartitionReads
from replication.truncation import TruncationDecision
from replication.views import Registration, Role

logger = logging.getLogger(__name__)
Verifier = Callable[[tuple[str, int], list[tuple[int, int]]], None]
"""S11: asks the transaction coordinator about ``(topic, partition)`` for ``[(producer id, epoch)]``; raises its
refusal."""


class VerificationPending(PartitionError):
    """An append that must ask the transaction coordinator first, tried by a thread that must not wait
    (``hold`` False): like a batch held for its turn (S8), it is tried again on a thread that may."""

    code = "CONCURRENT_TRANSACTIONS"
    ahead = True


ISR_RESEND_MS = 1_000.0  # an unsettled AlterPartition is sent again after this long


class Partition(PartitionReads):
    """One partition replica on this broker (Kafka's ``Partition``).

    Thread-safety: one lock guards every field; every public method takes it for its state and leaves the
    Log's disk reads (``read``, timestamp lookups) outside it: the :class:`Log` is thread-safe, so a fetch
    never holds up an append for more than the Log's own lock. Appends run under the lock, so appends to
    one partition are serialized and each one sees the role and epoch it was checked against. The
    metadata thread is the only caller of the role changes (``make_leader``, ``make_follower``,
    ``update_config``, ``close``); the fetcher thread calls the follower methods (each checks it still
    follows in the epoch it was given), the ISR thread ``isr_change`` / ``on_isr_answer``; request threads
    call the rest. The read-only properties are single
    attribute reads without the lock: each is current, but two of them may come from different moments
    (``fetch_position``, ``acks_status`` and ``read`` give consistent views).
    """

    # ------------------------------------------------------------------------------ role changes

    def make_leader(self, reg: Registration) -> bool:
        """Become leader as ``reg`` says (its leader is this broker). False for a stale registration.

        The leader epoch is the image's (the controller bumps it); followers start unknown (HW4).
        """
        assert reg.leader == self.local_broker_id, f"{reg} does not name broker {self.local_broker_id} leader"
        with self._lock:
            if self._is_stale(reg):
                return False
            is_new_term = self._role is not Role.LEADER or reg.leader_epoch != self._leader_epoch
            self._set_registration(reg, Role.LEADER)
            self._log.assign_epoch(reg.leader_epoch, self._log.log_end_offset)  # saved before the epoch's first write
            if is_new_term or self._leader_state is None or self._isr_state is None:
                self._leader_state = HighWatermark.start(
                    self.local_broker_id, reg.replicas, reg.isr, self._high_watermark, self._log.log_end_offset,
                    self._hw_min_isr(),
                )  # fmt: skip
                self._isr_state = IsrState(
                    self.local_broker_id, reg.leader_epoch, reg.partition_epoch, frozenset(reg.isr)
                )
                self._leader_since_ms = self._clock.monotonic_ms()
                self._epoch_start_offset = self._log.log_end_offset
            else:
                self._isr_state.on_metadata(reg.isr, reg.partition_epoch)
                self._leader_state.update_isr(self._isr_state.maximal_isr, reg.replicas)  # ISR4
            self._sync_high_watermark()
            return True

    def isr_change(
        self, lag_max_ms: float, may_join_isr: Callable[[int, int], bool] | None = None
    ) -> AlterPartitionRequest | None:
        """As leader: the AlterPartition to send now by the rules ISR1-ISR3, ISR5, ISR7, ISR8 of
        ``replication.isr`` (None: nothing to change, one is pending and not due again, or not leader). The HW
        counts the larger ISR meanwhile (ISR4).

        ``may_join_isr(broker_id, broker_epoch)``: whether the metadata lets that life of the broker join (ISR8:
        registered with that epoch, unfenced, not in controlled shutdown); None lets every caught-up one."""
        with self._lock:
            state, hw = self._isr_state, self._leader_state
            if self._role is not Role.LEADER or state is None or hw is None:
                return None
            now = self._clock.monotonic_ms()
            if state.pending is not None:  # ISR3; an unsettled one is sent again now and then (ISR6)
                if now - self._isr_sent_ms < ISR_RESEND_MS:
                    return None
                self._isr_sent_ms = now
                return state.pending
            leo = self._log.log_end_offset
            lagging = out_of_sync(
                state.isr, self.local_broker_id, hw.followers, leo, now, lag_max_ms, self._leader_since_ms
            )
            request = state.propose_shrink(lagging)
            for replica_id, progress in sorted(hw.followers.items()):
                if request is not None or not may_join(progress, self._high_watermark, self._epoch_start_offset):
                    continue
                if may_join_isr is None or may_join_isr(replica_id, progress.broker_epoch):  # ISR8
                    request = state.propose_expand(replica_id, progress.broker_epoch)
            if request is not None:
                self._isr_sent_ms = now
                hw.update_isr(state.maximal_isr, self._replicas)
                self._sync_high_watermark()
            return request

    def on_isr_answer(
        self, request: AlterPartitionRequest, accepted: bool, isr: Iterable[int], partition_epoch: int,
        *, settled: bool = True,
    ) -> bool:  # fmt: skip
        """The controller answered ``request`` (ISR6; ``settled`` False for a refusal of a stale view or no
        answer: the change stays pending and is sent again); True when the committed ISR changed."""
        with self._lock:
            state, hw = self._isr_state, self._leader_state
            if state is None or hw is None:
                return False
            changed = state.on_response(request, accepted, isr, partition_epoch, settled=settled)
            if changed:
                self._isr = tuple(sorted(state.isr))
                self._partition_epoch = max(self._partition_epoch, state.partition_epoch)
            hw.update_isr(state.maximal_isr, self._replicas)
            self._sync_high_watermark()
            return changed

    def make_follower(self, reg: Registration) -> bool:
        """Become a follower (or a replica without a leader) as ``reg`` says; False for a stale one.

        Writes are refused from now on; the broker's fetcher thread then truncates (TR rules) and fetches.
        """
        with self._lock:
            if self._is_stale(reg):
                return False
            self._set_registration(reg, Role.FOLLOWER)
            self._leader_state = None
            self._isr_state = None
            self._held.wake()  # held batches (S8) fail now: no longer the leader
            return True

    # ---------------------------------------------------------------------------------- follower

    @property
    def latest_epoch(self) -> int:
        """The newest leader epoch in this replica's log (what a follower asks OffsetsForLeaderEpoch about)."""
        with self._lock:
            return self._log.latest_epoch

    def decide_truncation(self, asked_epoch: int, answer: EpochEndOffset) -> TruncationDecision:
        """Where to truncate given the leader's OffsetsForLeaderEpoch ``answer`` (TR2-TR6)."""
        with self._lock:
            return self._log.decide_truncation(asked_epoch, answer)

    def truncate_as_follower(self, offset: int, leader_epoch: int) -> bool:
        """Cut the log at ``offset`` after an OffsetsForLeaderEpoch answer (TR2-TR7), while still the
        follower of ``leader_epoch``; False (nothing done) otherwise. The epoch cache is cut and saved after
        the log.

        TR7: the leader's log is the truth, even below this replica's high watermark. A leader that ends
        below it (elected uncleanly, or the last ISR member that came back without its unflushed tail) has
        lost records this replica saw committed; keeping them would leave different records at the same
        offsets, or loop on OFFSET_OUT_OF_RANGE. So the log is cut there anyway and the high watermark
        lowered to the new log end, with a warning (Kafka's ``ReplicaFetcherThread.truncate``)."""
        with self._lock:
            if self._role is not Role.FOLLOWER or self._leader_epoch != leader_epoch:
                return False
            if offset < self._high_watermark:
                logger.warning(
                    "%s: truncating to %d, below the high watermark %d: leader %d (epoch %d) does not have "
                    "records this replica saw committed (an unclean election, or a leader that lost its "
                    "unflushed tail)", self, offset, self._high_watermark, self._leader_id, leader_epoch,
                )  # fmt: skip
            if self._log.truncate_to(offset):
                self._bytes.reset()
            self._high_watermark = min(self._high_watermark, self._log.log_end_offset)
            return True

    def restart_at(self, offset: int, leader_epoch: int) -> bool:
        """The leader's log starts after ours ends (OFFSET_OUT_OF_RANGE below its start): start over there."""
        with self._lock:
            if self._role is not Role.FOLLOWER or self._leader_epoch != leader_epoch:
                return False
            self._log.truncate_fully_and_start_at(offset)
            self._high_watermark = offset
            self._bytes.reset()
            return True

    def append_as_follower(self, records: bytes, leader_high_watermark: int, leader_epoch: int) -> AppendInfo | None:
        """Append a Fetch response's batches (offsets and epochs as the leader wrote them), note their epochs
        (EC1), and take the leader's high watermark up to the new log end (HW2, HW3); None when this replica
        no longer follows in ``leader_epoch``."""
        with self._lock:
            if self._role is not Role.FOLLOWER or self._leader_epoch != leader_epoch:
                return None
            info = self._log.append_as_follower(records) if records else None
            if info is not None:
                self._bytes.on_follower_append(info.size_bytes)
            hw = min(leader_high_watermark, self._log.log_end_offset)
            self._high_watermark = max(self._high_watermark, hw, self._log.log_start_offset)
            self._bytes.on_follower_high_watermark(self._high_watermark, self._log.log_end_offset)
            return info

    def _is_stale(self, reg: Registration) -> bool:
        stale = reg.leader_epoch < self._leader_epoch or (
            reg.leader_epoch == self._leader_epoch and reg.partition_epoch < self._partition_epoch
        )
        if stale:
            logger.info(
                "%s: ignoring stale registration (leader epoch %d, partition epoch %d; have %d, %d)",
                self, reg.leader_epoch, reg.partition_epoch, self._leader_epoch, self._partition_epoch,
            )  # fmt: skip
        return stale

    def _set_registration(self, reg: Registration, role: Role) -> None:
        self._role = role
        self._leader_id = reg.leader
        self._leader_epoch = reg.leader_epoch
        self._partition_epoch = reg.partition_epoch
        self._replicas = tuple(reg.replicas)
        self._isr = tuple(reg.isr)

    def update_config(self, config: LogConfig) -> None:
        """Use ``config`` from now on: the log is closed (clean) and opened again with it."""
        with self._lock:
            if config == self._log.config or self._log.closed:
                return
            self._log.reopen(config)
            if self._leader_state is not None:
                self._leader_state.min_isr = self._hw_min_isr()
                self._leader_state.advance()
                self._sync_high_watermark()

    def _hw_min_isr(self) -> int:
        return self._log.config.min_insync_replicas if self._elr else 0

    def delete_old_segments(self) -> int:
        """Retention (time, size, log start), never past the high watermark; returns the segments deleted."""
        with self._lock:
            if self._role is Role.NONE or self._log.closed:
                return 0
            count = self._log.delete_retention(self._high_watermark)
            if count:
                self._sync_high_watermark()
            return count

    def flush(self) -> None:
        """fsync what the log holds (skipped once closed)."""
        with self._lock:
            self._log.flush()

    def close(self) -> None:
        """Flush and close the log (clean-shutdown marker); the partition serves nothing afterwards."""
        with self._lock:
            self._role = Role.NONE
            self._leader_state = None
            self._isr_state = None
            self._log.close()
            self._held.wake()  # held batches (S8) fail now

    def close_handlers(self) -> None:
        """Close the log's files without flushing or snapshotting (its disk failed: Kafka's ``closeHandlers``);
        the partition serves nothing afterwards."""
        with self._lock:
            self._role = Role.NONE
            self._leader_state = None
            self._isr_state = None
            self._log.log.close_handlers()
            self._held.wake()  # held batches (S8) fail now

    # ------------------------------------------------------------------------------------ writes

    def append_as_leader(
        self,
        records: bytes | memoryview,
        acks: int,
        *,
        deadline_ms: float | None = None,
        hold: bool = True,
        verify: Verifier | None = None,
    ) -> AppendInfo:
        """Append a producer's batches, stamped with this leader's epoch.

        Raises NotLeaderOrFollowerError unless leader; then, before anything else and outside the lock, the
        log's validation errors (CORRUPT_MESSAGE, INVALID_RECORD, INVALID_TIMESTAMP, MESSAGE_TOO_LARGE: every
        record is decoded, ``log.record.validator``); NotEnoughReplicasError when ``acks`` is -1 and the ISR is
        smaller than ``min.insync.replicas`` (Kafka checks before appending: nothing is written); the
        idempotent producers' sequence errors (``log.producer_state`` S1-S8: OUT_OF_ORDER_SEQUENCE_NUMBER,
        INVALID_PRODUCER_EPOCH, UNKNOWN_PRODUCER_ID), checked on the validated headers before the append. A
        retried batch already written is answered with its original offsets and not appended again (S5).

        A batch only ahead of its producer's turn (S8) is held, the lock released, for at most
        ``sequence_wait_ms`` and never past ``deadline_ms`` (the request's, monotonic clock)
        (:class:`~replication.sequence_wait.HeldBatchWait`); with ``hold`` False its refusal is raised at once
        instead (its ``ahead`` says it may be tried again by a thread that may wait).

        Transactional batches that would open a transaction here (S11) are verified first, outside the lock,
        by ``verify`` (it asks the transaction coordinator and raises its refusal); without ``verify`` they
        are refused (INVALID_TXN_STATE).
        """
        if self._role is not Role.LEADER:  # before decoding anything (checked again under the lock)
            raise NotLeaderOrFollowerError(f"broker {self.local_broker_id} is not the leader of {self.key_str}")
        validated = self._log.validate(records)  # no lock needed: config, clock and bytes only
        verified = self._verify(validated, verify, hold)
        with self._lock:
            if not hold:
                return self._append_as_leader_locked(validated, acks, verified)
            return self._held.attempt(
                lambda: self._append_as_leader_locked(validated, acks, verified), self, deadline_ms
            )

    def _verify(self, validated: ValidatedAppend, verify: Verifier | None, hold: bool) -> dict[int, int] | None:
        """S11: guards for the producers whose transaction the append would open, confirmed by ``verify``
        (called without the lock: it is a request to the coordinator; with ``hold`` False,
        :class:`VerificationPending` instead)."""
        if verify is None:
            return None
        with self._lock:
            needed = self._log.needs_verification(validated)
            if not needed:
                return None
            if not hold:
                raise VerificationPending(f"{self.key_str}: the transaction coordinator must be asked first")
            guards = {pid: self._log.begin_verification(pid, epoch) for pid, epoch in needed}
        verify(self.key, needed)
        return guards

    def append_marker(self, producer_id: int, producer_epoch: int, marker: EndTransactionMarker) -> int:
        """WriteTxnMarkers, as leader: write the transaction marker (S12 checked first); its offset. The caller
        waits for the high watermark to pass it (markers are written with acks=all)."""
        with self._lock:
            if self._role is not Role.LEADER or self._leader_state is None:
                raise NotLeaderOrFollowerError(f"broker {self.local_broker_id} is not the leader of {self.key_str}")
            info = self._log.append_marker(producer_id, producer_epoch, marker, self._leader_epoch)
            self._bytes.on_leader_append(info.last_offset + 1, info.size_bytes)
            self._leader_state.on_leader_append(self._log.log_end_offset)
            self._sync_high_watermark()
            return info.first_offset

    def _append_as_leader_locked(
        self, validated: ValidatedAppend, acks: int, verified: Mapping[int, int] | None = None
    ) -> AppendInfo:
        """``append_as_leader`` under the lock, once; wakes the batches held for their turn (S8)."""
        if self._role is not Role.LEADER or self._leader_state is None:
            raise NotLeaderOrFollowerError(f"broker {self.local_broker_id} is not the leader of {self.key_str}")
        min_isr = self._log.config.min_insync_replicas
        if acks == -1 and len(self._isr) < min_isr:
            raise NotEnoughReplicasError(
                f"{self.key_str}: the ISR {list(self._isr)} is smaller than min.insync.replicas={min_isr}"
            )
        info = self._log.append_as_leader(validated, self._leader_epoch, verified)
        if not info.batch_headers:
            return info  # a retried batch already written (S5): nothing appended
        self._bytes.on_leader_append(info.last_offset + 1, info.size_bytes)
        self._leader_state.on_leader_append(self._log.log_end_offset)
        self._sync_high_watermark()
        self._held.wake()
        return info
