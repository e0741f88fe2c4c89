"""DescribeCluster: cluster id, the active controller, the controller nodes and every registered broker.

Controllers come from DescribeQuorum (any controller answers it); the last answer is remembered, so a
broker that cannot reach a controller still describes the cluster (with the addresses it was started with
when it never reached one). Brokers come from this broker's metadata image, fenced ones included, with
their endpoint of the listener the request came in on (those without one are left out; see
:mod:`broker.handlers.metadata`).
"""

from __future__ import annotations

import logging

from broker.context import BrokerContext, QuorumInfo
from broker.handlers.metadata import broker_node, listener_endpoint
from broker.lifecycle import LISTENER
from proto import broker_pb2 as pb
from proto import controller_pb2

logger = logging.getLogger(__name__)

DESCRIBE_QUORUM_TIMEOUT_S = 3.0


def refresh_quorum(ctx: BrokerContext, timeout_s: float = DESCRIBE_QUORUM_TIMEOUT_S) -> QuorumInfo:
    """Ask a controller for the quorum; keep and return the answer (the last one known if none comes)."""
    if ctx.controllers is None:
        return ctx.quorum
    try:
        answer = ctx.controllers.call("DescribeQuorum", controller_pb2.DescribeQuorumRequest(), timeout_s, active=False)
    except Exception as exc:
        logger.info("DescribeQuorum failed: %s", exc)
        return ctx.quorum
    if not answer.error.code:
        ctx.quorum = QuorumInfo(answer.cluster_id, list(answer.nodes))
    return ctx.quorum


def handle(
    ctx: BrokerContext, request: pb.DescribeClusterRequest, listener: str = LISTENER
) -> pb.DescribeClusterResponse:
    quorum = refresh_quorum(ctx)
    image = ctx.metadata.image
    response = pb.DescribeClusterResponse(cluster_id=quorum.cluster_id, controller_id=image.controller_id)
    if quorum.nodes:
        response.controllers.extend(quorum.nodes)
    elif ctx.controllers is not None:
        response.controllers.extend(controller_pb2.QuorumNode(node_id=-1, address=a) for a in ctx.controllers.addresses)
    brokers = (image.brokers[b] for b in sorted(image.brokers))
    response.brokers.extend(broker_node(b, listener) for b in brokers if listener_endpoint(b, listener) is not None)
    return response
