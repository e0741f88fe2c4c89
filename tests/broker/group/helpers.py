"""Test helpers for the group state machine: a fixed topics view and heartbeat shortcuts."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from broker.group.config import GroupConfig
from broker.group.records import TopicPartition
from broker.group.shard import GroupShard, Heartbeat, HeartbeatResult
from common.clock import ManualClock


@dataclass
class Topics:
    counts: dict[str, int] = field(default_factory=dict)

    def partition_count(self, topic: str) -> int | None:
        return self.counts.get(topic)

    def topic_names(self) -> Iterable[str]:
        return list(self.counts)


CONFIG = GroupConfig(session_timeout_ms=10_000, min_session_timeout_ms=1_000, heartbeat_interval_ms=1_000)


def make_shard(clock: ManualClock | None = None) -> GroupShard:
    ids = iter(f"m{i}" for i in range(1, 10_000))
    return GroupShard(0, CONFIG, clock or ManualClock(), new_member_id=lambda: next(ids))


def join(shard: GroupShard, topics: Topics, names: list[str], *, instance_id: str = "", group: str = "g",
         assignor: str = "") -> HeartbeatResult:  # fmt: skip
    result, _ = shard.heartbeat(
        Heartbeat(
            group,
            "",
            0,
            instance_id=instance_id,
            subscribed_topic_names=tuple(names),
            server_assignor=assignor,
            owned=frozenset(),
            rebalance_timeout_ms=5_000,
        ),  # fmt: skip
        topics,
    )
    return result


def beat(shard: GroupShard, topics: Topics, member_id: str, epoch: int, owned: Iterable[TopicPartition] | None,
         *, instance_id: str = "", group: str = "g") -> HeartbeatResult:  # fmt: skip
    result, _ = shard.heartbeat(
        Heartbeat(
            group, member_id, epoch, instance_id=instance_id, owned=None if owned is None else frozenset(owned)
        ),  # fmt: skip
        topics,
    )
    return result
