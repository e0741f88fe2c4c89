"""Config schemas (metadata/configs.py) and AlterConfigs (controller/core/alter_configs.py, rules C1-C5,
Kafka's ConfigurationControlManager)."""

from __future__ import annotations

import pytest

from log.config import KEYS as LOG_CONFIG_KEYS
from log.config import LogConfig
from log.errors import InvalidConfigError
from metadata.configs import (
    BROKER_CONFIGS,
    CONTROLLER_CONFIGS,
    TOPIC_CONFIGS,
    TOPIC_TO_BROKER_KEY,
    ConfigError,
    ControllerConfig,
    parse_key_values,
)
from metadata.records import Config, ConfigResourceType
from proto import controller_pb2 as pb
from tests.controller.conftest import CoreHarness


@pytest.fixture
def h(harness: CoreHarness) -> CoreHarness:
    harness.start_brokers([0, 1])
    harness.create_topic("t")
    return harness


def alter(
    h: CoreHarness, resource_type: str, name: str, entries: list[tuple[str, str | None]], validate_only: bool = False
) -> pb.ResourceResult:
    request = pb.AlterConfigsRequest(validate_only=validate_only)
    res = request.resources.add(resource_type=resource_type, resource_name=name)
    for key, value in entries:
        res.entries.add(key=key, value=value or "", delete=value is None)
    response: pb.AlterConfigsResponse = h.call("AlterConfigs", request)
    return response.resources[0]


# --- schemas ----------------------------------------------------------------------------------------


def test_topic_configs_are_exactly_what_the_storage_engine_reads() -> None:
    """A broker must build a log from any topic config the controller accepts: same keys, same defaults."""
    assert set(TOPIC_CONFIGS.keys) == set(LOG_CONFIG_KEYS)
    defaults = LogConfig().to_props()
    for key in TOPIC_CONFIGS.keys:
        parsed = TOPIC_CONFIGS.default(key)
        expected = LogConfig.from_props({key: defaults[key]})
        assert LogConfig.from_props({key: TOPIC_CONFIGS.keys[key].default}) == expected, key
        assert parsed is not None


@pytest.mark.parametrize(
    ("key", "good", "bad"),
    [
        ("retention.ms", "-1", "-2"),
        ("segment.bytes", "14", "13"),
        ("min.cleanable.dirty.ratio", "0.0", "nan"),
        ("cleanup.policy", "compact,delete", ""),
        ("message.timestamp.type", "LogAppendTime", "logappendtime"),
        ("flush.messages", "1", "0"),
        ("max.message.bytes", "2147483647", "2147483648"),
    ],
)
def test_topic_values_agree_with_the_storage_engine(key: str, good: str, bad: str) -> None:
    """Where the controller accepts a value, so does LogConfig; where it refuses, so does LogConfig."""
    TOPIC_CONFIGS.validate(key, good)
    LogConfig.from_props({key: good})
    with pytest.raises(ConfigError) as excinfo:
        TOPIC_CONFIGS.validate(key, bad)
    assert excinfo.value.key == key
    assert key in str(excinfo.value)
    with pytest.raises(InvalidConfigError, match=key.replace(".", r"\.")):
        LogConfig.from_props({key: bad})


def test_broker_configs_are_the_synonyms_and_the_cluster_keys() -> None:
    """Kafka's broker-level names for topic defaults (log.retention.ms, ...) plus what the controller reads."""
    assert set(TOPIC_TO_BROKER_KEY) == set(TOPIC_CONFIGS.keys)
    assert set(TOPIC_TO_BROKER_KEY.values()) < set(BROKER_CONFIGS.keys)
    assert {"num.partitions", "default.replication.factor", "auto.leader.rebalance.enable"} < set(BROKER_CONFIGS.keys)


def test_controller_config_defaults_are_kafkas() -> None:
    config = ControllerConfig.from_props({})
    assert config == ControllerConfig()
    assert (config.broker_session_timeout_ms, config.num_partitions, config.default_replication_factor) == (2000, 1, 1)
    assert config.auto_leader_rebalance_enable
    assert not config.unclean_leader_election_enable
    assert config.leader_imbalance_check_interval_seconds == 300
    for key in CONTROLLER_CONFIGS.keys:
        assert config.cluster_default(key) == CONTROLLER_CONFIGS.default(key)


def test_controller_config_refuses_unknown_keys_and_bad_values_naming_the_key() -> None:
    with pytest.raises(ConfigError, match="no.such"):
        ControllerConfig.from_props({"no.such": "1"})
    with pytest.raises(ConfigError, match="broker.session.timeout.ms"):
        ControllerConfig.from_props({"broker.session.timeout.ms": "0"})
    with pytest.raises(ConfigError, match="broker.session.timeout.ms"):
        ControllerConfig(broker_session_timeout_ms=0)


def test_parse_key_values() -> None:
    assert parse_key_values(["a=1", "b==2", "c="]) == {"a": "1", "b": "=2", "c": ""}
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        parse_key_values(["a"])
    with pytest.raises(ConfigError, match="twice"):
        parse_key_values(["a=1", "a=2"])


