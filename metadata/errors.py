"""Errors of the metadata layer: records that cannot be decoded, built or applied.

Every one derives from :class:`MetadataError` and carries ``code``, Kafka's error name, like the storage
engine's errors. A broker or controller that meets one while replaying ``__cluster_metadata`` has found a
bug or a corrupt log: it must surface it loudly, never skip the record.
"""

from __future__ import annotations


class MetadataError(Exception):
    """A record would make the metadata image inconsistent (unknown partition, stale epoch, ...)."""

    code = "UNKNOWN_SERVER_ERROR"
    retriable = False


class MetadataDecodeError(MetadataError):
    """Bytes that are no encoded metadata record or snapshot: garbage, truncated, unknown type or version."""

    code = "CORRUPT_MESSAGE"


class InvalidMetadataRecordError(MetadataError, ValueError):
    """A record built with field values no record may hold (negative broker id, duplicate replica, ...)."""

    code = "INVALID_REQUEST"
