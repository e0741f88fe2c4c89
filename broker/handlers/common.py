"""Helpers shared by the handlers: finding the partition a request names, filling in errors."""

from __future__ import annotations

from broker.context import BrokerContext
from broker.errors import KAFKA_STORAGE_ERROR, NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION, BrokerError
from replication.partition import Partition
from replication.views import Role


def local_partition(ctx: BrokerContext, topic: str, number: int) -> Partition:
    """The local replica of ``topic-number``, or BrokerError: KAFKA_STORAGE_ERROR when this broker's log dir is
    offline, UNKNOWN_TOPIC_OR_PARTITION when the metadata has no such partition, NOT_LEADER_OR_FOLLOWER when it
    exists but not (yet) here."""
    partition = ctx.replicas.partition(topic, number)
    if partition is not None and partition.role is not Role.NONE:
        return partition
    offline = ctx.replicas.offline_reason
    if offline is not None:
        raise BrokerError(KAFKA_STORAGE_ERROR, f"the log dir of broker {ctx.broker_id} is offline: {offline}")
    image_topic = ctx.metadata.image.topic(topic)
    if image_topic is None or image_topic.partition(number) is None:
        raise BrokerError(UNKNOWN_TOPIC_OR_PARTITION, f"this server does not host topic-partition {topic}-{number}")
    raise BrokerError(NOT_LEADER_OR_FOLLOWER, f"broker {ctx.broker_id} is not the leader of {topic}-{number}")