# --- AlterConfigs ------------------------------------------------------------------------------------


def test_set_and_delete_topic_configs(h: CoreHarness) -> None:
    """C3, C4: set, then delete back to the default; one command per resource."""
    assert not alter(h, "topic", "t", [("retention.ms", "100"), ("cleanup.policy", "compact")]).error.code
    assert h.image.config(ConfigResourceType.TOPIC, "t") == {"retention.ms": "100", "cleanup.policy": "compact"}
    assert len(h.results[-1].commands) == 1
    assert not alter(h, "topic", "t", [("retention.ms", None)]).error.code
    assert h.results[-1].records == (Config(ConfigResourceType.TOPIC, "t", "retention.ms", None),)
    assert h.image.config(ConfigResourceType.TOPIC, "t") == {"cleanup.policy": "compact"}


def test_unknown_topic_is_refused(h: CoreHarness) -> None:
    """C2."""
    assert alter(h, "topic", "nope", [("retention.ms", "1")]).error.code == "UNKNOWN_TOPIC_OR_PARTITION"


@pytest.mark.parametrize(
    ("resource_type", "name"),
    [("group", "g"), ("broker", "x"), ("broker", "-1"), ("broker", "01"), ("cluster", "c"), ("TOPIC", "t")],
)
def test_bad_resources_are_invalid_request(h: CoreHarness, resource_type: str, name: str) -> None:
    """C1."""
    assert alter(h, resource_type, name, [("retention.ms", "1")]).error.code == "INVALID_REQUEST"


def test_unknown_keys_and_bad_values_are_invalid_config_naming_the_key(h: CoreHarness) -> None:
    """C3: deletes are checked too; one bad entry refuses the whole resource."""
    offset = h.image.offset
    cases: list[list[tuple[str, str | None]]] = [
        [("retention.ms", "1"), ("no.such", "1")],
        [("retention.ms", "x")],
        [("no.such", None)],
        [("log.retention.ms", "1")],  # a broker key on a topic
    ]
    for entries in cases:
        result = alter(h, "topic", "t", entries)
        assert result.error.code == "INVALID_CONFIG"
        assert entries[-1][0] in result.error.message
    assert alter(h, "cluster", "", [("retention.ms", "1")]).error.code == "INVALID_CONFIG"  # a topic key
    assert h.image.offset == offset


def test_broker_and_cluster_resources(h: CoreHarness) -> None:
    """C1: a broker by id, the cluster by ""; broker keys."""
    assert not alter(h, "broker", "1", [("log.retention.ms", "5")]).error.code
    assert not alter(h, "cluster", "", [("min.insync.replicas", "2")]).error.code
    assert h.image.config(ConfigResourceType.BROKER, "1") == {"log.retention.ms": "5"}
    assert h.image.config(ConfigResourceType.CLUSTER, "") == {"min.insync.replicas": "2"}


def test_duplicate_keys_or_resources_are_invalid_request(h: CoreHarness) -> None:
    """C3."""
    assert alter(h, "topic", "t", [("retention.ms", "1"), ("retention.ms", "2")]).error.code == "INVALID_REQUEST"
    request = pb.AlterConfigsRequest()
    for _ in range(2):
        request.resources.add(resource_type="topic", resource_name="t").entries.add(key="retention.ms", value="1")
    response = h.call("AlterConfigs", request)
    assert [r.error.code for r in response.resources] == ["INVALID_REQUEST", "INVALID_REQUEST"]


def test_validate_only_writes_nothing(h: CoreHarness) -> None:
    """C4."""
    offset = h.image.offset
    assert not alter(h, "topic", "t", [("retention.ms", "1")], validate_only=True).error.code
    assert alter(h, "topic", "t", [("retention.ms", "x")], validate_only=True).error.code == "INVALID_CONFIG"
    assert h.image.offset == offset


def test_no_op_changes_write_nothing(h: CoreHarness) -> None:
    """C5."""
    alter(h, "topic", "t", [("retention.ms", "1")])
    offset = h.image.offset
    assert not alter(h, "topic", "t", [("retention.ms", "1"), ("segment.ms", None)]).error.code
    assert h.image.offset == offset
    assert h.results[-1].commands == ()


def test_each_resource_stands_alone(h: CoreHarness) -> None:
    """C4: a refused resource does not stop the others."""
    request = pb.AlterConfigsRequest()
    request.resources.add(resource_type="topic", resource_name="t").entries.add(key="retention.ms", value="7")
    request.resources.add(resource_type="topic", resource_name="nope").entries.add(key="retention.ms", value="7")
    response = h.call("AlterConfigs", request)
    assert [r.error.code for r in response.resources] == ["", "UNKNOWN_TOPIC_OR_PARTITION"]
    assert h.image.config(ConfigResourceType.TOPIC, "t") == {"retention.ms": "7"}
