"""The transaction coordinator's state machine: one transactional id's metadata and the rules that move it.

Pure (no I/O, no clock, no threads of its own): the coordinator runtime calls a method per request with the
time, gets a :class:`Decision` back, persists the decision's :class:`Transition` to ``__transaction_state``
and reports the outcome with :meth:`TransactionStateManager.complete` or :meth:`~TransactionStateManager.fail`.
Kafka's ``TransactionCoordinator`` + ``TransactionMetadata`` (the ``pendingState`` protocol), with the rules
numbered as in docs/TRANSACTIONS.md; ``tests/broker/txn/`` cite them.

States (Kafka's, same ids, the id is what ``__transaction_state`` stores)::

    Empty(0) --AddPartitions--> Ongoing(1) --EndTxn(commit)--> PrepareCommit(2) --markers--> CompleteCommit(4)
                                           --EndTxn(abort)---> PrepareAbort(3)  --markers--> CompleteAbort(5)
                                           --InitProducerId/timeout--> PrepareEpochFence(7) --> PrepareAbort(3)
    Empty, CompleteCommit, CompleteAbort --InitProducerId--> Empty (epoch + 1)
                                         --AddPartitions--> Ongoing
                                         --transactional.id.expiration.ms--> Dead(6) (a tombstone; forgotten)

PrepareEpochFence is never written: it is the step between Ongoing and the PrepareAbort that carries the
bumped epoch, which is what is written.

* TC1. Every transition is one of :data:`VALID_PREVIOUS` (asserted).
* TC2. At most one transition per transactional id is in flight (being written). While one is, every request
  for that id is answered CONCURRENT_TRANSACTIONS, before its producer id and epoch are checked (a deviation:
  Kafka checks them first; answering "retry" first means a client never sees a verdict that the write in
  flight is about to change).
* TC3. A transition takes effect only once written: :meth:`complete` installs it, :meth:`fail` forgets it and
  the metadata stays what it was (a fence that fails to be written does not bump the epoch).
* TC4. InitProducerId. No metadata: a new producer id with epoch 0, Empty. Empty or Complete*: the epoch + 1
  (past :data:`MAX_CLIENT_EPOCH` a new producer id with epoch 0), Empty. Ongoing: the epoch + 1 and an abort
  (PrepareEpochFence, then PrepareAbort), answered CONCURRENT_TRANSACTIONS: the client retries and gets its
  epoch once the abort completes. Prepare*: CONCURRENT_TRANSACTIONS. A request that names the producer id and
  epoch it had (KIP-360) must name the current ones, else PRODUCER_FENCED (a deviation: Kafka also accepts
  the epoch before the last bump, so a client whose answer was lost can retry; here a replaced (id, epoch)
  cannot come back). The timeout must lie in ``(0, transaction.max.timeout.ms]``, else
  INVALID_TRANSACTION_TIMEOUT.
* TC5. Fencing. Every other request names a producer id and epoch: another id than the transactional id's
  is INVALID_PRODUCER_ID_MAPPING, another epoch PRODUCER_FENCED. An unknown transactional id is
  INVALID_PRODUCER_ID_MAPPING.
* TC6. AddPartitionsToTxn (and AddOffsetsToTxn, which adds the group's ``__consumer_offsets`` partition):
  Empty or Complete* starts a transaction (its start time is now); Ongoing adds to it (a subset: nothing to
  write, success); Prepare*: CONCURRENT_TRANSACTIONS. At most :data:`MAX_PARTITIONS_PER_TXN` partitions.
* TC7. EndTxn. Ongoing: PrepareCommit or PrepareAbort. A retry of what is done or under way: CompleteCommit +
  commit and CompleteAbort + abort succeed, PrepareCommit + commit and PrepareAbort + abort are
  CONCURRENT_TRANSACTIONS; everything else (Empty, the opposite outcome) is INVALID_TXN_STATE.
* TC8. Markers written on every partition: PrepareCommit -> CompleteCommit, PrepareAbort -> CompleteAbort,
  partitions cleared, same producer id and epoch.
* TC9. Timeout. An Ongoing transaction older than its timeout, with nothing in flight, is aborted as in TC4's
  fence (the epoch + 1): the producer that let it expire is fenced.
* TC10. Expiration. Empty or Complete*, idle for ``transactional.id.expiration.ms``: Dead, written as a
  tombstone; once written the id is forgotten.
* TC11. Load. Replaying the written records rebuilds exactly the metadata that was installed (what
  :meth:`complete` installed, in order; a tombstone forgets). Prepare* metadata after a load needs its
  markers written again (:meth:`awaiting_markers`).
* TC12. For one transactional id, (producer id, epoch) never goes back; the epoch a client is given is at
  most :data:`MAX_CLIENT_EPOCH`.

Thread-safety: none; one :class:`TransactionStateManager` per ``__transaction_state`` partition, called under
its owner's lock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from enum import IntEnum

from broker.txn.errors import (
    CONCURRENT_TRANSACTIONS,
    INVALID_PRODUCER_ID_MAPPING,
    INVALID_REQUEST,
    INVALID_TRANSACTION_TIMEOUT,
    INVALID_TXN_STATE,
    PRODUCER_FENCED,
)

TopicPartition = tuple[str, int]

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_TIMESTAMP = -1
MAX_CLIENT_EPOCH = 32766  # Short.MAX_VALUE - 1: the last epoch InitProducerId hands out for one producer id
MAX_EPOCH = 32767  # Short.MAX_VALUE: a fence may reach it; the next InitProducerId takes a new producer id
MAX_PARTITIONS_PER_TXN = 10_000


class TxnState(IntEnum):
    """Kafka's ``TransactionState``; the value is the id written to ``__transaction_state``."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """The name ``kafka-transactions describe`` prints (``Ongoing``, ``PrepareCommit``, ...)."""
        return "".join(word.capitalize() for word in self.name.split("_"))


