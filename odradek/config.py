"""Client configuration: Kafka's own keys and defaults, checked up front.

Each client takes a mapping of Kafka config keys (``"linger.ms"``, ``"acks"``, ...) to values given as
str, int or bool. :meth:`ProducerConfig.from_mapping` (and its consumer/admin twins) checks every key
and value and returns a frozen dataclass whose fields are the keys with dots turned into underscores
(``linger.ms`` -> ``linger_ms``). An unknown key raises :class:`~odradek.errors.ConfigError` naming it
(and the closest known key); a bad value names the key and the value.

Choices where Kafka leaves room:

- ``linger.ms`` defaults to 5, like Kafka 4.0 (KIP-1030).
- ``enable.idempotence`` defaults to true (``odradek.idempotence``: a producer id, sequence numbers, one
  copy per record through retries). Kafka's consistency rules apply: explicitly enabling it with ``acks``
  other than all, ``retries=0`` or more than 5 in-flight requests is an error; when it is only the
  default, such settings quietly turn it off.
- ``delivery.timeout.ms`` must be at least ``linger.ms + request.timeout.ms`` when given; the default is
  raised to that sum when smaller, as Kafka does.
- ``check.crcs`` is accepted; the decoder always checks CRCs.
- Consumer groups use the KIP-848 protocol (``ConsumerGroupHeartbeat``): ``group.remote.assignor``
  ("uniform" or "range") picks the coordinator's assignor, ``heartbeat.interval.ms`` is only used until
  the coordinator tells its own interval.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, TypeVar

from odradek.errors import ConfigError
from odradek.security.config import SECURITY_KEYS, SecurityConfig

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
SUPPORTED_COMPRESSION = ("none", "gzip", "snappy", "lz4", "zstd")

Parser = Callable[[str, object], Any]


# ------------------------------------------------------------------------------------------ parsers


def _bad(key: str, value: object, expected: str) -> ConfigError:
    return ConfigError(f"invalid value {value!r} for config {key!r}: expected {expected}")


def _int(low: int = 0, high: int = INT32_MAX) -> Parser:
    def parse(key: str, value: object) -> int:
        expected = f"an integer in [{low}, {high}]"
        if isinstance(value, bool):
            raise _bad(key, value, expected)
        if isinstance(value, int):
            n = value
        elif isinstance(value, float) and value.is_integer():
            n = int(value)
        elif isinstance(value, str):
            try:
                n = int(value.strip())
            except ValueError:
                raise _bad(key, value, expected) from None
        else:
            raise _bad(key, value, expected)
        if not low <= n <= high:
            raise _bad(key, value, expected)
        return n

    return parse


def _bool(key: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise _bad(key, value, "true or false")


def _str(key: str, value: object) -> str:
    if not isinstance(value, str):
        raise _bad(key, value, "a string")
    return value


def _optional_str(key: str, value: object) -> str | None:
    if value is None:
        return None
    text = _str(key, value).strip()
    return text or None


def _choice(*choices: str) -> Parser:
    def parse(key: str, value: object) -> str:
        text = value.strip().lower() if isinstance(value, str) else None
        if text not in choices:
            raise _bad(key, value, " | ".join(choices))
        return text

    return parse


def _servers(key: str, value: object) -> tuple[str, ...]:
    """``host:port[,host:port...]`` (a str, or a list of such strings)."""
    items: list[str] = []
    if isinstance(value, str):
        items = value.split(",")
    elif isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        for v in value:
            items.extend(v.split(","))
    else:
        raise _bad(key, value, "a comma-separated list of host:port")
    servers = tuple(s.strip() for s in items if s.strip())
    if not servers:
        raise ConfigError(f"config {key!r} is empty: give at least one host:port")
    for server in servers:
        host, sep, port = server.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(f"invalid address {server!r} in config {key!r}: expected host:port")
    return servers


def _acks(key: str, value: object) -> int:
    text = str(value).strip().lower() if isinstance(value, str | int) and not isinstance(value, bool) else None
    if text in ("all", "-1"):
        return -1
    if text in ("0", "1"):
        return int(text)
    raise _bad(key, value, "all, -1, 0 or 1")


def _compression(key: str, value: object) -> str:
    text = value.strip().lower() if isinstance(value, str) else None
    if text not in SUPPORTED_COMPRESSION:
        raise _bad(key, value, " | ".join(SUPPORTED_COMPRESSION))
    return text


# ---------------------------------------------------------------------------------------- key tables


@dataclass(frozen=True, slots=True)
class Key:
    """One config key: its parser and Kafka's default (``REQUIRED`` when it has none)."""

    parse: Parser
    default: object


