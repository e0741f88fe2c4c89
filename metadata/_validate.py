"""Field checks shared by the metadata record classes: each raises :class:`InvalidMetadataRecordError`."""

from __future__ import annotations

import re
import uuid
from typing import NoReturn

from metadata.errors import InvalidMetadataRecordError

INT16_MAX = 2**15 - 1
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1

_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")  # Kafka's legal topic names (minus "." and "..")


def fail(rec: object, message: str) -> NoReturn:
    raise InvalidMetadataRecordError(f"{type(rec).__name__}: {message}")


def check_int(rec: object, name: str, lo: int, hi: int) -> None:
    value = getattr(rec, name)
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        fail(rec, f"{name} must be an int in [{lo}, {hi}], got {value!r}")


def check_bool(rec: object, name: str) -> None:
    if not isinstance(getattr(rec, name), bool):
        fail(rec, f"{name} must be a bool, got {getattr(rec, name)!r}")


def check_str(rec: object, name: str, *, optional: bool = False, nonempty: bool = False) -> None:
    value = getattr(rec, name)
    if value is None and optional:
        return
    if not isinstance(value, str):
        fail(rec, f"{name} must be a str, got {value!r}")
    if nonempty and not value:
        fail(rec, f"{name} must not be empty")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        fail(rec, f"{name} is not valid unicode text: {value!r}")


def check_uuid(rec: object, name: str, *, allow_nil: bool = True) -> None:
    value = getattr(rec, name)
    try:
        canonical = str(uuid.UUID(value)) if isinstance(value, str) else None
    except ValueError:
        canonical = None
    if canonical != value:
        fail(rec, f"{name} must be a UUID in canonical form (lowercase, hyphenated), got {value!r}")
    if not allow_nil and value == str(uuid.UUID(int=0)):
        fail(rec, f"{name} must not be the nil UUID")


def check_topic_name(rec: object, name: str) -> None:
    value = getattr(rec, name)
    if not isinstance(value, str) or not _TOPIC_NAME.fullmatch(value) or value in (".", ".."):
        fail(rec, f"{name} must be 1-249 of [a-zA-Z0-9._-] and not '.' or '..', got {value!r}")


def coerce_ids(rec: object, name: str, *, optional: bool = False, nonempty: bool = False) -> None:
    """Turn a sequence of broker ids into a tuple; each a non-negative int32, no duplicates."""
    value = getattr(rec, name)
    if value is None and optional:
        return
    if not isinstance(value, tuple | list):
        fail(rec, f"{name} must be a tuple of broker ids, got {value!r}")
    ids = tuple(value)
    for i in ids:
        if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i <= INT32_MAX:
            fail(rec, f"{name} holds {i!r}, not a broker id in [0, {INT32_MAX}]")
    if len(set(ids)) != len(ids):
        fail(rec, f"{name} lists a broker twice: {list(ids)}")
    if nonempty and not ids:
        fail(rec, f"{name} must not be empty")
    object.__setattr__(rec, name, ids)
