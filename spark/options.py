"""The options of the ``odradek`` Spark data source, parsed and checked once, on the driver.

They follow Spark's Kafka source and sink (``subscribe``, ``startingOffsets``, ``maxOffsetsPerTrigger``,
``kafka.<key>`` passed to the client, ...). Spark hands options over in a case-insensitive map (keys
lowercased), so lookups here are by lowercased name, and messages use the documented spelling.

Everything here is pure: no Spark, no network. A misspelled option, a bad value or a malformed offsets
JSON raises :class:`OptionError`, which names the option.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from odradek.types import TopicPartition
from spark.planning import DEFAULT_MIN_RECORDS_PER_TASK

EARLIEST = -2  # in offsets JSON, as in Spark's Kafka source
LATEST = -1

# Options Spark itself puts into a data source's option map (the paths of load(path)/save(path), and the
# checkpoint of a streaming write): accepted and ignored.
SPARK_OPTIONS = frozenset({"path", "paths", "checkpointlocation", "queryname"})

SOURCE_OPTIONS = (
    "bootstrap.servers",
    "subscribe",
    "subscribePattern",
    "assign",
    "startingOffsets",
    "endingOffsets",
    "startingTimestamp",
    "startingOffsetsByTimestamp",
    "startingOffsetsByTimestampStrategy",
    "endingTimestamp",
    "endingOffsetsByTimestamp",
    "maxOffsetsPerTrigger",
    "minOffsetsPerTrigger",
    "maxTriggerDelay",
    "failOnDataLoss",
    "includeHeaders",
    "minPartitions",
    "maxRecordsPerPartition",
    "maxPartitions",
    "minRecordsPerPartition",
    "kafkaConsumer.pollTimeoutMs",
)
SINK_OPTIONS = ("bootstrap.servers", "topic", "includeHeaders", "exactlyOnce", "transactionalIdPrefix")

# Client keys the data source sets itself: a user value would break it (Spark's Kafka source says the same).
CONSUMER_RESERVED = {
    "auto.offset.reset": "use startingOffsets (and failOnDataLoss) instead",
    "enable.auto.commit": "Spark keeps the offsets in its checkpoint; no offsets are committed",
    "group.id": "Spark keeps the offsets in its checkpoint; no consumer group is joined",
    "key.deserializer": "keys are returned as binary; cast or decode them in the query",
    "value.deserializer": "values are returned as binary; cast or decode them in the query",
}
PRODUCER_RESERVED = {
    "key.serializer": "the key column is written as it is (binary, or a string as UTF-8)",
    "value.serializer": "the value column is written as it is (binary, or a string as UTF-8)",
}

DEFAULT_POLL_TIMEOUT_MS = 120_000  # Spark's kafkaConsumer.pollTimeoutMs (spark.network.timeout)
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60 * 1000  # Spark's maxTriggerDelay, "15m"
_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|h|d|milliseconds?|seconds?|minutes?|hours?|days?)?\s*$", re.IGNORECASE)
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


class OptionError(ValueError):
    """An option of the odradek data source is unknown, missing, malformed or contradicts another."""


# ------------------------------------------------------------------------------------------- offsets specs


@dataclass(frozen=True, slots=True)
class OffsetSpec:
    """Where reading starts or ends: ``earliest``, ``latest``, per-partition offsets (-2 earliest, -1
    latest), one timestamp for every partition, or per-partition timestamps (ms)."""

    kind: str  # "earliest" | "latest" | "offsets" | "timestamp" | "timestamps"
    offsets: Mapping[TopicPartition, int] = field(default_factory=dict)
    timestamp_ms: int = -1
    strategy: str = "error"  # by-timestamp lookups that find no record: "error" or "latest"


EARLIEST_SPEC = OffsetSpec("earliest")
LATEST_SPEC = OffsetSpec("latest")


def parse_partition_offsets(text: str, option: str) -> dict[TopicPartition, int]:
    """``{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}`` as {TopicPartition: int}."""
    example = '{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}'
    data = _json(text, option, example)
    if not isinstance(data, dict) or not data:
        raise OptionError(f"{option}: expected a JSON object of topics, like {example}, got {text!r}")
    offsets: dict[TopicPartition, int] = {}
    for topic, partitions in data.items():
        if not isinstance(partitions, dict) or not partitions:
            raise OptionError(f"{option}: topic {topic!r} must map partition numbers to offsets, like {example}")
        for key, value in partitions.items():
            if not str(key).isdigit():
                raise OptionError(f"{option}: {key!r} of topic {topic!r} is not a partition number")
            if type(value) is not int:
                raise OptionError(f"{option}: the offset of {topic}-{key} must be an integer, got {value!r}")
            offsets[TopicPartition(topic, int(key))] = value
    return offsets


def parse_assign(text: str) -> tuple[TopicPartition, ...]:
    """``{"topicA":[0,1],"topicB":[2,4]}`` as sorted TopicPartitions."""
    example = '{"topicA":[0,1],"topicB":[2,4]}'
    data = _json(text, "assign", example)
    if not isinstance(data, dict) or not data:
        raise OptionError(f"assign: expected a JSON object of topics to partition lists, like {example}, got {text!r}")
    tps: set[TopicPartition] = set()
    for topic, partitions in data.items():
        if not isinstance(partitions, list) or not all(type(p) is int and p >= 0 for p in partitions):
            raise OptionError(f"assign: topic {topic!r} must map to a list of partition numbers, like {example}")
        tps.update(TopicPartition(topic, p) for p in partitions)
    return tuple(sorted(tps))


def _json(text: str, option: str, example: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise OptionError(f"{option}: malformed JSON ({exc.msg} at character {exc.pos}): {text!r}; "
                          f"expected something like {example}") from None  # fmt: skip


def offsets_to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """Spark's Kafka offset layout with every key a string, topics and partitions in sorted order.

    Spark compares offsets as JSON text, so the same offsets must always serialize the same way.
    """
    out: dict[str, dict[str, int]] = {}
    for tp in sorted(offsets, key=lambda tp: (tp.topic, str(tp.partition))):
        out.setdefault(tp.topic, {})[str(tp.partition)] = offsets[tp]
    return out


def offsets_from_json(data: Mapping[str, Any]) -> dict[TopicPartition, int]:
    """The inverse of :func:`offsets_to_json` (a checkpointed offset)."""
    offsets: dict[TopicPartition, int] = {}
    for topic, partitions in data.items():
        for partition, offset in partitions.items():
            offsets[TopicPartition(topic, int(partition))] = int(offset)
    return offsets


# ----------------------------------------------------------------------------------------------- source


@dataclass(frozen=True, slots=True)
class Subscription:
    """Which partitions to read: one of ``subscribe`` (topics), ``subscribePattern`` or ``assign``."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assigned: tuple[TopicPartition, ...] = ()

    def matches(self, topic: str) -> bool:
        if self.pattern is not None:
            return re.fullmatch(self.pattern, topic) is not None
        if self.assigned:
            return any(tp.topic == topic for tp in self.assigned)
        return topic in self.topics

    def describe(self) -> str:
        if self.pattern is not None:
            return f"subscribePattern {self.pattern!r}"
        if self.assigned:
            return "assign " + ",".join(str(tp) for tp in self.assigned)
        return "subscribe " + ",".join(self.topics)


