"""FindCoordinator: which broker coordinates each group (the leader of its ``__consumer_offsets`` partition).

The first call creates ``__consumer_offsets`` through the active controller (Kafka creates it on first use):
``offsets.topic.num.partitions`` partitions, replication factor ``offsets.topic.replication.factor`` capped
at the number of live brokers, ``cleanup.policy=compact``. Per key: INVALID_GROUP_ID for an empty id,
COORDINATOR_NOT_AVAILABLE while the topic or the partition's leader is missing (the client retries),
INVALID_REQUEST for key_type other than 0 (transactions are not supported).
"""

from __future__ import annotations

import logging

from broker.context import BrokerContext
from broker.group import errors as E
from broker.group.config import OFFSETS_TOPIC, partition_for
from broker.handlers import forward
from broker.handlers.metadata import listener_endpoint
from broker.lifecycle import LISTENER
from proto import broker_pb2 as pb
from proto import common_pb2
from proto import controller_pb2 as cpb

logger = logging.getLogger(__name__)

GROUP_KEY_TYPE = 0
CREATE_TIMEOUT_MS = 10_000
OFFSETS_TOPIC_CONFIGS = {
    "cleanup.policy": "compact",
    "segment.bytes": "104857600",  # Kafka's offsets.topic.segment.bytes
    "compression.type": "producer",
}


def handle(
    ctx: BrokerContext, request: pb.FindCoordinatorRequest, *, listener: str = LISTENER
) -> pb.FindCoordinatorResponse:
    """Answers with each coordinator's address on ``listener`` (the one the request came in on)."""
    response = pb.FindCoordinatorResponse()
    if request.key_type != GROUP_KEY_TYPE:
        for key in request.keys:
            response.coordinators.add(key=key, node_id=-1, error=_err(E.INVALID_REQUEST, "only key_type 0 (group)"))
        return response
    if ctx.metadata.image.topic(OFFSETS_TOPIC) is None and any(request.keys):
        create_offsets_topic(ctx)
    image = ctx.metadata.image
    topic = image.topic(OFFSETS_TOPIC)
    for key in request.keys:
        answer = response.coordinators.add(key=key, node_id=-1)
        if not key:
            answer.error.CopyFrom(_err(E.INVALID_GROUP_ID, "the group id must not be empty"))
            continue
        if topic is None or not topic.partitions:
            answer.error.CopyFrom(_err(E.COORDINATOR_NOT_AVAILABLE, f"{OFFSETS_TOPIC} is being created"))
            continue
        number = partition_for(key, len(topic.partitions))
        reg = topic.partition(number)
        broker = image.broker(reg.leader) if reg is not None and reg.has_leader else None
        endpoint = None if broker is None else listener_endpoint(broker, listener)
        if broker is None or broker.fenced or endpoint is None:
            why = f"{OFFSETS_TOPIC}-{number} has no live leader"
            answer.error.CopyFrom(_err(E.COORDINATOR_NOT_AVAILABLE, why))
            continue
        answer.node_id = broker.broker_id
        answer.address = f"{endpoint.host}:{endpoint.port}"
    return response


def create_offsets_topic(ctx: BrokerContext) -> None:
    """Ask the controller to create ``__consumer_offsets``; TOPIC_ALREADY_EXISTS (a race) is fine."""
    live = len(ctx.metadata.image.unfenced_brokers())
    rf = max(1, min(int(ctx.config.get("offsets.topic.replication.factor")), live))
    topic = cpb.TopicToCreate(
        name=OFFSETS_TOPIC,
        num_partitions=int(ctx.config.get("offsets.topic.num.partitions")),
        replication_factor=rf,
        configs=OFFSETS_TOPIC_CONFIGS,
    )
    answer = forward.create_topics(ctx, cpb.CreateTopicsRequest(topics=[topic], timeout_ms=CREATE_TIMEOUT_MS))
    errors = [answer.error.code] + [t.error.code for t in answer.topics]
    if any(code and code != "TOPIC_ALREADY_EXISTS" for code in errors):
        logger.warning("broker %d: creating %s failed: %s %s", ctx.broker_id, OFFSETS_TOPIC, errors,
                       answer.error.message or [t.error.message for t in answer.topics])  # fmt: skip
    else:
        logger.info("broker %d: created %s (%d partitions, replication factor %d)", ctx.broker_id, OFFSETS_TOPIC,
                    topic.num_partitions, rf)  # fmt: skip


def _err(code: str, message: str) -> common_pb2.Error:
    return common_pb2.Error(code=code, message=message)
