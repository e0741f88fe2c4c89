"""The group coordinator runtime: the shards this broker leads, their loading, writes and timers.

A group's coordinator is the leader of ``__consumer_offsets`` partition ``partition_for(group_id, N)``
(:func:`broker.group.config.partition_for`). For each such partition this broker leads, one
:class:`_Shard` holds a :class:`~broker.group.shard.GroupShard` (the pure state machine).

Threads and locks (docs/CONVENTIONS.md §6: one owner per state machine):

* **One lock per shard.** A request thread takes its shard's lock, runs the operation on the state
  machine, appends the records it emitted to the partition as leader (so the log order is the order of
  the state changes), and releases the lock. Then, outside the lock, it waits (bounded by
  ``offsets.commit.timeout.ms``) until the high watermark passes the records (acks=all), and only then
  answers. An append that fails restores the groups saved before the operation; a write that does not
  replicate in time answers COORDINATOR_NOT_AVAILABLE (the state keeps it: a new leader re-reads the log).
* **The coordinator thread** loads a shard when this broker becomes leader of its partition (it reads the
  log from the start and replays every record; requests meanwhile answer COORDINATOR_LOAD_IN_PROGRESS),
  and every :data:`~broker.coordinator_shards.TICK_S` runs the shards' timers (session and rebalance
  timeouts; offset retention every ``offsets.retention.check.interval.ms``), and after each metadata change
  deletes the offsets of deleted topics.
* **Transactional offsets** (TxnOffsetCommit, docs/TRANSACTIONS.md): :meth:`GroupCoordinator.commit_txn_offsets`
  writes the commit records as a transactional batch of the producer (verified with its transaction
  coordinator, S11) and keeps them pending per producer id; the transaction's marker on the shard's
  partition (:meth:`GroupCoordinator.on_txn_marker`, from WriteTxnMarkers) applies them (COMMIT) or drops
  them (ABORT). Loading does the same with the transactional batches and markers of the log; a marker
  written while the shard loads is applied once the load ends.
* **The metadata thread** calls :meth:`GroupCoordinator.on_partition` after each role change of a
  ``__consumer_offsets`` partition: it swaps the shard map (copy-on-write) and queues the load; it never
  waits for one. Losing leadership drops the shard at once.

The shards' lifecycle (the shard map, the coordinator thread, the lookups and the appends) is the one the
transaction coordinator has too: :class:`~broker.coordinator_shards.CoordinatorShards`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from broker.appends import PendingAppend
from broker.coordinator_shards import CoordinatorShard, CoordinatorShards
from broker.group import errors as E
from broker.group.config import OFFSETS_TOPIC, GroupConfig, partition_for
from broker.group.errors import GroupError
from broker.group.model import ConsumerGroup
from broker.group.records import CoordinatorRecord, decode_record
from broker.group.shard import GroupShard, OffsetCommit, Records, TopicsView
from broker.metadata_cache import MetadataCache
from broker.replica_manager import ReplicaManager
from common.clock import Clock
from log.record.builder import build_batch
from log.record.reader import CONTROL_TYPE_COMMIT, iter_batches_with_records
from replication.partition import Partition, Verifier

logger = logging.getLogger(__name__)

T = TypeVar("T")
LOAD_ATTEMPTS = 3
LOAD_RETRY_S = 0.5

# how a failed append of coordinator records answers (Kafka's GroupMetadataManager mapping)
_WRITE_ERRORS = {
    "NOT_LEADER_OR_FOLLOWER": E.NOT_COORDINATOR,
    "FENCED_LEADER_EPOCH": E.NOT_COORDINATOR,
    "KAFKA_STORAGE_ERROR": E.NOT_COORDINATOR,
    "NOT_ENOUGH_REPLICAS": E.COORDINATOR_NOT_AVAILABLE,
    "NOT_ENOUGH_REPLICAS_AFTER_APPEND": E.COORDINATOR_NOT_AVAILABLE,
    "REQUEST_TIMED_OUT": E.COORDINATOR_NOT_AVAILABLE,
    "MESSAGE_TOO_LARGE": E.INVALID_COMMIT_OFFSET_SIZE,
    "RECORD_LIST_TOO_LARGE": E.INVALID_COMMIT_OFFSET_SIZE,
}


class ImageTopics:
    """The metadata image as the state machine's :class:`~broker.group.shard.TopicsView`."""

    def __init__(self, metadata: MetadataCache) -> None:
        self._image = metadata.image

    def partition_count(self, topic: str) -> int | None:
        t = self._image.topic(topic)
        return len(t.partitions) if t is not None else None

    def topic_names(self) -> Iterable[str]:
        return self._image.topics_by_name.keys()


