"""Config schemas the controller checks: topic configs, broker/cluster configs and its own settings.

Keys, defaults and ranges are Kafka's. A value travels as a string (as ``kafka-configs.sh`` and
CreateTopics send it); :meth:`ConfigSchema.validate` parses it and raises :class:`ConfigError`, which
names the key, for an unknown key or a bad value.

- :data:`TOPIC_CONFIGS`: what a topic may set. Exactly the keys the storage engine's ``log.config``
  understands (a test keeps the two in step: a broker must be able to build a log from any topic config
  the controller accepted).
- :data:`BROKER_CONFIGS`: what AlterConfigs may set on a broker (``broker``/``<id>``) or on the whole
  cluster (``cluster``/``""``, Kafka's cluster-wide default broker config): the broker-level synonyms of
  the topic configs (``log.retention.ms`` for ``retention.ms``, ... :data:`TOPIC_TO_BROKER_KEY`), plus
  ``unclean.leader.election.enable``, ``min.insync.replicas``, ``compression.type``, ``num.partitions``,
  ``default.replication.factor``, ``auto.leader.rebalance.enable`` and ``max.broker.partitions``, which the
  active controller reads.
- :data:`CONTROLLER_CONFIGS` and :class:`ControllerConfig`: ``odradek controller --config KEY=VALUE``.

Where the controller needs a value it looks, in order, at the topic's config, the cluster config (dynamic,
in the metadata image) and the controller's own static config (:meth:`ControllerConfig.cluster_default`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

INT_MIN, INT_MAX = -(2**31), 2**31 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1
SHORT_MAX = 2**15 - 1


class ConfigError(ValueError):
    """An unknown config key or a bad value; the message names the key. Kafka's ``INVALID_CONFIG``."""

    code = "INVALID_CONFIG"

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


class ConfigType(Enum):
    INT = "int"
    LONG = "long"
    SHORT = "short"
    DOUBLE = "double"
    BOOLEAN = "boolean"
    STRING = "string"
    LIST = "list"


def _parse_integer(key: str, text: str, low: int, high: int) -> int:
    stripped = text.strip()
    body = stripped[1:] if stripped[:1] in "+-" else stripped
    if not body.isascii() or not body.isdigit():  # Kafka's parseInt: ASCII digits after an optional sign
        raise ConfigError(key, f"Invalid value {text!r} for configuration {key}: not a number of type int")
    value = int(stripped)
    if not low <= value <= high:
        raise ConfigError(key, f"Invalid value {text!r} for configuration {key}: out of range")
    return value


def _parse_double(key: str, text: str) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        raise ConfigError(key, f"Invalid value {text!r} for configuration {key}: not a number") from None
    if not math.isfinite(value):
        raise ConfigError(key, f"Invalid value {text!r} for configuration {key}: not a finite number")
    return value


def _parse_bool(key: str, text: str) -> bool:
    lowered = text.strip().lower()
    if lowered not in ("true", "false"):
        raise ConfigError(key, f"Invalid value {text!r} for configuration {key}: expected true or false")
    return lowered == "true"


_INTEGER_RANGES = {
    ConfigType.INT: (INT_MIN, INT_MAX),
    ConfigType.LONG: (LONG_MIN, LONG_MAX),
    ConfigType.SHORT: (-(2**15), SHORT_MAX),
}