@dataclass(frozen=True, slots=True)
class SourceOptions:
    client: Mapping[str, object]  # Consumer/Admin config: bootstrap.servers and the kafka.* keys
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS
    fail_on_data_loss: bool = True
    include_headers: bool = False
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    max_partitions: int | None = None
    min_records_per_partition: int = DEFAULT_MIN_RECORDS_PER_TASK
    poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS


def parse_source_options(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    """Check and parse the options of ``spark.read`` (``streaming=False``) or ``spark.readStream``."""
    opts = _normalize(options, SOURCE_OPTIONS)
    client = _client_config(opts, CONSUMER_RESERVED, "source")
    subscription = _subscription(opts)
    starting = _starting(opts, streaming)
    ending = _ending(opts, streaming)
    max_rows = _positive_int(opts, "maxOffsetsPerTrigger")
    min_rows = _positive_int(opts, "minOffsetsPerTrigger")
    if not streaming:
        for name in ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay"):
            if name.lower() in opts:
                raise OptionError(f"{name} is only valid in streaming queries (spark.readStream)")
    if max_rows is not None and min_rows is not None and min_rows > max_rows:
        raise OptionError(f"minOffsetsPerTrigger ({min_rows}) must not exceed maxOffsetsPerTrigger ({max_rows})")
    min_tasks, max_tasks = _positive_int(opts, "minPartitions"), _positive_int(opts, "maxPartitions")
    if min_tasks is not None and max_tasks is not None and min_tasks > max_tasks:
        raise OptionError(f"minPartitions ({min_tasks}) must not exceed maxPartitions ({max_tasks})")
    min_records = _int_at_least(opts, "minRecordsPerPartition", 0)  # 0 is allowed: one task per range
    delay = opts.get("maxtriggerdelay")
    return SourceOptions(
        client=client,
        subscription=subscription,
        starting=starting,
        ending=ending,
        max_offsets_per_trigger=max_rows,
        min_offsets_per_trigger=min_rows,
        max_trigger_delay_ms=DEFAULT_MAX_TRIGGER_DELAY_MS if delay is None else parse_duration_ms(delay),
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        include_headers=_bool(opts, "includeHeaders", False),
        min_partitions=min_tasks,
        max_records_per_partition=_positive_int(opts, "maxRecordsPerPartition"),
        max_partitions=max_tasks,
        min_records_per_partition=DEFAULT_MIN_RECORDS_PER_TASK if min_records is None else min_records,
        poll_timeout_ms=_positive_int(opts, "kafkaConsumer.pollTimeoutMs") or DEFAULT_POLL_TIMEOUT_MS,
    )


def _subscription(opts: Mapping[str, str]) -> Subscription:
    given = [name for name in ("subscribe", "subscribePattern", "assign") if name.lower() in opts]
    if len(given) != 1:
        what = "none was" if not given else " and ".join(given) + " were"
        raise OptionError(f"exactly one of the options subscribe, subscribePattern, assign must be given; {what}")
    value = opts[given[0].lower()]
    if given[0] == "subscribe":
        topics = tuple(t.strip() for t in value.split(",") if t.strip())
        if not topics:
            raise OptionError(f"subscribe: no topic given in {value!r} (a comma-separated list of topics)")
        return Subscription(topics=topics)
    if given[0] == "subscribePattern":
        try:
            re.compile(value)
        except re.error as exc:
            raise OptionError(f"subscribePattern: {value!r} is not a valid regular expression ({exc})") from None
        if not value.strip():
            raise OptionError("subscribePattern: the pattern is empty")
        return Subscription(pattern=value)
    return Subscription(assigned=parse_assign(value))


def _starting(opts: Mapping[str, str], streaming: bool) -> OffsetSpec:
    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise OptionError(f"startingOffsetsByTimestampStrategy must be error or latest, got {strategy!r}")
    # Spark's precedence: startingTimestamp, then startingOffsetsByTimestamp, then startingOffsets.
    if "startingtimestamp" in opts:
        return OffsetSpec("timestamp", timestamp_ms=_timestamp(opts, "startingTimestamp"), strategy=strategy)
    if "startingoffsetsbytimestamp" in opts:
        by_ts = parse_partition_offsets(opts["startingoffsetsbytimestamp"], "startingOffsetsByTimestamp")
        _check_timestamps(by_ts, "startingOffsetsByTimestamp")
        return OffsetSpec("timestamps", offsets=by_ts, strategy=strategy)
    text = opts.get("startingoffsets")
    if text is None:
        return LATEST_SPEC if streaming else EARLIEST_SPEC
    word = text.strip().lower()
    if word == "earliest":
        return EARLIEST_SPEC
    if word == "latest":
        if not streaming:
            raise OptionError("startingOffsets: latest is not allowed in batch queries (the result would be empty)")
        return LATEST_SPEC
    offsets = parse_partition_offsets(text, "startingOffsets")
    for tp, offset in offsets.items():
        if offset < EARLIEST or (offset == LATEST and not streaming):
            allowed = "-2 (earliest) or an offset >= 0" if not streaming else "-2 (earliest), -1 (latest) or >= 0"
            raise OptionError(f"startingOffsets: the offset {offset} of {tp} is not valid; use {allowed}")
    return OffsetSpec("offsets", offsets=offsets)


def _ending(opts: Mapping[str, str], streaming: bool) -> OffsetSpec:
    names = [n for n in ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp") if n.lower() in opts]
    if streaming and names:
        raise OptionError(f"{names[0]} is only valid in batch queries; a streaming query has no end")
    if "endingtimestamp" in opts:
        return OffsetSpec("timestamp", timestamp_ms=_timestamp(opts, "endingTimestamp"), strategy="latest")
    if "endingoffsetsbytimestamp" in opts:
        by_ts = parse_partition_offsets(opts["endingoffsetsbytimestamp"], "endingOffsetsByTimestamp")
        _check_timestamps(by_ts, "endingOffsetsByTimestamp")
        return OffsetSpec("timestamps", offsets=by_ts, strategy="latest")
    text = opts.get("endingoffsets")
    if text is None or text.strip().lower() == "latest":
        return LATEST_SPEC
    if text.strip().lower() == "earliest":
        raise OptionError("endingOffsets: earliest is not allowed (the result would be empty)")
    offsets = parse_partition_offsets(text, "endingOffsets")
    for tp, offset in offsets.items():
        if offset < LATEST:
            raise OptionError(f"endingOffsets: the offset {offset} of {tp} is not valid; use -1 (latest) or >= 0")
    return OffsetSpec("offsets", offsets=offsets)


def _check_timestamps(by_ts: Mapping[TopicPartition, int], option: str) -> None:
    for tp, ts in by_ts.items():
        if ts < 0:
            raise OptionError(f"{option}: the timestamp of {tp} must be >= 0 (milliseconds since the epoch), got {ts}")


def _timestamp(opts: Mapping[str, str], name: str) -> int:
    value = opts[name.lower()].strip()
    if not value.isdigit():
        raise OptionError(f"{name} must be a timestamp in milliseconds since the epoch, got {value!r}")
    return int(value)


# ------------------------------------------------------------------------------------------------- sink


@dataclass(frozen=True, slots=True)
class SinkOptions:
    client: Mapping[str, object]  # Producer config: bootstrap.servers and the kafka.* keys
    topic: str | None = None
    exactly_once: bool = False  # exactlyOnce: one transaction per task, committed by the driver (spark.exactly_once)
    transactional_id_prefix: str | None = None  # transactionalIdPrefix (default: from the query id)


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    opts = _normalize(options, SINK_OPTIONS)
    client = _client_config(opts, PRODUCER_RESERVED, "sink")
    topic = opts.get("topic")
    if topic is not None and not topic.strip():
        raise OptionError("topic: the topic name is empty")
    exactly_once = _bool(opts, "exactlyOnce", False)
    prefix = opts.get("transactionalidprefix")
    if exactly_once and not (topic and topic.strip()):
        raise OptionError("exactlyOnce=true needs the topic option (its partition 0 keeps the micro-batch bookkeeping)")
    if "transactional.id" in client:
        raise OptionError("option 'kafka.transactional.id' is not supported by the odradek sink: use exactlyOnce=true "
                          "(and transactionalIdPrefix)")  # fmt: skip
    return SinkOptions(client=client, topic=topic.strip() if topic else None, exactly_once=exactly_once,
                       transactional_id_prefix=prefix.strip() if prefix else None)  # fmt: skip


# ---------------------------------------------------------------------------------------------- helpers


def _normalize(options: Mapping[str, str], known: tuple[str, ...]) -> dict[str, str]:
    """Lowercased keys; unknown ones (not ``kafka.*``, not Spark's own) raise, naming the closest known."""
    opts = {str(k).lower(): str(v) for k, v in options.items() if v is not None}
    canonical = {name.lower(): name for name in known}
    for key in opts:
        if key in canonical or key in SPARK_OPTIONS or key.startswith("kafka."):
            continue
        guess = difflib.get_close_matches(key, list(canonical), n=1, cutoff=0.6)
        hint = f"; did you mean {canonical[guess[0]]}?" if guess else ""
        raise OptionError(f"unknown option {key!r} for the odradek data source{hint} "
                          f"(known: {', '.join(known)}, and kafka.<client config key>)")  # fmt: skip
    return opts


def _client_config(opts: Mapping[str, str], reserved: Mapping[str, str], side: str) -> dict[str, object]:
    """``bootstrap.servers`` (or ``kafka.bootstrap.servers``) and every ``kafka.<key>`` as a client config."""
    config: dict[str, object] = {}
    for key, value in opts.items():
        if key.startswith("kafka."):
            name = key[len("kafka.") :]
            if name in reserved:
                raise OptionError(f"option {key!r} is not supported by the odradek {side}: {reserved[name]}")
            config[name] = value
    direct = opts.get("bootstrap.servers")
    if direct is not None:
        if "bootstrap.servers" in config and config["bootstrap.servers"] != direct:
            raise OptionError("bootstrap.servers and kafka.bootstrap.servers are both given, with different values")
        config["bootstrap.servers"] = direct
    if not str(config.get("bootstrap.servers", "")).strip():
        raise OptionError("option bootstrap.servers (or kafka.bootstrap.servers) is required, e.g. 127.0.0.1:9092")
    return config


def _bool(opts: Mapping[str, str], name: str, default: bool) -> bool:
    value = opts.get(name.lower())
    if value is None:
        return default
    word = value.strip().lower()
    if word not in ("true", "false"):
        raise OptionError(f"{name} must be true or false, got {value!r}")
    return word == "true"


def _positive_int(opts: Mapping[str, str], name: str) -> int | None:
    return _int_at_least(opts, name, 1)


def _int_at_least(opts: Mapping[str, str], name: str, minimum: int) -> int | None:
    """The integer option ``name`` (None when absent), refused below ``minimum`` (0 or 1)."""
    value = opts.get(name.lower())
    if value is None:
        return None
    text = value.strip()
    if not text.isdigit() or int(text) < minimum:
        what = "a positive integer" if minimum == 1 else f"an integer of at least {minimum}"
        raise OptionError(f"{name} must be {what}, got {value!r}")
    return int(text)


def parse_duration_ms(value: str, name: str = "maxTriggerDelay") -> int:
    """``"15m"``, ``"30s"``, ``"500ms"``, ``"2 minutes"`` or a bare number of milliseconds."""
    match = _DURATION.match(value)
    if match is None:
        raise OptionError(f"{name} must be a duration like 500ms, 30s, 15m or 1h, got {value!r}")
    unit = (match.group(2) or "ms").lower()
    unit = "ms" if unit.startswith("milli") else unit[0] if len(unit) > 2 else unit
    return int(match.group(1)) * _UNIT_MS[unit]
