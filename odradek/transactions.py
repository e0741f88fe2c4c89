"""The transactional producer's side of Kafka's transactions (the transactional part of Kafka's
``TransactionManager``; docs/TRANSACTIONS.md).

States and what moves them (one lock; the application's thread calls, the sender thread reports errors)::

    UNINITIALIZED --init_transactions--> READY --begin_transaction--> IN_TRANSACTION
    IN_TRANSACTION --commit_transaction--> READY        (flush, then EndTxn(commit))
    IN_TRANSACTION / ABORTABLE --abort_transaction--> READY   (unsent records dropped, EndTxn(abort))
    IN_TRANSACTION --a record failed--> ABORTABLE       (commit raises the cause; abort_transaction recovers)
    any --the coordinator answers PRODUCER_FENCED, INVALID_PRODUCER_EPOCH, INVALID_PRODUCER_ID_MAPPING--> FATAL
                                                        (close the producer)

A record refused for its epoch (INVALID_PRODUCER_EPOCH, PRODUCER_FENCED from a partition leader) makes the
transaction ABORTABLE, not the producer FATAL (Kafka's KIP-588): a leader's verdict may be stale (a leader cut
off from the others answers from its own coordinator's old state), and the abort asks the coordinator, which
fences the producer (FATAL) only if a newer instance took its transactional id.

* C1. ``init_transactions`` finds the transaction coordinator (FindCoordinator key_type 1) and asks it for the
  producer id and epoch (InitProducerId with the transactional id and ``transaction.timeout.ms``), retrying
  CONCURRENT_TRANSACTIONS and coordinator moves within ``max.block.ms``: a previous instance's open
  transaction is aborted first, and the previous instance is fenced.
* C2. A record goes to a partition only once the coordinator added that partition to the transaction:
  ``send`` queues the record and registers the partition; an adder thread sends one AddPartitionsToTxn for
  every partition registered meanwhile (as Kafka's sender does), and the accumulator drains a partition's
  batches only once it is added (:class:`TransactionalGate`). ``send`` outside a transaction raises.
  The coordinator answers EndTxn once PrepareCommit/PrepareAbort is written and writes the markers after, so
  the next transaction's first AddPartitionsToTxn usually meets CONCURRENT_TRANSACTIONS until the previous one
  is complete: as Kafka's producer, it retries that one every ``ADD_PARTITIONS_RETRY_BACKOFF_MS`` (20 ms)
  rather than after ``retry.backoff.ms`` (100 ms, doubling), which would hold the new transaction's records.
  An AddPartitionsToTxn that fails (an error, or no answer within ``max.block.ms``) makes the transaction
  ABORTABLE, and the records of its partitions fail unsent, with its error: they are never sent. A partition
  may still hold the previous transaction open (its coordinator cut off before it wrote the markers), and a
  record sent there would join that transaction and be committed with it, while the others of its own
  transaction are refused (a partial transaction).
* C3. ``send_offsets_to_transaction`` adds the group's offsets partition (AddOffsetsToTxn), then commits the
  offsets to the group's coordinator as part of the transaction (TxnOffsetCommit).
* C4. ``commit_transaction`` first flushes: every record is written or has failed. If one failed, the commit
  raises its error and the transaction must be aborted; if it failed with a fatal error (the producer fenced),
  the commit raises that (C6) and nothing is committed. Then EndTxn(commit), retried while the coordinator
  answers CONCURRENT_TRANSACTIONS or moves. A transaction to which nothing was added ends locally.
* C5. ``abort_transaction`` drops the records not sent yet (their futures fail with TransactionAbortedError),
  waits for those in flight, then EndTxn(abort). If the producer's sequence numbers need a new epoch
  (``odradek.idempotence`` P6), it then asks InitProducerId with its current id and epoch for the next one.
* C6. After a fatal error every call raises it.
"""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from common.clock import Clock
from odradek.accumulator import ProducerBatch
from odradek.errors import (
    ConcurrentTransactionsError,
    IllegalStateError,
    InvalidProducerEpochError,
    InvalidProducerIdMappingError,
    KafkaError,
    KafkaTimeoutError,
    ProducerFencedError,
    error_from_code,
)
from odradek.group.coordinator import REDISCOVER_CODES, TRANSACTION_KEY_TYPE, CoordinatorClient
from odradek.idempotence import IdempotenceState
from odradek.net import ClusterClient
from odradek.txn_handle import TransactionHandle
from odradek.types import ConsumerGroupMetadata, TopicPartition
from proto import broker_pb2

