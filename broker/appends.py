"""One request's appends, in order, then its acks=all wait (:meth:`ReplicaManager.append_records`).

:class:`PendingAppend` appends each ``(partition, records)`` as leader in the order given (a failure is that
partition's and does not stop the others), wakes the fetches waiting on each, and for acks=all parks a
:class:`~broker.delayed_produce.DelayedProduce` until the ISR has every appended batch, or the request's
deadline. A caller on a thread that must not wait (the gRPC event loop) runs it with ``hold=False``: it then
stops at the first batch that would be held for its turn (``log.producer_state`` S8), or that must ask the
transaction coordinator first (S11: ``verify``), and is resumed later
(:meth:`PendingAppend.resume`) on a worker thread, from that batch on, so the order holds.

Thread-safety: one request's object, used by one thread at a time (the loop, then a worker); ``wait`` from
the thread that waits.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from broker.delayed_produce import DelayedProduce, ProduceStatus
from broker.log_manager import TopicPartition
from broker.purgatory import DelayedOperation, Purgatory
from common.clock import Clock
from log import trace
from log.append import AppendInfo
from replication.partition import Partition, Verifier


class Replicas(Protocol):
    """What a :class:`PendingAppend` uses of the ``ReplicaManager`` (which imports this module, not the other
    way round)."""

    @property
    def clock(self) -> Clock: ...

    @property
    def produce_purgatory(self) -> Purgatory[DelayedOperation]: ...

    def partition(self, topic: str, partition: int) -> Partition | None: ...

    def complete_delayed(self, *keys: TopicPartition) -> None: ...

WAIT_SLACK_S = 5.0  # beyond the timeout, in case the purgatory's timer thread is late


@dataclass(slots=True)
class AppendResult:
    """One partition of an :meth:`ReplicaManager.append_records`: the append's ``info``, or the exception
    it raised (``exception``; nothing written); for acks=all, once waited, ``status`` says whether the ISR
    got the records (``status.error`` "" when it did)."""

    key: TopicPartition
    info: AppendInfo | None = None
    exception: Exception | None = None
    status: ProduceStatus | None = None
    appended_ns: int = 0  # with ``log.trace`` on: when the append ended, before it woke any waiting fetch

    @property
    def replication_error(self) -> str:
        """acks=all: the error code of the wait ("" once the ISR has the records, or not acks=all)."""
        return "" if self.status is None else self.status.error


class PendingAppend:
    """One request's appends and acks=all wait; see the module docstring. :meth:`wait` (acks=all) until the
    ISR has them."""

    def __init__(
        self, manager: Replicas, entries: Sequence[tuple[Partition, bytes | memoryview]], acks: int,
        deadline_ms: float, leader_epoch: int | None, wait: bool, verify: Verifier | None = None,
    ) -> None:  # fmt: skip
        self.results: list[AppendResult] = []
        self._manager = manager
        self._entries = entries
        self._acks = acks
        self._deadline_ms = deadline_ms
        self._leader_epoch = leader_epoch
        self._wait = wait
        self._verify = verify  # S11: transactional batches opening a transaction ask the coordinator
        self._operation: DelayedProduce | None = None

    @property
    def held(self) -> bool:
        """Stopped at a batch that must wait for its turn (``run(hold=False)``): :meth:`resume` goes on."""
        return len(self.results) < len(self._entries)

    def run(self, hold: bool) -> None:
        """Append the entries not appended yet, in order; with every one done, park the acks=all wait."""
        manager = self._manager
        for partition, records in self._entries[len(self.results) :]:
            result = AppendResult(partition.key)
            epoch = partition.leader_epoch if self._leader_epoch is None else self._leader_epoch  # before it
            try:
                result.info = partition.append_as_leader(records, self._acks, deadline_ms=self._deadline_ms,
                                                         hold=hold, verify=self._verify)  # fmt: skip
            except Exception as exc:
                if not hold and getattr(exc, "ahead", False):
                    return  # held: resume() appends it, and the rest, on a thread that may wait
                result.exception = exc
                self.results.append(result)
                continue
            self.results.append(result)
            if trace.ON:  # before the wake-ups: a parked follower fetch may be answered inside complete_delayed
                result.appended_ns = trace.now_ns()
            manager.complete_delayed(partition.key)  # waiting fetches (and, with ISR = {leader}, produces)
            if self._acks == -1 and self._wait:
                result.status = ProduceStatus(partition.key, result.info.last_offset + 1, epoch)
        self._park()

    def resume(self) -> PendingAppend:
        """Go on after a held batch (on a thread that may wait for it)."""
        self.run(hold=True)
        return self

    def _park(self) -> None:
        statuses = [r.status for r in self.results if r.status is not None]
        if not statuses:
            return
        manager = self._manager
        remaining_ms = max(0.0, self._deadline_ms - manager.clock.monotonic_ms())
        op = DelayedProduce(remaining_ms, statuses, lambda key: manager.partition(*key))
        if not manager.produce_purgatory.try_complete_else_watch(op, op.keys):
            self._operation = op

    @property
    def operation(self) -> DelayedProduce | None:
        """The acks=all wait still in progress (None: nothing to wait for)."""
        return self._operation

    @property
    def wait_s(self) -> float:
        """How long to wait for the operation before expiring it (its own timer should have fired by then)."""
        return 0.0 if self._operation is None else self._operation.delay_ms / 1000 + WAIT_SLACK_S

    def wait(self) -> list[AppendResult]:
        """Block until the DelayedProduce completed (bounded by its timeout plus :data:`WAIT_SLACK_S`, then
        expired); returns ``results``."""
        op = self._operation
        if op is not None and not op.wait(op.delay_ms / 1000 + WAIT_SLACK_S):
            op.expire()
        return self.results
