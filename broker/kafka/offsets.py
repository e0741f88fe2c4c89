"""ListOffsets (key 2) and OffsetForLeaderEpoch (key 23) through :mod:`broker.handlers.list_offsets` and
:mod:`broker.handlers.offsets_for_leader_epoch`.

ListOffsets v0 (a list of offsets per partition) is not offered; v1+ answers one offset. Timestamps -1
(latest: the high watermark, which is also the last stable offset here), -2 (earliest), -3 (the largest
timestamp, v7+) and times in ms, as the handler documents.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from broker.handlers import list_offsets as list_offsets_handler
from broker.handlers import offsets_for_leader_epoch as epoch_handler
from broker.kafka.api import Request
from broker.kafka.codec import build, response_class
from proto import broker_pb2 as pb

LIST_OFFSETS_KEY = 2
OFFSET_FOR_LEADER_EPOCH_KEY = 23


def handle_list_offsets(request: Request) -> Any:
    body = request.body
    pb_request = pb.ListOffsetsRequest(replica_id=body.replica_id, isolation_level=getattr(body, "isolation_level", 0))
    for t in body.topics:
        for p in t.partitions:
            pb_request.partitions.add(topic=t.name, partition=p.partition_index, timestamp=p.timestamp,
                                      current_leader_epoch=getattr(p, "current_leader_epoch", -1))  # fmt: skip
    answer = list_offsets_handler.handle(request.ctx, pb_request)
    by_topic: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for a in answer.partitions:
        by_topic[a.topic].append(dict(partition_index=a.partition, error_code=a.error.code, timestamp=a.timestamp,
                                      offset=a.offset, leader_epoch=a.leader_epoch))  # fmt: skip
    topics = [dict(name=name, partitions=parts) for name, parts in by_topic.items()]
    return build(response_class(LIST_OFFSETS_KEY, request.version), throttle_time=0, topics=topics)


def handle_offset_for_leader_epoch(request: Request) -> Any:
    body = request.body
    pb_request = pb.OffsetsForLeaderEpochRequest(replica_id=getattr(body, "replica_id", -1))
    for t in body.topics:
        for p in t.partitions:
            pb_request.partitions.add(topic=t.topic, partition=p.partition, leader_epoch=p.leader_epoch,
                                      current_leader_epoch=getattr(p, "current_leader_epoch", -1))  # fmt: skip
    answer = epoch_handler.handle(request.ctx, pb_request)
    by_topic: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for a in answer.partitions:
        by_topic[a.topic].append(dict(partition=a.partition, error_code=a.error.code, leader_epoch=a.leader_epoch,
                                      end_offset=a.end_offset))  # fmt: skip
    topics = [dict(topic=name, partitions=parts) for name, parts in by_topic.items()]
    return build(response_class(OFFSET_FOR_LEADER_EPOCH_KEY, request.version), throttle_time=0, topics=topics)
