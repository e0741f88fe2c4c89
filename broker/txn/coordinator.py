"""The transaction coordinator runtime: the ``__transaction_state`` partitions this broker leads, their loading,
writes, markers and timers (Kafka's ``TransactionCoordinator`` + ``TransactionStateManager`` +
``TransactionMarkerChannelManager``).

A transactional id's coordinator is the leader of ``__transaction_state`` partition
``partition_for(transactional_id, N)`` (the group coordinator's hash). For each partition this broker leads, one
:class:`_Shard` holds a :class:`~broker.txn.state.TransactionStateManager` (the pure state machine, TC1-TC12).

Threads and locks (one owner per state machine):

* **One lock per shard.** A request thread takes the lock, asks the state machine, and if it decided a
  transition, appends its record to the partition as leader (so the log order is the order of the
  transitions) and releases the lock. Outside the lock it waits (bounded by :data:`WRITE_TIMEOUT_MS`) for the
  high watermark to pass the record (acks=all); then, under the lock again, the transition is installed
  (``complete``) or forgotten (``fail``, TC3), and only then the request is answered. While it waits, every
  request for the same transactional id answers CONCURRENT_TRANSACTIONS (TC2).
* **The marker threads** (a small pool) write the markers of decided transactions (Prepare*): the
  partitions are grouped by leader, each leader gets one WriteTxnMarkers (this broker's own partitions are
  written in place), retriable failures are retried with a backoff until every partition has its marker
  (a deleted topic counts as done, as in Kafka), then Complete* is written (TC8), written again after a
  retriable failure (the ISR below ``min.insync.replicas`` for a moment after a failover) while the shard is
  still this broker's. A job stops when its shard
  is no longer this broker's: the next coordinator loads the Prepare* state and writes the markers again
  (TC11; markers are idempotent for a partition: a second COMMIT of a closed transaction closes nothing).
* **The coordinator thread** loads a shard when this broker becomes leader of its partition (replays the
  log to its end, past the high watermark, as the group coordinator does: :func:`read_records`; requests
  meanwhile answer COORDINATOR_LOAD_IN_PROGRESS), queues the markers of what the log left
  decided, and every ``transaction.abort.timed.out.transaction.cleanup.interval.ms`` aborts the transactions
  older than their timeout (TC9); every ``transaction.remove.expired.transaction.cleanup.interval.ms`` it
  expires idle transactional ids (TC10).
* **The metadata thread** calls :meth:`TransactionCoordinator.on_partition` after each role change of a
  ``__transaction_state`` partition: it swaps the shard map (copy-on-write) and queues the load.

The coordinator epoch written into markers is the partition's leader epoch when this broker became leader.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial

from broker.appends import PendingAppend
from broker.coordinator_shards import CoordinatorShard, CoordinatorShards
from broker.group.config import partition_for
from broker.metadata_cache import MetadataCache
from broker.replica_manager import ReplicaManager
from broker.txn import errors as E
from broker.txn.errors import TxnError
from broker.txn.records import decode_record, encode_record
from broker.txn.state import PREPARED, Decision, TopicPartition, TransactionStateManager, TxnMetadata
from common.clock import Clock
from log.log import Log
from log.record.builder import build_batch
from log.record.reader import iter_batches_with_records
from replication.partition import Partition

logger = logging.getLogger(__name__)

TXN_TOPIC = "__transaction_state"
WRITE_TIMEOUT_MS = 5_000  # the acks=all wait of a __transaction_state write
MARKER_RETRY_MS = (50, 100, 200, 500, 1000)  # backoff between marker rounds
# a Complete* write that failed with one of these is written again (NOT_COORDINATOR: the shard moved, the
# loop stops on is_current; INVALID_TXN_STATE and the rest: nothing left to complete)
COMPLETION_RETRIABLE = frozenset(
    {E.COORDINATOR_NOT_AVAILABLE, E.CONCURRENT_TRANSACTIONS, E.COORDINATOR_LOAD_IN_PROGRESS}
)
MARKER_THREADS = 4
LOAD_BUFFER_BYTES = 5 * 1024 * 1024

_WRITE_ERRORS = {  # a failed write answers (Kafka's TransactionStateManager mapping)
    "NOT_LEADER_OR_FOLLOWER": E.NOT_COORDINATOR,
    "FENCED_LEADER_EPOCH": E.NOT_COORDINATOR,
    "KAFKA_STORAGE_ERROR": E.NOT_COORDINATOR,
    "NOT_ENOUGH_REPLICAS": E.COORDINATOR_NOT_AVAILABLE,
    "NOT_ENOUGH_REPLICAS_AFTER_APPEND": E.COORDINATOR_NOT_AVAILABLE,
    "REQUEST_TIMED_OUT": E.COORDINATOR_NOT_AVAILABLE,
}

MarkerResult = dict[TopicPartition, str]
"""Per partition of one marker write: "" written, else Kafka's error name."""
SendMarkers = Callable[[int, TxnMetadata, bool, int, list[TopicPartition]], MarkerResult]
"""``(leader broker id, metadata, commit, coordinator epoch, partitions)`` -> the result per partition."""


