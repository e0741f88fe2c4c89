"""One partition on one broker (Kafka's ``Partition``): its role, the registration it follows, replicas, ISR
and high watermark. It owns, and drives under one lock (docs/CONVENTIONS.md §1, one module per piece):
:class:`~replication.unified_log.UnifiedLog` (the log with its producer state and leader-epoch cache),
:class:`~replication.high_watermark.HighWatermark` (HW1-HW8) and :class:`~replication.isr.IsrState`
(ISR1-ISR8), :class:`~replication.sequence_wait.HeldBatchWait` (S8) and
:class:`~replication.fetch_positions.AppendedBytes` (DelayedFetch positions).

Error names are Kafka's: NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH,
OFFSET_NOT_AVAILABLE, plus the log's (CORRUPT_MESSAGE, MESSAGE_TOO_LARGE, OFFSET_OUT_OF_RANGE).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

from common.clock import Clock
from log.append import AppendInfo, ValidatedAppend
from log.config import LogConfig
from log.errors import StorageError
from log.log import FetchData, FetchSlice, Log
from log.producer_state import ProducerEntry
from log.record.control import EndTransactionMarker
from replication.epoch_cache import EpochEndOffset
from replication.errors import (
    FencedLeaderEpochError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    OffsetNotAvailableError,
    PartitionError,
    UnknownLeaderEpochError,
)
from replication.fetch_positions import AppendedBytes
from replication.high_watermark import UNKNOWN_OFFSET, HighWatermark, ReplicaProgress
from replication.isr import AlterPartitionRequest, IsrState, may_join, out_of_sync
from replication.sequence_wait import SEQUENCE_WAIT_MS, HeldBatchWait
from replication.timestamps import lookup_offset
from replication.truncation import TruncationDecision
from replication.unified_log import (
    PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_MS,
    PRODUCER_ID_EXPIRATION_MS,
    PRODUCER_ID_MAX,
    UnifiedLog,
)
from replication.views import FetchPosition, PartitionRead, Registration, Role

logger = logging.getLogger(__name__)
T = TypeVar("T")
Verifier = Callable[[tuple[str, int], list[tuple[int, int]]], None]
"""S11: asks the transaction coordinator about ``(topic, partition)`` for ``[(producer id, epoch)]``; raises its
refusal."""


class VerificationPending(PartitionError):
    """An append that must ask the transaction coordinator first, tried by a thread that must not wait
    (``hold`` False): like a batch held for its turn (S8), it is tried again on a thread that may."""

    code = "CONCURRENT_TRANSACTIONS"
    ahead = True

NO_EPOCH = -1  # current_leader_epoch = -1: the caller does not check epochs
NO_LEADER = -1
ISR_RESEND_MS = 1_000.0  # an unsettled AlterPartition is sent again after this long


__all__ = [
    "UNKNOWN_OFFSET",
    "FetchPosition",
    "PartitionRead",
    "Registration",
    "Role",
    "FencedLeaderEpochError",
    "HighWatermark",
    "NotEnoughReplicasError",
    "NotLeaderOrFollowerError",
    "Partition",
    "PartitionError",
    "ReplicaProgress",
    "UnknownLeaderEpochError",
]  # the names moved to their own modules stay importable from here


class Partition:
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

    def __init__(
        self,
        topic_id: str,
        topic: str,
        partition: int,
        log: Log,
        local_broker_id: int,
        clock: Clock,
        *,
        high_watermark: int = 0,
        producer_id_expiration_ms: int = PRODUCER_ID_EXPIRATION_MS,
        producer_id_expiration_check_interval_ms: int = PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_MS,
        sequence_wait_ms: float = SEQUENCE_WAIT_MS,
        held_batch_slots: threading.Semaphore | None = None,
        producer_id_max: int = PRODUCER_ID_MAX,
        eligible_leader_replicas: bool = True,
    ) -> None:
        self.topic_id = topic_id
        self.topic = topic
        self.partition = partition
        self.local_broker_id = local_broker_id
        self._clock = clock
        self._lock = threading.Condition(threading.Lock())  # notified after every leader append (S8 holds)
        self._log = UnifiedLog(
            log, clock, producer_id_expiration_ms=producer_id_expiration_ms,
            producer_id_expiration_check_interval_ms=producer_id_expiration_check_interval_ms,
            producer_id_max=producer_id_max,
        )  # fmt: skip
        self._role = Role.NONE
        self._leader_id = NO_LEADER
        self._leader_epoch = NO_EPOCH
        self._partition_epoch = NO_EPOCH
        self._replicas: tuple[int, ...] = ()
        self._isr: tuple[int, ...] = ()
        self._hw = 0
        self._high_watermark = min(max(high_watermark, log.log_start_offset), log.log_end_offset)
        self._leader_state: HighWatermark | None = None
        self._isr_state: IsrState | None = None  # leader only: the committed ISR and the pending change
        self._leader_since_ms = 0.0
        self._isr_sent_ms = 0.0
        self._epoch_start_offset = 0
        self._bytes = AppendedBytes()  # byte positions for DelayedFetch
        self._held = HeldBatchWait(self._lock, clock, sequence_wait_ms, held_batch_slots)  # S8
        self._elr = eligible_leader_replicas  # HW8

    def __repr__(self) -> str:
        return f"Partition({self.topic}-{self.partition}, {self._role}, epoch {self._leader_epoch})"

    @property
    def _high_watermark(self) -> int:
        return self._hw

    @_high_watermark.setter
    def _high_watermark(self, value: int) -> None:
        """Every move of the high watermark reaches the transactions' bookkeeping (L3: the LSO)."""
        self._hw = value
        self._log.update_high_watermark(value)

    # ------------------------------------------------------------------------------------- state

    @property
    def key(self) -> tuple[str, int]:
        return (self.topic, self.partition)

    @property
    def log(self) -> Log:
        return self._log.log

    @property
    def role(self) -> Role:
        return self._role

    @property
    def is_leader(self) -> bool:
        return self._role is Role.LEADER

    @property
    def leader_id(self) -> int:
        return self._leader_id

    @property
    def leader_epoch(self) -> int:
        return self._leader_epoch

    @property
    def partition_epoch(self) -> int:
        return self._partition_epoch

    @property
    def replicas(self) -> tuple[int, ...]:
        return self._replicas

    @property
    def isr(self) -> tuple[int, ...]:
        return self._isr

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def log_end_offset(self) -> int:
        return self._log.log_end_offset

    @property
    def log_start_offset(self) -> int:
        return self._log.log_start_offset

    @property
    def config(self) -> LogConfig:
        return self._log.config

    def follower_offsets(self) -> Mapping[int, int]:
        """As leader: each follower's last reported log end offset (-1 unknown); empty otherwise."""
        with self._lock:
            return {} if self._leader_state is None else self._leader_state.follower_offsets()

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

    def producer_entries(self) -> dict[int, ProducerEntry]:
        """The idempotent producers' state of this replica, by producer id (tests, tools)."""
        with self._lock:
            return self._log.producer_entries()

    def acks_status(self, required_offset: int, leader_epoch: int) -> tuple[bool, str]:
        """For acks=all (Kafka's ``checkEnoughReplicasReachOffset``): ``(done, error code)``.

        Done with "" once the high watermark reaches ``required_offset`` with the ISR at least
        ``min.insync.replicas`` (else NOT_ENOUGH_REPLICAS_AFTER_APPEND); done with NOT_LEADER_OR_FOLLOWER
        once this broker no longer leads in ``leader_epoch``; not done otherwise.
        """
        with self._lock:
            if self._role is not Role.LEADER or self._leader_epoch != leader_epoch:
                return True, NotLeaderOrFollowerError.code
            if self._high_watermark < required_offset:
                return False, ""
            if len(self._isr) < self._log.config.min_insync_replicas:
                return True, "NOT_ENOUGH_REPLICAS_AFTER_APPEND"
            return True, ""

    def _sync_high_watermark(self) -> None:
        """Copy the leader state's HW, never backwards (HW2), and move the byte position with it."""
        if self._leader_state is not None:
            self._high_watermark = max(self._high_watermark, self._leader_state.high_watermark)
        self._high_watermark = min(self._high_watermark, self._log.log_end_offset)
        self._bytes.on_high_watermark(self._high_watermark, self._log.log_end_offset)
        # Retention or DeleteRecords may move the log start past a follower's HW: Kafka moves the HW up.
        self._high_watermark = max(self._high_watermark, self._log.log_start_offset)
        assert self._log.log_start_offset <= self._high_watermark <= self._log.log_end_offset, "HW3"

    # ------------------------------------------------------------------------------------- reads

    def check_leader_epoch(self, current_leader_epoch: int) -> None:
        """FENCED_LEADER_EPOCH when the caller's epoch is older than ours, UNKNOWN_LEADER_EPOCH when newer
        (Kafka's ``Partition.checkCurrentLeaderEpoch``); -1 skips the check."""
        if current_leader_epoch == NO_EPOCH:
            return
        epoch = self._leader_epoch
        if current_leader_epoch < epoch:
            raise FencedLeaderEpochError(f"{self.key_str}: leader epoch {current_leader_epoch} is older than {epoch}")
        if current_leader_epoch > epoch:
            raise UnknownLeaderEpochError(f"{self.key_str}: leader epoch {current_leader_epoch} is newer than {epoch}")

    def _leader_snapshot(self, current_leader_epoch: int, replica_id: int) -> tuple[Log, int, int]:
        """Under the lock: the checks every read makes, then ``(log, high_watermark, leader_epoch)``."""
        self.check_leader_epoch(current_leader_epoch)
        if self._role is not Role.LEADER:
            raise NotLeaderOrFollowerError(f"broker {self.local_broker_id} is not the leader of {self.key_str}")
        if replica_id >= 0 and (replica_id == self.local_broker_id or replica_id not in self._replicas):
            raise NotLeaderOrFollowerError(f"broker {replica_id} is not a follower of {self.key_str}")
        return self._log.log, self._high_watermark, self._leader_epoch

    def read(
        self,
        fetch_offset: int,
        max_bytes: int,
        *,
        replica_id: int = -1,
        current_leader_epoch: int = NO_EPOCH,
        min_one_batch: bool = True,
        replica_epoch: int = -1,
        last_fetched_epoch: int = NO_EPOCH,
        read_committed: bool = False,
    ) -> PartitionRead:
        """Whole batches from ``fetch_offset``: for consumers (``replica_id`` < 0) only below the high
        watermark, for followers to the log end; a follower's fetch also reports its position (HW4).

        Divergence (KIP-320 for consumers, as Kafka's ``validateFetchOffsetAndMaybeGetDivergingEpoch``):
        with ``last_fetched_epoch`` (the epoch of the batch before ``fetch_offset`` in the reader's view),
        when this log's largest epoch ``<=`` it is older, or ends before ``fetch_offset``, the reader holds
        records this log does not: the answer has no records and ``diverging_epoch`` says where the reader's
        epoch ends here (the reader truncates or resets its position there).

        ``read_committed`` (consumers): only below the last stable offset (L3), with the aborted transactions
        of what is returned.

        Raises the epoch errors, NotLeaderOrFollowerError, and OffsetOutOfRangeError outside
        ``[log_start_offset, log_end_offset]``.
        """
        with self._lock:
            log, high_watermark, epoch = self._leader_snapshot(current_leader_epoch, replica_id)
            lso = self._log.last_stable_offset(high_watermark) if replica_id < 0 else -1
            if last_fetched_epoch >= 0:
                end = self._log.end_offset_for(last_fetched_epoch)
                if end.leader_epoch < last_fetched_epoch or end.end_offset < fetch_offset:
                    start, leo = self._log.log_start_offset, self._log.log_end_offset
                    empty = FetchData(b"", fetch_offset, fetch_offset, -1, 0, start, leo)
                    return PartitionRead(empty, high_watermark, start, leo, epoch, False, diverging_epoch=end)
        max_offset = None if replica_id >= 0 else (lso if read_committed else high_watermark)
        data = self._read_log(log, lambda lg: lg.read(fetch_offset, max_bytes, max_offset=max_offset,
                                                       min_one_batch=min_one_batch))  # fmt: skip
        if read_committed and replica_id < 0:
            aborted = tuple(log.collect_aborted(fetch_offset, lso)) if data.records else ()
            return PartitionRead(data, high_watermark, data.log_start_offset, data.log_end_offset, epoch, False,
                                 last_stable_offset=lso, aborted=aborted)  # fmt: skip
        moved = False
        if replica_id >= 0:
            with self._lock:
                if self._leader_state is not None and self._leader_epoch == epoch:
                    now = self._clock.monotonic_ms()
                    moved = self._leader_state.on_follower_fetch(replica_id, fetch_offset, now, replica_epoch)
                    self._sync_high_watermark()
                high_watermark = self._high_watermark
        return PartitionRead(data, high_watermark, data.log_start_offset, data.log_end_offset, epoch, moved,
                             last_stable_offset=lso)  # fmt: skip

    def read_slice(
        self, fetch_offset: int, max_bytes: int, *, current_leader_epoch: int = NO_EPOCH, min_one_batch: bool = True
    ) -> tuple[FetchSlice, int, int]:
        """A consumer's :meth:`read` as a file slice for a zero-copy send (:meth:`Log.read_slice`), below the
        high watermark: ``(slice, high_watermark, leader_epoch)``; the caller closes ``slice.fd``. (For
        ``read_uncommitted`` only: a read_committed read needs the aborted list, :meth:`read`.)"""
        with self._lock:
            log, high_watermark, epoch = self._leader_snapshot(current_leader_epoch, -1)
        found = self._read_log(log, lambda lg: lg.read_slice(fetch_offset, max_bytes, max_offset=high_watermark,
                                                              min_one_batch=min_one_batch))  # fmt: skip
        return found, high_watermark, epoch

    @property
    def last_stable_offset(self) -> int:
        """L3: below it every transaction is decided."""
        with self._lock:
            return self._log.last_stable_offset(self._high_watermark)

    @property
    def cleanable_upper_bound(self) -> int:
        """Where the log cleaner stops (:meth:`UnifiedLog.cleanable_upper_bound`)."""
        with self._lock:
            return self._log.cleanable_upper_bound(self._high_watermark)

    def _read_log(self, log: Log, read: Callable[[Log], T]) -> T:
        """``read(log)`` outside the lock; if a config change reopened the log meanwhile (``log`` is closed),
        ``read`` the new one; any other storage error is raised."""
        try:
            return read(log)
        except StorageError:
            if log is self._log.log:
                raise
            return read(self._log.log)

    def end_offset_for_epoch(self, leader_epoch: int, *, current_leader_epoch: int = NO_EPOCH) -> EpochEndOffset:
        """OffsetsForLeaderEpoch, as leader (TR1, EC2): the largest epoch ``<= leader_epoch`` in this log and
        the offset where it ends; raises the epoch errors and NotLeaderOrFollowerError."""
        with self._lock:
            self._leader_snapshot(current_leader_epoch, -1)
            return self._log.end_offset_for(leader_epoch)

    @property
    def leader_epoch_entries(self) -> tuple[tuple[int, int], ...]:
        """The leader-epoch cache: ``(leader_epoch, start_offset)`` pairs."""
        with self._lock:
            return tuple((e.leader_epoch, e.start_offset) for e in self._log.epoch_entries)

    def fetch_position(self, for_replica: bool) -> FetchPosition:
        """Where readers of each kind stand now (DelayedFetch compares two of these)."""
        with self._lock:
            leo = self._log.log_end_offset
            positions = self._bytes
            offset, appended = (
                (leo, positions.appended) if for_replica else (self._high_watermark, positions.at_high_watermark)
            )
            return FetchPosition(self._role, self._leader_epoch, offset, appended, self._log.log_start_offset, leo)

    def offset_for_timestamp(
        self,
        timestamp_ms: int,
        *,
        current_leader_epoch: int = NO_EPOCH,
        for_replica: bool = False,
        read_committed: bool = False,
    ) -> tuple[int, int] | None:
        """ListOffsets: ``(offset, timestamp)`` for -2 earliest, -1 latest (the HW for consumers, the log end
        for replicas), -3 the record with the largest timestamp, or the first record at or after a time;
        None when no record qualifies below the high watermark (Kafka's ``fetchOffsetForTimestamp``).

        KIP-207: for consumers, while this new leader's high watermark is below the start offset of its
        epoch (a follower's HW lags the old leader's by up to a fetch), "latest" raises OffsetNotAvailableError
        instead of an offset below what the old leader answered, and so does a time lookup that found
        nothing below the high watermark. ``read_committed`` consumers get the last stable offset as "latest"
        (and look below it)."""
        with self._lock:
            log, high_watermark, _ = self._leader_snapshot(current_leader_epoch, -1)
            epoch_start = self._epoch_start_offset
            lagging = not for_replica and epoch_start > high_watermark
            lso = self._log.last_stable_offset(high_watermark)
        upper = log.log_end_offset if for_replica else (lso if read_committed else high_watermark)
        found = lookup_offset(log, timestamp_ms, upper, latest_known=not lagging)
        if found is None and lagging:
            raise OffsetNotAvailableError(
                f"{self.key_str}: the high watermark {high_watermark} of the new leader is below the start "
                f"offset {epoch_start} of its epoch; ask again"
            )
        return found

    @property
    def key_str(self) -> str:
        return f"{self.topic}-{self.partition}"
