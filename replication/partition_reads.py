"""A partition replica's state and its reads: :class:`PartitionReads`, the base class of
:class:`~replication.partition.Partition` (one class in two modules, docs/CONVENTIONS.md §10).

It holds every field of the replica and the lock that guards them, the read-only views, and what request
threads read: Fetch (``read``, ``read_slice``), ListOffsets (``offset_for_timestamp``),
OffsetsForLeaderEpoch (``end_offset_for_epoch``), the acks=all check (``acks_status``) and the positions
DelayedFetch compares (``fetch_position``). A follower's fetch also records its progress (HW4), which may
move the high watermark (``_sync_high_watermark``, shared with the transitions).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from enum import Enum
from typing import TypeVar

from common.clock import Clock
from log.config import LogConfig
from log.errors import StorageError
from log.log import Log
from log.log_reads import FetchData, FetchSlice
from log.producer_state import ProducerEntry
from replication.epoch_cache import EpochEndOffset
from replication.errors import (
    FencedLeaderEpochError,
    NotLeaderOrFollowerError,
    OffsetNotAvailableError,
    UnknownLeaderEpochError,
)
from replication.fetch_positions import AppendedBytes
from replication.high_watermark import HighWatermark
from replication.isr import IsrState
from replication.sequence_wait import SEQUENCE_WAIT_MS, HeldBatchWait
from replication.timestamps import lookup_offset
from replication.unified_log import (
    PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_MS,
    PRODUCER_ID_EXPIRATION_MS,
    PRODUCER_ID_MAX,
    UnifiedLog,
)
from replication.views import FetchPosition, PartitionRead, Role

T = TypeVar("T")


class IdleFetch(Enum):
    """What :meth:`PartitionReads.note_idle_follower_fetch` and :meth:`PartitionReads.note_caught_up_fetch` did."""

    READ = "read"  # nothing: the fetch must read this partition
    UNCHANGED = "unchanged"  # recorded; nothing to send
    HW_MOVED = "hw moved"  # recorded, and the high watermark moved

NO_EPOCH = -1  # current_leader_epoch = -1: the caller does not check epochs
NO_LEADER = -1


class PartitionReads:
    """The fields of one partition replica, the one lock that guards them, and the reads.

    :class:`~replication.partition.Partition` (the only subclass) adds the transitions and states the
    thread-safety contract of both: reads take the lock for the state they look at and read the log outside
    it.
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
        # a plain lock (``with`` on a Condition is a Python-level call each time: ~39 a record on the leader's
        # path); the Condition over it is notified after every leader append (S8 holds)
        self._lock = threading.Lock()
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
        self._held = HeldBatchWait(threading.Condition(self._lock), clock, sequence_wait_ms, held_batch_slots)  # S8
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

    # ------------------------------------------------------------------------------------- reads

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
        log = self._log
        log_end, log_start = log.log_end_offset, log.log_start_offset
        state = self._leader_state
        hw = self._hw if state is None else max(self._hw, state.high_watermark)
        hw = min(hw, log_end)
        self._bytes.on_high_watermark(hw, log_end)
        # Retention or DeleteRecords may move the log start past a follower's HW: Kafka moves the HW up.
        hw = max(hw, log_start)
        assert log_start <= hw <= log_end, "HW3"
        self._high_watermark = hw  # once: each assignment reaches the transactions' bookkeeping

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
        # the aborted transactions before the records: the log cleaner removes an aborted transaction's records
        # and, with the segment that held them, its index entry (log/cleaner/README.md); an entry seen first
        # still covers records read after, the other order could miss it
        aborted_before = tuple(log.collect_aborted(fetch_offset, lso)) if read_committed and replica_id < 0 else ()
        data = self._read_log(log, lambda lg: lg.read(fetch_offset, max_bytes, max_offset=max_offset,
                                                       min_one_batch=min_one_batch))  # fmt: skip
        if read_committed and replica_id < 0:
            aborted = aborted_before if data.records else ()
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

    def note_idle_follower_fetch(
        self, replica_id: int, fetch_offset: int, current_leader_epoch: int, replica_epoch: int,
        high_watermark: int, log_start_offset: int,
    ) -> IdleFetch:  # fmt: skip
        """A fetch session's partition that the follower did not name this time (``broker/fetch_session.py``):
        when a :meth:`read` from ``fetch_offset`` would find nothing (this broker leads the partition in
        ``current_leader_epoch`` and ``fetch_offset`` is its log end) and tell the follower nothing it was not
        told (``high_watermark`` and ``log_start_offset``, its last answer's, are still this replica's), the
        fetch is recorded as :meth:`read` records it (HW4: the follower's progress and its caught-up time, which
        ISR1 counts) without reading the log: :attr:`IdleFetch.UNCHANGED`, or :attr:`IdleFetch.HW_MOVED` when
        that moved the high watermark (the caller completes what waited for it, and reads to send it).
        Otherwise nothing is done: :attr:`IdleFetch.READ`, the caller reads (and gets the errors)."""
        with self._lock:
            if self._log.log_start_offset != log_start_offset or self._high_watermark != high_watermark:
                return IdleFetch.READ
            return self._note_caught_up(fetch_offset, replica_id, current_leader_epoch, replica_epoch, NO_EPOCH, False)

    def note_caught_up_fetch(
        self, fetch_offset: int, *, replica_id: int = -1, current_leader_epoch: int = NO_EPOCH,
        replica_epoch: int = -1, last_fetched_epoch: int = NO_EPOCH, read_committed: bool = False,
    ) -> IdleFetch:  # fmt: skip
        """A fetch that will wait when it finds nothing (the long poll), before its first read: when a
        :meth:`read` with the same arguments would find nothing and raise nothing (this broker leads the
        partition, the epochs agree, no divergence, and ``fetch_offset`` is where the reader's records end: the
        log end for followers, the high watermark, or the last stable offset for ``read_committed``, for
        consumers), it is done without reading the log: a follower's fetch is recorded as :meth:`read` records
        it (HW4), :attr:`IdleFetch.UNCHANGED`, or :attr:`IdleFetch.HW_MOVED` when that moved the high watermark
        (the caller completes what waited for it). Otherwise nothing is done: :attr:`IdleFetch.READ`, the caller
        reads (and gets the records or the errors). The caller's read after the wait answers the fetch, so
        nothing of the read skipped here reaches the reader."""
        with self._lock:
            return self._note_caught_up(fetch_offset, replica_id, current_leader_epoch, replica_epoch,
                                        last_fetched_epoch, read_committed)  # fmt: skip

    def _note_caught_up(
        self, fetch_offset: int, replica_id: int, current_leader_epoch: int, replica_epoch: int,
        last_fetched_epoch: int, read_committed: bool,
    ) -> IdleFetch:  # fmt: skip
        """Under the lock: :meth:`note_caught_up_fetch` (``last_fetched_epoch`` as :meth:`read` checks it)."""
        if self._role is not Role.LEADER or (current_leader_epoch not in (NO_EPOCH, self._leader_epoch)):
            return IdleFetch.READ
        log = self._log
        if replica_id >= 0:
            state = self._leader_state
            if (
                state is None or replica_id not in self._replicas or replica_id == self.local_broker_id
                or log.log_end_offset != fetch_offset
            ):  # fmt: skip
                return IdleFetch.READ
        else:
            state = None
            end = log.last_stable_offset(self._high_watermark) if read_committed else self._high_watermark
            if fetch_offset != end:
                return IdleFetch.READ
        if fetch_offset < log.log_start_offset:
            return IdleFetch.READ  # out of range: the read raises it
        if last_fetched_epoch >= 0:
            found = log.end_offset_for(last_fetched_epoch)
            if found.leader_epoch < last_fetched_epoch or found.end_offset < fetch_offset:
                return IdleFetch.READ  # diverging: the read answers where
        if state is None:
            return IdleFetch.UNCHANGED
        moved = state.on_follower_fetch(replica_id, fetch_offset, self._clock.monotonic_ms(), replica_epoch)
        self._sync_high_watermark()
        return IdleFetch.HW_MOVED if moved else IdleFetch.UNCHANGED

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