@dataclass(eq=False)
class _Shard(CoordinatorShard):
    core: GroupShard
    pending_txn: dict[int, Records] = field(default_factory=dict)  # producer id -> its uncommitted offsets
    early_markers: dict[int, bool] = field(default_factory=dict)  # markers written while loading: committed?


class GroupCoordinator:
    """See the module docstring. Thread-safety: every public method is for any thread."""

    def __init__(
        self, broker_id: int, config: GroupConfig, clock: Clock, replicas: ReplicaManager, metadata: MetadataCache
    ) -> None:
        self.broker_id = broker_id
        self.config = config
        self.clock = clock
        self._replicas = replicas
        self._metadata = metadata
        self._checked_image_offset = -2  # the metadata offset S4 last looked at
        self._next_retention_check_ms = 0.0
        self._runtime: CoordinatorShards[_Shard] = CoordinatorShards(
            broker_id=broker_id, topic=OFFSETS_TOPIC, what="groups", replicas=replicas, metadata=metadata,
            new_shard=lambda number, epoch: _Shard(GroupShard(number, config, clock), partition=number,
                                                   leader_epoch=epoch),
            load=self._load, tick=self._tick, error=GroupError, write_errors=_WRITE_ERRORS,
            thread_name=f"broker-{broker_id}-coordinator",
        )  # fmt: skip

    # --- lifecycle (broker.coordinator_shards) -----------------------------------------------------------

    def start(self) -> None:
        self._runtime.start()

    def stop(self) -> None:
        self._runtime.stop()

    def on_partition(self, topic: str, number: int, partition: Partition | None) -> None:
        """The metadata thread changed ``topic-number`` here (None: removed): load or drop its shard."""
        self._runtime.on_partition(topic, number, partition)

    @property
    def _shards(self) -> dict[int, _Shard]:
        return self._runtime.shards

    # --- the coordinator thread -------------------------------------------------------------------------

    def _load(self, shard: _Shard) -> None:
        """Replay the partition's log into a fresh state machine; publish it if the shard is still current.

        A read that fails is retried (:data:`LOAD_ATTEMPTS`, e.g. a config change reopened the log under
        us); after that the shard answers COORDINATOR_NOT_AVAILABLE rather than coordinate from a log it
        could not read whole (a corrupt record included).
        """
        for attempt in range(1, LOAD_ATTEMPTS + 1):
            partition = self._runtime.partition_to_load(shard)
            if partition is None or self._runtime.stopping.is_set():
                return
            try:
                core, count, pending = self._replay_log(partition, shard.partition)
                break
            except Exception as exc:  # RecordFormatError, CorruptRecordError, StorageError...
                shard.failure = f"cannot load {OFFSETS_TOPIC}-{shard.partition}: {exc!r}"
                logger.warning("broker %d: %s (attempt %d)", self.broker_id, shard.failure, attempt)
                self._runtime.stopping.wait(LOAD_RETRY_S)
        else:
            return
        with shard.lock:
            if not self._runtime.is_current(shard):
                return
            core.on_loaded()
            shard.core = core
            shard.pending_txn = pending
            for producer_id, committed in shard.early_markers.items():
                self._apply_txn_marker(shard, producer_id, committed)
            shard.early_markers.clear()
            shard.failure = ""
            shard.loaded = True
        logger.info("broker %d: loaded %d groups from %d records of %s-%d", self.broker_id, len(core.groups), count,
                    OFFSETS_TOPIC, shard.partition)  # fmt: skip

    def _replay_log(self, partition: Partition, number: int) -> tuple[GroupShard, int, dict[int, Records]]:
        """The state of the log; transactional records wait for their producer's marker (the pending ones at
        the end are returned)."""
        core = GroupShard(number, self.config, self.clock)
        pending: dict[int, Records] = {}
        log = partition.log
        offset, count = log.log_start_offset, 0
        while offset < log.log_end_offset:
            data = log.read(offset, self.config.offsets_load_buffer_size, min_one_batch=True)
            if not data.records:
                break
            for header, records in iter_batches_with_records(data.records):
                offset = header.next_offset
                if header.is_control:
                    if header.is_transactional and records:
                        held = pending.pop(header.producer_id, [])
                        if records[0].control_type() == CONTROL_TYPE_COMMIT:
                            for record in held:
                                core.replay(record)
                    continue
                for r in records:
                    record = decode_record(r.key, r.value)
                    count += 1
                    if header.is_transactional:
                        pending.setdefault(header.producer_id, []).append(record)
                    else:
                        core.replay(record)
        return core, count, pending

    def _tick(self) -> None:
        now = self.clock.monotonic_ms()
        retention = now >= self._next_retention_check_ms
        if retention:
            self._next_retention_check_ms = now + self.config.offsets_retention_check_interval_ms
        for shard in list(self._shards.values()):
            if not shard.loaded:
                continue
            with shard.lock:  # the groups are the request threads' too
                if shard.core.next_deadline_ms() > now and not retention:
                    continue
                due = shard.core.due_groups(retention=retention)
            for gid in due:
                try:
                    self._execute(shard, [gid], _expire_op(gid, retention), wait=False)
                except GroupError as exc:
                    logger.info("broker %d: expiring group %s: %s %s", self.broker_id, gid, exc.code, exc)
        image_offset = self._metadata.image.offset
        if image_offset != self._checked_image_offset:
            self._checked_image_offset = image_offset
            self._delete_offsets_of_deleted_topics()

    def _delete_offsets_of_deleted_topics(self) -> None:
        topics = self.topics()
        for shard in list(self._shards.values()):
            if not shard.loaded:
                continue
            with shard.lock:
                groups = shard.core.groups_with_deleted_topics(topics)
            for gid in groups:
                op = _delete_offsets_op(gid, topics)
                try:
                    self._execute(shard, [gid], op, wait=False)
                except GroupError as exc:
                    logger.info("broker %d: deleting offsets of group %s: %s %s", self.broker_id, gid, exc.code, exc)

    # --- running operations ----------------------------------------------------------------------------

    def num_partitions(self) -> int | None:
        return self._runtime.num_partitions()

    def partition_of(self, group_id: str) -> int:
        return self._runtime.partition_of(group_id, partition_for)

    def _shard(self, group_id: str) -> _Shard:
        if not group_id:
            raise GroupError(E.INVALID_GROUP_ID, "the group id must not be empty")
        return self._runtime.lookup(self.partition_of(group_id), f"coordinator of group {group_id}")

    def topics(self) -> TopicsView:
        return ImageTopics(self._metadata)

    def run(
        self, group_id: str, op: Callable[[GroupShard], tuple[T, Records]], *, touches: Iterable[str] | None = None
    ) -> T:
        """Run ``op`` on the group's shard, persist what it emitted, answer once it is committed."""
        shard = self._shard(group_id)
        return self._execute(shard, list(touches) if touches is not None else [group_id], op, wait=True)

    def read(self, group_id: str, op: Callable[[GroupShard], T]) -> T:
        """A read-only operation, under the shard lock."""
        shard = self._shard(group_id)
        with shard.lock:
            self._check_current(shard)
            return op(shard.core)

    def shards(self) -> list[tuple[int, GroupShard, threading.Lock]]:
        return [(s.partition, s.core, s.lock) for s in self._shards.values() if s.loaded]

    def loading(self) -> list[int]:
        """The ``__consumer_offsets`` partitions this broker leads whose groups are still being loaded."""
        return sorted(s.partition for s in self._shards.values() if not s.loaded and not s.failure)

    def _check_current(self, shard: _Shard) -> None:
        self._runtime.check_current(shard)

    def _execute(
        self, shard: _Shard, group_ids: list[str], op: Callable[[GroupShard], tuple[T, Records]], *, wait: bool
    ) -> T:
        with shard.lock:
            self._check_current(shard)
            saved: dict[str, ConsumerGroup | None] = shard.core.save(group_ids)
            try:
                result, records = op(shard.core)
                pending = self._append(shard, records, wait) if records else None
            except BaseException:
                shard.core.restore(saved)
                raise
        if pending is not None and wait:
            self._await(pending)
        return result

    def _append(self, shard: _Shard, records: list[CoordinatorRecord], wait: bool) -> PendingAppend:
        encoded = [r.encode() for r in records]
        batch = build_batch([v for _, v in encoded], keys=[k for k, _ in encoded], timestamp_ms=self.clock.time_ms())
        timeout_ms = self.config.offsets_commit_timeout_ms  # the acks=all wait (see _await)
        return self._runtime.append(shard, batch, timeout_ms, wait=wait)

    def _await(self, pending: PendingAppend) -> None:
        """acks=all: until the high watermark passes the records, bounded by ``offsets.commit.timeout.ms``."""
        error = self._runtime.replication_error(pending)
        if error is not None:
            raise error


    # --- transactional offsets ---------------------------------------------------------------------------

    def commit_txn_offsets(
        self, commit: OffsetCommit, producer_id: int, producer_epoch: int, verify: Verifier | None,
        classic: Any = None,
    ) -> dict[tuple[str, int], str]:  # fmt: skip
        """TxnOffsetCommit: the per-partition errors; the valid offsets are written as the producer's
        transactional batch and become the group's when its transaction commits (:meth:`on_txn_marker`).
        ``classic``: the classic groups' runtime, whose members are checked by generation."""
        shard = self._shard(commit.group_id)
        topics = self.topics()
        with shard.lock:
            self._check_current(shard)
            if classic is not None and classic.groups_of(shard.core).check_commit(
                commit.group_id, commit.member_id, commit.instance_id, commit.member_epoch
            ):
                commit = OffsetCommit(commit.group_id, "", -1, "", commit.offsets)  # a classic member, checked
            saved = shard.core.save([commit.group_id])
            try:
                errors, records = shard.core.commit_offsets(commit, topics)  # checks the member, builds records
            finally:
                shard.core.restore(saved)  # nothing is the group's before the transaction commits
            if not records:
                return errors
            partition = self._runtime.leading_partition(shard)
            encoded = [r.encode() for r in records]
            entry = partition.producer_entries().get(producer_id)
            sequence = (entry.last_seq + 1) % (1 << 31) if entry and entry.producer_epoch == producer_epoch else 0
            batch = build_batch([v for _, v in encoded], keys=[k for k, _ in encoded],
                                timestamp_ms=self.clock.time_ms(), producer_id=producer_id,
                                producer_epoch=producer_epoch, base_sequence=sequence,
                                is_transactional=True)  # fmt: skip
            pending = self._replicas.append_records([(partition, batch)], -1, self.config.offsets_commit_timeout_ms,
                                                    leader_epoch=shard.leader_epoch, verify=verify)  # fmt: skip
            exc = pending.results[0].exception
            if exc is not None:
                code = str(getattr(exc, "code", ""))
                code = {"INVALID_PRODUCER_EPOCH": "PRODUCER_FENCED"}.get(code, code)
                passed = code in ("PRODUCER_FENCED", "INVALID_TXN_STATE", "NOT_ENOUGH_REPLICAS",
                                  "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", "INVALID_PRODUCER_ID_MAPPING")  # fmt: skip
                why = f"writing to {partition.key_str}: {exc}"
                raise GroupError(code if passed else _WRITE_ERRORS.get(code, "UNKNOWN_SERVER_ERROR"), why)
        self._await(pending)
        with shard.lock:
            if self._runtime.is_current(shard):
                shard.pending_txn.setdefault(producer_id, []).extend(records)
        return errors

    def on_txn_marker(self, partition: int, producer_id: int, committed: bool) -> None:
        """A transaction marker was written (and replicated) on ``__consumer_offsets-partition``: apply or drop
        the producer's pending offsets there."""
        shard = self._shards.get(partition)
        if shard is None:
            return
        with shard.lock:
            if not shard.loaded:
                shard.early_markers[producer_id] = committed
                return
            self._apply_txn_marker(shard, producer_id, committed)

    @staticmethod
    def _apply_txn_marker(shard: _Shard, producer_id: int, committed: bool) -> None:
        held = shard.pending_txn.pop(producer_id, [])
        if committed:
            for record in held:
                shard.core.replay(record)


def _expire_op(group_id: str, retention: bool) -> Callable[[GroupShard], tuple[None, Records]]:
    return lambda core: (None, core.expire_group(group_id, retention=retention))


def _delete_offsets_op(group_id: str, topics: TopicsView) -> Callable[[GroupShard], tuple[None, Records]]:
    return lambda core: (None, core.delete_offsets_of_deleted_topics(group_id, topics))
