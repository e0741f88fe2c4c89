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
from broker.group.shard import OffsetCommit
from broker.group.wire import no_coordinator
from broker.handlers.offset_commit import answer, requested_offsets
from broker.txn.verify import make_verifier
from proto import broker_pb2 as pb


def handle(ctx: BrokerContext, request: pb.TxnOffsetCommitRequest) -> pb.TxnOffsetCommitResponse:
    offsets = requested_offsets(request.topics)
    commit = OffsetCommit(request.group_id, request.member_id, request.generation_id, request.group_instance_id,
                          offsets)  # fmt: skip

    def run() -> dict[tuple[str, int], str]:
        if ctx.coordinator is None:
            raise no_coordinator()
        verify = make_verifier(ctx, request.transactional_id)
        return ctx.coordinator.commit_txn_offsets(commit, request.producer_id, request.producer_epoch, verify,
                                                  ctx.classic)  # fmt: skip

    return answer(pb.TxnOffsetCommitResponse(), request.topics, offsets, run)
