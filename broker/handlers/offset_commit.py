"""OffsetCommit: store a group's committed offsets, checked against the member's epoch.

Group-level refusals (NOT_COORDINATOR, STALE_MEMBER_EPOCH, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, ...) fill
``error`` and every partition; otherwise each partition answers on its own (UNKNOWN_TOPIC_OR_PARTITION,
OFFSET_METADATA_TOO_LARGE). The answer goes out once the commit is replicated (acks=all), else it fails.
"""

from __future__ import annotations

from broker.context import BrokerContext
from broker.group.errors import GroupError
from broker.group.shard import OffsetCommit
from broker.group.wire import group_error, no_coordinator
from proto import broker_pb2 as pb


def handle(ctx: BrokerContext, request: pb.OffsetCommitRequest) -> pb.OffsetCommitResponse:
    offsets = {
        (t.name, p.partition): (p.committed_offset, p.committed_leader_epoch, p.committed_metadata)
        for t in request.topics
        for p in t.partitions
    }
    commit = OffsetCommit(request.group_id, request.member_id, request.member_epoch, request.instance_id, offsets)
    coordinator = ctx.coordinator
    response = pb.OffsetCommitResponse()
    try:
        if coordinator is None:
            raise no_coordinator()
        topics = coordinator.topics()
        errors = coordinator.run(request.group_id, lambda core: core.commit_offsets(commit, topics))
    except GroupError as exc:
        response.error.CopyFrom(group_error(exc))
        errors = {tp: exc.code for tp in offsets}
    for t in request.topics:
        answer = response.topics.add(name=t.name)
        for p in t.partitions:
            code = errors.get((t.name, p.partition), "")
            part = answer.partitions.add(partition=p.partition)
            if code:
                part.error.code = code
                part.error.message = response.error.message or f"{t.name}-{p.partition}: {code}"
    return response
