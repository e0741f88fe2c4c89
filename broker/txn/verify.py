"""Partition leaders asking the transaction coordinator before a producer's first transactional batch
(KIP-890 part 1, ``log.producer_state`` S11): AddPartitionsToTxn with ``verify_only``.

The coordinator of the transactional id is this broker (asked in place) or another (a gRPC call with a
deadline). Its refusal is raised as a :class:`~broker.txn.errors.TxnError`: INVALID_TXN_STATE, PRODUCER_FENCED
and INVALID_PRODUCER_ID_MAPPING as they are; the coordinator's retriable errors (NOT_COORDINATOR,
COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS, CONCURRENT_TRANSACTIONS) and a failed call become
NOT_ENOUGH_REPLICAS, which a producer retries (Kafka's mapping: the producer does not know the leader asked).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from broker.group.config import partition_for
from broker.txn import errors as E
from broker.txn.errors import TxnError
from proto import broker_pb2 as pb
from replication.partition import Verifier

if TYPE_CHECKING:
    from broker.context import BrokerContext

TXN_TOPIC = "__transaction_state"
VERIFY_TIMEOUT_S = 5.0
NOT_ENOUGH_REPLICAS = "NOT_ENOUGH_REPLICAS"


def make_verifier(ctx: BrokerContext, transactional_id: str) -> Verifier:
    """The :data:`~replication.partition.Verifier` of a produce request of ``transactional_id``."""

    def verify(key: tuple[str, int], producers: list[tuple[int, int]]) -> None:
        for producer_id, epoch in producers:
            ask(ctx, transactional_id, producer_id, epoch, [key])

    return verify


def ask(
    ctx: BrokerContext, transactional_id: str, producer_id: int, epoch: int, partitions: list[tuple[str, int]]
) -> None:
    """Raise unless the coordinator says ``partitions`` are in the producer's ongoing transaction."""
    if not transactional_id:
        raise TxnError(E.INVALID_TXN_STATE, "a transactional batch needs the request's transactional id")
    code, message = _answer(ctx, transactional_id, producer_id, epoch, partitions)
    if not code:
        return
    if code in E.RETRIABLE:
        raise TxnError(NOT_ENOUGH_REPLICAS, f"the transaction coordinator answered {code}: {message}")
    raise TxnError(code, message)


def _answer(ctx: BrokerContext, transactional_id: str, producer_id: int, epoch: int,
            partitions: list[tuple[str, int]]) -> tuple[str, str]:  # fmt: skip
    topic = ctx.metadata.image.topic(TXN_TOPIC)
    if topic is None or not topic.partitions:
        return E.COORDINATOR_NOT_AVAILABLE, f"{TXN_TOPIC} does not exist"
    reg = topic.partition(partition_for(transactional_id, len(topic.partitions)))
    if reg is None or not reg.has_leader:
        return E.COORDINATOR_NOT_AVAILABLE, f"{TXN_TOPIC} partition of {transactional_id!r} has no leader"
    if reg.leader == ctx.broker_id:
        coordinator = ctx.txn_coordinator
        if coordinator is None:
            return E.COORDINATOR_NOT_AVAILABLE, "no transaction coordinator on this broker"
        try:
            coordinator.verify(transactional_id, producer_id, epoch, partitions)
        except TxnError as exc:
            return exc.code, str(exc)
        return "", ""
    if ctx.peers is None:
        return E.COORDINATOR_NOT_AVAILABLE, "no connection to other brokers"
    request = pb.AddPartitionsToTxnRequest(transactional_id=transactional_id, producer_id=producer_id,
                                           producer_epoch=epoch, verify_only=True)  # fmt: skip
    by_topic: dict[str, list[int]] = {}
    for t, p in partitions:
        by_topic.setdefault(t, []).append(p)
    for t, ps in by_topic.items():
        request.topics.add(topic=t, partitions=ps)
    try:
        response = ctx.peers.stub(int(reg.leader)).AddPartitionsToTxn(request, timeout=VERIFY_TIMEOUT_S)
    except Exception as exc:  # grpc.RpcError, ConnectionError
        return E.COORDINATOR_NOT_AVAILABLE, f"asking broker {reg.leader}: {exc!r}"
    if response.error.code:
        return response.error.code, response.error.message
    for p in response.partitions:
        if p.error.code:
            return p.error.code, p.error.message
    return "", ""