@dataclass(frozen=True, slots=True)
class TxnConfig:
    num_partitions: int = 50  # transaction.state.log.num.partitions
    replication_factor: int = 3  # transaction.state.log.replication.factor
    min_isr: int = 2  # transaction.state.log.min.isr
    segment_bytes: int = 104_857_600  # transaction.state.log.segment.bytes
    max_timeout_ms: int = 900_000  # transaction.max.timeout.ms
    abort_interval_ms: int = 10_000  # transaction.abort.timed.out.transaction.cleanup.interval.ms
    expiration_ms: int = 604_800_000  # transactional.id.expiration.ms
    expiration_interval_ms: int = 3_600_000  # transaction.remove.expired.transaction.cleanup.interval.ms

    @classmethod
    def from_broker(cls, get: Callable[[str], object]) -> TxnConfig:
        def num(key: str) -> int:
            return int(str(get(key)))

        return cls(
            num_partitions=num("transaction.state.log.num.partitions"),
            replication_factor=num("transaction.state.log.replication.factor"),
            min_isr=num("transaction.state.log.min.isr"),
            segment_bytes=num("transaction.state.log.segment.bytes"),
            max_timeout_ms=num("transaction.max.timeout.ms"),
            abort_interval_ms=num("transaction.abort.timed.out.transaction.cleanup.interval.ms"),
            expiration_ms=num("transactional.id.expiration.ms"),
            expiration_interval_ms=num("transaction.remove.expired.transaction.cleanup.interval.ms"),
        )


@dataclass(eq=False)
class _Shard(CoordinatorShard):
    manager: TransactionStateManager


