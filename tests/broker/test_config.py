"""Broker configs: Kafka's names and defaults, unknown keys, and each partition's effective LogConfig."""

from __future__ import annotations

import pytest

from broker.config import BrokerConfig, effective_log_config
from metadata.configs import ConfigError
from metadata.image import MetadataDelta, MetadataImage
from metadata.records import Config, ConfigResourceType, MetadataRecord, Topic


def test_kafka_defaults() -> None:
    config = BrokerConfig.from_props({})
    assert config.heartbeat_interval_ms == 500  # not Kafka's 2000, on purpose: fencing within ~2 s
    assert config.message_max_bytes == 1048588
    assert config.fetch_max_bytes == 57671680
    assert config.retention_check_interval_ms == 300000
    assert config.get("replica.lag.time.max.ms") == 30000
    assert config.get("auto.create.topics.enable") is False  # not Kafka's default, on purpose
    assert config.get("num.partitions") == 1
    assert config.get("default.replication.factor") == 1
    assert config.log_config().retention_ms == 7 * 24 * 3600 * 1000


def test_unknown_keys_and_bad_values_name_the_key() -> None:
    with pytest.raises(ConfigError, match="no.such.key"):
        BrokerConfig.from_props({"no.such.key": "1"})
    with pytest.raises(ConfigError, match="fetch.max.bytes"):
        BrokerConfig.from_props({"fetch.max.bytes": "lots"})
    with pytest.raises(ConfigError, match="log.segment.bytes"):
        BrokerConfig.from_props({"log.segment.bytes": "3"})


def test_retention_and_roll_by_hours_minutes_and_ms() -> None:
    assert BrokerConfig.from_props({"log.retention.hours": "2"}).log_config().retention_ms == 2 * 3600_000
    assert BrokerConfig.from_props({"log.retention.minutes": "3", "log.retention.hours": "2"}).log_config(
    ).retention_ms == 180_000  # fmt: skip
    both = {"log.retention.ms": "5", "log.retention.minutes": "3"}
    assert BrokerConfig.from_props(both).log_config().retention_ms == 5
    assert BrokerConfig.from_props({"log.retention.hours": "-1"}).log_config().retention_ms == -1
    assert BrokerConfig.from_props({"log.roll.hours": "1"}).log_config().segment_ms == 3600_000
    assert BrokerConfig.from_props({"log.roll.ms": "7", "log.roll.hours": "1"}).log_config().segment_ms == 7


def test_layering_topic_over_dynamic_broker_over_static() -> None:
    config = BrokerConfig.from_props(
        {"log.segment.bytes": "1000", "log.retention.bytes": "10", "min.insync.replicas": "2"}
    )
    delta = MetadataDelta(MetadataImage())
    records: list[MetadataRecord] = [
        Topic("t", "00000000-0000-0000-0000-000000000001"),
        Config(ConfigResourceType.CLUSTER, "", "log.retention.bytes", "20"),
        Config(ConfigResourceType.CLUSTER, "", "log.flush.interval.messages", "5"),
        Config(ConfigResourceType.BROKER, "3", "log.retention.bytes", "30"),
        Config(ConfigResourceType.BROKER, "4", "log.retention.bytes", "40"),
        Config(ConfigResourceType.TOPIC, "t", "segment.bytes", "2000"),
    ]
    for i, record in enumerate(records):
        delta.replay(record, i)
    image = delta.apply()
    log_config = effective_log_config(image, "t", 3, config)
    assert log_config.segment_bytes == 2000  # the topic's own
    assert log_config.retention_bytes == 30  # this broker's dynamic config
    assert log_config.flush_messages == 5  # the cluster-wide dynamic config
    assert log_config.min_insync_replicas == 2  # static
    assert effective_log_config(image, "other", 4, config).retention_bytes == 40
