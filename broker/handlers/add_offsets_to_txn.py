"""AddOffsetsToTxn: add the group's ``__consumer_offsets`` partition to the producer's transaction (TC6), so
that its TxnOffsetCommit is part of it and the transaction's markers reach that partition. Creates
``__consumer_offsets`` when it does not exist yet (answering COORDINATOR_NOT_AVAILABLE meanwhile), as
FindCoordinator does.
"""

from __future__ import annotations

from broker.context import BrokerContext
from broker.errors import error
from broker.group.config import OFFSETS_TOPIC, partition_for
from broker.handlers.find_coordinator import create_offsets_topic
from broker.txn import errors as E
from broker.txn.errors import TxnError
from proto import broker_pb2 as pb


def handle(ctx: BrokerContext, request: pb.AddOffsetsToTxnRequest) -> pb.AddOffsetsToTxnResponse:
    response = pb.AddOffsetsToTxnResponse()
    try:
        if not request.group_id:
            raise TxnError("INVALID_GROUP_ID", "the group id must not be empty")
        topic = ctx.metadata.image.topic(OFFSETS_TOPIC)
        if topic is None or not topic.partitions:
            why = create_offsets_topic(ctx) or "it is being created"  # as FindCoordinator does on first use
            raise TxnError(E.COORDINATOR_NOT_AVAILABLE, f"{OFFSETS_TOPIC} does not exist yet: {why}")
        coordinator = ctx.txn_coordinator
        if coordinator is None:
            raise TxnError(E.COORDINATOR_NOT_AVAILABLE, "no transaction coordinator on this broker")
        offsets_partition = (OFFSETS_TOPIC, partition_for(request.group_id, len(topic.partitions)))
        coordinator.add_partitions(request.transactional_id, request.producer_id, request.producer_epoch,
                                   [offsets_partition])  # fmt: skip
    except TxnError as exc:
        response.error.CopyFrom(error(exc.code, str(exc)))
    return response
