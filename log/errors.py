"""Errors of the storage engine, each carrying Kafka's error name.

Every error a caller may see from ``log`` derives from :class:`LogError` and has a ``code``: the
name Kafka gives that condition (``CORRUPT_MESSAGE``, ``OFFSET_OUT_OF_RANGE``, ...). Brokers put
that name into responses; clients map it back to a typed exception.
"""

from __future__ import annotations


class LogError(Exception):
    """Base of every storage-engine error. ``code`` is Kafka's error name."""

    code = "UNKNOWN_SERVER_ERROR"
    retriable = False


class CorruptRecordError(LogError):
    """A batch failed validation: bad magic, bad length, CRC mismatch, or malformed records."""

    code = "CORRUPT_MESSAGE"


class InvalidRecordError(LogError):
    """A batch is well formed but not acceptable here (e.g. a record count that disagrees)."""

    code = "INVALID_RECORD"


class InvalidTimestampError(LogError):
    """A record's timestamp lies outside ``message.timestamp.before.max.ms`` / ``after.max.ms`` of the
    broker's clock."""

    code = "INVALID_TIMESTAMP"


class UnsupportedCompressionError(LogError):
    """The batch names a compression codec this build cannot read or write."""

    code = "UNSUPPORTED_COMPRESSION_TYPE"


class RecordTooLargeError(LogError):
    """A batch is larger than ``max.message.bytes``."""

    code = "MESSAGE_TOO_LARGE"


class OffsetOutOfRangeError(LogError):
    """A read asked for an offset outside ``[log_start_offset, log_end_offset]``."""

    code = "OFFSET_OUT_OF_RANGE"


class InvalidConfigError(LogError):
    """A log config key is unknown or its value is out of range."""

    code = "INVALID_CONFIG"


class StorageError(LogError):
    """The disk failed us (I/O error, a file that cannot be opened or written)."""

    code = "KAFKA_STORAGE_ERROR"
