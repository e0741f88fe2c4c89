"""The rebalance listener: what a subscribed consumer's application hears when its partitions change.

Kafka's ``ConsumerRebalanceListener``. Every method runs on the application thread, inside
``Consumer.poll`` (or ``unsubscribe``/``close``), so it may call the consumer (``commit``, ``seek``,
``position``). Order within one reconciliation: revoked first, then assigned.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from odradek.types import TopicPartition


@runtime_checkable
class RebalanceListener(Protocol):
    """What ``Consumer.subscribe(topics, listener)`` accepts: any object with these three methods."""

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None: ...

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None: ...

    def on_partitions_lost(self, lost: set[TopicPartition]) -> None: ...


class ConsumerRebalanceListener:
    """A base class with Kafka's defaults: nothing on revoke and assign; a loss is treated as a revocation.

    ``on_partitions_revoked``: the partitions are still owned: commit what was processed (at-least-once).
    ``on_partitions_lost``: the partitions already belong to someone else (this member was fenced or
    left for not polling): a commit would fail, so do not commit.
    """

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        return None

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        return None

    def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        self.on_partitions_revoked(lost)
