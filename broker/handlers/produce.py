"""Produce: append each partition's batches as leader; acks=all waits in the purgatory for the ISR.

Per partition, in order: the partition must exist (UNKNOWN_TOPIC_OR_PARTITION) and be led here
(NOT_LEADER_OR_FOLLOWER); acks=all needs ``len(isr) >= min.insync.replicas`` (NOT_ENOUGH_REPLICAS); the
batches must be valid (CORRUPT_MESSAGE, INVALID_RECORD) and small enough (MESSAGE_TOO_LARGE). A partition
that fails changes nothing and does not stop the others. ``acks`` outside {0, 1, -1} fails every
partition with INVALID_REQUIRED_ACKS and appends nothing.

An idempotent producer's batch that overtook an earlier one of its partition on the way (gRPC hands one
connection's calls to several threads) is held by the partition until the earlier one is written, for a
bounded time (``log.producer_state`` S8, ``replication.partition``): the partitions of a request are
appended in the order the request lists them, which the producer keeps the same in every request.

Transactional batches (docs/TRANSACTIONS.md): a batch that would open its producer's transaction on a partition
is written only once the request's ``transactional_id``'s coordinator confirmed the partition is in the
ongoing transaction (``broker.txn.verify``; ``log.producer_state`` S11), asked from a worker thread.

acks=0 and acks=1 answer after the leader append (the client ignores the acks=0 answer); acks=-1 waits
until every appended partition's high watermark passes its batch, or ``timeout_ms`` (capped at 300 s), one
deadline for the whole request (held batches included): the appends and the wait go through
:meth:`broker.replica_manager.ReplicaManager.append_records`. The gRPC service waits without a thread
(:func:`begin`, then :func:`finish` once the DelayedProduce completed: ``broker.service``). Each
``records`` field is read once: protobuf copies bytes on every access.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from broker.appends import PendingAppend
from broker.context import BrokerContext
from broker.errors import INVALID_REQUIRED_ACKS, INVALID_TOPIC_EXCEPTION, error, error_of
from broker.group.config import OFFSETS_TOPIC
from broker.handlers.common import local_partition
from broker.txn.verify import make_verifier
from proto import broker_pb2 as pb
from replication.partition import Partition

if TYPE_CHECKING:
    from broker.metrics import BrokerMetrics

VALID_ACKS = (0, 1, -1)
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, "__transaction_state"})
MAX_TIMEOUT_MS = 300_000  # a longer timeout_ms is cut to this (docs/CONVENTIONS.md §8: every request has a maximum)


@dataclass(frozen=True, slots=True)
class PendingProduce:
    """An acks=all produce whose appends are done and whose DelayedProduce waits for the ISR: once
    ``pending.operation`` completes, :func:`finish` fills the answers."""

    response: pb.ProduceResponse
    answers: list[pb.ProducePartitionResponse]
    pending: PendingAppend
    sizes: list[int]  # each appended partition's bytes (metrics)
    metrics: BrokerMetrics | None


def handle(ctx: BrokerContext, request: pb.ProduceRequest) -> pb.ProduceResponse:
    """Produce on the calling thread, waiting on it for acks=all (the asynchronous server uses :func:`begin`,
    :func:`resume` and :func:`finish`, and waits without a thread)."""
    started = begin(ctx, request)
    if isinstance(started, pb.ProduceResponse):
        return started
    started.pending.wait()
    return finish(started)


def resume(ctx: BrokerContext, started: PendingProduce) -> pb.ProduceResponse | PendingProduce:
    """After ``begin(..., hold=False)`` stopped at a batch held for its turn: the rest of the appends, on a
    thread that may wait; then as :func:`begin`."""
    started.pending.resume()
    return started if started.pending.operation is not None else finish(started)


def begin(ctx: BrokerContext, request: pb.ProduceRequest, *, hold: bool = True) -> pb.ProduceResponse | PendingProduce:
    """Every partition's append (see the module docstring): the answer, or what is left to do: the acks=all
    wait (``pending.operation``), or with ``hold`` False the appends from a batch held for its turn on
    (``pending.held``: :func:`resume`)."""
    acks = request.acks
    response = pb.ProduceResponse()
    entries: list[tuple[Partition, bytes]] = []
    answers: list[pb.ProducePartitionResponse] = []
    for topic_data in request.topics:
        topic_response = response.topics.add(name=topic_data.name)
        for data in topic_data.partitions:
            records = data.records  # once: a copy per access
            answer = topic_response.partitions.add(
                partition=data.partition, base_offset=-1, log_append_time_ms=-1, log_start_offset=-1
            )
            if acks not in VALID_ACKS:
                answer.error.CopyFrom(error(INVALID_REQUIRED_ACKS, f"acks must be 0, 1 or -1, got {acks}"))
                continue
            if topic_data.name in INTERNAL_TOPICS:  # Kafka: only the coordinators write there
                why = f"cannot append to internal topic {topic_data.name}"
                answer.error.CopyFrom(error(INVALID_TOPIC_EXCEPTION, why))
                continue
            try:
                partition = local_partition(ctx, topic_data.name, data.partition)
            except Exception as exc:
                answer.error.CopyFrom(error_of(exc))
                continue
            entries.append((partition, records))
            answers.append(answer)
    if not entries:
        return response
    timeout_ms = min(max(request.timeout_ms, 0), MAX_TIMEOUT_MS)
    # S11: a transaction opens only once its coordinator says so (no transactional id: transactional batches fail)
    verify = make_verifier(ctx, request.transactional_id) if request.transactional_id else None
    pending = ctx.replicas.append_records(entries, acks, timeout_ms, hold=hold, verify=verify)
    started = PendingProduce(response, answers, pending, [len(records) for _, records in entries], ctx.metrics)
    return started if pending.held or pending.operation is not None else finish(started)


def finish(started: PendingProduce) -> pb.ProduceResponse:
    """The answers once the appends (and the acks=all wait, if any) are done."""
    metrics = started.metrics
    for result, answer, size in zip(started.pending.results, started.answers, started.sizes, strict=True):
        if result.exception is not None:
            answer.error.CopyFrom(error_of(result.exception))
            continue
        assert result.info is not None
        if metrics is not None:
            metrics.topics.produced(result.key[0], size, result.info.record_count)
        answer.base_offset = result.info.first_offset
        answer.log_append_time_ms = result.info.log_append_time
        answer.log_start_offset = result.info.log_start_offset
        if result.replication_error:
            code = result.replication_error
            why = _WHY.get(code, "acks=all not satisfied")
            answer.error.CopyFrom(error(code, f"{result.key[0]}-{result.key[1]}: {why}"))
    return started.response


_WHY = {
    "REQUEST_TIMED_OUT": "the in-sync replicas did not all get the records within timeout_ms",
    "NOT_LEADER_OR_FOLLOWER": "leadership moved before the in-sync replicas had the records",
    "NOT_ENOUGH_REPLICAS_AFTER_APPEND": "the records are written but the ISR shrank below min.insync.replicas",
}
