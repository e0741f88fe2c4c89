"""Admin calls forwarded to the active controller: CreateTopics, DeleteTopics, CreatePartitions, AlterConfigs,
ElectLeaders. The answer is the controller's, unchanged.

The broker follows NOT_CONTROLLER hints and retries unreachable controllers until the request's
``timeout_ms`` (``forward_timeout_ms`` when it has none); when no controller answers in time the answer
carries REQUEST_TIMED_OUT. After a topic change succeeds, the broker waits (bounded by what is left of the
timeout, at most :data:`LOCAL_WAIT_S`) until its own metadata image shows it, so that the next Metadata
request to this broker sees the change (read-your-writes through one broker).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from broker.context import BrokerContext
from broker.errors import REQUEST_TIMED_OUT, BrokerError, error
from metadata.image import MetadataImage
from proto import controller_pb2 as pb

R = TypeVar("R")
LOCAL_WAIT_S = 5.0


def forward_call(ctx: BrokerContext, method: str, request: Any, response_type: type[R], timeout_ms: int) -> R:
    timeout_s = (timeout_ms if timeout_ms > 0 else ctx.forward_timeout_ms) / 1000.0
    if ctx.controllers is None:
        response = response_type()
        response.error.CopyFrom(error(REQUEST_TIMED_OUT, "this broker knows no controller"))  # type: ignore[attr-defined]
        return response
    try:
        answer: R = ctx.controllers.call(method, request, timeout_s)
    except BrokerError as exc:
        response = response_type()
        response.error.CopyFrom(error(exc.code, str(exc)))  # type: ignore[attr-defined]
        return response
    return answer


def await_image(ctx: BrokerContext, predicate: Callable[[MetadataImage], bool], timeout_ms: int) -> None:
    ctx.metadata.wait_for(predicate, min(LOCAL_WAIT_S, (timeout_ms if timeout_ms > 0 else 30_000) / 1000.0))


def create_topics(ctx: BrokerContext, request: pb.CreateTopicsRequest) -> pb.CreateTopicsResponse:
    response = forward_call(ctx, "CreateTopics", request, pb.CreateTopicsResponse, request.timeout_ms)
    created = {t.name: t.topic_id for t in response.topics if not t.error.code and t.topic_id}
    if created and not request.validate_only:

        def visible(image: MetadataImage) -> bool:
            return all((t := image.topic(name)) is not None and t.topic_id == tid for name, tid in created.items())

        await_image(ctx, visible, request.timeout_ms)
    return response


def delete_topics(ctx: BrokerContext, request: pb.DeleteTopicsRequest) -> pb.DeleteTopicsResponse:
    response = forward_call(ctx, "DeleteTopics", request, pb.DeleteTopicsResponse, request.timeout_ms)
    deleted = {t.name for t in response.topics if not t.error.code}
    if deleted:
        await_image(ctx, lambda image: all(image.topic(n) is None for n in deleted), request.timeout_ms)
    return response


def create_partitions(ctx: BrokerContext, request: pb.CreatePartitionsRequest) -> pb.CreatePartitionsResponse:
    response = forward_call(ctx, "CreatePartitions", request, pb.CreatePartitionsResponse, request.timeout_ms)
    failed = {t.name for t in response.topics if t.error.code}
    wanted = {t.name: t.count for t in request.topics if t.name not in failed}
    if wanted and not response.error.code and not request.validate_only:

        def visible(image: MetadataImage) -> bool:
            return all((t := image.topic(n)) is not None and len(t.partitions) >= c for n, c in wanted.items())

        await_image(ctx, visible, request.timeout_ms)
    return response


def alter_configs(ctx: BrokerContext, request: pb.AlterConfigsRequest) -> pb.AlterConfigsResponse:
    return forward_call(ctx, "AlterConfigs", request, pb.AlterConfigsResponse, 0)


def elect_leaders(ctx: BrokerContext, request: pb.ElectLeadersRequest) -> pb.ElectLeadersResponse:
    return forward_call(ctx, "ElectLeaders", request, pb.ElectLeadersResponse, 0)
