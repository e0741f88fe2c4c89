"""Topic and config administration, and InitProducerId, through the gRPC handlers:
CreateTopics (19), DeleteTopics (20), CreatePartitions (37) and IncrementalAlterConfigs (44) go to the
active controller (:mod:`broker.handlers.forward`); DescribeConfigs (32) and InitProducerId (22) are
answered here (:mod:`broker.handlers.describe_configs`, :mod:`broker.handlers.init_producer_id`).

Kafka's resource types: 2 topic, 4 broker (an empty name: the cluster-wide default, Odradek's
``cluster`` resource). IncrementalAlterConfigs operations: 0 SET, 1 DELETE, 2 APPEND and 3 SUBTRACT
(on list configs, against the effective value). DeleteTopics by topic id (v6+) resolves the id through
the metadata image (UNKNOWN_TOPIC_ID when no topic has it).
"""

from __future__ import annotations

from typing import Any

from broker.config import describe_broker_configs, describe_topic_configs
from broker.handlers import describe_configs as describe_configs_handler
from broker.handlers import forward
from broker.handlers import init_producer_id as init_producer_id_handler
from broker.kafka.api import Request
from broker.kafka.codec import NULL_UUID, build, millis, response_class
from proto import broker_pb2 as pb
from proto import controller_pb2 as cpb

CREATE_TOPICS_KEY = 19
DELETE_TOPICS_KEY = 20
INIT_PRODUCER_ID_KEY = 22
DESCRIBE_CONFIGS_KEY = 32
CREATE_PARTITIONS_KEY = 37
INCREMENTAL_ALTER_CONFIGS_KEY = 44

TOPIC, BROKER = 2, 4
RESOURCE_NAMES = {TOPIC: "topic", BROKER: "broker"}
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
CONFIG_SOURCES = {  # Kafka's DescribeConfigsResponse config_source
    "DYNAMIC_TOPIC_CONFIG": 1,
    "DYNAMIC_BROKER_CONFIG": 2,
    "DYNAMIC_DEFAULT_BROKER_CONFIG": 3,
    "STATIC_BROKER_CONFIG": 4,
    "DEFAULT_CONFIG": 5,
}


def handle_create_topics(request: Request) -> Any:
    body = request.body
    pb_request = cpb.CreateTopicsRequest(validate_only=getattr(body, "validate_only", False),
                                         timeout_ms=millis(body.timeout))  # fmt: skip
    for t in body.topics:
        topic = pb_request.topics.add(name=t.name, num_partitions=t.num_partitions,
                                      replication_factor=t.replication_factor)  # fmt: skip
        for c in t.configs:
            if c.value is not None:
                topic.configs[c.name] = c.value
        for a in sorted(t.assignments, key=lambda a: a.partition_index):
            topic.assignments.add(broker_ids=list(a.broker_ids))
    answer = forward.create_topics(request.ctx, pb_request)
    results = {t.name: t for t in answer.topics}
    topics = []
    for t in body.topics:
        r = results.get(t.name)
        code = (r.error.code if r is not None else "") or answer.error.code
        message = (r.error.message if r is not None else "") or answer.error.message
        topics.append(dict(name=t.name, topic_id=(r.topic_id if r is not None else "") or NULL_UUID, error_code=code,
                           error_message=message or None, topic_config_error_code=0,
                           num_partitions=r.num_partitions if r is not None and not code else -1,
                           replication_factor=r.replication_factor if r is not None and not code else -1,
                           configs=None))  # fmt: skip
    return build(response_class(CREATE_TOPICS_KEY, request.version), throttle_time=0, topics=topics)


def handle_delete_topics(request: Request) -> Any:
    body = request.body
    image = request.ctx.metadata.image
    if request.version >= 6:
        wanted: list[tuple[str | None, Any]] = []
        for t in body.topics:
            name = t.name
            if not name and t.topic_id is not None and t.topic_id != NULL_UUID:
                found = next((x for x in image.topics_by_name.values() if x.topic_id == str(t.topic_id)), None)
                name = found.name if found is not None else None
            wanted.append((name, t.topic_id))
    else:
        wanted = [(name, None) for name in body.topic_names]
    names = [n for n, _ in wanted if n]
    answer = forward.delete_topics(request.ctx, cpb.DeleteTopicsRequest(names=names, timeout_ms=millis(body.timeout)))
    results = {t.name: t for t in answer.topics}
    responses = []
    for name, topic_id in wanted:
        r = results.get(name or "")
        if name is None:
            code, message = "UNKNOWN_TOPIC_ID", f"no topic has id {topic_id}"
        else:
            code = (r.error.code if r is not None else "") or answer.error.code
            message = (r.error.message if r is not None else "") or answer.error.message
        responses.append(dict(name=name, topic_id=topic_id or NULL_UUID, error_code=code,
                              error_message=message or None))  # fmt: skip
    return build(response_class(DELETE_TOPICS_KEY, request.version), throttle_time=0, responses=responses)


