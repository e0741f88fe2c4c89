"""``Admin.list_transactions`` and ``Admin.describe_transactions`` (Kafka's ListTransactions /
DescribeTransactions, as ``kafka-transactions list|describe`` use them).

Every broker answers ListTransactions for the ``__transaction_state`` partitions it leads, so the list asks
them all (a broker that does not answer is skipped; none answering is a NetworkError). DescribeTransactions
goes to each transactional id's coordinator (FindCoordinator key_type 1), retried where a coordinator moves.
"""

from __future__ import annotations

from odradek.errors import NetworkError, error_from_code
from odradek.group.coordinator import TRANSACTION_KEY_TYPE, CoordinatorClient
from odradek.net import ClusterClient
from odradek.types import TopicPartition, TransactionDescription, TransactionListing
from proto import broker_pb2


def list_transactions(client: ClusterClient, states: list[str] | None = None) -> list[TransactionListing]:
    if client.cluster.updated_ms == 0.0:
        client.refresh()
    request = broker_pb2.ListTransactionsRequest(state_filters=states or [])
    found: dict[str, TransactionListing] = {}
    answered = 0
    for node_id in sorted(client.cluster.brokers):
        try:
            response = client.call_node(node_id, "ListTransactions", request)
        except NetworkError:
            continue
        answered += 1
        if response.error.code:
            raise error_from_code(response.error.code, f"listing transactions on broker {node_id}: "
                                  f"{response.error.message}")  # fmt: skip
        for t in response.transactions:
            found[t.transactional_id] = TransactionListing(t.transactional_id, t.producer_id, t.state,
                                                           t.coordinator_id)  # fmt: skip
    if not answered:
        raise NetworkError("no broker answered ListTransactions")
    return [found[t] for t in sorted(found)]


def describe_transaction(client: ClusterClient, transactional_id: str, timeout_ms: float) -> TransactionDescription:
    coordinator = CoordinatorClient(client, transactional_id, TRANSACTION_KEY_TYPE)
    request = broker_pb2.DescribeTransactionsRequest(transactional_ids=[transactional_id])

    def code(response: broker_pb2.DescribeTransactionsResponse) -> str:
        return next((str(t.error.code) for t in response.transactions if t.error.code), "")

    response = coordinator.call("DescribeTransactions", lambda: request, timeout_ms, code)
    for t in response.transactions:
        if t.error.code:
            raise error_from_code(t.error.code, f"describing transactional id {transactional_id!r}: "
                                  f"{t.error.message or t.error.code}")  # fmt: skip
        partitions = tuple(TopicPartition(tp.topic, p) for tp in t.topics for p in tp.partitions)
        return TransactionDescription(t.transactional_id, t.coordinator_id, t.state, t.producer_id,
                                      t.producer_epoch, t.transaction_timeout_ms, t.transaction_start_time_ms,
                                      partitions)  # fmt: skip
    raise NetworkError(f"DescribeTransactions did not answer for {transactional_id!r}")
