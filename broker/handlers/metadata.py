"""Metadata: the whole cluster as this broker's metadata image has it (any broker answers).

Brokers: the unfenced ones, with their advertised ``host:port`` (Kafka lists only live brokers).
Topics: the ones asked for (``all_topics``: every one); an unknown topic answers UNKNOWN_TOPIC_OR_PARTITION,
or, with ``auto.create.topics.enable`` (off by default here), is created through the active controller with
``num.partitions`` / ``default.replication.factor`` and answers LEADER_NOT_AVAILABLE until it has leaders
(INVALID_TOPIC_EXCEPTION for a name no topic may have). Partitions: leader (-1 and LEADER_NOT_AVAILABLE when
none), leader epoch, replicas, ISR. ``controller_id`` is the active controller's node id.

Listeners (Kafka's ``listeners`` / ``advertised.listeners``): each broker registers one endpoint per
listener, and the answer gives every broker's endpoint of the listener the request came in on, so clients
inside a container network and outside it each get addresses they can reach. A broker without that listener
is left out, and a partition it leads answers LISTENER_NOT_FOUND (as Kafka does); on the default
``PLAINTEXT`` listener a broker without it is listed with its first endpoint (single-listener clusters).
Each broker also comes with the address of the ``DATA`` listener for clients of the request's listener when it
has one (``data_endpoint``): the clients' Produce and Fetch on plain TCP frames (``broker.data_listener``). That is
``DATA_<LISTENER>`` (``DATA_EXTERNAL`` for the clients of ``EXTERNAL``: one network's address each, as the gRPC
listeners have) or else ``DATA``, each only when its protocol is the client listener's.
"""

from __future__ import annotations

import logging
import re

from broker.context import BrokerContext
from broker.errors import INVALID_TOPIC_EXCEPTION, LEADER_NOT_AVAILABLE, UNKNOWN_TOPIC_OR_PARTITION, error
from broker.lifecycle import LISTENER
from common.framing import DATA
from metadata.image import BrokerRegistration, MetadataImage, TopicImage
from metadata.records import Endpoint
from proto import broker_pb2 as pb
from proto import controller_pb2

logger = logging.getLogger(__name__)

TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")
LISTENER_NOT_FOUND = "LISTENER_NOT_FOUND"  # Kafka's: the leader has no endpoint for the request's listener
AUTO_CREATE_TIMEOUT_S = 5.0


def valid_topic_name(name: str) -> bool:
    return bool(TOPIC_NAME.fullmatch(name)) and name not in (".", "..")


def listener_endpoint(broker: BrokerRegistration, listener: str = LISTENER) -> Endpoint | None:
    """``broker``'s endpoint for ``listener`` (see the module docstring), or None."""
    endpoint = broker.endpoint(listener)
    if endpoint is None and listener == LISTENER and broker.endpoints:
        return broker.endpoints[0]
    return endpoint


def broker_node(broker: BrokerRegistration, listener: str = LISTENER, data: tuple[str, ...] = ()) -> pb.BrokerNode:
    """``broker`` as clients of ``listener`` see it; with ``data`` (:func:`data_listeners`), the first of those
    listeners it has, for those clients' Produce and Fetch."""
    endpoint = listener_endpoint(broker, listener)
    data_endpoint = next((e for e in map(broker.endpoint, data) if e is not None), None)
    return pb.BrokerNode(
        node_id=broker.broker_id,
        host=endpoint.host if endpoint else "",
        port=endpoint.port if endpoint else -1,
        rack=broker.rack or "",
        fenced=broker.fenced,
        data_host=data_endpoint.host if data_endpoint else "",
        data_port=data_endpoint.port if data_endpoint else 0,
    )