S = TxnState
VALID_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}
IDLE = frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT})  # no transaction: one may start
PREPARED = frozenset({S.PREPARE_COMMIT, S.PREPARE_ABORT})  # decided, markers to write


@dataclass(frozen=True, slots=True)
class TxnMetadata:
    """One transactional id's metadata: what a ``__transaction_state`` record holds (Kafka's
    ``TransactionMetadata``). ``partitions`` are the ones added to the current transaction (empty when
    there is none); ``txn_start_timestamp_ms`` is -1 when there is none."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    txn_timeout_ms: int
    state: TxnState
    partitions: frozenset[TopicPartition]
    txn_start_timestamp_ms: int
    txn_last_update_timestamp_ms: int


@dataclass(frozen=True, slots=True)
class Transition:
    """A change to persist before it takes effect (TC3). ``after.state`` DEAD is written as a tombstone.
    ``fenced``: the change went through PrepareEpochFence (an Ongoing transaction aborted under a new epoch)."""

    before: TxnMetadata | None
    after: TxnMetadata
    fenced: bool = False


@dataclass(frozen=True, slots=True)
class Decision:
    """The core's answer to one request: an error to answer now, a transition to persist, or both (a fence is
    persisted and answered CONCURRENT_TRANSACTIONS). Neither: success with nothing to write."""

    error: str = ""
    message: str = ""
    transition: Transition | None = None


def _refuse(error: str, message: str) -> Decision:
    return Decision(error, message)


class TransactionStateManager:
    """The transactional ids of one ``__transaction_state`` partition and their transitions in flight.

    ``coordinator_epoch`` is the partition's leader epoch when this broker became its coordinator: the
    markers it writes carry it, and a partition refuses markers of an older one.
    """

    def __init__(self, partition: int, coordinator_epoch: int, max_timeout_ms: int = 900_000) -> None:
        self.partition = partition
        self.coordinator_epoch = coordinator_epoch
        self.max_timeout_ms = max_timeout_ms
        self._metadata: dict[str, TxnMetadata] = {}
        self._pending: dict[str, Transition] = {}

    def __len__(self) -> int:
        return len(self._metadata)

    def __iter__(self) -> Iterator[TxnMetadata]:
        return iter(sorted(self._metadata.values(), key=lambda m: m.transactional_id))

    def metadata(self, transactional_id: str) -> TxnMetadata | None:
        return self._metadata.get(transactional_id)

    def pending(self, transactional_id: str) -> Transition | None:
        return self._pending.get(transactional_id)

    # --------------------------------------------------------------------------------- the write protocol

    def _begin(self, transition: Transition) -> Transition:
        """TC1, TC2: check the transition and mark it in flight."""
        txn_id = transition.after.transactional_id
        assert txn_id not in self._pending, f"TC2: a transition of {txn_id!r} is already in flight"
        assert self._metadata.get(txn_id) == transition.before, "a transition must start from the current metadata"
        check_transition(transition)
        self._pending[txn_id] = transition
        return transition

    def complete(self, transition: Transition) -> None:
        """TC3: ``transition`` was written; install it (DEAD forgets the id)."""
        txn_id = transition.after.transactional_id
        assert self._pending.get(txn_id) is transition, f"no such transition of {txn_id!r} in flight"
        del self._pending[txn_id]
        if transition.after.state == S.DEAD:
            self._metadata.pop(txn_id, None)
        else:
            self._metadata[txn_id] = transition.after

    def fail(self, transition: Transition) -> None:
        """TC3: ``transition`` could not be written; the metadata stays as it was."""
        txn_id = transition.after.transactional_id
        assert self._pending.get(txn_id) is transition, f"no such transition of {txn_id!r} in flight"
        del self._pending[txn_id]

    def load(self, records: Iterable[tuple[str, TxnMetadata | None]]) -> None:
        """TC11: replay ``__transaction_state`` records (``None``: a tombstone) in log order."""
        assert not self._pending, "load before any request"
        for txn_id, metadata in records:
            if metadata is None or metadata.state == S.DEAD:
                self._metadata.pop(txn_id, None)
            else:
                self._metadata[txn_id] = metadata

    def awaiting_markers(self) -> list[TxnMetadata]:
        """Decided transactions whose markers must be written (after a load, or a write of markers that
        failed): Prepare* with nothing in flight."""
        return [m for m in self if m.state in PREPARED and m.transactional_id not in self._pending]

    # ---------------------------------------------------------------------------------------- requests

    def init_producer_id(
        self,
        transactional_id: str,
        txn_timeout_ms: int,
        producer_id: int,
        producer_epoch: int,
        now_ms: int,
        allocate_producer_id: Callable[[], int],
    ) -> Decision:
        """TC4. ``producer_id``/``producer_epoch``: what the client had (-1, -1 for none)."""
        if not transactional_id:
            return _refuse(INVALID_REQUEST, "the transactional id is empty")
        if not 0 < txn_timeout_ms <= self.max_timeout_ms:
            return _refuse(
                INVALID_TRANSACTION_TIMEOUT,
                f"transaction.timeout.ms {txn_timeout_ms} is not in (0, {self.max_timeout_ms}] "
                "(transaction.max.timeout.ms)",
            )
        if transactional_id in self._pending:
            return _in_flight(transactional_id)
        current = self._metadata.get(transactional_id)
        if current is None:
            fresh = TxnMetadata(transactional_id, allocate_producer_id(), 0, txn_timeout_ms, S.EMPTY, frozenset(),
                                NO_TIMESTAMP, now_ms)  # fmt: skip
            return Decision(transition=self._begin(Transition(None, fresh)))
        if producer_id != NO_PRODUCER_ID and (producer_id, producer_epoch) != (
            current.producer_id,
            current.producer_epoch,
        ):
            return _refuse(
                PRODUCER_FENCED,
                f"producer {producer_id} epoch {producer_epoch} of {transactional_id!r} was replaced by producer "
                f"{current.producer_id} epoch {current.producer_epoch}",
            )
        if current.state in PREPARED:
            return _refuse(CONCURRENT_TRANSACTIONS, f"{transactional_id!r} is completing a transaction: retry")
        if current.state == S.ONGOING:
            return Decision(CONCURRENT_TRANSACTIONS, f"{transactional_id!r} had a transaction in progress: it is "
                            "being aborted, retry", self._begin(self._fence(current, now_ms)))  # fmt: skip
        assert current.state in IDLE, f"{transactional_id!r} in state {current.state.kafka_name}"
        if current.producer_epoch >= MAX_CLIENT_EPOCH:
            pid, epoch = allocate_producer_id(), 0
        else:
            pid, epoch = current.producer_id, current.producer_epoch + 1
        after = replace(current, producer_id=pid, producer_epoch=epoch, txn_timeout_ms=txn_timeout_ms,
                        state=S.EMPTY, partitions=frozenset(), txn_start_timestamp_ms=NO_TIMESTAMP,
                        txn_last_update_timestamp_ms=now_ms)  # fmt: skip
        return Decision(transition=self._begin(Transition(current, after)))

    def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
        now_ms: int,
    ) -> Decision:
        """TC6."""
        added = frozenset(partitions)
        current, refusal = self._checked(transactional_id, producer_id, producer_epoch)
        if current is None:
            return refusal
        if not added:
            return _refuse(INVALID_REQUEST, "no partitions to add")
        if current.state in PREPARED:
            return _refuse(CONCURRENT_TRANSACTIONS, f"{transactional_id!r} is completing a transaction: retry")
        assert current.state == S.ONGOING or current.state in IDLE, current.state
        if current.state == S.ONGOING and added <= current.partitions:
            return Decision()
        base = current.partitions if current.state == S.ONGOING else frozenset()
        union = base | added
        if len(union) > MAX_PARTITIONS_PER_TXN:
            return _refuse(INVALID_REQUEST, f"a transaction may hold at most {MAX_PARTITIONS_PER_TXN} partitions")
        start = current.txn_start_timestamp_ms if current.state == S.ONGOING else now_ms
        after = replace(current, state=S.ONGOING, partitions=union, txn_start_timestamp_ms=start,
                        txn_last_update_timestamp_ms=now_ms)  # fmt: skip
        return Decision(transition=self._begin(Transition(current, after)))

    def verify_partition(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partition: TopicPartition
    ) -> Decision:
        """Whether a partition leader may append a transactional batch of this producer (KIP-890 part 1): the
        transaction is Ongoing, the partition was added to it, the producer is the current one. Writes nothing.
        """
        current, refusal = self._checked(transactional_id, producer_id, producer_epoch)
        if current is None:
            return refusal
        if current.state != S.ONGOING or partition not in current.partitions:
            return _refuse(
                INVALID_TXN_STATE,
                f"{partition[0]}-{partition[1]} is not in an ongoing transaction of {transactional_id!r} "
                f"(state {current.state.kafka_name}): call AddPartitionsToTxn first",
            )
        return Decision()

    def end_txn(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool, now_ms: int
    ) -> Decision:
        """TC7."""
        current, refusal = self._checked(transactional_id, producer_id, producer_epoch)
        if current is None:
            return refusal
        wanted = "commit" if commit else "abort"
        state = current.state
        if state == S.ONGOING:
            target = S.PREPARE_COMMIT if commit else S.PREPARE_ABORT
            after = replace(current, state=target, txn_last_update_timestamp_ms=now_ms)
            return Decision(transition=self._begin(Transition(current, after)))
        if (state, commit) in ((S.COMPLETE_COMMIT, True), (S.COMPLETE_ABORT, False)):
            return Decision()  # a retry of what is done
        if (state, commit) in ((S.PREPARE_COMMIT, True), (S.PREPARE_ABORT, False)):
            return _refuse(CONCURRENT_TRANSACTIONS, f"the {wanted} of {transactional_id!r} is being completed")
        return _refuse(INVALID_TXN_STATE, f"cannot {wanted} {transactional_id!r} in state {state.kafka_name}")

    def markers_written(self, transactional_id: str, now_ms: int) -> Decision:
        """TC8: every partition of the decided transaction has its marker."""
        if transactional_id in self._pending:
            return _in_flight(transactional_id)
        current = self._metadata.get(transactional_id)
        if current is None or current.state not in PREPARED:
            state = "none" if current is None else current.state.kafka_name
            return _refuse(INVALID_TXN_STATE, f"{transactional_id!r} has no decided transaction (state {state})")
        target = S.COMPLETE_COMMIT if current.state == S.PREPARE_COMMIT else S.COMPLETE_ABORT
        after = replace(current, state=target, partitions=frozenset(), txn_last_update_timestamp_ms=now_ms)
        return Decision(transition=self._begin(Transition(current, after)))

    # ----------------------------------------------------------------------------- the coordinator's own

    def timed_out(self, now_ms: int) -> list[str]:
        """TC9: the transactional ids whose Ongoing transaction is older than its timeout, nothing in flight."""
        return [
            m.transactional_id
            for m in self
            if m.state == S.ONGOING
            and m.transactional_id not in self._pending
            and now_ms - m.txn_start_timestamp_ms >= m.txn_timeout_ms
        ]

    def abort_timed_out(self, transactional_id: str, now_ms: int) -> Decision:
        """TC9: fence and abort one transaction :meth:`timed_out` named (if it still is)."""
        if transactional_id not in self.timed_out(now_ms):
            return _refuse(INVALID_TXN_STATE, f"{transactional_id!r} has no timed-out transaction")
        current = self._metadata[transactional_id]
        return Decision(transition=self._begin(self._fence(current, now_ms)))

    def expirable(self, now_ms: int, expiration_ms: int) -> list[str]:
        """TC10: idle transactional ids not written for ``expiration_ms``."""
        return [
            m.transactional_id
            for m in self
            if m.state in IDLE
            and m.transactional_id not in self._pending
            and now_ms - m.txn_last_update_timestamp_ms >= expiration_ms
        ]

    def expire(self, transactional_id: str, now_ms: int, expiration_ms: int) -> Decision:
        """TC10: the tombstone of one id :meth:`expirable` named (if it still is)."""
        if transactional_id not in self.expirable(now_ms, expiration_ms):
            return _refuse(INVALID_TXN_STATE, f"{transactional_id!r} is not expirable")
        current = self._metadata[transactional_id]
        after = replace(current, state=S.DEAD, txn_last_update_timestamp_ms=now_ms)
        return Decision(transition=self._begin(Transition(current, after)))

    # -------------------------------------------------------------------------------------------- helpers

    def _checked(
        self, transactional_id: str, producer_id: int, producer_epoch: int
    ) -> tuple[TxnMetadata, Decision] | tuple[None, Decision]:
        """TC2 then TC5: the current metadata, or None and the refusal."""
        if not transactional_id:
            return None, _refuse(INVALID_REQUEST, "the transactional id is empty")
        if transactional_id in self._pending:
            return None, _in_flight(transactional_id)
        current = self._metadata.get(transactional_id)
        if current is None:
            return None, _refuse(INVALID_PRODUCER_ID_MAPPING, f"transactional id {transactional_id!r} is unknown: "
                                 "call InitProducerId first")  # fmt: skip
        if producer_id != current.producer_id:
            return None, _refuse(
                INVALID_PRODUCER_ID_MAPPING,
                f"producer id {producer_id} is not the one of {transactional_id!r} ({current.producer_id})",
            )
        if producer_epoch != current.producer_epoch:
            return None, _refuse(
                PRODUCER_FENCED,
                f"producer {producer_id} epoch {producer_epoch} of {transactional_id!r} is fenced: the current "
                f"epoch is {current.producer_epoch}",
            )
        return current, Decision()

    @staticmethod
    def _fence(current: TxnMetadata, now_ms: int) -> Transition:
        """TC4/TC9: Ongoing -> PrepareEpochFence (epoch + 1, never written) -> PrepareAbort (written)."""
        assert current.state == S.ONGOING
        assert current.producer_epoch < MAX_EPOCH, "TC12: a client never holds the last epoch"
        fence = replace(current, state=S.PREPARE_EPOCH_FENCE, producer_epoch=current.producer_epoch + 1)
        check_transition(Transition(current, fence))
        return Transition(current, replace(fence, state=S.PREPARE_ABORT, txn_last_update_timestamp_ms=now_ms),
                          fenced=True)  # fmt: skip


def _in_flight(transactional_id: str) -> Decision:
    return _refuse(CONCURRENT_TRANSACTIONS, f"a change of {transactional_id!r} is being written: retry")


def check_transition(transition: Transition) -> None:
    """TC1 and TC12 for one transition; AssertionError names the rule broken."""
    before, after = transition.before, transition.after
    if before is None:
        assert after.state == S.EMPTY, "TC1: a new transactional id starts Empty"
        assert after.producer_epoch == 0, "TC12: a new producer id starts at epoch 0"
        return
    came_from = S.PREPARE_EPOCH_FENCE if transition.fenced else before.state
    assert came_from in VALID_PREVIOUS[after.state], (
        f"TC1: {came_from.kafka_name} -> {after.state.kafka_name} is not a transition"
    )
    assert not transition.fenced or before.state in VALID_PREVIOUS[S.PREPARE_EPOCH_FENCE], "TC1: fence"
    assert after.transactional_id == before.transactional_id
    if after.producer_id == before.producer_id:
        assert after.producer_epoch >= before.producer_epoch, "TC12: an epoch never goes back"
    else:
        assert after.producer_epoch == 0, "TC12: a new producer id starts at epoch 0"