class TransactionCoordinator:
    """See the module docstring. Thread-safety: every public method is for any thread."""

    def __init__(
        self,
        broker_id: int,
        config: TxnConfig,
        clock: Clock,
        replicas: ReplicaManager,
        metadata: MetadataCache,
        allocate_producer_id: Callable[[], int],
        send_markers: SendMarkers,
    ) -> None:
        self.broker_id = broker_id
        self.config = config
        self.clock = clock
        self._replicas = replicas
        self._metadata = metadata
        self._allocate = allocate_producer_id
        self._send_markers = send_markers
        self._lock = threading.Lock()  # the marker jobs
        self._markers = ThreadPoolExecutor(MARKER_THREADS, thread_name_prefix=f"broker-{broker_id}-txn-markers")
        self._marker_jobs: set[tuple[int, str]] = set()  # (partition, transactional id) being written
        self._next_abort_ms = 0.0
        self._next_expire_ms = 0.0
        self._runtime: CoordinatorShards[_Shard] = CoordinatorShards(
            broker_id=broker_id, topic=TXN_TOPIC, what="transactions", replicas=replicas, metadata=metadata,
            new_shard=lambda number, epoch: _Shard(TransactionStateManager(number, epoch, config.max_timeout_ms),
                                                   partition=number, leader_epoch=epoch),
            load=self._load, tick=self._tick, error=TxnError, write_errors=_WRITE_ERRORS,
            thread_name=f"broker-{broker_id}-txn-coordinator",
        )  # fmt: skip
        self._stopping = self._runtime.stopping

    # --- lifecycle (broker.coordinator_shards) -----------------------------------------------------------

    def start(self) -> None:
        self._runtime.start()

    def on_partition(self, topic: str, number: int, partition: Partition | None) -> None:
        """The metadata thread changed ``topic-number`` here (None: removed): load or drop its shard."""
        self._runtime.on_partition(topic, number, partition)

    @property
    def _shards(self) -> dict[int, _Shard]:
        return self._runtime.shards

    def stop(self) -> None:
        self._runtime.stop()
        self._markers.shutdown(wait=False, cancel_futures=True)

    # --- requests -----------------------------------------------------------------------------------------

    def partition_of(self, transactional_id: str) -> int:
        return self._runtime.partition_of(transactional_id, partition_for)

    def init_producer_id(self, transactional_id: str, timeout_ms: int, producer_id: int, epoch: int) -> TxnMetadata:
        """TC4: the metadata with the producer id and epoch to answer (raises the refusal)."""
        shard = self._shard(transactional_id)
        now = self.clock.time_ms()
        decision = self._execute(shard, lambda m: m.init_producer_id(transactional_id, timeout_ms, producer_id,
                                                                      epoch, now, self._allocate))  # fmt: skip
        assert decision.transition is not None
        return decision.transition.after

    def add_partitions(self, transactional_id: str, producer_id: int, epoch: int,
                       partitions: Iterable[TopicPartition]) -> None:  # fmt: skip
        """TC6 (AddPartitionsToTxn, and AddOffsetsToTxn with the group's offsets partition)."""
        parts = list(partitions)
        shard = self._shard(transactional_id)
        now = self.clock.time_ms()
        self._execute(shard, lambda m: m.add_partitions(transactional_id, producer_id, epoch, parts, now))

    def verify(self, transactional_id: str, producer_id: int, epoch: int, partitions: Iterable[TopicPartition]) -> None:
        """KIP-890 part 1, for partition leaders: each partition is in the producer's ongoing transaction."""
        shard = self._shard(transactional_id)
        with shard.lock:
            self._check_current(shard)
            for tp in partitions:
                _raise(shard.manager.verify_partition(transactional_id, producer_id, epoch, tp))

    def end_txn(self, transactional_id: str, producer_id: int, epoch: int, commit: bool) -> None:
        """TC7: answered once Prepare* is written; the markers follow (TC8)."""
        shard = self._shard(transactional_id)
        now = self.clock.time_ms()
        self._execute(shard, lambda m: m.end_txn(transactional_id, producer_id, epoch, commit, now))

    def describe(self, transactional_id: str) -> TxnMetadata:
        shard = self._shard(transactional_id)
        with shard.lock:
            self._check_current(shard)
            found = shard.manager.metadata(transactional_id)
        if found is None:
            raise TxnError(E.TRANSACTIONAL_ID_NOT_FOUND, f"transactional id {transactional_id!r} is unknown")
        return found

    def list_transactions(self) -> list[TxnMetadata]:
        """Every transactional id of the loaded shards."""
        found: list[TxnMetadata] = []
        for shard in list(self._shards.values()):
            if shard.loaded:
                with shard.lock:
                    found.extend(shard.manager)
        return found

    # --- the write protocol -------------------------------------------------------------------------------

    def _execute(self, shard: _Shard, decide: Callable[[TransactionStateManager], Decision]) -> Decision:
        """Decide under the lock; write the transition (acks=all, outside the lock); install it or forget it
        (TC3); queue the markers of a decided transaction. Raises the decision's error, after the write when
        both (a fence: CONCURRENT_TRANSACTIONS once its abort is written)."""
        with shard.lock:
            self._check_current(shard)
            decision = decide(shard.manager)
            transition = decision.transition
            if transition is None:
                _raise(decision)
                return decision
            try:
                pending = self._append(shard, transition.after)
            except BaseException:
                shard.manager.fail(transition)
                raise
        failure = self._await(pending)
        with shard.lock:
            if failure is not None:
                shard.manager.fail(transition)
                raise failure
            shard.manager.complete(transition)
        if transition.after.state in PREPARED:
            self._submit_markers(shard, transition.after)
        _raise(decision)
        return decision

    def _append(self, shard: _Shard, metadata: TxnMetadata) -> PendingAppend:
        key, value = encode_record(metadata)
        batch = build_batch([value], keys=[key], timestamp_ms=self.clock.time_ms())
        return self._runtime.append(shard, batch, WRITE_TIMEOUT_MS)

    def _await(self, pending: PendingAppend) -> Exception | None:
        return self._runtime.replication_error(pending)

    # --- markers -----------------------------------------------------------------------------------------

    def _submit_markers(self, shard: _Shard, metadata: TxnMetadata) -> None:
        key = (shard.partition, metadata.transactional_id)
        with self._lock:
            if key in self._marker_jobs or self._stopping.is_set():
                return
            self._marker_jobs.add(key)
        try:
            self._markers.submit(self._write_markers, shard, metadata)
        except RuntimeError:  # shut down
            with self._lock:
                self._marker_jobs.discard(key)

    def _write_markers(self, shard: _Shard, metadata: TxnMetadata) -> None:
        key = (shard.partition, metadata.transactional_id)
        try:
            self._write_markers_until_done(shard, metadata)
        except Exception:
            logger.exception("broker %d: writing the markers of %r", self.broker_id, metadata.transactional_id)
        finally:
            with self._lock:
                self._marker_jobs.discard(key)

    def _write_markers_until_done(self, shard: _Shard, metadata: TxnMetadata) -> None:
        """TC8: markers on every partition (retried), then Complete* written."""
        from broker.txn.state import TxnState

        commit = metadata.state == TxnState.PREPARE_COMMIT
        remaining = set(metadata.partitions)
        attempt = 0
        while remaining:
            if self._stopping.is_set() or not self._runtime.is_current(shard):
                return  # the next coordinator writes them (TC11)
            by_leader: dict[int, list[TopicPartition]] = {}
            for tp in sorted(remaining):
                leader = self._leader_of(tp)
                if leader is None:
                    if self._metadata.image.topic(tp[0]) is None:
                        remaining.discard(tp)  # a deleted topic: nothing to mark (Kafka's rule)
                    continue
                by_leader.setdefault(leader, []).append(tp)
            for leader, tps in by_leader.items():
                try:
                    result = self._send_markers(leader, metadata, commit, shard.leader_epoch, tps)
                except Exception as exc:
                    logger.info("broker %d: WriteTxnMarkers to broker %d failed: %r", self.broker_id, leader, exc)
                    continue
                for tp, code in result.items():
                    if code in ("", "UNKNOWN_TOPIC_OR_PARTITION") and tp in remaining:
                        if code and self._metadata.image.topic(tp[0]) is not None:
                            continue  # the partition is not known there yet: retry
                        remaining.discard(tp)
                    elif code in (E.TRANSACTION_COORDINATOR_FENCED, E.PRODUCER_FENCED):
                        logger.warning("broker %d: markers of %r refused on %s: %s; leaving them to the current "
                                       "coordinator", self.broker_id, metadata.transactional_id, tp, code)  # fmt: skip
                        return
            if remaining:
                self._stopping.wait(MARKER_RETRY_MS[min(attempt, len(MARKER_RETRY_MS) - 1)] / 1000)
                attempt += 1
        self._complete_until_done(shard, metadata.transactional_id)

    def _complete_until_done(self, shard: _Shard, transactional_id: str) -> None:
        """TC8's last step, Complete* written, retried with the markers' backoff while the failure is retriable
        (the write found the ISR below ``min.insync.replicas`` right after a failover, or timed out) and the
        shard is still this broker's: until it is written the transaction stays Prepare* and every request of
        the id answers CONCURRENT_TRANSACTIONS, so giving up here stalled the id until the next coordinator
        load (found by ``tests/transactions/test_exactly_once_processes.py``)."""
        attempt = 0
        while True:
            try:
                self._execute(shard, partial(_markers_written, transactional_id, self.clock.time_ms()))
                return
            except TxnError as exc:
                logger.info("broker %d: completing %r: %s %s", self.broker_id, transactional_id, exc.code, exc)
                if exc.code not in COMPLETION_RETRIABLE or shard.failure:
                    return  # nothing left to complete, or a shard that failed to load (it never will)
            if self._stopping.wait(MARKER_RETRY_MS[min(attempt, len(MARKER_RETRY_MS) - 1)] / 1000):
                return
            if not self._runtime.is_current(shard):
                return  # the next coordinator loads the Prepare* state and completes it (TC11)
            attempt += 1

    def _leader_of(self, tp: TopicPartition) -> int | None:
        topic = self._metadata.image.topic(tp[0])
        reg = None if topic is None else topic.partition(tp[1])
        if reg is None or not reg.has_leader:
            return None
        return int(reg.leader)

    # --- the coordinator thread --------------------------------------------------------------------------

    def _load(self, shard: _Shard) -> None:
        partition = self._runtime.partition_to_load(shard)
        if partition is None:
            return
        try:
            records = list(read_records(partition.log))
        except Exception as exc:  # RecordFormatError, CorruptRecordError, StorageError
            shard.failure = f"cannot load {TXN_TOPIC}-{shard.partition}: {exc!r}"
            logger.warning("broker %d: %s", self.broker_id, shard.failure)
            return
        with shard.lock:
            if not self._runtime.is_current(shard):
                return
            shard.manager.load(records)
            shard.loaded = True
            decided = shard.manager.awaiting_markers()
        logger.info("broker %d: loaded %d transactional ids from %d records of %s-%d; %d awaiting markers",
                    self.broker_id, len(shard.manager), len(records), TXN_TOPIC, shard.partition,
                    len(decided))  # fmt: skip
        for metadata in decided:
            self._submit_markers(shard, metadata)

    def _tick(self) -> None:
        now_mono = self.clock.monotonic_ms()
        abort = now_mono >= self._next_abort_ms
        expire = now_mono >= self._next_expire_ms
        if not abort and not expire:
            return
        if abort:
            self._next_abort_ms = now_mono + self.config.abort_interval_ms
        if expire:
            self._next_expire_ms = now_mono + self.config.expiration_interval_ms
        now = self.clock.time_ms()
        for shard in list(self._shards.values()):
            if not shard.loaded:
                continue
            with shard.lock:
                timed_out = shard.manager.timed_out(now) if abort else []
                idle = shard.manager.expirable(now, self.config.expiration_ms) if expire else []
            for txn_id in timed_out:
                logger.info("broker %d: aborting the timed-out transaction of %r", self.broker_id, txn_id)
                self._try(shard, lambda m, t=txn_id: m.abort_timed_out(t, now))  # type: ignore[misc]
            for txn_id in idle:
                self._try(shard, lambda m, t=txn_id: m.expire(t, now, self.config.expiration_ms))  # type: ignore[misc]

    def _try(self, shard: _Shard, decide: Callable[[TransactionStateManager], Decision]) -> None:
        try:
            self._execute(shard, decide)
        except TxnError as exc:
            logger.info("broker %d: %s %s", self.broker_id, exc.code, exc)

    # --- helpers -----------------------------------------------------------------------------------------

    def _shard(self, transactional_id: str) -> _Shard:
        if not transactional_id:
            raise TxnError(E.INVALID_REQUEST, "the transactional id must not be empty")
        number = self.partition_of(transactional_id)
        return self._runtime.lookup(number, f"transaction coordinator of {transactional_id!r}")

    def _check_current(self, shard: _Shard) -> None:
        self._runtime.check_current(shard)


def _markers_written(transactional_id: str, now_ms: int, manager: TransactionStateManager) -> Decision:
    return manager.markers_written(transactional_id, now_ms)


def read_records(log: Log) -> Iterator[tuple[str, TxnMetadata | None]]:
    """Every record of a ``__transaction_state`` partition this broker has just come to lead, to its log end
    (TC11), as Kafka's ``loadTransactionsForTxnTopicPartition`` reads. Not only to the high watermark: a new
    leader's lags the records the previous leader acknowledged (they are in this log, and become committed as
    the followers catch up), and a load stopping there missed the latest state of an id: an Ongoing
    transaction whose InitProducerId then bumped the epoch without aborting it, its records on a partition
    left open, to be committed by the next transaction's marker (found by the chaos harness)."""
    offset = log.log_start_offset
    end = log.log_end_offset
    while offset < end:
        data = log.read(offset, LOAD_BUFFER_BYTES, max_offset=end, min_one_batch=True)
        if not data.records:
            break
        for header, records in iter_batches_with_records(data.records):
            offset = header.next_offset
            for r in records:
                if not r.is_control:
                    yield decode_record(r.key, r.value)


def _raise(decision: Decision) -> None:
    if decision.error:
        raise TxnError(decision.error, decision.message)
