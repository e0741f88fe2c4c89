"""DescribeConfigs: effective configs of topics (their own, else the broker's, else Kafka's defaults) and of
this broker, each with Kafka's ``source`` name.

Resources: ``topic``/<name> (UNKNOWN_TOPIC_OR_PARTITION when there is no such topic), ``broker``/<this
broker's id> or ``broker``/"" (the cluster-wide defaults as this broker sees them); another broker's id is
INVALID_REQUEST (ask that broker, as in Kafka), any other resource type too. ``keys`` narrows the answer.
"""

from __future__ import annotations

from broker.config import ConfigEntry, describe_broker_configs, describe_topic_configs
from broker.context import BrokerContext
from broker.errors import INVALID_REQUEST, UNKNOWN_TOPIC_OR_PARTITION, error
from proto import broker_pb2 as pb


def handle(ctx: BrokerContext, request: pb.DescribeConfigsRequest) -> pb.DescribeConfigsResponse:
    response = pb.DescribeConfigsResponse()
    image = ctx.metadata.image
    for resource in request.resources:
        result = response.results.add(resource_type=resource.resource_type, resource_name=resource.resource_name)
        entries: list[ConfigEntry]
        if resource.resource_type == "topic":
            if image.topic(resource.resource_name) is None:
                result.error.CopyFrom(error(UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {resource.resource_name!r}"))
                continue
            entries = describe_topic_configs(image, resource.resource_name, ctx.broker_id, ctx.config)
        elif resource.resource_type == "broker" and resource.resource_name in ("", str(ctx.broker_id)):
            entries = describe_broker_configs(image, ctx.broker_id, ctx.config)
        else:
            message = f"cannot describe {resource.resource_type} {resource.resource_name!r} on broker {ctx.broker_id}"
            result.error.CopyFrom(error(INVALID_REQUEST, message))
            continue
        wanted = set(resource.keys)
        for entry in entries:
            if not wanted or entry.key in wanted:
                result.configs.add(
                    key=entry.key, value=entry.value, source=entry.source, is_default=entry.is_default,
                    read_only=entry.read_only, sensitive=False,
                )  # fmt: skip
    return response