FATAL_CODES = frozenset({"PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH", "INVALID_PRODUCER_ID_MAPPING",
                         "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"})  # fmt: skip
# a partition leader's refusal of a record's epoch: abortable, the coordinator decides on fencing (KIP-588)
EPOCH_REFUSALS = frozenset({"INVALID_PRODUCER_EPOCH", "PRODUCER_FENCED"})
ADD_PARTITIONS_RETRY_BACKOFF_MS = 20.0  # Kafka's TransactionManager.ADD_PARTITIONS_RETRY_BACKOFF_MS
RETRY_CODES = frozenset({"CONCURRENT_TRANSACTIONS", "COORDINATOR_LOAD_IN_PROGRESS", "REQUEST_TIMED_OUT",
                         "NOT_ENOUGH_REPLICAS", "UNKNOWN_TOPIC_OR_PARTITION"})  # fmt: skip


class State(enum.Enum):
    UNINITIALIZED = "uninitialized"
    READY = "ready"
    IN_TRANSACTION = "in transaction"
    ABORTABLE = "abortable error"
    FATAL = "fatal error"


class TransactionManager:
    """See the module docstring. Thread-safe: one lock guards the state; the coordinator calls are made by the
    application's thread (one transaction call at a time is the application's contract, as in Kafka)."""

    def __init__(
        self,
        client: ClusterClient,
        transactional_id: str,
        transaction_timeout_ms: int,
        idempotence: IdempotenceState,
        clock: Clock,
        max_block_ms: int,
        wakeup: Callable[[], None] = lambda: None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.transactional_id = transactional_id
        self._timeout_ms = transaction_timeout_ms
        self._client = client
        self._idempotence = idempotence
        self._clock = clock
        self._max_block_ms = max_block_ms
        self._coordinator = CoordinatorClient(client, transactional_id, TRANSACTION_KEY_TYPE)
        self._lock = threading.Lock()
        self._state = State.UNINITIALIZED
        self._partitions: set[TopicPartition] = set()  # registered in the current transaction (C2)
        self._added: frozenset[TopicPartition] = frozenset()  # added by the coordinator (read by the sender)
        self._pending: set[TopicPartition] = set()  # registered, AddPartitionsToTxn not answered yet
        # partitions whose AddPartitionsToTxn failed, and why: their records fail unsent (C2; read by the sender;
        # the dict is replaced, never mutated)
        self._refused: dict[TopicPartition, BaseException] = {}
        self._changed = threading.Condition(self._lock)
        self._adder: threading.Thread | None = None
        self._closed = False
        self._wakeup = wakeup  # the sender: a partition was added, its batches may go
        self._sleep = sleep  # a retry's backoff wait, in seconds (this object's own: tests record it)
        self._started = False  # the coordinator knows of the current transaction
        self._error: BaseException | None = None  # why ABORTABLE or FATAL

    @property
    def state(self) -> State:
        return self._state

    # ------------------------------------------------------------------------------------- calls

    def init_transactions(self, timeout_ms: float | None = None) -> None:
        """C1."""
        with self._lock:
            self._check_not_fatal()
            if self._state is not State.UNINITIALIZED:
                raise IllegalStateError(f"init_transactions() in state {self._state.value}: call it once")
        pid, epoch = self._init_producer_id(-1, -1, timeout_ms)
        with self._lock:
            self._idempotence.set_producer_id(pid, epoch)
            self._state = State.READY

    def begin_transaction(self) -> None:
        with self._lock:
            self._check_not_fatal()
            if self._state is not State.READY:
                raise IllegalStateError(f"begin_transaction() in state {self._state.value}" + _HINTS[self._state])
            self._state = State.IN_TRANSACTION
            self._partitions = set()
            self._added = frozenset()
            self._refused = {}
            self._started = False
            self._error = None

    def before_send(self, tp: TopicPartition) -> None:
        """C2: called by ``send`` for the record's partition before it is queued: registers the partition for
        the adder thread (never waits for the coordinator)."""
        if tp in self._partitions and self._state is State.IN_TRANSACTION:
            return
        with self._lock:
            self._check_not_fatal()
            if self._state is State.ABORTABLE:
                raise IllegalStateError(f"the transaction must be aborted: {self._error}") from self._error
            if self._state is not State.IN_TRANSACTION:
                raise IllegalStateError(f"send() of a transactional producer outside a transaction (state "
                                        f"{self._state.value}): call begin_transaction() first")  # fmt: skip
            if tp in self._partitions:
                return
            self._partitions.add(tp)
            self._pending.add(tp)
            if self._adder is None:
                self._adder = threading.Thread(target=self._add_partitions, daemon=True,
                                               name=f"odradek-txn-adder-{self.transactional_id}")  # fmt: skip
                self._adder.start()
            self._changed.notify_all()

    def is_added(self, tp: TopicPartition) -> bool:
        """Whether batches of ``tp`` may be sent (the sender thread asks; the set is replaced, never mutated)."""
        return tp in self._added

    def refused(self) -> Mapping[TopicPartition, BaseException]:
        """The partitions whose AddPartitionsToTxn failed, with its error: the sender fails their records (C2)."""
        return self._refused

    def _add_partitions(self) -> None:
        """The adder thread: one AddPartitionsToTxn for the partitions registered meanwhile, again and again."""
        while True:
            with self._lock:
                while not self._pending and not self._closed:
                    self._changed.wait()
                if self._closed:
                    return
                batch = sorted(self._pending)
            request = broker_pb2.AddPartitionsToTxnRequest(transactional_id=self.transactional_id,
                                                           producer_id=self._idempotence.producer_id,
                                                           producer_epoch=self._idempotence.producer_epoch)
            by_topic: dict[str, list[int]] = {}
            for tp in batch:
                by_topic.setdefault(tp.topic, []).append(tp.partition)
            for topic, numbers in by_topic.items():
                request.topics.add(topic=topic, partitions=numbers)
            error: BaseException | None = None
            try:
                # the first partitions of a transaction: the previous one may still be completing (C2)
                first = not self._started
                self._call("AddPartitionsToTxn", request, _add_partitions_error,
                           concurrent_backoff_ms=ADD_PARTITIONS_RETRY_BACKOFF_MS if first else None)  # fmt: skip
            except Exception as exc:  # _call made the transaction ABORTABLE or the producer FATAL (a timeout: below)
                error = exc
            with self._lock:
                self._pending.difference_update(batch)
                if error is None:
                    self._added = self._added | frozenset(batch)
                    self._started = True
                else:
                    # C2: never sent (a partition may hold the previous transaction open); they fail unsent
                    if self._state is State.IN_TRANSACTION:
                        self._state = State.ABORTABLE
                        self._error = error
                    self._refused = {**self._refused, **dict.fromkeys(batch, error)}
                self._changed.notify_all()
            self._wakeup()

    def _wait_for_adds(self) -> None:
        """Until no AddPartitionsToTxn is outstanding (bounded by ``max.block.ms``)."""
        deadline = time.monotonic() + self._max_block_ms / 1000
        with self._lock:
            while self._pending:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise KafkaTimeoutError(f"AddPartitionsToTxn for {self.transactional_id!r} did not finish "
                                            f"within {self._max_block_ms} ms")  # fmt: skip
                self._changed.wait(remaining)

    def close(self) -> None:
        """Stop the adder thread (the producer closes)."""
        with self._lock:
            self._closed = True
            self._changed.notify_all()

    def send_offsets_to_transaction(
        self, offsets: Mapping[TopicPartition, int], group_metadata: ConsumerGroupMetadata | str
    ) -> None:
        """C3. ``offsets``: the next offset to consume per partition (as ``Consumer.commit`` takes them)."""
        metadata = group_metadata if isinstance(group_metadata, ConsumerGroupMetadata) else \
            ConsumerGroupMetadata(str(group_metadata))  # fmt: skip
        with self._lock:
            self._check_in_transaction("send_offsets_to_transaction()")
        pid, epoch = self._idempotence.producer_id, self._idempotence.producer_epoch
        self._call("AddOffsetsToTxn", broker_pb2.AddOffsetsToTxnRequest(
            transactional_id=self.transactional_id, producer_id=pid, producer_epoch=epoch,
            group_id=metadata.group_id))  # fmt: skip
        with self._lock:
            self._started = True
        request = broker_pb2.TxnOffsetCommitRequest(
            transactional_id=self.transactional_id, group_id=metadata.group_id, producer_id=pid, producer_epoch=epoch,
            generation_id=metadata.generation_id, member_id=metadata.member_id,
            group_instance_id=metadata.group_instance_id or "",
        )  # fmt: skip
        by_topic: dict[str, list[tuple[int, int]]] = {}
        for tp, offset in offsets.items():
            by_topic.setdefault(tp.topic, []).append((tp.partition, offset))
        for topic, items in sorted(by_topic.items()):
            t = request.topics.add(name=topic)
            for partition, offset in sorted(items):
                t.partitions.add(partition=partition, committed_offset=offset, committed_leader_epoch=-1)
        group = CoordinatorClient(self._client, metadata.group_id)
        response = group.call("TxnOffsetCommit", lambda: request, self._max_block_ms,
                              error_code=_txn_offset_commit_error)  # fmt: skip
        code = _txn_offset_commit_error(response)
        if code:
            self._fail(error_from_code(code, f"TxnOffsetCommit for group {metadata.group_id!r}: {code}"))

    def commit_transaction(self, flush: Callable[[], None]) -> None:
        """C4."""
        with self._lock:
            self._check_in_transaction("commit_transaction()")
        flush()
        self._wait_for_adds()
        with self._lock:
            # a record that failed during the flush made the transaction ABORTABLE, or the producer FATAL (C6:
            # fenced): either way it must not be committed without that record
            self._check_in_transaction("commit_transaction()")
            started = self._started
        if started:
            self._end(commit=True)
        with self._lock:
            self._check_not_fatal()
            self._state = State.READY

    def abort_transaction(self, abort_unsent: Callable[[], None], flush: Callable[[], None]) -> None:
        """C5."""
        with self._lock:
            self._check_not_fatal()
            if self._state not in (State.IN_TRANSACTION, State.ABORTABLE):
                raise IllegalStateError(f"abort_transaction() in state {self._state.value}: no transaction")
            started = self._started
        abort_unsent()
        flush()
        self._wait_for_adds()
        with self._lock:
            self._check_not_fatal()
            started = self._started
        if started:
            self._end(commit=False)
        if self._idempotence.bump_requested:  # C5: the sequences need the next epoch
            pid, epoch = self._init_producer_id(self._idempotence.producer_id, self._idempotence.producer_epoch,
                                                None)  # fmt: skip
            self._idempotence.set_producer_id(pid, epoch)
        with self._lock:
            self._state = State.READY
            self._error = None

    def handle(self) -> TransactionHandle:
        """The open transaction, to be ended elsewhere (``odradek.txn_handle``); ABORTABLE raises its cause."""
        with self._lock:
            self._check_in_transaction("transaction_handle()")
            return TransactionHandle(self.transactional_id, self._idempotence.producer_id,
                                     self._idempotence.producer_epoch)  # fmt: skip

    def on_record_error(self, error: BaseException) -> None:
        """The sender thread: a record of the current transaction failed (ABORTABLE; FATAL for a fatal error other
        than the epoch's, which only the coordinator decides: module docstring)."""
        code = getattr(error, "code", "")
        with self._lock:
            if code in FATAL_CODES and code not in EPOCH_REFUSALS:
                self._state = State.FATAL
                self._error = error
            elif self._state is State.IN_TRANSACTION:
                self._state = State.ABORTABLE
                self._error = error

    # ----------------------------------------------------------------------------------- helpers

    def _end(self, commit: bool) -> None:
        self._call("EndTxn", broker_pb2.EndTxnRequest(
            transactional_id=self.transactional_id, producer_id=self._idempotence.producer_id,
            producer_epoch=self._idempotence.producer_epoch, committed=commit))  # fmt: skip

    def _init_producer_id(self, pid: int, epoch: int, timeout_ms: float | None) -> tuple[int, int]:
        request = broker_pb2.InitProducerIdRequest(transactional_id=self.transactional_id,
                                                   transaction_timeout_ms=self._timeout_ms, producer_id=pid,
                                                   producer_epoch=epoch)  # fmt: skip
        response = self._call("InitProducerId", request, timeout_ms=timeout_ms)
        return int(response.producer_id), int(response.producer_epoch)

    def _call(
        self,
        method: str,
        request: Any,
        error_code: Callable[[Any], str] = lambda r: str(r.error.code),
        timeout_ms: float | None = None,
        concurrent_backoff_ms: float | None = None,
    ) -> Any:
        """Call the transaction coordinator until it answers something else than a retriable error, within
        ``max.block.ms``; a fatal answer makes the producer FATAL, another error is raised as is. Retries wait
        ``retry.backoff.ms`` (doubling), or ``concurrent_backoff_ms`` after CONCURRENT_TRANSACTIONS when given."""
        budget = self._max_block_ms if timeout_ms is None else timeout_ms
        deadline = self._clock.monotonic_ms() + budget
        attempt = 0
        while True:
            remaining = deadline - self._clock.monotonic_ms()
            if remaining <= 0:
                raise KafkaTimeoutError(f"{method} for transactional id {self.transactional_id!r} did not succeed "
                                        f"within {budget:.0f} ms")  # fmt: skip
            response = self._coordinator.call(method, lambda: request, remaining, error_code)
            code = error_code(response)
            if not code:
                return response
            if code in RETRY_CODES and code not in REDISCOVER_CODES:
                backoff_ms = self._client.backoff.backoff_ms(attempt)
                if concurrent_backoff_ms is not None and code == "CONCURRENT_TRANSACTIONS":
                    backoff_ms = min(backoff_ms, concurrent_backoff_ms)
                self._sleep(min(backoff_ms, max(0.0, remaining)) / 1000)
                attempt += 1
                continue
            error = error_from_code(code, f"{method} for transactional id {self.transactional_id!r}: "
                                    f"{_message(response) or code}")  # fmt: skip
            self._fail(error)

    def _fail(self, error: KafkaError) -> None:
        """Raise ``error``; a fatal one makes the producer FATAL (C6), another one the transaction ABORTABLE."""
        with self._lock:
            if error.code in FATAL_CODES:
                self._state = State.FATAL
                self._error = _fenced(error) if error.code != "INVALID_PRODUCER_ID_MAPPING" else error
                raise self._error from None
            if self._state is State.IN_TRANSACTION:
                self._state = State.ABORTABLE
                self._error = error
        raise error

    def _check_not_fatal(self) -> None:
        if self._state is State.FATAL:
            assert self._error is not None
            raise self._error

    def _check_in_transaction(self, what: str) -> None:
        self._check_not_fatal()
        if self._state is State.ABORTABLE and what != "abort_transaction()":
            assert self._error is not None
            raise self._error
        if self._state is not State.IN_TRANSACTION:
            raise IllegalStateError(f"{what} in state {self._state.value}" + _HINTS[self._state])


class TransactionalGate:
    """The accumulator's drain gate for a transactional producer: a batch goes out once its partition is in the
    transaction (C2), then as idempotence says (``odradek.idempotence``)."""

    def __init__(self, idempotence: IdempotenceState, transactions: TransactionManager) -> None:
        self._idempotence = idempotence
        self._transactions = transactions

    def may_drain(self, batch: ProducerBatch, in_flight: int) -> bool:
        return self._transactions.is_added(batch.tp) and self._idempotence.may_drain(batch, in_flight)

    def on_drain(self, batch: ProducerBatch) -> None:
        self._idempotence.on_drain(batch)


_HINTS = {
    State.UNINITIALIZED: ": call init_transactions() first",
    State.READY: ": call begin_transaction() first",
    State.IN_TRANSACTION: ": a transaction is in progress (commit or abort it)",
    State.ABORTABLE: ": the transaction must be aborted",
    State.FATAL: ": the producer is fenced or failed; close it",
}


def _fenced(error: BaseException) -> ProducerFencedError:
    if isinstance(error, ProducerFencedError):
        return error
    return ProducerFencedError(f"this producer was fenced by a newer instance with the same transactional.id: "
                               f"{error}")  # fmt: skip


def _message(response: Any) -> str:
    error = getattr(response, "error", None)
    return str(getattr(error, "message", "")) if error is not None else ""


def _add_partitions_error(response: broker_pb2.AddPartitionsToTxnResponse) -> str:
    if response.error.code:
        return str(response.error.code)
    for p in response.partitions:
        if p.error.code:
            return str(p.error.code)
    return ""


def _txn_offset_commit_error(response: broker_pb2.TxnOffsetCommitResponse) -> str:
    if response.error.code:
        return str(response.error.code)
    for t in response.topics:
        for p in t.partitions:
            if p.error.code:
                return str(p.error.code)
    return ""


__all__ = ["ConcurrentTransactionsError", "InvalidProducerEpochError", "InvalidProducerIdMappingError", "State",
           "TransactionManager"]  # fmt: skip
