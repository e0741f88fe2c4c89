"""Kafka's error names as the broker answers them, and how exceptions map to them.

A response carries ``odradek.common.Error(code, message)``; an empty code is success. Exceptions of the
storage engine (:class:`~log.errors.LogError`), of the partition (:mod:`replication.partition`) and of the
metadata layer carry their Kafka name in ``code``; anything else is a bug and answers
``UNKNOWN_SERVER_ERROR`` (logged with its traceback).
"""

from __future__ import annotations

import logging

from log.errors import LogError
from metadata.configs import ConfigError
from metadata.errors import MetadataError
from proto import common_pb2

logger = logging.getLogger(__name__)

NONE = ""
CORRUPT_MESSAGE = "CORRUPT_MESSAGE"
COORDINATOR_LOAD_IN_PROGRESS = "COORDINATOR_LOAD_IN_PROGRESS"
COORDINATOR_NOT_AVAILABLE = "COORDINATOR_NOT_AVAILABLE"
FENCED_LEADER_EPOCH = "FENCED_LEADER_EPOCH"
INVALID_CONFIG = "INVALID_CONFIG"
INVALID_REQUEST = "INVALID_REQUEST"
INVALID_REQUIRED_ACKS = "INVALID_REQUIRED_ACKS"
INVALID_TOPIC_EXCEPTION = "INVALID_TOPIC_EXCEPTION"
KAFKA_STORAGE_ERROR = "KAFKA_STORAGE_ERROR"
LEADER_NOT_AVAILABLE = "LEADER_NOT_AVAILABLE"
MESSAGE_TOO_LARGE = "MESSAGE_TOO_LARGE"
NOT_CONTROLLER = "NOT_CONTROLLER"
NOT_COORDINATOR = "NOT_COORDINATOR"
NOT_ENOUGH_REPLICAS = "NOT_ENOUGH_REPLICAS"
NOT_ENOUGH_REPLICAS_AFTER_APPEND = "NOT_ENOUGH_REPLICAS_AFTER_APPEND"
NOT_LEADER_OR_FOLLOWER = "NOT_LEADER_OR_FOLLOWER"
OFFSET_OUT_OF_RANGE = "OFFSET_OUT_OF_RANGE"
REQUEST_TIMED_OUT = "REQUEST_TIMED_OUT"
STALE_BROKER_EPOCH = "STALE_BROKER_EPOCH"
TOPIC_ALREADY_EXISTS = "TOPIC_ALREADY_EXISTS"
UNKNOWN_LEADER_EPOCH = "UNKNOWN_LEADER_EPOCH"
UNKNOWN_SERVER_ERROR = "UNKNOWN_SERVER_ERROR"
UNKNOWN_TOPIC_OR_PARTITION = "UNKNOWN_TOPIC_OR_PARTITION"


class BrokerError(Exception):
    """A request the broker refuses; ``code`` is Kafka's error name."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def code_of(exc: BaseException) -> str:
    """Kafka's name for ``exc``; UNKNOWN_SERVER_ERROR (logged) for anything that is not ours."""
    if isinstance(exc, BrokerError | LogError | MetadataError | ConfigError):
        return str(exc.code)
    logger.error("unexpected error answering a request", exc_info=exc)
    return UNKNOWN_SERVER_ERROR


def error(code: str, message: str = "") -> common_pb2.Error:
    return common_pb2.Error(code=code, message=message)


def error_of(exc: BaseException) -> common_pb2.Error:
    return common_pb2.Error(code=code_of(exc), message=str(exc) or type(exc).__name__)
