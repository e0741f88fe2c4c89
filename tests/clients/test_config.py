"""Client configs: Kafka's keys and defaults, clear errors for unknown keys and bad values."""

from __future__ import annotations

import pytest

from odradek.config import (
    ADMIN_KEYS,
    CONSUMER_KEYS,
    PRODUCER_KEYS,
    AdminConfig,
    ConsumerConfig,
    ProducerConfig,
)
from odradek.errors import ConfigError, ConfigException

BOOT = {"bootstrap.servers": "127.0.0.1:9092"}


def test_producer_defaults_are_kafkas() -> None:
    c = ProducerConfig.from_mapping(BOOT)
    assert c.bootstrap_servers == ("127.0.0.1:9092",)
    assert c.acks == -1
    assert c.linger_ms == 5
    assert c.batch_size == 16384
    assert c.buffer_memory == 33554432
    assert c.max_block_ms == 60000
    assert c.compression_type == "none"
    assert c.enable_idempotence is True
    assert c.max_in_flight_requests_per_connection == 5
    assert c.retries == 2147483647
    assert c.retry_backoff_ms == 100
    assert c.retry_backoff_max_ms == 1000
    assert c.delivery_timeout_ms == 120000
    assert c.request_timeout_ms == 30000
    assert c.max_request_size == 1048576
    assert c.partitioner_ignore_keys is False
    assert c.metadata_max_age_ms == 300000


def test_consumer_defaults_are_kafkas() -> None:
    c = ConsumerConfig.from_mapping(BOOT)
    assert c.group_id is None
    assert c.auto_offset_reset == "latest"
    assert c.enable_auto_commit is True
    assert c.fetch_min_bytes == 1
    assert c.fetch_max_bytes == 52428800
    assert c.fetch_max_wait_ms == 500
    assert c.max_partition_fetch_bytes == 1048576
    assert c.max_poll_records == 500
    assert c.session_timeout_ms == 45000
    assert c.heartbeat_interval_ms == 3000
    assert c.max_poll_interval_ms == 300000
    assert c.isolation_level == "read_uncommitted"
    assert c.check_crcs is True


def test_admin_defaults() -> None:
    c = AdminConfig.from_mapping({"bootstrap.servers": "a:1, b:2"})
    assert c.bootstrap_servers == ("a:1", "b:2")
    assert c.request_timeout_ms == 30000
    assert c.default_api_timeout_ms == 60000


def test_values_may_be_str_int_or_bool() -> None:
    c = ProducerConfig.from_mapping(
        {**BOOT, "linger.ms": "7", "batch.size": 1000, "enable.idempotence": "false", "acks": 1, "retries": "3"}
    )
    assert (c.linger_ms, c.batch_size, c.enable_idempotence, c.acks, c.retries) == (7, 1000, False, 1, 3)
    assert ProducerConfig.from_mapping({**BOOT, "acks": "all"}).acks == -1
    assert ProducerConfig.from_mapping({**BOOT, "acks": "-1"}).acks == -1
    assert ProducerConfig.from_mapping({**BOOT, "acks": "0", "enable.idempotence": False}).acks == 0
    assert ConsumerConfig.from_mapping({**BOOT, "enable.auto.commit": "TRUE"}).enable_auto_commit is True
    assert ConsumerConfig.from_mapping({**BOOT, "group.id": "billing"}).group_id == "billing"


def test_given_keys_are_remembered() -> None:
    assert ProducerConfig.from_mapping({**BOOT, "acks": 1}).given == {"bootstrap.servers", "acks"}


def test_unknown_key_is_named_with_a_suggestion() -> None:
    with pytest.raises(ConfigError, match=r"unknown producer config 'lingr\.ms'; did you mean 'linger\.ms'\?"):
        ProducerConfig.from_mapping({**BOOT, "lingr.ms": 5})


def test_key_of_another_client_says_so() -> None:
    with pytest.raises(ConfigError, match="'group.id': it is a consumer config"):
        ProducerConfig.from_mapping({**BOOT, "group.id": "g"})
    with pytest.raises(ConfigError, match="'acks': it is a producer config"):
        ConsumerConfig.from_mapping({**BOOT, "acks": "all"})


def test_unknown_key_without_neighbour() -> None:
    with pytest.raises(ConfigError, match=r"^unknown admin config 'zzz'$"):
        AdminConfig.from_mapping({**BOOT, "zzz": 1})


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("linger.ms", "soon"),
        ("linger.ms", -1),
        ("linger.ms", True),
        ("linger.ms", 1.5),
        ("batch.size", None),
        ("acks", "2"),
        ("acks", True),
        ("enable.idempotence", "yes"),
        ("compression.type", "brotli"),
        ("max.in.flight.requests.per.connection", 0),
        ("retries", 2**31),
    ],
)
def test_bad_value_names_key_and_value(key: str, value: object) -> None:
    with pytest.raises(ConfigError) as info:
        ProducerConfig.from_mapping({**BOOT, key: value})
    assert repr(key) in str(info.value)
    assert repr(value) in str(info.value)


