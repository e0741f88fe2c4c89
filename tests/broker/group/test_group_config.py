"""Coordinator settings and the group -> partition mapping (Kafka's Utils.abs(groupId.hashCode) % N)."""

from __future__ import annotations

import pytest

from broker.config import BrokerConfig
from broker.group.assignors import ASSIGNORS
from broker.group.config import KNOWN_ASSIGNORS, GroupConfig, java_string_hash, partition_for
from metadata.configs import ConfigError


def test_java_string_hash_matches_java() -> None:
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322  # "hello".hashCode()
    assert java_string_hash("polygenelubricants") == -(2**31)  # the famous Integer.MIN_VALUE hash
    assert java_string_hash("h\u00e9llo") == 103094734  # values printed by Java 17's String.hashCode
    assert java_string_hash("\U0001f600group") == -1231696132  # a surrogate pair counts as two code units


def test_partition_for_is_kafkas_abs_hash_mod_n() -> None:
    assert partition_for("hello", 50) == 99162322 % 50
    assert partition_for("polygenelubricants", 50) == 0  # Utils.abs(MIN_VALUE) is 0
    assert all(0 <= partition_for(f"g{i}", 7) < 7 for i in range(200))


def test_broker_keys_and_defaults_are_kafkas() -> None:
    config = GroupConfig.from_broker(BrokerConfig.from_props({}).get)
    assert config == GroupConfig()
    custom = GroupConfig.from_broker(BrokerConfig.from_props({"group.consumer.assignors": "range"}).get)
    assert custom.assignors == ("range",)
    assert tuple(ASSIGNORS) == KNOWN_ASSIGNORS


def test_an_unknown_assignor_names_the_key() -> None:
    with pytest.raises(ConfigError, match="group.consumer.assignors"):
        GroupConfig.from_broker(BrokerConfig.from_props({"group.consumer.assignors": "uniform,sticky"}).get)