def data_listeners(ctx: BrokerContext, listener: str) -> tuple[str, ...]:
    """The DATA listeners clients of ``listener`` may be told of, in order of preference: ``DATA_<LISTENER>``,
    then ``DATA``, each only when its security protocol is ``listener``'s (a client of an SSL listener is never
    sent to a plaintext one, nor a SASL client to a listener without SASL; the listener names mean the same on
    every broker, as in Kafka)."""
    wanted = []
    for name in (f"{DATA}_{listener.upper()}", DATA):
        try:
            if ctx.security.protocol(name) == ctx.security.protocol(listener):
                wanted.append(name)
        except ValueError:  # ConfigError: a listener map without it
            continue
    return tuple(wanted)


def handle(ctx: BrokerContext, request: pb.MetadataRequest, listener: str = LISTENER) -> pb.MetadataResponse:
    image = ctx.metadata.image
    names = sorted(image.topics_by_name) if request.all_topics else list(dict.fromkeys(request.topics))
    missing = [n for n in names if image.topic(n) is None]
    if missing and not request.all_topics and ctx.config.get("auto.create.topics.enable"):
        _auto_create(ctx, [n for n in missing if valid_topic_name(n)])
        image = ctx.metadata.image
    response = pb.MetadataResponse(
        cluster_id=ctx.quorum.cluster_id, controller_id=image.controller_id, metadata_offset=image.offset
    )
    data = data_listeners(ctx, listener)
    response.brokers.extend(
        broker_node(b, listener, data) for b in image.unfenced_brokers() if listener_endpoint(b, listener) is not None
    )
    for name in names:
        topic = image.topic(name)
        if topic is not None:
            response.topics.append(topic_metadata(image, topic, listener))
        elif ctx.config.get("auto.create.topics.enable") and not request.all_topics:
            if valid_topic_name(name):
                response.topics.add(name=name, error=error(LEADER_NOT_AVAILABLE, f"topic {name!r} is being created"))
            else:
                response.topics.add(name=name, error=error(INVALID_TOPIC_EXCEPTION, f"invalid topic name {name!r}"))
        else:
            response.topics.add(name=name, error=error(UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {name!r}"))
    return response


def topic_metadata(image: MetadataImage, topic: TopicImage, listener: str = LISTENER) -> pb.TopicMetadata:
    result = pb.TopicMetadata(name=topic.name, topic_id=topic.topic_id, is_internal=topic.name.startswith("__"))
    for number in sorted(topic.partitions):
        reg = topic.partitions[number]
        answer = result.partitions.add(
            partition=number, leader=reg.leader, leader_epoch=reg.leader_epoch, replicas=reg.replicas, isr=reg.isr
        )
        leader = image.broker(reg.leader) if reg.has_leader else None
        if not reg.has_leader:
            answer.error.CopyFrom(error(LEADER_NOT_AVAILABLE, f"{topic.name}-{number} has no leader"))
        elif leader is not None and listener_endpoint(leader, listener) is None:
            message = f"the leader of {topic.name}-{number}, broker {reg.leader}, has no listener {listener}"
            answer.error.CopyFrom(error(LISTENER_NOT_FOUND, message))
        offline = [r for r in reg.replicas if image.broker(r) is None or image.brokers[r].fenced]
        answer.offline_replicas.extend(offline)
    return result


def _auto_create(ctx: BrokerContext, names: list[str]) -> None:
    if not names or ctx.controllers is None:
        return
    request = controller_pb2.CreateTopicsRequest(
        topics=[
            controller_pb2.TopicToCreate(
                name=n,
                num_partitions=int(ctx.config.get("num.partitions")),
                replication_factor=int(ctx.config.get("default.replication.factor")),
            )
            for n in names
        ],
        timeout_ms=int(AUTO_CREATE_TIMEOUT_S * 1000),
    )
    try:
        ctx.controllers.call("CreateTopics", request, AUTO_CREATE_TIMEOUT_S)
    except Exception as exc:
        logger.info("auto-creating topics %s failed: %s", names, exc)
        return
    ctx.metadata.wait_for(lambda image: all(image.topic(n) is not None for n in names), AUTO_CREATE_TIMEOUT_S)