REQUIRED = object()

_COMMON: dict[str, Key] = {
    "bootstrap.servers": Key(_servers, REQUIRED),
    "client.id": Key(_str, ""),
    "request.timeout.ms": Key(_int(1), 30000),
    "retry.backoff.ms": Key(_int(0, INT64_MAX), 100),
    "retry.backoff.max.ms": Key(_int(0, INT64_MAX), 1000),
    "metadata.max.age.ms": Key(_int(0, INT64_MAX), 300000),
    # security (odradek/security/config.py, docs/SECURITY.md): checked together when the config is built
    **{key: Key(_optional_str, None) for key in SECURITY_KEYS},
}

PRODUCER_KEYS: dict[str, Key] = {
    **_COMMON,
    "acks": Key(_acks, "all"),
    "linger.ms": Key(_int(0, INT64_MAX), 5),
    "batch.size": Key(_int(0), 16384),
    "buffer.memory": Key(_int(1, INT64_MAX), 33554432),
    "max.block.ms": Key(_int(0, INT64_MAX), 60000),
    "compression.type": Key(_compression, "none"),
    "enable.idempotence": Key(_bool, True),
    "max.in.flight.requests.per.connection": Key(_int(1), 5),
    "retries": Key(_int(0), INT32_MAX),
    "delivery.timeout.ms": Key(_int(0), 120000),
    "max.request.size": Key(_int(1), 1048576),
    "partitioner.ignore.keys": Key(_bool, False),
    "transactional.id": Key(_optional_str, None),
    "transaction.timeout.ms": Key(_int(1), 60000),
}

CONSUMER_KEYS: dict[str, Key] = {
    **_COMMON,
    "group.id": Key(_optional_str, None),
    "group.instance.id": Key(_optional_str, None),
    "auto.offset.reset": Key(_choice("latest", "earliest", "none"), "latest"),
    "enable.auto.commit": Key(_bool, True),
    "auto.commit.interval.ms": Key(_int(0), 5000),
    "fetch.min.bytes": Key(_int(0), 1),
    "fetch.max.bytes": Key(_int(0), 52428800),
    "fetch.max.wait.ms": Key(_int(0), 500),
    "max.partition.fetch.bytes": Key(_int(0), 1048576),
    "max.poll.records": Key(_int(1), 500),
    "session.timeout.ms": Key(_int(1), 45000),
    "heartbeat.interval.ms": Key(_int(1), 3000),
    "max.poll.interval.ms": Key(_int(1), 300000),
    "group.remote.assignor": Key(_optional_str, None),
    "client.rack": Key(_str, ""),
    "isolation.level": Key(_choice("read_uncommitted", "read_committed"), "read_uncommitted"),
    "check.crcs": Key(_bool, True),
    "default.api.timeout.ms": Key(_int(0), 60000),
}

ADMIN_KEYS: dict[str, Key] = {**_COMMON, "default.api.timeout.ms": Key(_int(0), 60000)}

_ALL_KINDS = {"producer": PRODUCER_KEYS, "consumer": CONSUMER_KEYS, "admin": ADMIN_KEYS}


