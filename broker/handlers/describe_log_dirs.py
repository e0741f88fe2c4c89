"""DescribeLogDirs: the replicas this broker holds, each with its size on disk, offsets and segment count
(Kafka's DescribeLogDirs, one log dir per broker here). Sizes are the segment files' bytes, read from each
log under its lock; the answer is this broker's alone (ask every broker for the whole cluster, as in Kafka).
``topics`` narrows the answer; an unknown topic simply has no replicas here.
"""

from __future__ import annotations

from broker.context import BrokerContext
from proto import broker_pb2 as pb


def handle(ctx: BrokerContext, request: pb.DescribeLogDirsRequest) -> pb.DescribeLogDirsResponse:
    wanted = set(request.topics)
    response = pb.DescribeLogDirsResponse(broker_id=ctx.broker_id, log_dir=str(ctx.replicas.log_manager.data_dir))
    for (topic, number), partition in sorted(ctx.replicas.partitions().items()):
        if wanted and topic not in wanted:
            continue
        log = partition.log
        response.replicas.add(
            topic=topic, partition=number, size_bytes=log.size_bytes, log_start_offset=partition.log_start_offset,
            log_end_offset=partition.log_end_offset, high_watermark=partition.high_watermark,
            segments=len(log.segments), is_leader=partition.is_leader,
        )  # fmt: skip
    return response
