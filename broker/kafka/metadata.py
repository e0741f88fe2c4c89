"""Metadata (key 3) and DescribeCluster (key 60), answered by :mod:`broker.handlers.metadata` and
:mod:`broker.handlers.describe_cluster` with the endpoints of the listener the request came in on.

Metadata v0 asks for every topic with an empty list, v1+ with a null one. ``allow_auto_topic_creation``
is honoured only when the broker's ``auto.create.topics.enable`` is set (the handler's rule).
"""

from __future__ import annotations

from typing import Any

from broker.handlers import describe_cluster as describe_cluster_handler
from broker.handlers import metadata as metadata_handler
from broker.kafka.api import Request
from broker.kafka.codec import build, response_class
from proto import broker_pb2 as pb

METADATA_KEY = 3
DESCRIBE_CLUSTER_KEY = 60
NO_AUTHORIZED_OPERATIONS = -(2**31)


def handle_metadata(request: Request) -> Any:
    body = request.body
    unknown_ids: list[Any] = []
    names: list[str] | None = None
    if body.topics is not None:  # v10+ may name topics by id instead
        by_id = {t.topic_id: n for n, t in request.ctx.metadata.image.topics_by_name.items()}
        names = []
        for t in body.topics:
            name = t.name if t.name is not None else by_id.get(str(getattr(t, "topic_id", "")))
            if name is None:
                unknown_ids.append(t.topic_id)
            else:
                names.append(name)
    all_topics = names is None or (request.version == 0 and not names and not unknown_ids)
    answer = metadata_handler.handle(
        request.ctx, pb.MetadataRequest(topics=names or [], all_topics=all_topics), listener=request.session.listener
    )
    topics = [_topic(t) for t in answer.topics]
    topics += [dict(error_code="UNKNOWN_TOPIC_ID", name=None, topic_id=i, is_internal=False, partitions=[],
                    topic_authorized_operations=NO_AUTHORIZED_OPERATIONS) for i in unknown_ids]  # fmt: skip
    return build(
        response_class(METADATA_KEY, request.version),
        throttle_time=0,
        brokers=[dict(node_id=b.node_id, host=b.host, port=b.port, rack=b.rack or None) for b in answer.brokers],
        cluster_id=answer.cluster_id or None,
        controller_id=answer.controller_id,
        topics=topics,
        cluster_authorized_operations=NO_AUTHORIZED_OPERATIONS,
        error_code=0,
    )


def _topic(t: pb.TopicMetadata) -> dict[str, Any]:
    return dict(
        error_code=t.error.code,
        name=t.name,
        topic_id=t.topic_id,
        is_internal=t.is_internal,
        topic_authorized_operations=NO_AUTHORIZED_OPERATIONS,
        partitions=[
            dict(error_code=p.error.code, partition_index=p.partition, leader_id=p.leader,
                 leader_epoch=p.leader_epoch, replica_nodes=list(p.replicas), isr_nodes=list(p.isr),
                 offline_replicas=list(p.offline_replicas))  # fmt: skip
            for p in t.partitions
        ],
    )


def handle_describe_cluster(request: Request) -> Any:
    answer = describe_cluster_handler.handle(
        request.ctx, pb.DescribeClusterRequest(), listener=request.session.listener
    )
    return build(
        response_class(DESCRIBE_CLUSTER_KEY, request.version),
        throttle_time=0,
        error_code=answer.error.code,
        error_message=answer.error.message or None,
        endpoint_type=1,  # brokers
        cluster_id=answer.cluster_id,
        controller_id=answer.controller_id,
        brokers=[dict(broker_id=b.node_id, host=b.host, port=b.port, rack=b.rack or None, is_fenced=b.fenced)
                 for b in answer.brokers],  # fmt: skip
        cluster_authorized_operations=NO_AUTHORIZED_OPERATIONS,
    )