def parse_config(
    kind: str, keys: Mapping[str, Key], raw: Mapping[str, object]
) -> tuple[dict[str, Any], frozenset[str]]:
    """Check ``raw`` against ``keys``; returns every key's value (defaults filled in) and the keys given."""
    if not isinstance(raw, Mapping):
        raise ConfigError(f"a {kind} config is a mapping of Kafka config keys to values, got {type(raw).__name__}")
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if not isinstance(key, str):
            raise ConfigError(f"config keys are strings, got {key!r}")
        spec = keys.get(key)
        if spec is None:
            raise _unknown_key(kind, keys, key)
        if value is None and spec.default is not None:
            raise _bad(key, value, "a value (None is not one)")
        values[key] = spec.parse(key, value)
    for key, spec in keys.items():
        if key not in values:
            if spec.default is REQUIRED:
                raise ConfigError(f"config {key!r} is required by the {kind}")
            values[key] = spec.parse(key, spec.default) if spec.default is not None else None
    return values, frozenset(raw)


def _unknown_key(kind: str, keys: Mapping[str, Key], key: str) -> ConfigError:
    owners = [other for other, table in _ALL_KINDS.items() if other != kind and key in table]
    if owners:
        return ConfigError(f"unknown {kind} config {key!r}: it is a {' and '.join(owners)} config")
    close = difflib.get_close_matches(key, list(keys), n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return ConfigError(f"unknown {kind} config {key!r}{hint}")


T = TypeVar("T")


def _build(
    cls: Callable[..., T], kind: str, keys: Mapping[str, Key], raw: Mapping[str, object]
) -> tuple[T, frozenset[str]]:
    values, given = parse_config(kind, keys, raw)
    SecurityConfig.from_mapping(values)  # K1-K4: the security keys agree with each other
    return cls(**{key.replace(".", "_"): value for key, value in values.items()}, given=given), given


def _check_fields(cls: type, keys: Mapping[str, Key]) -> None:
    names = {f.name for f in fields(cls)} - {"given"}
    expected = {key.replace(".", "_") for key in keys}
    assert names == expected, f"{cls.__name__} fields differ from its keys: {names ^ expected}"


# ---------------------------------------------------------------------------------------- the configs


@dataclass(frozen=True, slots=True)
class ProducerConfig:
    """A checked producer config (immutable, so thread-safe). ``given`` holds the keys the user set."""

    bootstrap_servers: tuple[str, ...]
    client_id: str
    request_timeout_ms: int
    retry_backoff_ms: int
    retry_backoff_max_ms: int
    metadata_max_age_ms: int
    acks: int
    linger_ms: int
    batch_size: int
    buffer_memory: int
    max_block_ms: int
    compression_type: str
    enable_idempotence: bool
    max_in_flight_requests_per_connection: int
    retries: int
    delivery_timeout_ms: int
    max_request_size: int
    partitioner_ignore_keys: bool
    transactional_id: str | None
    transaction_timeout_ms: int
    security_protocol: str | None = None
    ssl_ca_location: str | None = None
    ssl_certificate_location: str | None = None
    ssl_key_location: str | None = None
    ssl_key_password: str | None = field(default=None, repr=False)
    ssl_endpoint_identification_algorithm: str | None = None
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    sasl_jaas_config: str | None = field(default=None, repr=False)
    given: frozenset[str] = frozenset()

    @property
    def security(self) -> SecurityConfig:
        """The security keys, parsed (checked when the config was built)."""
        return _security(self)

    @classmethod
    def from_mapping(cls, raw: Mapping[str, object]) -> ProducerConfig:
        config, given = _build(cls, "producer", PRODUCER_KEYS, raw)
        return config._checked(given)

    def _checked(self, given: frozenset[str]) -> ProducerConfig:
        floor = self.linger_ms + self.request_timeout_ms
        delivery = self.delivery_timeout_ms
        if delivery < floor:
            if "delivery.timeout.ms" in given:
                raise ConfigError(
                    f"delivery.timeout.ms ({delivery}) must be at least linger.ms + request.timeout.ms ({floor})"
                )
            delivery = floor
        idempotence = self.enable_idempotence
        conflicts = [
            text
            for bad, text in (
                (self.acks != -1, f"acks=all (got acks={self.acks})"),
                (self.retries == 0, "retries > 0"),
                (self.max_in_flight_requests_per_connection > 5, "max.in.flight.requests.per.connection <= 5"),
            )
            if bad
        ]
        if self.transactional_id is not None and not self.transactional_id:
            raise ConfigError("transactional.id must not be empty (leave it unset for a non-transactional producer)")
        if self.transactional_id and (conflicts or not idempotence):
            # Kafka: a transactional producer is idempotent
            why = " and ".join(conflicts) if conflicts else "enable.idempotence=true (got false)"
            raise ConfigError(f"transactional.id requires {why}")
        if conflicts and idempotence:
            if "enable.idempotence" in given:
                raise ConfigError(f"enable.idempotence=true requires {' and '.join(conflicts)}")
            idempotence = False
        return replace(self, delivery_timeout_ms=delivery, enable_idempotence=idempotence)


@dataclass(frozen=True, slots=True)
class ConsumerConfig:
    """A checked consumer config (immutable, so thread-safe). ``given`` holds the keys the user set."""

    bootstrap_servers: tuple[str, ...]
    client_id: str
    request_timeout_ms: int
    retry_backoff_ms: int
    retry_backoff_max_ms: int
    metadata_max_age_ms: int
    group_id: str | None
    group_instance_id: str | None
    auto_offset_reset: str
    enable_auto_commit: bool
    auto_commit_interval_ms: int
    fetch_min_bytes: int
    fetch_max_bytes: int
    fetch_max_wait_ms: int
    max_partition_fetch_bytes: int
    max_poll_records: int
    session_timeout_ms: int
    heartbeat_interval_ms: int
    max_poll_interval_ms: int
    group_remote_assignor: str | None
    client_rack: str
    isolation_level: str
    check_crcs: bool
    default_api_timeout_ms: int
    security_protocol: str | None = None
    ssl_ca_location: str | None = None
    ssl_certificate_location: str | None = None
    ssl_key_location: str | None = None
    ssl_key_password: str | None = field(default=None, repr=False)
    ssl_endpoint_identification_algorithm: str | None = None
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    sasl_jaas_config: str | None = field(default=None, repr=False)
    given: frozenset[str] = frozenset()

    @property
    def security(self) -> SecurityConfig:
        """The security keys, parsed (checked when the config was built)."""
        return _security(self)

    @classmethod
    def from_mapping(cls, raw: Mapping[str, object]) -> ConsumerConfig:
        return _build(cls, "consumer", CONSUMER_KEYS, raw)[0]


@dataclass(frozen=True, slots=True)
class AdminConfig:
    """A checked admin config (immutable, so thread-safe)."""

    bootstrap_servers: tuple[str, ...]
    client_id: str
    request_timeout_ms: int
    retry_backoff_ms: int
    retry_backoff_max_ms: int
    metadata_max_age_ms: int
    default_api_timeout_ms: int
    security_protocol: str | None = None
    ssl_ca_location: str | None = None
    ssl_certificate_location: str | None = None
    ssl_key_location: str | None = None
    ssl_key_password: str | None = field(default=None, repr=False)
    ssl_endpoint_identification_algorithm: str | None = None
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    sasl_jaas_config: str | None = field(default=None, repr=False)
    given: frozenset[str] = frozenset()

    @property
    def security(self) -> SecurityConfig:
        """The security keys, parsed (checked when the config was built)."""
        return _security(self)

    @classmethod
    def from_mapping(cls, raw: Mapping[str, object]) -> AdminConfig:
        return _build(cls, "admin", ADMIN_KEYS, raw)[0]


def _security(config: object) -> SecurityConfig:
    return SecurityConfig.from_mapping({key: getattr(config, key.replace(".", "_")) for key in SECURITY_KEYS})


_check_fields(ProducerConfig, PRODUCER_KEYS)
_check_fields(ConsumerConfig, CONSUMER_KEYS)
_check_fields(AdminConfig, ADMIN_KEYS)
