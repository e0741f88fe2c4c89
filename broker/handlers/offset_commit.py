"""OffsetCommit: store a group's committed offsets, checked against the member's epoch.

Group-level refusals (NOT_COORDINATOR, STALE_MEMBER_EPOCH, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, ...) fill
``error`` and every partition; otherwise each partition answers on its own (UNKNOWN_TOPIC_OR_PARTITION,
OFFSET_METADATA_TOO_LARGE). The answer goes out once the commit is replicated (acks=all), else it fails.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from broker.context import BrokerContext
from broker.group.errors import GroupError
from broker.group.shard import OffsetCommit
from broker.group.wire import group_error, no_coordinator
from proto import broker_pb2 as pb

Offsets = dict[tuple[str, int], tuple[int, int, str]]  # (topic, partition) -> offset, leader epoch, metadata
R = TypeVar("R", pb.OffsetCommitResponse, pb.TxnOffsetCommitResponse)


def handle(ctx: BrokerContext, request: pb.OffsetCommitRequest) -> pb.OffsetCommitResponse:
    offsets = requested_offsets(request.topics)
    commit = OffsetCommit(request.group_id, request.member_id, request.member_epoch, request.instance_id, offsets)
    coordinator = ctx.coordinator

    def run() -> dict[tuple[str, int], str]:
        if coordinator is None:
            raise no_coordinator()
        topics = coordinator.topics()
        return coordinator.run(request.group_id, lambda core: core.commit_offsets(commit, topics))

    return answer(pb.OffsetCommitResponse(), request.topics, offsets, run)


def requested_offsets(topics: Iterable[Any]) -> Offsets:
    """The offsets of an OffsetCommit or TxnOffsetCommit request, by partition."""
    return {
        (t.name, p.partition): (p.committed_offset, p.committed_leader_epoch, p.committed_metadata)
        for t in topics
        for p in t.partitions
    }


def answer(response: R, topics: Iterable[Any], offsets: Offsets, commit: Callable[[], dict[tuple[str, int], str]]) -> R:
    """Run ``commit`` (the partitions' error codes) and answer every requested partition; a group-level
    refusal (a GroupError) fills ``error`` and every partition (OffsetCommit and TxnOffsetCommit alike)."""
    try:
        errors = commit()
    except GroupError as exc:
        response.error.CopyFrom(group_error(exc))
        errors = {tp: exc.code for tp in offsets}
    for t in topics:
        topic_answer = response.topics.add(name=t.name)
        for p in t.partitions:
            code = errors.get((t.name, p.partition), "")
            part = topic_answer.partitions.add(partition=p.partition)
            if code:
                part.error.code = code
                part.error.message = response.error.message or f"{t.name}-{p.partition}: {code}"
    return response