def test_compression_names() -> None:
    for name in ("none", "gzip", "snappy", "lz4", "zstd", "ZSTD"):
        assert ProducerConfig.from_mapping({**BOOT, "compression.type": name}).compression_type == name.lower()


@pytest.mark.parametrize("servers", ["", "localhost", "host:port", "host:0", ":9092", 9092, ["a:1", 2]])
def test_bad_bootstrap_servers(servers: object) -> None:
    with pytest.raises(ConfigError, match="bootstrap.servers"):
        AdminConfig.from_mapping({"bootstrap.servers": servers})


def test_bootstrap_servers_may_be_a_list() -> None:
    assert AdminConfig.from_mapping({"bootstrap.servers": ["a:1", "b:2,c:3"]}).bootstrap_servers == (
        "a:1",
        "b:2",
        "c:3",
    )


def test_bootstrap_servers_is_required() -> None:
    with pytest.raises(ConfigError, match="'bootstrap.servers' is required"):
        ConsumerConfig.from_mapping({})


def test_config_must_be_a_mapping() -> None:
    with pytest.raises(ConfigError, match="mapping"):
        ProducerConfig.from_mapping([("bootstrap.servers", "a:1")])  # type: ignore[arg-type]


def test_consumer_choices() -> None:
    with pytest.raises(ConfigError, match="'auto.offset.reset'"):
        ConsumerConfig.from_mapping({**BOOT, "auto.offset.reset": "smallest"})
    assert ConsumerConfig.from_mapping({**BOOT, "auto.offset.reset": "none"}).auto_offset_reset == "none"
    assert (
        ConsumerConfig.from_mapping({**BOOT, "isolation.level": "read_committed"}).isolation_level == "read_committed"
    )


def test_explicit_idempotence_requires_acks_all() -> None:
    with pytest.raises(ConfigError, match="enable.idempotence=true requires acks=all"):
        ProducerConfig.from_mapping({**BOOT, "enable.idempotence": True, "acks": 1})
    with pytest.raises(ConfigError, match="max.in.flight.requests.per.connection <= 5"):
        ProducerConfig.from_mapping({**BOOT, "enable.idempotence": "true", "max.in.flight.requests.per.connection": 6})
    with pytest.raises(ConfigError, match="retries > 0"):
        ProducerConfig.from_mapping({**BOOT, "enable.idempotence": "true", "retries": 0})


def test_default_idempotence_yields_to_conflicting_settings() -> None:
    assert ProducerConfig.from_mapping({**BOOT, "acks": 1}).enable_idempotence is False
    assert ProducerConfig.from_mapping({**BOOT, "acks": "all"}).enable_idempotence is True


def test_delivery_timeout_covers_linger_and_request_timeout() -> None:
    with pytest.raises(ConfigError, match=r"delivery.timeout.ms \(1000\) must be at least"):
        ProducerConfig.from_mapping({**BOOT, "delivery.timeout.ms": 1000, "request.timeout.ms": 2000})
    raised = ProducerConfig.from_mapping({**BOOT, "linger.ms": 100, "request.timeout.ms": 200000})
    assert raised.delivery_timeout_ms == 200100


def test_config_exception_is_kafkas_name() -> None:
    assert ConfigException is ConfigError
    assert issubclass(ConfigError, ValueError)


def test_tables_cover_the_documented_keys() -> None:
    for key in ("bootstrap.servers", "acks", "linger.ms", "batch.size", "buffer.memory", "max.block.ms",
                "compression.type", "enable.idempotence", "max.in.flight.requests.per.connection", "retries",
                "retry.backoff.ms", "retry.backoff.max.ms", "delivery.timeout.ms", "request.timeout.ms",
                "max.request.size", "partitioner.ignore.keys", "client.id", "metadata.max.age.ms"):  # fmt: skip
        assert key in PRODUCER_KEYS
    for key in ("group.id", "auto.offset.reset", "enable.auto.commit", "auto.commit.interval.ms", "fetch.min.bytes",
                "fetch.max.bytes", "fetch.max.wait.ms", "max.partition.fetch.bytes", "max.poll.records",
                "session.timeout.ms", "heartbeat.interval.ms", "max.poll.interval.ms", "group.instance.id",
                "isolation.level", "client.id", "request.timeout.ms", "check.crcs"):  # fmt: skip
        assert key in CONSUMER_KEYS
    for key in ("bootstrap.servers", "request.timeout.ms", "client.id"):
        assert key in ADMIN_KEYS
