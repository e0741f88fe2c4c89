"""DelayedProduce: an acks=all Produce that waits until the ISR has its records, as a purgatory operation.

After the leader append, each partition waits until its high watermark reaches the offset after the
batch's last one (every ISR member has it). The operation completes (Kafka's ``DelayedProduce``) when every
partition is settled, each by one of:

A. the high watermark reached the required offset: success, or NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR
   is then smaller than ``min.insync.replicas`` (the records are in the log, but not as durable as asked);
B. this broker no longer leads the partition in the epoch of the append: NOT_LEADER_OR_FOLLOWER (the
   records may or may not survive; the producer retries);
or when
C. ``timeout_ms`` passed: every unsettled partition answers REQUEST_TIMED_OUT.

With the ISR = {leader} (RF=1) the high watermark moves with the append, so it completes at once. The
follower-progress and ISR-change paths call ``check_and_complete`` on the partition's key.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from broker.errors import NOT_LEADER_OR_FOLLOWER, REQUEST_TIMED_OUT
from broker.purgatory import DelayedOperation
from replication.partition import Partition

TopicPartition = tuple[str, int]


@dataclass(slots=True)
class ProduceStatus:
    """One appended partition: what it needs (``required_offset``) and, once settled, its error ("" = ok)."""

    key: TopicPartition
    required_offset: int
    leader_epoch: int
    settled: bool = False
    error: str = ""


class DelayedProduce(DelayedOperation):
    """A waiting acks=all Produce; see the module docstring for its completion cases.

    Thread-safety: ``statuses`` are written under the operation's check lock (by ``try_complete``), and read
    by the request thread after completion; ``on_complete`` takes the same lock (re-entrant) to settle the
    rest with REQUEST_TIMED_OUT.
    """

    def __init__(
        self,
        timeout_ms: float,
        statuses: Sequence[ProduceStatus],
        lookup: Callable[[TopicPartition], Partition | None],
    ) -> None:
        super().__init__(timeout_ms)
        self.statuses = list(statuses)
        self._lookup = lookup

    @property
    def keys(self) -> list[TopicPartition]:
        return [s.key for s in self.statuses]

    def try_complete(self) -> bool:
        for status in self.statuses:
            if status.settled:
                continue
            partition = self._lookup(status.key)
            if partition is None:
                status.settled, status.error = True, NOT_LEADER_OR_FOLLOWER
            else:
                status.settled, status.error = partition.acks_status(status.required_offset, status.leader_epoch)
        if all(s.settled for s in self.statuses):
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        with self._check_lock:
            for status in self.statuses:
                if not status.settled:
                    status.settled, status.error = True, REQUEST_TIMED_OUT
