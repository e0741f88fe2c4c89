"""Transaction APIs of the Kafka listener, through the gRPC handlers (docs/TRANSACTIONS.md): AddPartitionsToTxn
(24, v0-v3: the client's form; v4+ is Kafka's inter-broker batch, not served), AddOffsetsToTxn (25), EndTxn (26),
TxnOffsetCommit (28), DescribeTransactions (65), ListTransactions (66). InitProducerId (22) with a
transactional id is :func:`broker.kafka.admin.handle_init_producer_id`; FindCoordinator key type 1 is
:func:`broker.kafka.groups.handle_find_coordinator`; Produce with a transactional id is
:mod:`broker.kafka.produce`. WriteTxnMarkers (27) stays inter-broker gRPC.
"""

from __future__ import annotations

import datetime
from typing import Any

from broker.handlers import (
    add_offsets_to_txn,
    add_partitions_to_txn,
    describe_transactions,
    end_txn,
    txn_offset_commit,
)
from broker.kafka.api import Request
from broker.kafka.codec import build, millis, response_class
from proto import broker_pb2 as pb

ADD_PARTITIONS_TO_TXN_KEY = 24
ADD_OFFSETS_TO_TXN_KEY = 25
END_TXN_KEY = 26
TXN_OFFSET_COMMIT_KEY = 28
DESCRIBE_TRANSACTIONS_KEY = 65
LIST_TRANSACTIONS_KEY = 66


def handle_add_partitions_to_txn(request: Request) -> Any:
    body = request.body
    grpc_request = pb.AddPartitionsToTxnRequest(
        transactional_id=_v3(body, "transactional_id"), producer_id=_v3(body, "producer_id"),
        producer_epoch=_v3(body, "producer_epoch"),
    )  # fmt: skip
    for topic in _v3(body, "topics"):
        grpc_request.topics.add(topic=topic.name, partitions=list(topic.partitions))
    answer = add_partitions_to_txn.handle(request.ctx, grpc_request)
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for p in answer.partitions:
        by_topic.setdefault(p.topic, []).append(dict(partition_index=p.partition, partition_error_code=p.error.code))
    results = [dict(name=name, results_by_partition=parts) for name, parts in by_topic.items()]
    return build(response_class(ADD_PARTITIONS_TO_TXN_KEY, request.version), throttle_time=0,
                 results_by_topic_v3_and_below=results)  # fmt: skip


def _v3(body: Any, name: str) -> Any:
    """A field of AddPartitionsToTxn v0-v3 (kio names them ``v3_and_below_*``)."""
    return getattr(body, f"v3_and_below_{name}", None) if hasattr(body, f"v3_and_below_{name}") else getattr(body, name)


def handle_add_offsets_to_txn(request: Request) -> Any:
    body = request.body
    answer = add_offsets_to_txn.handle(request.ctx, pb.AddOffsetsToTxnRequest(
        transactional_id=body.transactional_id, producer_id=body.producer_id, producer_epoch=body.producer_epoch,
        group_id=body.group_id))  # fmt: skip
    return build(response_class(ADD_OFFSETS_TO_TXN_KEY, request.version), throttle_time=0,
                 error_code=answer.error.code)  # fmt: skip


def handle_end_txn(request: Request) -> Any:
    body = request.body
    answer = end_txn.handle(request.ctx, pb.EndTxnRequest(
        transactional_id=body.transactional_id, producer_id=body.producer_id, producer_epoch=body.producer_epoch,
        committed=bool(body.committed)))  # fmt: skip
    return build(response_class(END_TXN_KEY, request.version), throttle_time=0, error_code=answer.error.code)


def handle_txn_offset_commit(request: Request) -> Any:
    body = request.body
    grpc_request = pb.TxnOffsetCommitRequest(
        transactional_id=body.transactional_id, group_id=body.group_id, producer_id=body.producer_id,
        producer_epoch=body.producer_epoch, generation_id=getattr(body, "generation_id", -1),
        member_id=getattr(body, "member_id", "") or "", group_instance_id=getattr(body, "group_instance_id", "") or "",
    )  # fmt: skip
    for topic in body.topics:
        t = grpc_request.topics.add(name=topic.name)
        for p in topic.partitions:
            t.partitions.add(partition=p.partition_index, committed_offset=p.committed_offset,
                             committed_leader_epoch=getattr(p, "committed_leader_epoch", -1),
                             committed_metadata=p.committed_metadata or "")  # fmt: skip
    answer = txn_offset_commit.handle(request.ctx, grpc_request)
    topics = [dict(name=t.name, partitions=[dict(partition_index=p.partition, error_code=p.error.code)
                                            for p in t.partitions]) for t in answer.topics]  # fmt: skip
    return build(response_class(TXN_OFFSET_COMMIT_KEY, request.version), throttle_time=0, topics=topics)


def handle_describe_transactions(request: Request) -> Any:
    answer = describe_transactions.describe(
        request.ctx, pb.DescribeTransactionsRequest(transactional_ids=list(request.body.transactional_ids))
    )
    states = []
    for t in answer.transactions:
        start = t.transaction_start_time_ms if t.transaction_start_time_ms >= 0 else 0
        states.append(dict(
            error_code=t.error.code, transactional_id=t.transactional_id, transaction_state=t.state or "",
            transaction_timeout=datetime.timedelta(milliseconds=t.transaction_timeout_ms),
            transaction_start_time=datetime.datetime.fromtimestamp(start / 1000, tz=datetime.UTC),
            producer_id=t.producer_id if not t.error.code else -1, producer_epoch=t.producer_epoch,
            topics=[dict(topic=tp.topic, partitions=list(tp.partitions)) for tp in t.topics],
        ))  # fmt: skip
    return build(response_class(DESCRIBE_TRANSACTIONS_KEY, request.version), throttle_time=0,
                 transaction_states=states)  # fmt: skip


def handle_list_transactions(request: Request) -> Any:
    body = request.body
    answer = describe_transactions.list_transactions(request.ctx, pb.ListTransactionsRequest(
        state_filters=list(body.state_filters), producer_id_filters=list(body.producer_id_filters)))  # fmt: skip
    known = {"Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort",
             "PrepareEpochFence", "Dead"}  # fmt: skip
    states = [dict(transactional_id=t.transactional_id, producer_id=t.producer_id, transaction_state=t.state)
              for t in answer.transactions]  # fmt: skip
    return build(response_class(LIST_TRANSACTIONS_KEY, request.version), throttle_time=0,
                 error_code=answer.error.code,
                 unknown_state_filters=[s for s in body.state_filters if s not in known],
                 transaction_states=states)  # fmt: skip


__all__ = ["millis"]
