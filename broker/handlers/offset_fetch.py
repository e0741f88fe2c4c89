"""OffsetFetch: a group's committed offsets (-1 where none); every committed partition when none is named.

A member's fetch (``member_id`` and ``member_epoch`` >= 0) is checked: UNKNOWN_MEMBER_ID,
STALE_MEMBER_EPOCH. An unknown group answers -1 offsets without error, as Kafka.
"""

from __future__ import annotations

from collections import defaultdict

from broker.context import BrokerContext
from broker.group.errors import GroupError
from broker.group.wire import group_error, no_coordinator
from proto import broker_pb2 as pb


def handle(ctx: BrokerContext, request: pb.OffsetFetchRequest) -> pb.OffsetFetchResponse:
    response = pb.OffsetFetchResponse()
    wanted = [(t.topic, p) for t in request.topics for p in t.partitions] if request.topics else None
    coordinator = ctx.coordinator
    try:
        if coordinator is None:
            raise no_coordinator()
        offsets = coordinator.read(
            request.group_id,
            lambda core: core.fetch_offsets(request.group_id, request.member_id, request.member_epoch, wanted),
        )
    except GroupError as exc:
        response.error.CopyFrom(group_error(exc))
        return response
    by_topic: dict[str, list[tuple[int, tuple[int, int, str]]]] = defaultdict(list)
    for (topic, number), value in offsets.items():
        by_topic[topic].append((number, value))
    for topic, parts in by_topic.items():
        answer = response.topics.add(name=topic)
        for number, (offset, leader_epoch, metadata) in sorted(parts):
            answer.partitions.add(
                partition=number, committed_offset=offset, committed_leader_epoch=leader_epoch, metadata=metadata
            )
    return response
