"""Per-partition log configuration: Kafka's topic-level keys, defaults and ranges.

:class:`LogConfig` is a frozen dataclass with one snake_case attribute per Kafka key
(``segment.bytes`` -> ``segment_bytes``). :meth:`LogConfig.from_props` parses Kafka's string form
(what ``kafka-configs.sh`` and CreateTopics send) and raises :class:`InvalidConfigError` naming the
key for an unknown key or a bad value; constructing the dataclass directly runs the same range checks.

Keys, defaults and ranges (Kafka's own, except where noted)::

    key                              type     default               range
    segment.bytes                    int      1073741824 (1 GiB)     >= 14 (Kafka 4: 1 MiB; tests need less)
    segment.ms                       long     604800000 (7 days)     >= 1
    segment.index.bytes              int      10485760 (10 MiB)      >= 4
    index.interval.bytes             int      4096                   >= 0
    retention.ms                     long     604800000 (7 days)     >= -1 (-1 = keep forever)
    retention.bytes                  long     -1                     >= -1 (-1 = no size limit)
    max.message.bytes                int      1048588                >= 0
    flush.messages                   long     9223372036854775807    >= 1
    flush.ms                         long     9223372036854775807    >= 0
    message.timestamp.type           string   CreateTime             CreateTime | LogAppendTime
    message.timestamp.before.max.ms  long     9223372036854775807    >= 0 (CreateTime: how far in the past)
    message.timestamp.after.max.ms   long     3600000 (1 hour)       >= 0 (CreateTime: how far in the future)
    cleanup.policy                   list     delete                 subset of {delete, compact}, not empty
    delete.retention.ms              long     86400000 (1 day)       >= 0
    min.compaction.lag.ms            long     0                      >= 0
    max.compaction.lag.ms            long     9223372036854775807    >= 1
    min.cleanable.dirty.ratio        double   0.5                    [0, 1]
    compression.type                 string   producer               producer, uncompressed, gzip,
                                                                    snappy, lz4, zstd
    min.insync.replicas              int      1                      >= 1
    unclean.leader.election.enable   boolean  false                  true | false

The Log acts on the segment, index, retention, size, flush and timestamp keys (a leader refuses records
whose CreateTime lies outside the two ``message.timestamp.*.max.ms`` bounds, and keyless records when
``cleanup.policy`` includes compact); the log cleaner (``log.cleaner``) acts on the
compaction keys; ``compression.type``, ``min.insync.replicas`` and ``unclean.leader.election.enable``
are carried for the produce path and replication.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from log.errors import InvalidConfigError

INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1
LONG_MIN = -(2**63)

CREATE_TIME = "CreateTime"
LOG_APPEND_TIME = "LogAppendTime"
TIMESTAMP_TYPES = (CREATE_TIME, LOG_APPEND_TIME)
CLEANUP_DELETE = "delete"
CLEANUP_COMPACT = "compact"
CLEANUP_POLICIES = (CLEANUP_DELETE, CLEANUP_COMPACT)
COMPRESSION_TYPES = ("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd")


@dataclass(frozen=True, slots=True)
class _Key:
    """How one Kafka key maps to an attribute: its parser and its valid range (inclusive)."""

    attribute: str
    parse: Callable[[str, str], Any]
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] = ()


def _parse_int(key: str, text: str, low: int, high: int) -> int:
    stripped = text.strip()
    # int() also accepts "1_000" and "+5": Kafka's Integer.parseInt takes neither the underscores
    # nor anything but ASCII digits after an optional sign.
    body = stripped[1:] if stripped[:1] in "+-" else stripped
    if not body.isascii() or not body.isdigit():
        raise InvalidConfigError(f"invalid value {text!r} for config {key!r}: not an integer")
    value = int(stripped)
    if not low <= value <= high:
        raise InvalidConfigError(f"invalid value {text!r} for config {key!r}: does not fit the type's range")
    return value


def _int(key: str, text: str) -> int:
    return _parse_int(key, text, -(2**31), INT_MAX)


def _long(key: str, text: str) -> int:
    return _parse_int(key, text, LONG_MIN, LONG_MAX)


def _double(key: str, text: str) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        raise InvalidConfigError(f"invalid value {text!r} for config {key!r}: not a number") from None
    if not math.isfinite(value):
        raise InvalidConfigError(f"invalid value {text!r} for config {key!r}: not a finite number")
    return value


def _bool(key: str, text: str) -> bool:
    lowered = text.strip().lower()
    if lowered not in ("true", "false"):
        raise InvalidConfigError(f"invalid value {text!r} for config {key!r}: expected true or false")
    return lowered == "true"


def _string(key: str, text: str) -> str:
    return text.strip()


def _policy(key: str, text: str) -> frozenset[str]:
    items = [item.strip() for item in text.split(",")]
    if not items or any(item not in CLEANUP_POLICIES for item in items):
        raise InvalidConfigError(
            f"invalid value {text!r} for config {key!r}: expected a list of {', '.join(CLEANUP_POLICIES)}"
        )
    return frozenset(items)


KEYS: dict[str, _Key] = {
    "segment.bytes": _Key("segment_bytes", _int, 14, INT_MAX),
    "segment.ms": _Key("segment_ms", _long, 1, LONG_MAX),
    "segment.index.bytes": _Key("segment_index_bytes", _int, 4, INT_MAX),
    "index.interval.bytes": _Key("index_interval_bytes", _int, 0, INT_MAX),
    "retention.ms": _Key("retention_ms", _long, -1, LONG_MAX),
    "retention.bytes": _Key("retention_bytes", _long, -1, LONG_MAX),
    "max.message.bytes": _Key("max_message_bytes", _int, 0, INT_MAX),
    "flush.messages": _Key("flush_messages", _long, 1, LONG_MAX),
    "flush.ms": _Key("flush_ms", _long, 0, LONG_MAX),
    "message.timestamp.type": _Key("message_timestamp_type", _string, choices=TIMESTAMP_TYPES),
    "message.timestamp.before.max.ms": _Key("message_timestamp_before_max_ms", _long, 0, LONG_MAX),
    "message.timestamp.after.max.ms": _Key("message_timestamp_after_max_ms", _long, 0, LONG_MAX),
    "cleanup.policy": _Key("cleanup_policy", _policy),
    "delete.retention.ms": _Key("delete_retention_ms", _long, 0, LONG_MAX),
    "min.compaction.lag.ms": _Key("min_compaction_lag_ms", _long, 0, LONG_MAX),
    "max.compaction.lag.ms": _Key("max_compaction_lag_ms", _long, 1, LONG_MAX),
    "min.cleanable.dirty.ratio": _Key("min_cleanable_dirty_ratio", _double, 0.0, 1.0),
    "compression.type": _Key("compression_type", _string, choices=COMPRESSION_TYPES),
    "min.insync.replicas": _Key("min_insync_replicas", _int, 1, INT_MAX),
    "unclean.leader.election.enable": _Key("unclean_leader_election_enable", _bool),
}


@dataclass(frozen=True, slots=True)
class LogConfig:
    """The configuration of one partition's log; immutable, shared freely between threads."""

    segment_bytes: int = 1024 * 1024 * 1024
    segment_ms: int = 7 * 24 * 60 * 60 * 1000
    segment_index_bytes: int = 10 * 1024 * 1024
    index_interval_bytes: int = 4096
    retention_ms: int = 7 * 24 * 60 * 60 * 1000
    retention_bytes: int = -1
    max_message_bytes: int = 1024 * 1024 + 12
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    message_timestamp_type: str = CREATE_TIME
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = 60 * 60 * 1000  # Kafka 4.0's default (KIP-1030; 3.x: LONG_MAX)
    cleanup_policy: frozenset[str] = field(default_factory=lambda: frozenset({CLEANUP_DELETE}))
    delete_retention_ms: int = 24 * 60 * 60 * 1000
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    min_cleanable_dirty_ratio: float = 0.5
    compression_type: str = "producer"
    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False

    def __post_init__(self) -> None:
        for key, spec in KEYS.items():
            _check_range(key, spec, getattr(self, spec.attribute))

    @classmethod
    def from_props(cls, props: Mapping[str, str], base: LogConfig | None = None) -> LogConfig:
        """Parse Kafka-style string properties over ``base`` (default: Kafka's defaults)."""
        changes: dict[str, Any] = {}
        for key, text in props.items():
            spec = KEYS.get(key)
            if spec is None:
                raise InvalidConfigError(f"unknown log config {key!r}")
            if not isinstance(text, str):
                raise InvalidConfigError(f"invalid value {text!r} for config {key!r}: expected a string")
            changes[spec.attribute] = spec.parse(key, text)
        return dataclasses.replace(base if base is not None else cls(), **changes)

    def to_props(self) -> dict[str, str]:
        """The configuration as Kafka strings (round-trips through :meth:`from_props`)."""
        props: dict[str, str] = {}
        for key, spec in KEYS.items():
            value = getattr(self, spec.attribute)
            if isinstance(value, bool):
                props[key] = "true" if value else "false"
            elif isinstance(value, frozenset):
                props[key] = ",".join(sorted(value))  # "delete", "compact" or "compact,delete"
            else:
                props[key] = str(value)
        return props

    @property
    def delete_enabled(self) -> bool:
        """``cleanup.policy`` includes ``delete``: retention by time and size applies."""
        return CLEANUP_DELETE in self.cleanup_policy

    @property
    def compact_enabled(self) -> bool:
        return CLEANUP_COMPACT in self.cleanup_policy

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == LOG_APPEND_TIME


def _check_range(key: str, spec: _Key, value: object) -> None:
    if spec.choices:
        if value not in spec.choices:
            raise InvalidConfigError(
                f"invalid value {value!r} for config {key!r}: expected one of {', '.join(spec.choices)}"
            )
        return
    if spec.parse is _policy:
        if not isinstance(value, frozenset) or not value or not value <= set(CLEANUP_POLICIES):
            raise InvalidConfigError(f"invalid value {value!r} for config {key!r}")
        return
    if spec.parse is _bool:
        if not isinstance(value, bool):
            raise InvalidConfigError(f"invalid value {value!r} for config {key!r}: expected a boolean")
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidConfigError(f"invalid value {value!r} for config {key!r}: expected a number")
    if spec.parse is not _double and not isinstance(value, int):
        raise InvalidConfigError(f"invalid value {value!r} for config {key!r}: expected an integer")
    if (spec.low is not None and value < spec.low) or (spec.high is not None and value > spec.high):
        raise InvalidConfigError(
            f"invalid value {value!r} for config {key!r}: must be in [{spec.low}, {spec.high}]"
        )
