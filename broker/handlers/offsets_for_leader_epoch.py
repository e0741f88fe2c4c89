"""OffsetsForLeaderEpoch (KIP-101, KIP-279; Kafka's ``OffsetsForLeaderEpoch``), answered by the partition
leader from its leader-epoch cache: for each asked epoch, the largest epoch ``<=`` it in the leader's log
and the offset where that epoch ends (the next epoch's start, or the log end for the latest). A follower
truncates to the smaller of that and its own end of the same epoch (``replication.truncation``).

Per partition errors: UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH /
UNKNOWN_LEADER_EPOCH (``current_leader_epoch`` checked as in Fetch). An epoch older than any in the log is
answered ``(-1, -1)``, no error (the follower then starts over, TR5).
"""

from __future__ import annotations

from broker.context import BrokerContext
from broker.errors import error_of
from broker.handlers.common import local_partition
from proto import broker_pb2 as pb


def handle(ctx: BrokerContext, request: pb.OffsetsForLeaderEpochRequest) -> pb.OffsetsForLeaderEpochResponse:
    response = pb.OffsetsForLeaderEpochResponse()
    for item in request.partitions:
        answer = response.partitions.add(topic=item.topic, partition=item.partition, leader_epoch=-1, end_offset=-1)
        try:
            partition = local_partition(ctx, item.topic, item.partition)
            found = partition.end_offset_for_epoch(item.leader_epoch, current_leader_epoch=item.current_leader_epoch)
        except Exception as exc:
            answer.error.CopyFrom(error_of(exc))
            continue
        answer.leader_epoch, answer.end_offset = found.leader_epoch, found.end_offset
    return response