@dataclass(frozen=True, slots=True)
class ConfigKey:
    """One key: its type, Kafka default (as a string) and valid range (inclusive) or choices. Immutable."""

    name: str
    type: ConfigType
    default: str
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] = ()

    def parse(self, text: str) -> Any:
        """The typed value of ``text``; :class:`ConfigError` naming the key if it is not valid."""
        if not isinstance(text, str):
            raise ConfigError(self.name, f"Invalid value {text!r} for configuration {self.name}: not a string")
        value: Any
        if self.type in _INTEGER_RANGES:
            value = _parse_integer(self.name, text, *_INTEGER_RANGES[self.type])
        elif self.type is ConfigType.DOUBLE:
            value = _parse_double(self.name, text)
        elif self.type is ConfigType.BOOLEAN:
            value = _parse_bool(self.name, text)
        elif self.type is ConfigType.LIST:
            value = tuple(item.strip() for item in text.split(","))
            self._check_choices(text, value)
            return value
        else:
            value = text.strip()
            self._check_choices(text, (value,))
            return value
        self.check_range(text, value)
        return value

    def check_range(self, text: str, value: float) -> None:
        """:class:`ConfigError` unless ``low <= value <= high`` (``text``: the value as given)."""
        if (self.low is not None and value < self.low) or (self.high is not None and value > self.high):
            bounds = f"at least {_num(self.low)}" if self.high is None else f"in [{_num(self.low)}, {_num(self.high)}]"
            raise ConfigError(self.name, f"Invalid value {text!r} for configuration {self.name}: must be {bounds}")

    def _check_choices(self, text: str, values: tuple[str, ...]) -> None:
        if self.choices and (not values or any(v not in self.choices for v in values)):
            raise ConfigError(
                self.name,
                f"Invalid value {text!r} for configuration {self.name}: must be one of {', '.join(self.choices)}",
            )


def _num(value: float | None) -> str:
    return "-inf" if value is None else (str(int(value)) if float(value).is_integer() else str(value))


class ConfigSchema:
    """A set of :class:`ConfigKey` by name. Immutable; safe to share between threads."""

    def __init__(self, kind: str, keys: list[ConfigKey]) -> None:
        self.kind = kind
        self.keys: Mapping[str, ConfigKey] = {k.name: k for k in keys}

    def __contains__(self, key: object) -> bool:
        return key in self.keys

    def key(self, name: str) -> ConfigKey:
        found = self.keys.get(name)
        if found is None:
            raise ConfigError(name, f"Unknown {self.kind} config name: {name}")
        return found

    def validate(self, name: str, text: str) -> Any:
        """The typed value of config ``name`` set to ``text``; :class:`ConfigError` naming the key."""
        return self.key(name).parse(text)

    def validate_all(self, props: Mapping[str, str]) -> dict[str, Any]:
        return {name: self.validate(name, text) for name, text in props.items()}

    def default(self, name: str) -> Any:
        key = self.key(name)
        return key.parse(key.default)


def _key(name: str, type_: ConfigType, default: str, low: float | None = None, high: float | None = None,
         choices: tuple[str, ...] = ()) -> ConfigKey:  # fmt: skip
    return ConfigKey(name, type_, default, low, high, choices)


INT, LONG, SHORT, DOUBLE, BOOLEAN, STRING, LIST = (
    ConfigType.INT, ConfigType.LONG, ConfigType.SHORT, ConfigType.DOUBLE, ConfigType.BOOLEAN,
    ConfigType.STRING, ConfigType.LIST,
)  # fmt: skip
COMPRESSION_TYPES = ("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd")
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
CLEANUP_POLICIES = ("delete", "compact")

_TOPIC_KEYS = [
    _key("segment.bytes", INT, "1073741824", 14),
    _key("segment.ms", LONG, "604800000", 1),
    _key("segment.index.bytes", INT, "10485760", 4),
    _key("index.interval.bytes", INT, "4096", 0),
    _key("retention.ms", LONG, "604800000", -1),
    _key("retention.bytes", LONG, "-1", -1),
    _key("max.message.bytes", INT, "1048588", 0),
    _key("flush.messages", LONG, str(LONG_MAX), 1),
    _key("flush.ms", LONG, str(LONG_MAX), 0),
    _key("message.timestamp.type", STRING, "CreateTime", choices=TIMESTAMP_TYPES),
    _key("message.timestamp.before.max.ms", LONG, str(LONG_MAX), 0),
    _key("message.timestamp.after.max.ms", LONG, "3600000", 0),  # Kafka 4.0's default (KIP-1030)
    _key("cleanup.policy", LIST, "delete", choices=CLEANUP_POLICIES),
    _key("delete.retention.ms", LONG, "86400000", 0),
    _key("min.compaction.lag.ms", LONG, "0", 0),
    _key("max.compaction.lag.ms", LONG, str(LONG_MAX), 1),
    _key("min.cleanable.dirty.ratio", DOUBLE, "0.5", 0.0, 1.0),
    _key("compression.type", STRING, "producer", choices=COMPRESSION_TYPES),
    _key("min.insync.replicas", INT, "1", 1),
    _key("unclean.leader.election.enable", BOOLEAN, "false"),
]
TOPIC_CONFIGS = ConfigSchema("topic", _TOPIC_KEYS)
"""Configs a topic may set (CreateTopics, AlterConfigs on a ``topic`` resource)."""

