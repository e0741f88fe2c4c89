"""One partition on one broker: its log, its role, epochs, replicas, ISR and high watermark.

Two layers (STYLE.md §1):

* :class:`HighWatermark` -- the leader's rules for follower progress and the high watermark, a plain class
  with no I/O, no threads and no clock of its own (times are passed in).
* :class:`Partition` -- the owner of one :class:`~log.log.Log` and of a :class:`HighWatermark`: appends as
  leader, reads for consumers and followers, role changes from the metadata image, epoch checks.

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

Error names are Kafka's: NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS, FENCED_LEADER_EPOCH,
UNKNOWN_LEADER_EPOCH, plus whatever the log raises (CORRUPT_MESSAGE, MESSAGE_TOO_LARGE, OFFSET_OUT_OF_RANGE).
"""

from __future__ import annotations

import enum
import logging
import threading
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from log.append import AppendInfo
from log.clock import Clock
from log.config import LogConfig
from log.errors import LogError, StorageError
from log.log import FetchData, Log
from log.record.header import iter_batches
from log.record.reader import read_batch

logger = logging.getLogger(__name__)

UNKNOWN_OFFSET = -1
NO_EPOCH = -1  # current_leader_epoch = -1: the caller does not check epochs
NO_LEADER = -1
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3
MAX_PENDING_POSITIONS = 100_000  # appends above the high watermark whose byte positions are remembered
_SCAN_CHUNK_BYTES = 1 << 20


# ------------------------------------------------------------------------------------------------ errors


class PartitionError(LogError):
    """A request this partition cannot serve in its current state. ``code`` is Kafka's error name."""


class NotLeaderOrFollowerError(PartitionError):
    code = "NOT_LEADER_OR_FOLLOWER"
    retriable = True


class NotEnoughReplicasError(PartitionError):
    code = "NOT_ENOUGH_REPLICAS"
    retriable = True


class FencedLeaderEpochError(PartitionError):
    code = "FENCED_LEADER_EPOCH"
    retriable = True


class UnknownLeaderEpochError(PartitionError):
    code = "UNKNOWN_LEADER_EPOCH"
    retriable = True


# ------------------------------------------------------------------------------- the high-watermark rules


class Role(enum.StrEnum):
    LEADER = "leader"
    FOLLOWER = "follower"
    NONE = "none"  # opened from disk, no metadata about it yet


@dataclass(slots=True)
class ReplicaProgress:
    """What the leader knows of one follower (HW4, HW6)."""

    log_end_offset: int = UNKNOWN_OFFSET
    last_fetch_ms: float = -1.0
    last_caught_up_ms: float = -1.0
    leader_end_offset_at_last_fetch: int = UNKNOWN_OFFSET


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

    @classmethod
    def start(
        cls, leader_id: int, replicas: Iterable[int], isr: Iterable[int], high_watermark: int, leader_leo: int
    ) -> HighWatermark:
        """The state of a broker that just became leader: followers unknown (HW4), HW as it was (capped, HW3)."""
        followers = {r: ReplicaProgress() for r in replicas if r != leader_id}
        state = cls(leader_id, frozenset(isr), min(high_watermark, leader_leo), leader_leo, followers)
        state.advance()
        return state

    def on_leader_append(self, log_end_offset: int) -> bool:
        """The leader's log grew; True when the high watermark moved."""
        assert log_end_offset >= self.leader_log_end_offset, "a leader's log end offset never goes back"
        self.leader_log_end_offset = log_end_offset
        return self.advance()

    def on_follower_fetch(self, replica_id: int, fetch_offset: int, now_ms: float) -> bool:
        """Follower ``replica_id`` fetched from ``fetch_offset`` (HW4, HW6); True when the HW moved."""
        progress = self.followers.get(replica_id)
        if progress is None:
            raise NotLeaderOrFollowerError(f"broker {replica_id} is not a replica of this partition")
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
        """HW1: the smallest log end offset over the ISR; None while an ISR member's offset is unknown."""
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


# ------------------------------------------------------------------------------------------ the partition


class Registration(Protocol):
    """What a partition needs of the metadata image's ``PartitionRegistration``."""

    @property
    def replicas(self) -> tuple[int, ...]: ...
    @property
    def isr(self) -> tuple[int, ...]: ...
    @property
    def leader(self) -> int: ...
    @property
    def leader_epoch(self) -> int: ...
    @property
    def partition_epoch(self) -> int: ...


@dataclass(frozen=True, slots=True)
class PartitionRead:
    """The answer to :meth:`Partition.read`: whole batches, unchanged, and the partition's offsets."""

    data: FetchData
    high_watermark: int
    log_start_offset: int
    log_end_offset: int
    leader_epoch: int
    high_watermark_moved: bool  # a follower's fetch moved the high watermark (complete delayed produces)

    @property
    def records(self) -> bytes:
        return self.data.records


