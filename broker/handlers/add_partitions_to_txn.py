"""AddPartitionsToTxn: add partitions to a producer's transaction (TC6), or, with ``verify_only``, tell a
partition leader whether they are in it (KIP-890 part 1).

The whole request answers the coordinator's error (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS,
CONCURRENT_TRANSACTIONS, PRODUCER_FENCED, INVALID_PRODUCER_ID_MAPPING, ...) on every partition. A partition
the metadata does not know fails with UNKNOWN_TOPIC_OR_PARTITION and the others with OPERATION_NOT_ATTEMPTED,
nothing added (Kafka's rule); a partition of an internal topic likewise fails with INVALID_TOPIC_EXCEPTION
(only AddOffsetsToTxn adds a ``__consumer_offsets`` partition).
"""

from __future__ import annotations

from broker.context import BrokerContext
from broker.errors import error
from broker.txn import errors as E
from broker.txn.errors import TxnError
from proto import broker_pb2 as pb

OPERATION_NOT_ATTEMPTED = "OPERATION_NOT_ATTEMPTED"
INTERNAL = frozenset({"__consumer_offsets", "__transaction_state"})


def handle(ctx: BrokerContext, request: pb.AddPartitionsToTxnRequest) -> pb.AddPartitionsToTxnResponse:
    partitions = [(t.topic, p) for t in request.topics for p in t.partitions]
    response = pb.AddPartitionsToTxnResponse()
    bad = {tp: _unknown(ctx, tp) for tp in partitions}
    bad = {tp: code for tp, code in bad.items() if code}
    if bad and not request.verify_only:
        for tp in partitions:
            code = bad.get(tp, OPERATION_NOT_ATTEMPTED)
            response.partitions.add(topic=tp[0], partition=tp[1], error=error(code, f"{tp[0]}-{tp[1]}: {code}"))
        return response
    try:
        coordinator = ctx.txn_coordinator
        if coordinator is None:
            raise TxnError(E.COORDINATOR_NOT_AVAILABLE, "no transaction coordinator on this broker")
        if request.verify_only:
            coordinator.verify(request.transactional_id, request.producer_id, request.producer_epoch, partitions)
        else:
            coordinator.add_partitions(request.transactional_id, request.producer_id, request.producer_epoch,
                                       partitions)  # fmt: skip
    except TxnError as exc:
        response.error.CopyFrom(error(exc.code, str(exc)))
        for tp in partitions:
            response.partitions.add(topic=tp[0], partition=tp[1], error=error(exc.code, str(exc)))
        return response
    for tp in partitions:
        response.partitions.add(topic=tp[0], partition=tp[1])
    return response


def _unknown(ctx: BrokerContext, tp: tuple[str, int]) -> str:
    if tp[0] in INTERNAL:
        return "INVALID_TOPIC_EXCEPTION"
    topic = ctx.metadata.image.topic(tp[0])
    return "" if topic is not None and topic.partition(tp[1]) is not None else E.UNKNOWN_TOPIC_OR_PARTITION