def handle_create_partitions(request: Request) -> Any:
    body = request.body
    pb_request = cpb.CreatePartitionsRequest(validate_only=body.validate_only, timeout_ms=millis(body.timeout))
    for t in body.topics:
        topic = pb_request.topics.add(name=t.name, count=t.count)
        for a in t.assignments or ():
            topic.assignments.add(broker_ids=list(a.broker_ids))
    answer = forward.create_partitions(request.ctx, pb_request)
    results = {t.name: t for t in answer.topics}
    out = []
    for t in body.topics:
        r = results.get(t.name)
        code = (r.error.code if r is not None else "") or answer.error.code
        message = (r.error.message if r is not None else "") or answer.error.message
        out.append(dict(name=t.name, error_code=code, error_message=message or None))
    return build(response_class(CREATE_PARTITIONS_KEY, request.version), throttle_time=0, results=out)


def handle_describe_configs(request: Request) -> Any:
    body = request.body
    pb_request = pb.DescribeConfigsRequest()
    for r in body.resources:
        pb_request.resources.add(resource_type=RESOURCE_NAMES.get(r.resource_type, f"type-{r.resource_type}"),
                                 resource_name=r.resource_name, keys=list(r.configuration_keys or ()))  # fmt: skip
    answer = describe_configs_handler.handle(request.ctx, pb_request)
    results = []
    for asked, r in zip(body.resources, answer.results, strict=True):
        results.append(dict(
            error_code=r.error.code, error_message=r.error.message or None, resource_type=asked.resource_type,
            resource_name=asked.resource_name,
            configs=[dict(name=c.key, value=c.value, read_only=c.read_only, is_default=c.is_default,
                          config_source=CONFIG_SOURCES.get(c.source, 0), is_sensitive=c.sensitive, synonyms=[],
                          config_type=0, documentation=None) for c in r.configs],
        ))  # fmt: skip
    return build(response_class(DESCRIBE_CONFIGS_KEY, request.version), throttle_time=0, results=results)


def handle_incremental_alter_configs(request: Request) -> Any:
    body = request.body
    ctx = request.ctx
    responses: list[dict[str, Any]] = []
    for r in body.resources:
        kind = RESOURCE_NAMES.get(r.resource_type)
        if kind == "broker" and not r.resource_name:
            kind = "cluster"
        if kind is None:
            responses.append(_alter_result(r, "INVALID_REQUEST", f"resource type {r.resource_type} cannot be altered"))
            continue
        try:
            entries = [_entry(ctx, kind, r.resource_name, c) for c in r.configs]
        except ValueError as exc:
            responses.append(_alter_result(r, "INVALID_CONFIG", str(exc)))
            continue
        pb_request = cpb.AlterConfigsRequest(validate_only=body.validate_only)
        pb_request.resources.add(resource_type=kind, resource_name=r.resource_name, entries=entries)
        answer = forward.alter_configs(ctx, pb_request)
        result = answer.resources[0].error if answer.resources else answer.error
        responses.append(_alter_result(r, result.code or answer.error.code, result.message or answer.error.message))
    return build(response_class(INCREMENTAL_ALTER_CONFIGS_KEY, request.version), throttle_time=0, responses=responses)


def _alter_result(resource: Any, code: str, message: str) -> dict[str, Any]:
    return dict(error_code=code, error_message=message or None, resource_type=resource.resource_type,
                resource_name=resource.resource_name)  # fmt: skip


def _entry(ctx: Any, kind: str, name: str, change: Any) -> cpb.ConfigEntry:
    op = change.config_operation
    if op == SET:
        return cpb.ConfigEntry(key=change.name, value=change.value or "")
    if op == DELETE:
        return cpb.ConfigEntry(key=change.name, delete=True)
    if op not in (APPEND, SUBTRACT):
        raise ValueError(f"unknown config operation {op} for {change.name}")
    current = [v for v in _current_value(ctx, kind, name, change.name).split(",") if v]
    given = [v for v in (change.value or "").split(",") if v]
    if op == APPEND:
        values = current + [v for v in given if v not in current]
    else:
        values = [v for v in current if v not in given]
    return cpb.ConfigEntry(key=change.name, value=",".join(values))


def _current_value(ctx: Any, kind: str, name: str, key: str) -> str:
    image = ctx.metadata.image
    if kind == "topic":
        if image.topic(name) is None:
            raise ValueError(f"unknown topic {name!r}")
        entries = describe_topic_configs(image, name, ctx.broker_id, ctx.config)
    else:
        entries = describe_broker_configs(image, ctx.broker_id, ctx.config)
    for entry in entries:
        if entry.key == key:
            return str(entry.value)
    raise ValueError(f"{key} is not a config of {kind} {name!r}")


def handle_init_producer_id(request: Request) -> Any:
    body = request.body
    answer = init_producer_id_handler.handle(request.ctx, pb.InitProducerIdRequest(
        transactional_id=body.transactional_id or "", transaction_timeout_ms=millis(body.transaction_timeout),
        producer_id=getattr(body, "producer_id", -1), producer_epoch=getattr(body, "producer_epoch", -1),
    ))  # fmt: skip
    code = answer.error.code
    return build(response_class(INIT_PRODUCER_ID_KEY, request.version), throttle_time=0, error_code=code,
                 producer_id=answer.producer_id, producer_epoch=answer.producer_epoch)  # fmt: skip