@dataclass(frozen=True, slots=True)
class FetchPosition:
    """How far readers may read: ``offset`` (HW for consumers, LEO for followers) and the count of bytes
    appended up to it since the partition was opened (differences say how many bytes arrived)."""

    role: Role
    leader_epoch: int
    offset: int
    appended_bytes: int
    log_start_offset: int
    log_end_offset: int


class Partition:
    """One partition replica on this broker (Kafka's ``Partition``).

    Thread-safety: one lock guards every field; every public method takes it for its state and leaves the
    Log's disk reads (``read``, timestamp lookups) outside it: the :class:`Log` is thread-safe, so a fetch
    never holds up an append for more than the Log's own lock. Appends run under the lock, so appends to
    one partition are serialized and each one sees the role and epoch it was checked against. The
    metadata thread is the only caller of the role changes (``make_leader``, ``make_follower``,
    ``update_config``, ``close``); request threads call the rest. The read-only properties are single
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
    ) -> None:
        self.topic_id = topic_id
        self.topic = topic
        self.partition = partition
        self.local_broker_id = local_broker_id
        self._clock = clock
        self._lock = threading.Lock()
        self._log = log
        self._role = Role.NONE
        self._leader_id = NO_LEADER
        self._leader_epoch = NO_EPOCH
        self._partition_epoch = NO_EPOCH
        self._replicas: tuple[int, ...] = ()
        self._isr: tuple[int, ...] = ()
        self._high_watermark = min(max(high_watermark, log.log_start_offset), log.log_end_offset)
        self._leader_state: HighWatermark | None = None
        # Byte positions, for DelayedFetch's "enough bytes arrived" test: cumulative bytes appended since
        # open, at the log end and at the high watermark; appends above the HW wait in _pending.
        self._appended_bytes = 0
        self._hw_bytes = 0
        self._pending: deque[tuple[int, int]] = deque()

    def __repr__(self) -> str:
        return f"Partition({self.topic}-{self.partition}, {self._role}, epoch {self._leader_epoch})"

    # ------------------------------------------------------------------------------------- state

    @property
    def key(self) -> tuple[str, int]:
        return (self.topic, self.partition)

    @property
    def log(self) -> Log:
        return self._log

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
            if is_new_term or self._leader_state is None:
                self._leader_state = HighWatermark.start(
                    self.local_broker_id, reg.replicas, reg.isr, self._high_watermark, self._log.log_end_offset
                )
            else:
                self._leader_state.update_isr(reg.isr, reg.replicas)
            self._sync_high_watermark()
            return True

    def make_follower(self, reg: Registration) -> bool:
        """Become a follower (or a replica without a leader) as ``reg`` says; False for a stale one.

        Writes are refused from now on; the replication issue adds truncation and the fetcher.
        """
        with self._lock:
            if self._is_stale(reg):
                return False
            self._set_registration(reg, Role.FOLLOWER)
            self._leader_state = None
            return True

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
            directory = self._log.dir
            self._log.close()
            self._log = Log.open(directory, config, self._clock)

    def delete_old_segments(self) -> int:
        """Retention (time, size, log start), never past the high watermark; returns the segments deleted."""
        with self._lock:
            if self._role is Role.NONE or self._log.closed:
                return 0
            count = self._log.delete_retention(high_watermark=self._high_watermark)
            if count:
                self._sync_high_watermark()
            return count

    def flush(self) -> None:
        """fsync what the log holds (skipped once closed)."""
        with self._lock:
            if not self._log.closed:
                self._log.flush()

    def close(self) -> None:
        """Flush and close the log (clean-shutdown marker); the partition serves nothing afterwards."""
        with self._lock:
            self._role = Role.NONE
            self._leader_state = None
            self._log.close()

    # ------------------------------------------------------------------------------------ writes

    def append_as_leader(self, records: bytes | memoryview, acks: int) -> AppendInfo:
        """Append a producer's batches, stamped with this leader's epoch.

        Raises NotLeaderOrFollowerError unless leader; NotEnoughReplicasError when ``acks`` is -1 and the ISR
        is smaller than ``min.insync.replicas`` (Kafka checks before appending: nothing is written); the
        log's errors (CORRUPT_MESSAGE, MESSAGE_TOO_LARGE, ...) for bad batches, again with nothing written.
        """
        with self._lock:
            if self._role is not Role.LEADER or self._leader_state is None:
                raise NotLeaderOrFollowerError(f"broker {self.local_broker_id} is not the leader of {self.key_str}")
            min_isr = self._log.config.min_insync_replicas
            if acks == -1 and len(self._isr) < min_isr:
                raise NotEnoughReplicasError(
                    f"{self.key_str}: the ISR {list(self._isr)} is smaller than min.insync.replicas={min_isr}"
                )
            info = self._log.append(records, leader_epoch=self._leader_epoch)
            self._appended_bytes += info.size_bytes
            self._pending.append((info.last_offset + 1, self._appended_bytes))
            self._leader_state.on_leader_append(self._log.log_end_offset)
            self._sync_high_watermark()
            return info

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
        while self._pending and self._pending[0][0] <= self._high_watermark:
            self._hw_bytes = self._pending.popleft()[1]
        while len(self._pending) > MAX_PENDING_POSITIONS:
            self._hw_bytes = self._pending.popleft()[1]  # over the bound: positions get coarser, never wrong
        if self._high_watermark >= self._log.log_end_offset:
            self._hw_bytes = self._appended_bytes
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
        return self._log, self._high_watermark, self._leader_epoch

    def read(
        self,
        fetch_offset: int,
        max_bytes: int,
        *,
        replica_id: int = -1,
        current_leader_epoch: int = NO_EPOCH,
        min_one_batch: bool = True,
    ) -> PartitionRead:
        """Whole batches from ``fetch_offset``: for consumers (``replica_id`` < 0) only below the high
        watermark, for followers to the log end; a follower's fetch also reports its position (HW4).

        Raises the epoch errors, NotLeaderOrFollowerError, and OffsetOutOfRangeError outside
        ``[log_start_offset, log_end_offset]``.
        """
        with self._lock:
            log, high_watermark, epoch = self._leader_snapshot(current_leader_epoch, replica_id)
        max_offset = None if replica_id >= 0 else high_watermark
        try:
            data = log.read(fetch_offset, max_bytes, max_offset=max_offset, min_one_batch=min_one_batch)
        except StorageError:
            if log is self._log:  # not closed by a config change's reopen: a real storage error
                raise
            data = self._log.read(fetch_offset, max_bytes, max_offset=max_offset, min_one_batch=min_one_batch)
        moved = False
        if replica_id >= 0:
            with self._lock:
                if self._leader_state is not None and self._leader_epoch == epoch:
                    moved = self._leader_state.on_follower_fetch(replica_id, fetch_offset, self._clock.monotonic_ms())
                    self._sync_high_watermark()
                high_watermark = self._high_watermark
        return PartitionRead(data, high_watermark, data.log_start_offset, data.log_end_offset, epoch, moved)

    def fetch_position(self, for_replica: bool) -> FetchPosition:
        """Where readers of each kind stand now (DelayedFetch compares two of these)."""
        with self._lock:
            leo = self._log.log_end_offset
            offset, appended = (leo, self._appended_bytes) if for_replica else (self._high_watermark, self._hw_bytes)
            return FetchPosition(self._role, self._leader_epoch, offset, appended, self._log.log_start_offset, leo)

    def offset_for_timestamp(
        self, timestamp_ms: int, *, current_leader_epoch: int = NO_EPOCH, for_replica: bool = False
    ) -> tuple[int, int] | None:
        """ListOffsets: ``(offset, timestamp)`` for -2 earliest, -1 latest (the HW for consumers, the log end
        for replicas), -3 the record with the largest timestamp, or the first record at or after a time;
        None when no record qualifies below the high watermark (Kafka's ``fetchOffsetForTimestamp``)."""
        with self._lock:
            log, high_watermark, _ = self._leader_snapshot(current_leader_epoch, -1)
        upper = log.log_end_offset if for_replica else high_watermark
        if timestamp_ms == EARLIEST_TIMESTAMP:
            return log.log_start_offset, -1
        if timestamp_ms == LATEST_TIMESTAMP:
            return upper, -1
        if timestamp_ms == MAX_TIMESTAMP:
            return _offset_of_max_timestamp(log, upper)
        if timestamp_ms < 0:
            raise ValueError(f"timestamp {timestamp_ms} is not -1, -2, -3 or a time")
        found = log.offset_for_timestamp(timestamp_ms)
        return found if found is not None and found[0] < upper else None

    @property
    def key_str(self) -> str:
        return f"{self.topic}-{self.partition}"


def _offset_of_max_timestamp(log: Log, upper: int) -> tuple[int, int] | None:
    """The first record with the largest timestamp below ``upper`` (KIP-734, record-exact as in KAFKA-16310).

    Segments say which one holds the largest batch timestamp; only that segment is read, in chunks.
    """
    segments = [s for s in log.segments if s.base_offset < upper and s.max_timestamp >= 0]
    if not segments:
        return None
    best = max(segments, key=lambda s: s.max_timestamp)  # the first of equals: max() keeps the first
    offset = max(best.base_offset, log.log_start_offset)
    end = min(best.next_offset, upper)
    while offset < end:
        chunk = log.read(offset, _SCAN_CHUNK_BYTES, max_offset=upper).records
        if not chunk:
            break
        for pos, header in iter_batches(chunk, validate=False):
            if header.max_timestamp == best.max_timestamp and header.base_offset < upper:
                _, records = read_batch(chunk, pos)
                for record in records:
                    if record.timestamp == best.max_timestamp or header.is_log_append_time:
                        return record.offset, best.max_timestamp
            offset = header.next_offset
    return None
