"""Conversions between the group RPCs' protobuf messages and the state machine's values."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from broker.group import errors as E
from broker.group.errors import GroupError
from broker.group.records import TopicPartition
from proto import broker_pb2 as pb
from proto import common_pb2


def to_topic_partitions(tps: Iterable[TopicPartition]) -> list[pb.TopicPartitions]:
    by_topic: dict[str, list[int]] = defaultdict(list)
    for topic, number in tps:
        by_topic[topic].append(number)
    return [pb.TopicPartitions(topic=t, partitions=sorted(ps)) for t, ps in sorted(by_topic.items())]


def from_topic_partitions(items: Iterable[Any]) -> frozenset[TopicPartition]:
    return frozenset((tp.topic, p) for tp in items for p in tp.partitions)


def group_error(exc: GroupError) -> common_pb2.Error:
    return common_pb2.Error(code=exc.code, message=str(exc))


def no_coordinator() -> GroupError:
    return GroupError(E.COORDINATOR_NOT_AVAILABLE, "this broker runs no group coordinator")
