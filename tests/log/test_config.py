"""LogConfig: Kafka's keys and defaults, string parsing, range checks naming the key."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from log.config import LONG_MAX, LogConfig
from log.errors import InvalidConfigError


def test_defaults_are_kafkas() -> None:
    config = LogConfig()
    assert config.segment_bytes == 1073741824
    assert config.segment_ms == 604800000
    assert config.segment_index_bytes == 10485760
    assert config.index_interval_bytes == 4096
    assert config.retention_ms == 604800000
    assert config.retention_bytes == -1
    assert config.max_message_bytes == 1048588
    assert config.flush_messages == config.flush_ms == 9223372036854775807
    assert config.message_timestamp_type == "CreateTime"
    assert config.cleanup_policy == frozenset({"delete"})
    assert config.delete_enabled
    assert not config.compact_enabled


def test_from_props_parses_kafka_strings() -> None:
    config = LogConfig.from_props(
        {
            "segment.bytes": " 1048576 ",
            "retention.ms": "-1",
            "flush.messages": str(LONG_MAX),
            "message.timestamp.type": "LogAppendTime",
            "cleanup.policy": "compact,delete",
            "min.cleanable.dirty.ratio": "0.25",
            "unclean.leader.election.enable": "TRUE",
        }
    )
    assert config.segment_bytes == 1048576
    assert config.retention_ms == -1
    assert config.log_append_time
    assert config.cleanup_policy == frozenset({"compact", "delete"})
    assert config.min_cleanable_dirty_ratio == 0.25
    assert config.unclean_leader_election_enable is True


def test_from_props_starts_from_a_base() -> None:
    base = LogConfig(segment_bytes=5000)
    assert LogConfig.from_props({"retention.bytes": "10"}, base).segment_bytes == 5000


@pytest.mark.parametrize(
    ("props", "match"),
    [
        ({"segment.byte": "100"}, "unknown log config 'segment.byte'"),
        ({"segment.bytes": "13"}, "'segment.bytes'"),
        ({"segment.bytes": "2147483648"}, "'segment.bytes'.*range"),
        ({"segment.bytes": "1e6"}, "'segment.bytes'.*not an integer"),
        ({"segment.bytes": "1_000"}, "'segment.bytes'.*not an integer"),
        ({"segment.bytes": ""}, "'segment.bytes'.*not an integer"),
        ({"retention.ms": "-2"}, "'retention.ms'"),
        ({"segment.ms": "0"}, "'segment.ms'"),
        ({"flush.messages": "0"}, "'flush.messages'"),
        ({"flush.ms": "9223372036854775808"}, "'flush.ms'"),
        ({"message.timestamp.type": "createtime"}, "'message.timestamp.type'"),
        ({"cleanup.policy": "delete,forever"}, "'cleanup.policy'"),
        ({"cleanup.policy": ""}, "'cleanup.policy'"),
        ({"min.cleanable.dirty.ratio": "1.5"}, "'min.cleanable.dirty.ratio'"),
        ({"min.cleanable.dirty.ratio": "nan"}, "'min.cleanable.dirty.ratio'"),
        ({"unclean.leader.election.enable": "yes"}, "'unclean.leader.election.enable'"),
        ({"compression.type": "brotli"}, "'compression.type'"),
        ({"max.message.bytes": 100}, "'max.message.bytes'.*expected a string"),
    ],
)
def test_bad_keys_and_values_name_the_key(props: dict[str, str], match: str) -> None:
    with pytest.raises(InvalidConfigError, match=match) as excinfo:
        LogConfig.from_props(props)
    assert excinfo.value.code == "INVALID_CONFIG"


def test_direct_construction_is_checked_too() -> None:
    with pytest.raises(InvalidConfigError, match="'index.interval.bytes'"):
        LogConfig(index_interval_bytes=-1)
    with pytest.raises(InvalidConfigError, match="'segment.bytes'.*integer"):
        LogConfig(segment_bytes=1.5)  # type: ignore[arg-type]
    with pytest.raises(InvalidConfigError, match="'retention.bytes'.*number"):
        dataclasses.replace(LogConfig(), retention_bytes=True)


@settings(derandomize=True)
@given(
    segment_bytes=st.integers(14, 2**31 - 1),
    retention_ms=st.integers(-1, LONG_MAX),
    policy=st.sampled_from(["delete", "compact", "compact,delete"]),
    timestamp_type=st.sampled_from(["CreateTime", "LogAppendTime"]),
)
def test_to_props_round_trips(
    segment_bytes: int, retention_ms: int, policy: str, timestamp_type: str
) -> None:
    config = LogConfig.from_props(
        {
            "segment.bytes": str(segment_bytes),
            "retention.ms": str(retention_ms),
            "cleanup.policy": policy,
            "message.timestamp.type": timestamp_type,
        }
    )
    assert config.to_props()["cleanup.policy"] == policy
    assert LogConfig.from_props(config.to_props()) == config
