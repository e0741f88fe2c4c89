"""Kafka error names map to typed exceptions that say whether to retry."""

from __future__ import annotations

import pytest

from odradek import errors
from odradek.errors import (
    ERRORS_BY_CODE,
    CorruptMessageError,
    FencedLeaderEpochError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidTopicError,
    KafkaError,
    KafkaTimeoutError,
    LeaderNotAvailableError,
    MessageTooLargeError,
    NotControllerError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    RequestTimedOutError,
    TopicAlreadyExistsError,
    UnknownKafkaError,
    UnknownTopicOrPartitionError,
    error_from_code,
    is_retriable,
)


@pytest.mark.parametrize(
    ("code", "cls", "retriable", "invalid_metadata"),
    [
        ("NOT_LEADER_OR_FOLLOWER", NotLeaderOrFollowerError, True, True),
        ("UNKNOWN_TOPIC_OR_PARTITION", UnknownTopicOrPartitionError, True, True),
        ("LEADER_NOT_AVAILABLE", LeaderNotAvailableError, True, True),
        ("FENCED_LEADER_EPOCH", FencedLeaderEpochError, True, True),
        ("NOT_ENOUGH_REPLICAS", NotEnoughReplicasError, True, False),
        ("REQUEST_TIMED_OUT", RequestTimedOutError, True, False),
        ("NOT_CONTROLLER", NotControllerError, True, False),
        ("CORRUPT_MESSAGE", CorruptMessageError, True, False),
        ("OFFSET_OUT_OF_RANGE", OffsetOutOfRangeError, False, False),
        ("MESSAGE_TOO_LARGE", MessageTooLargeError, False, False),
        ("INVALID_TOPIC_EXCEPTION", InvalidTopicError, False, False),
        ("INVALID_TOPIC", InvalidTopicError, False, False),
        ("TOPIC_ALREADY_EXISTS", TopicAlreadyExistsError, False, False),
        ("INVALID_CONFIG", InvalidConfigError, False, False),
        ("INVALID_PARTITIONS", InvalidPartitionsError, False, False),
        ("INVALID_REPLICATION_FACTOR", InvalidReplicationFactorError, False, False),
    ],
)
def test_codes_map_to_typed_errors(code: str, cls: type[KafkaError], retriable: bool, invalid_metadata: bool) -> None:
    error = error_from_code(code, "broker 2 says so")
    assert type(error) is cls
    assert error.code == cls.code
    assert error.retriable is retriable
    assert error.invalid_metadata is invalid_metadata
    assert str(error) == "broker 2 says so"
    assert is_retriable(code) is retriable


def test_empty_message_falls_back_to_a_description() -> None:
    assert "not the leader" in str(error_from_code("NOT_LEADER_OR_FOLLOWER"))


def test_unknown_code_keeps_the_name() -> None:
    error = error_from_code("SOMETHING_NEW", "")
    assert isinstance(error, UnknownKafkaError)
    assert error.code == "SOMETHING_NEW"
    assert "SOMETHING_NEW" in str(error)
    assert not error.retriable
    assert not is_retriable("SOMETHING_NEW")


def test_empty_code_is_not_an_error() -> None:
    with pytest.raises(ValueError, match="success"):
        error_from_code("")


def test_every_code_is_unique_and_round_trips() -> None:
    for code, cls in ERRORS_BY_CODE.items():
        assert type(error_from_code(code)) is cls


def test_timeout_is_a_builtin_timeout_too() -> None:
    assert KafkaTimeoutError is RequestTimedOutError
    assert issubclass(KafkaTimeoutError, TimeoutError)
    assert issubclass(KafkaError, errors.OdradekError)
    assert issubclass(errors.NotSupportedYetError, NotImplementedError)