TOPIC_TO_BROKER_KEY: Mapping[str, str] = {
    "segment.bytes": "log.segment.bytes",
    "segment.ms": "log.roll.ms",
    "segment.index.bytes": "log.index.size.max.bytes",
    "index.interval.bytes": "log.index.interval.bytes",
    "retention.ms": "log.retention.ms",
    "retention.bytes": "log.retention.bytes",
    "max.message.bytes": "message.max.bytes",
    "flush.messages": "log.flush.interval.messages",
    "flush.ms": "log.flush.interval.ms",
    "message.timestamp.type": "log.message.timestamp.type",
    "message.timestamp.before.max.ms": "log.message.timestamp.before.max.ms",
    "message.timestamp.after.max.ms": "log.message.timestamp.after.max.ms",
    "cleanup.policy": "log.cleanup.policy",
    "delete.retention.ms": "log.cleaner.delete.retention.ms",
    "min.compaction.lag.ms": "log.cleaner.min.compaction.lag.ms",
    "max.compaction.lag.ms": "log.cleaner.max.compaction.lag.ms",
    "min.cleanable.dirty.ratio": "log.cleaner.min.cleanable.ratio",
    "compression.type": "compression.type",
    "min.insync.replicas": "min.insync.replicas",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
}
"""Kafka's broker-level synonym of each topic config (the default a topic without its own value gets)."""

_CLUSTER_KEYS = [
    _key("num.partitions", INT, "1", 1),
    _key("default.replication.factor", SHORT, "1", 1),
    _key("auto.leader.rebalance.enable", BOOLEAN, "true"),
    # Not Kafka's (the name of KIP-578, not adopted): partition replicas per broker, checked at creation.
    _key("max.broker.partitions", INT, "4000", 1),
]
BROKER_CONFIGS = ConfigSchema(
    "broker",
    [ConfigKey(TOPIC_TO_BROKER_KEY[k.name], k.type, k.default, k.low, k.high, k.choices) for k in _TOPIC_KEYS]
    + _CLUSTER_KEYS,
)
"""Configs AlterConfigs may set on a ``broker`` or the ``cluster`` resource."""

