"""DescribeTransactions (to each transactional id's coordinator) and ListTransactions (every broker answers
for the ``__transaction_state`` partitions it leads; the client asks them all), as ``kafka-transactions``."""

from __future__ import annotations

from broker.context import BrokerContext
from broker.errors import error
from broker.txn import errors as E
from broker.txn.errors import TxnError
from broker.txn.state import TxnMetadata
from proto import broker_pb2 as pb


def describe(ctx: BrokerContext, request: pb.DescribeTransactionsRequest) -> pb.DescribeTransactionsResponse:
    response = pb.DescribeTransactionsResponse()
    for txn_id in request.transactional_ids:
        answer = response.transactions.add(transactional_id=txn_id, coordinator_id=ctx.broker_id)
        try:
            coordinator = ctx.txn_coordinator
            if coordinator is None:
                raise TxnError(E.COORDINATOR_NOT_AVAILABLE, "no transaction coordinator on this broker")
            _fill(answer, coordinator.describe(txn_id))
        except TxnError as exc:
            answer.error.CopyFrom(error(exc.code, str(exc)))
    return response


def list_transactions(ctx: BrokerContext, request: pb.ListTransactionsRequest) -> pb.ListTransactionsResponse:
    response = pb.ListTransactionsResponse()
    coordinator = ctx.txn_coordinator
    if coordinator is None:
        return response
    states = set(request.state_filters)
    pids = set(request.producer_id_filters)
    for m in coordinator.list_transactions():
        if (states and m.state.kafka_name not in states) or (pids and m.producer_id not in pids):
            continue
        response.transactions.add(transactional_id=m.transactional_id, producer_id=m.producer_id,
                                  state=m.state.kafka_name, coordinator_id=ctx.broker_id)  # fmt: skip
    return response


def _fill(answer: pb.TransactionDescription, m: TxnMetadata) -> None:
    answer.state = m.state.kafka_name
    answer.producer_id = m.producer_id
    answer.producer_epoch = m.producer_epoch
    answer.transaction_timeout_ms = m.txn_timeout_ms
    answer.transaction_start_time_ms = m.txn_start_timestamp_ms
    by_topic: dict[str, list[int]] = {}
    for topic, number in sorted(m.partitions):
        by_topic.setdefault(topic, []).append(number)
    for topic, numbers in by_topic.items():
        answer.topics.add(topic=topic, partitions=numbers)
