"""WriteTxnMarkers: a transaction coordinator asks this broker to write COMMIT / ABORT markers on the partitions
it leads (Kafka's inter-broker WriteTxnMarkers).

Per marker and partition: the partition must be led here (UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER);
the marker must not come from an older coordinator epoch (TRANSACTION_COORDINATOR_FENCED) nor carry an older
producer epoch (PRODUCER_FENCED) (``log.producer_state`` S12). Markers are written with acks=all: the answer
waits (at most :data:`WRITE_TIMEOUT_MS`) until the high watermark passes each one (a marker the ISR does not
have could be lost with this leader). On ``__consumer_offsets`` partitions, the group coordinator then makes
the transaction's offsets visible (COMMIT) or drops them (ABORT).
"""

from __future__ import annotations

from broker.context import BrokerContext
from broker.delayed_produce import DelayedProduce, ProduceStatus
from broker.errors import error, error_of
from broker.group.config import OFFSETS_TOPIC
from broker.handlers.common import local_partition
from log.record.control import CONTROL_TYPE_ABORT, CONTROL_TYPE_COMMIT, EndTransactionMarker
from proto import broker_pb2 as pb

WRITE_TIMEOUT_MS = 5_000
WAIT_SLACK_S = 5.0


def handle(ctx: BrokerContext, request: pb.WriteTxnMarkersRequest) -> pb.WriteTxnMarkersResponse:
    response = pb.WriteTxnMarkersResponse()
    waits: list[tuple[pb.WriteTxnMarkersResponse.Partition, ProduceStatus, int, bool]] = []
    for marker in request.markers:
        answer = response.markers.add(producer_id=marker.producer_id)
        kind = CONTROL_TYPE_COMMIT if marker.committed else CONTROL_TYPE_ABORT
        value = EndTransactionMarker(kind, marker.coordinator_epoch)
        for topic in marker.topics:
            for number in topic.partitions:
                part = answer.partitions.add(topic=topic.topic, partition=number)
                try:
                    partition = local_partition(ctx, topic.topic, number)
                    epoch = partition.leader_epoch
                    offset = partition.append_marker(marker.producer_id, marker.producer_epoch, value)
                except Exception as exc:
                    part.error.CopyFrom(error_of(exc))
                    continue
                ctx.replicas.complete_delayed(partition.key)
                waits.append((part, ProduceStatus(partition.key, offset + 1, epoch), marker.producer_id,
                              marker.committed))  # fmt: skip
    if waits:
        op = DelayedProduce(WRITE_TIMEOUT_MS, [s for _, s, _, _ in waits], lambda key: ctx.replicas.partition(*key))
        if not ctx.replicas.produce_purgatory.try_complete_else_watch(op, op.keys) and not op.wait(
            WRITE_TIMEOUT_MS / 1000 + WAIT_SLACK_S
        ):
            op.expire()
    for part, status, producer_id, committed in waits:
        if status.error:
            part.error.CopyFrom(error(status.error, f"the marker on {part.topic}-{part.partition} was not "
                                      f"replicated: {status.error}"))  # fmt: skip
        elif part.topic == OFFSETS_TOPIC and ctx.coordinator is not None:
            ctx.coordinator.on_txn_marker(part.partition, producer_id, committed)
    return response