CONTROLLER_CONFIGS = ConfigSchema(
    "controller",
    _CLUSTER_KEYS
    + [
        _key("unclean.leader.election.enable", BOOLEAN, "false"),
        # KIP-966's eligible leader replicas (Kafka 4's default for new clusters; Kafka gates it by a feature
        # version, this implementation by this key, which brokers have too: it also stops their high watermark
        # below min.insync.replicas).
        _key("eligible.leader.replicas.enable", BOOLEAN, "true"),
        # Not Kafka's defaults (9000 / 2000): a broker killed without a word is fenced, and its leaderships move,
        # within about 2 s (the replication target: a new leader within 3 s with the default settings).
        _key("broker.session.timeout.ms", INT, "2000", 1),
        _key("broker.heartbeat.interval.ms", INT, "500", 1),
        # Kafka's is a long; fractions are accepted so that tests can rebalance quickly.
        _key("leader.imbalance.check.interval.seconds", DOUBLE, "300", 0.001),
        # Not Kafka's: limits of this implementation.
        _key("controller.max.records.per.command", INT, "10000", 16, 100_000),
        _key("controller.event.queue.size", INT, "1024", 1, 1_000_000),
        _key("controller.request.timeout.ms", INT, "30000", 1),
        _key("metadata.log.max.records.between.snapshots", INT, "10000", 2),
        _key("metadata.log.fsync", BOOLEAN, "true"),
        # Kafka's names for the request pool and queue; the workers run the controller's short RPCs (a write
        # holds one until its records commit: Kafka's 8 is too few here); FetchMetadata long polls hold none.
        _key("num.io.threads", INT, "64", 1, 10_000),
        _key("queued.max.requests", INT, "500", 1),
    ],
)
"""``odradek controller --config KEY=VALUE`` keys (static: read at start)."""


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    """The controller's static settings (immutable; shared freely). Build with :meth:`from_props`."""

    num_partitions: int = 1
    default_replication_factor: int = 1
    auto_leader_rebalance_enable: bool = True
    max_broker_partitions: int = 4000
    unclean_leader_election_enable: bool = False
    eligible_leader_replicas_enable: bool = True
    broker_session_timeout_ms: int = 2000
    broker_heartbeat_interval_ms: int = 500
    leader_imbalance_check_interval_seconds: float = 300.0
    max_records_per_command: int = 10_000
    event_queue_size: int = 1024
    request_timeout_ms: int = 30_000
    max_records_between_snapshots: int = 10_000
    metadata_log_fsync: bool = True
    num_io_threads: int = 64
    queued_max_requests: int = 500

    def __post_init__(self) -> None:
        for key, attribute in _CONTROLLER_ATTRIBUTES.items():
            spec, value = CONTROLLER_CONFIGS.key(key), getattr(self, attribute)
            if spec.type is not ConfigType.BOOLEAN:
                spec.check_range(str(value), value)

    @classmethod
    def from_props(cls, props: Mapping[str, str]) -> ControllerConfig:
        """Parse ``KEY=VALUE`` strings; :class:`ConfigError` naming the key for unknown keys or bad values."""
        values = {_CONTROLLER_ATTRIBUTES[k]: v for k, v in CONTROLLER_CONFIGS.validate_all(props).items()}
        return cls(**values)

    def cluster_default(self, key: str) -> Any:
        """The static value of a cluster-level key the controller reads (``num.partitions``, ...)."""
        return getattr(self, _CONTROLLER_ATTRIBUTES[key])


_CONTROLLER_ATTRIBUTES: dict[str, str] = {
    "num.partitions": "num_partitions",
    "default.replication.factor": "default_replication_factor",
    "auto.leader.rebalance.enable": "auto_leader_rebalance_enable",
    "max.broker.partitions": "max_broker_partitions",
    "unclean.leader.election.enable": "unclean_leader_election_enable",
    "eligible.leader.replicas.enable": "eligible_leader_replicas_enable",
    "broker.session.timeout.ms": "broker_session_timeout_ms",
    "broker.heartbeat.interval.ms": "broker_heartbeat_interval_ms",
    "leader.imbalance.check.interval.seconds": "leader_imbalance_check_interval_seconds",
    "controller.max.records.per.command": "max_records_per_command",
    "controller.event.queue.size": "event_queue_size",
    "controller.request.timeout.ms": "request_timeout_ms",
    "metadata.log.max.records.between.snapshots": "max_records_between_snapshots",
    "metadata.log.fsync": "metadata_log_fsync",
    "num.io.threads": "num_io_threads",
    "queued.max.requests": "queued_max_requests",
}
assert set(_CONTROLLER_ATTRIBUTES) == set(CONTROLLER_CONFIGS.keys), "every controller key maps to an attribute"


def parse_key_values(items: list[str] | None, *, option: str = "--config") -> dict[str, str]:
    """``["k=v", ...]`` as a dict; :class:`ConfigError` for an item without ``=`` or a repeated key."""
    props: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(key, f"{option} expects KEY=VALUE, got {item!r}")
        if key in props:
            raise ConfigError(key, f"{option} sets {key} twice")
        props[key] = value
    return props
