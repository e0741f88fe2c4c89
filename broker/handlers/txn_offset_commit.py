"""TxnOffsetCommit: a transactional producer commits a group's offsets as part of its transaction
(``send_offsets_to_transaction``). To the group's coordinator; the offsets become the group's when the
transaction commits (``GroupCoordinator.commit_txn_offsets``). The group's ``__consumer_offsets`` partition must
have been added to the transaction first (AddOffsetsToTxn): the append asks the transaction coordinator
(S11), which refuses it otherwise (INVALID_TXN_STATE).

Group-level refusals (NOT_COORDINATOR, UNKNOWN_MEMBER_ID, STALE_MEMBER_EPOCH, PRODUCER_FENCED, ...) fill
``error`` and every partition; else each partition answers on its own (UNKNOWN_TOPIC_OR_PARTITION,
OFFSET_METADATA_TOO_LARGE).
"""

from __future__ import annotations

from broker.context import BrokerContext
from broker.group.errors import GroupError
from broker.group.shard import OffsetCommit
from broker.group.wire import group_error, no_coordinator
from broker.txn.verify import make_verifier
from proto import broker_pb2 as pb


def handle(ctx: BrokerContext, request: pb.TxnOffsetCommitRequest) -> pb.TxnOffsetCommitResponse:
    offsets = {
        (t.name, p.partition): (p.committed_offset, p.committed_leader_epoch, p.committed_metadata)
        for t in request.topics
        for p in t.partitions
    }
    commit = OffsetCommit(request.group_id, request.member_id, request.generation_id, request.group_instance_id,
                          offsets)  # fmt: skip
    response = pb.TxnOffsetCommitResponse()
    try:
        if ctx.coordinator is None:
            raise no_coordinator()
        verify = make_verifier(ctx, request.transactional_id)
        errors = ctx.coordinator.commit_txn_offsets(commit, request.producer_id, request.producer_epoch, verify,
                                                    ctx.classic)  # fmt: skip
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
