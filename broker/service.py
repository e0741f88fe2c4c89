"""The Broker gRPC service (proto/broker.proto): a thin shell over ``broker.handlers``.

Each RPC calls its handler with the :class:`~broker.context.BrokerContext`. Handlers answer errors in the
response (Kafka's names); an exception escaping one is a bug: it is logged and the call fails with gRPC
status INTERNAL, and the broker keeps serving. With metrics on, ``_call`` (the one dispatch point) counts
and times every request (``broker.metrics.requests``). Every server also serves the gRPC health service.

Thread-safety: the servicer holds no state of its own; gRPC calls it from its worker threads.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent import futures
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

import grpc

from broker.config import BrokerConfig
from broker.context import BrokerContext
from broker.handlers import (
    consumer_group_describe,
    consumer_group_heartbeat,
    delete_groups,
    describe_cluster,
    describe_configs,
    describe_log_dirs,
    fetch,
    find_coordinator,
    forward,
    init_producer_id,
    list_groups,
    list_offsets,
    metadata,
    offset_commit,
    offset_fetch,
    offsets_for_leader_epoch,
    produce,
)
from broker.lifecycle import LISTENER
from proto import broker_pb2_grpc

if TYPE_CHECKING:
    from controller.health import HealthReporter

logger = logging.getLogger(__name__)

Req = TypeVar("Req")
Resp = TypeVar("Resp")
RESPONSE_SLACK_BYTES = 1 << 20  # framing of a response around its record bytes
SERVICE_NAME = "odradek.broker.Broker"  # its name in the gRPC health service


class BrokerService(broker_pb2_grpc.BrokerServicer):
    """Every RPC of the Broker service, as served on one listener (Metadata and DescribeCluster answer its
    endpoints)."""

    def __init__(self, ctx: BrokerContext, listener: str = LISTENER) -> None:
        self._ctx = ctx
        self._listener = listener

    def _call(self, handler: Callable[[BrokerContext, Req], Resp], request: Req, context: Any) -> Resp:
        metrics = self._ctx.metrics
        if metrics is None:
            return self._run(handler, request, context)
        started = time.perf_counter()
        try:
            response = self._run(handler, request, context)
        except BaseException:
            metrics.requests.record_failure(handler, request, started)
            raise
        metrics.requests.record(handler, request, response, started)
        return response

    def _run(self, handler: Callable[[BrokerContext, Req], Resp], request: Req, context: Any) -> Resp:
        try:
            return handler(self._ctx, request)
        except Exception as exc:
            name = getattr(getattr(handler, "func", handler), "__module__", handler)  # partial: its function's
            logger.exception("broker %d: %s failed", self._ctx.broker_id, name)
            context.abort(grpc.StatusCode.INTERNAL, f"unexpected error: {exc!r}")
            raise  # abort raises; this line satisfies the type checker

    def Metadata(self, request: Any, context: Any) -> Any:
        return self._call(partial(metadata.handle, listener=self._listener), request, context)

    def Produce(self, request: Any, context: Any) -> Any:
        return self._call(produce.handle, request, context)

    def Fetch(self, request: Any, context: Any) -> Any:
        return self._call(fetch.handle, request, context)

    def ListOffsets(self, request: Any, context: Any) -> Any:
        return self._call(list_offsets.handle, request, context)

    def OffsetsForLeaderEpoch(self, request: Any, context: Any) -> Any:
        return self._call(offsets_for_leader_epoch.handle, request, context)

    def DescribeCluster(self, request: Any, context: Any) -> Any:
        return self._call(partial(describe_cluster.handle, listener=self._listener), request, context)

    def DescribeConfigs(self, request: Any, context: Any) -> Any:
        return self._call(describe_configs.handle, request, context)

    def DescribeLogDirs(self, request: Any, context: Any) -> Any:
        return self._call(describe_log_dirs.handle, request, context)

    def CreateTopics(self, request: Any, context: Any) -> Any:
        return self._call(forward.create_topics, request, context)

    def DeleteTopics(self, request: Any, context: Any) -> Any:
        return self._call(forward.delete_topics, request, context)

    def CreatePartitions(self, request: Any, context: Any) -> Any:
        return self._call(forward.create_partitions, request, context)

    def AlterConfigs(self, request: Any, context: Any) -> Any:
        return self._call(forward.alter_configs, request, context)

    def ElectLeaders(self, request: Any, context: Any) -> Any:
        return self._call(forward.elect_leaders, request, context)

    def InitProducerId(self, request: Any, context: Any) -> Any:
        return self._call(init_producer_id.handle, request, context)

    def FindCoordinator(self, request: Any, context: Any) -> Any:
        return self._call(partial(find_coordinator.handle, listener=self._listener), request, context)

    def ConsumerGroupHeartbeat(self, request: Any, context: Any) -> Any:
        return self._call(consumer_group_heartbeat.handle, request, context)

    def OffsetCommit(self, request: Any, context: Any) -> Any:
        return self._call(offset_commit.handle, request, context)

    def OffsetFetch(self, request: Any, context: Any) -> Any:
        return self._call(offset_fetch.handle, request, context)

    def ListGroups(self, request: Any, context: Any) -> Any:
        return self._call(list_groups.handle, request, context)

    def ConsumerGroupDescribe(self, request: Any, context: Any) -> Any:
        return self._call(consumer_group_describe.handle, request, context)

    def DeleteGroups(self, request: Any, context: Any) -> Any:
        return self._call(delete_groups.handle, request, context)


def message_limits(config: BrokerConfig) -> tuple[int, int]:
    """``(max receive, max send)`` bytes of one gRPC message.

    Receive: ``socket.request.max.bytes`` (a Produce may carry many partitions' batches, each up to
    ``message.max.bytes``). Send: the larger Fetch cap (``fetch.max.bytes`` or
    ``replica.fetch.response.max.bytes``) plus one batch of ``message.max.bytes`` (the first batch goes out
    whole even above the cap) plus framing.
    """
    receive = max(int(config.get("socket.request.max.bytes")), config.message_max_bytes + RESPONSE_SLACK_BYTES)
    send = max(config.fetch_max_bytes, config.replica_fetch_response_max_bytes) + config.message_max_bytes
    return receive, min(send + RESPONSE_SLACK_BYTES, 2**31 - 1)


def start_grpc_server(
    ctx: BrokerContext, listen: str, *, listener: str = LISTENER, health: HealthReporter | None = None
) -> grpc.Server:
    """Serve the Broker service (and ``health``'s) on ``listen`` for the listener named ``listener``;
    ``RuntimeError`` when it cannot bind."""
    receive, send = message_limits(ctx.config)
    server = grpc.server(
        futures.ThreadPoolExecutor(
            max_workers=int(ctx.config.get("num.io.threads")), thread_name_prefix=f"broker-{ctx.broker_id}-rpc"
        ),
        options=[
            ("grpc.max_receive_message_length", receive),
            ("grpc.max_send_message_length", send),
            ("grpc.so_reuseport", 0),
        ],
        maximum_concurrent_rpcs=int(ctx.config.get("queued.max.requests")),
    )
    add_servicer: Any = broker_pb2_grpc.add_BrokerServicer_to_server  # generated code is untyped
    add_servicer(BrokerService(ctx, listener), server)
    if health is not None:
        health.add_to(server)
    try:
        port = server.add_insecure_port(listen)
    except RuntimeError as exc:
        raise RuntimeError(f"cannot listen on {listen}: {exc}") from None
    if port == 0:
        raise RuntimeError(f"cannot listen on {listen}")
    server.start()
    return server
