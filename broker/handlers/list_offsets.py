"""ListOffsets: an offset per partition by time (Kafka's ``ListOffsets``), answered by the partition leader.

``timestamp``: -2 earliest (the log start offset), -1 latest (the high watermark for consumers, the last
stable offset for ``read_committed`` ones; the log end for replicas), -3 the record with the
largest timestamp, or a time in ms: the first record whose timestamp is at or after it. ``offset`` -1
when no record qualifies (below the high watermark, for consumers). Per partition errors:
UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH,
INVALID_REQUEST for a negative timestamp other than -1, -2, -3.
"""

from __future__ import annotations

from broker.context import BrokerContext
from broker.errors import INVALID_REQUEST, error, error_of
from broker.handlers.common import local_partition
from proto import broker_pb2 as pb


def handle(ctx: BrokerContext, request: pb.ListOffsetsRequest) -> pb.ListOffsetsResponse:
    response = pb.ListOffsetsResponse()
    for_replica = request.replica_id >= 0
    for item in request.partitions:
        answer = response.partitions.add(
            topic=item.topic, partition=item.partition, timestamp=-1, offset=-1, leader_epoch=-1
        )
        if item.timestamp < -3:
            answer.error.CopyFrom(error(INVALID_REQUEST, f"timestamp {item.timestamp}: not -1, -2, -3 or a time"))
            continue
        try:
            partition = local_partition(ctx, item.topic, item.partition)
            found = partition.offset_for_timestamp(
                item.timestamp, current_leader_epoch=item.current_leader_epoch, for_replica=for_replica,
                read_committed=request.isolation_level == 1,
            )
        except Exception as exc:
            answer.error.CopyFrom(error_of(exc))
            continue
        answer.leader_epoch = partition.leader_epoch
        if found is not None:
            answer.offset, answer.timestamp = found
    return response
