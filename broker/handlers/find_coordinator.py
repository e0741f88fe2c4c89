"""FindCoordinator: which broker coordinates each group (the leader of its ``__consumer_offsets`` partition), or
each transactional id (key_type 1: the leader of its ``__transaction_state`` partition).

The first call creates ``__consumer_offsets`` through the active controller (Kafka creates it on first use):
``offsets.topic.num.partitions`` partitions, replication factor ``offsets.topic.replication.factor``,
``cleanup.policy=compact``. With fewer live brokers than that replication factor it is not created (as in
Kafka): a topic created under-replicated would stay so for ever, every group's offsets one broker from loss;
FindCoordinator answers COORDINATOR_NOT_AVAILABLE saying why, and clients retry until enough brokers are up
(a single-broker cluster sets the factor to 1, as ``odradek up`` does). Per key: INVALID_GROUP_ID for an
empty id, COORDINATOR_NOT_AVAILABLE while the topic or the partition's leader is missing (the client
retries), INVALID_REQUEST for a key_type other than 0 and 1. ``__transaction_state`` is made the same way on
the first transactional lookup: ``transaction.state.log.num.partitions``, ``transaction.state.log.replication.
factor``, compacted, ``min.insync.replicas`` = ``transaction.state.log.min.isr`` (capped at the factor).
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
TRANSACTION_KEY_TYPE = 1
TXN_TOPIC = "__transaction_state"
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
    if request.key_type not in (GROUP_KEY_TYPE, TRANSACTION_KEY_TYPE):
        for key in request.keys:
            error = _err(E.INVALID_REQUEST, "key_type 0 (group) or 1 (transaction)")
            response.coordinators.add(key=key, node_id=-1, error=error)
        return response
    internal = OFFSETS_TOPIC if request.key_type == GROUP_KEY_TYPE else TXN_TOPIC
    missing = f"{internal} is being created"
    if ctx.metadata.image.topic(internal) is None and any(request.keys):
        create = create_offsets_topic if internal == OFFSETS_TOPIC else create_transaction_topic
        missing = create(ctx) or missing
    image = ctx.metadata.image
    topic = image.topic(internal)
    for key in request.keys:
        answer = response.coordinators.add(key=key, node_id=-1)
        if not key:
            what = "group id" if internal == OFFSETS_TOPIC else "transactional id"
            answer.error.CopyFrom(_err(E.INVALID_GROUP_ID if internal == OFFSETS_TOPIC else E.INVALID_REQUEST,
                                       f"the {what} must not be empty"))  # fmt: skip
            continue
        if topic is None or not topic.partitions:
            answer.error.CopyFrom(_err(E.COORDINATOR_NOT_AVAILABLE, missing))
            continue
        number = partition_for(key, len(topic.partitions))
        reg = topic.partition(number)
        broker = image.broker(reg.leader) if reg is not None and reg.has_leader else None
        endpoint = None if broker is None else listener_endpoint(broker, listener)
        if broker is None or broker.fenced or endpoint is None:
            why = f"{internal}-{number} has no live leader"
            answer.error.CopyFrom(_err(E.COORDINATOR_NOT_AVAILABLE, why))
            continue
        answer.node_id = broker.broker_id
        answer.address = f"{endpoint.host}:{endpoint.port}"
    return response


def create_offsets_topic(ctx: BrokerContext) -> str | None:
    """Ask the controller to create ``__consumer_offsets``; TOPIC_ALREADY_EXISTS (a race) is fine. Returns
    why it was not asked (too few live brokers for ``offsets.topic.replication.factor``), else None."""
    live = len(ctx.metadata.image.unfenced_brokers())
    rf = int(ctx.config.get("offsets.topic.replication.factor"))
    if live < rf:
        why = (f"{live} live broker(s) do not meet offsets.topic.replication.factor={rf} for {OFFSETS_TOPIC}; "
               "it is created once enough brokers are up (this can be ignored while the cluster starts)")  # fmt: skip
        logger.info("broker %d: %s", ctx.broker_id, why)
        return why
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
    return None


def create_transaction_topic(ctx: BrokerContext) -> str | None:
    """Ask the controller to create ``__transaction_state`` (as :func:`create_offsets_topic`)."""
    live = len(ctx.metadata.image.unfenced_brokers())
    rf = int(ctx.config.get("transaction.state.log.replication.factor"))
    if live < rf:
        why = (f"{live} live broker(s) do not meet transaction.state.log.replication.factor={rf} for "
               f"{TXN_TOPIC}; it is created once enough brokers are up")  # fmt: skip
        logger.info("broker %d: %s", ctx.broker_id, why)
        return why
    configs = {
        "cleanup.policy": "compact",
        "segment.bytes": str(ctx.config.get("transaction.state.log.segment.bytes")),
        "min.insync.replicas": str(min(int(ctx.config.get("transaction.state.log.min.isr")), rf)),
        "unclean.leader.election.enable": "false",
        "compression.type": "producer",
    }
    partitions = int(ctx.config.get("transaction.state.log.num.partitions"))
    topic = cpb.TopicToCreate(name=TXN_TOPIC, num_partitions=partitions, replication_factor=rf, configs=configs)
    answer = forward.create_topics(ctx, cpb.CreateTopicsRequest(topics=[topic], timeout_ms=CREATE_TIMEOUT_MS))
    errors = [answer.error.code] + [t.error.code for t in answer.topics]
    if any(code and code != "TOPIC_ALREADY_EXISTS" for code in errors):
        logger.warning("broker %d: creating %s failed: %s", ctx.broker_id, TXN_TOPIC, errors)
    else:
        logger.info("broker %d: created %s (%d partitions, replication factor %d)", ctx.broker_id, TXN_TOPIC,
                    topic.num_partitions, rf)  # fmt: skip
    return None


def _err(code: str, message: str) -> common_pb2.Error:
    return common_pb2.Error(code=code, message=message)
