"""The ``__transaction_state`` record codec: one key per transactional id, compacted to its latest metadata.

Kafka's ``TransactionLog`` (``TransactionLogKey`` / ``TransactionLogValue``, version 0), big-endian, as
Kafka's protocol primitives (``string`` = int16 length + UTF-8; arrays = int32 count, -1 for null)::

    key     version                            int16   0
            transactional_id                   string

    value   version                            int16   0
            producer_id                        int64
            producer_epoch                     int16
            transaction_timeout_ms             int32
            transaction_status                 int8    TxnState id (never PrepareEpochFence nor Dead)
            transaction_partitions             [topic string, partition_ids [int32]], null when Empty
            transaction_last_update_timestamp  int64
            transaction_start_timestamp        int64

A Dead transactional id is written as a tombstone (null value). A key or value that does not parse raises
:class:`RecordFormatError`: the loader then refuses to coordinate from the partition rather than skip facts.
"""

from __future__ import annotations

import struct
from collections import defaultdict
from collections.abc import Iterable

from broker.txn.state import TopicPartition, TxnMetadata, TxnState

KEY_VERSION = 0
VALUE_VERSION = 0
MAX_STRING_BYTES = 32767  # int16 length

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_VALUE_HEAD = struct.Struct(
    ">"
    "h"  # version
    "q"  # producer_id
    "h"  # producer_epoch
    "i"  # transaction_timeout_ms
    "b"  # transaction_status
)
_TIMESTAMPS = struct.Struct(
    ">"
    "q"  # transaction_last_update_timestamp_ms
    "q"  # transaction_start_timestamp_ms
)
WRITTEN_STATES = frozenset(TxnState) - {TxnState.PREPARE_EPOCH_FENCE, TxnState.DEAD}


class RecordFormatError(ValueError):
    """A ``__transaction_state`` key or value that does not parse."""


def _string(s: str) -> bytes:
    data = s.encode("utf-8")
    if len(data) > MAX_STRING_BYTES:
        raise ValueError(f"string of {len(data)} bytes is longer than {MAX_STRING_BYTES}")
    return _I16.pack(len(data)) + data


def encode_key(transactional_id: str) -> bytes:
    return _I16.pack(KEY_VERSION) + _string(transactional_id)


def encode_value(metadata: TxnMetadata) -> bytes | None:
    """The value of ``metadata``; None (a tombstone) for Dead."""
    if metadata.state == TxnState.DEAD:
        return None
    if metadata.state not in WRITTEN_STATES:
        raise ValueError(f"state {metadata.state.kafka_name} is never written")
    if metadata.state == TxnState.EMPTY and metadata.partitions:
        raise ValueError("an Empty transactional id has no partitions")
    parts = [_VALUE_HEAD.pack(VALUE_VERSION, metadata.producer_id, metadata.producer_epoch,
                              metadata.txn_timeout_ms, int(metadata.state))]  # fmt: skip
    if metadata.state == TxnState.EMPTY:
        parts.append(_I32.pack(-1))
    else:
        parts.append(_encode_partitions(metadata.partitions))
    parts.append(_TIMESTAMPS.pack(metadata.txn_last_update_timestamp_ms, metadata.txn_start_timestamp_ms))
    return b"".join(parts)


def _encode_partitions(partitions: Iterable[TopicPartition]) -> bytes:
    by_topic: dict[str, list[int]] = defaultdict(list)
    for topic, number in partitions:
        by_topic[topic].append(number)
    parts = [_I32.pack(len(by_topic))]
    for topic in sorted(by_topic):
        numbers = sorted(by_topic[topic])
        parts += (_string(topic), _I32.pack(len(numbers)), *(_I32.pack(n) for n in numbers))
    return b"".join(parts)


class _Reader:
    def __init__(self, data: bytes, what: str) -> None:
        self._data = data
        self._pos = 0
        self._what = what

    def take(self, s: struct.Struct) -> tuple[int, ...]:
        if self._pos + s.size > len(self._data):
            raise RecordFormatError(f"{self._what}: truncated at byte {self._pos}")
        values = s.unpack_from(self._data, self._pos)
        self._pos += s.size
        return tuple(int(v) for v in values)

    def count(self, nullable: bool = False) -> int:
        (n,) = self.take(_I32)
        if n == -1 and nullable:
            return 0
        if n < 0 or n > len(self._data) - self._pos:
            raise RecordFormatError(f"{self._what}: bad array length {n} at byte {self._pos - 4}")
        return n

    def string(self) -> str:
        (n,) = self.take(_I16)
        if n < 0 or self._pos + n > len(self._data):
            raise RecordFormatError(f"{self._what}: bad string length {n} at byte {self._pos - 2}")
        raw = self._data[self._pos : self._pos + n]
        self._pos += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise RecordFormatError(f"{self._what}: string is not UTF-8: {exc}") from None

    def end(self) -> None:
        if self._pos != len(self._data):
            raise RecordFormatError(f"{self._what}: {len(self._data) - self._pos} bytes after the last field")


def decode_key(data: bytes) -> str:
    r = _Reader(data, "__transaction_state key")
    (version,) = r.take(_I16)
    if version != KEY_VERSION:
        raise RecordFormatError(f"__transaction_state key version {version} is unknown")
    transactional_id = r.string()
    r.end()
    if not transactional_id:
        raise RecordFormatError("__transaction_state key with an empty transactional id")
    return transactional_id


def decode_value(transactional_id: str, data: bytes) -> TxnMetadata:
    r = _Reader(data, f"__transaction_state value of {transactional_id!r}")
    version, producer_id, producer_epoch, timeout_ms, status = r.take(_VALUE_HEAD)
    if version != VALUE_VERSION:
        raise RecordFormatError(f"__transaction_state value version {version} of {transactional_id!r} is unknown")
    if status not in {int(s) for s in WRITTEN_STATES}:
        raise RecordFormatError(f"__transaction_state value of {transactional_id!r} has status {status}")
    partitions: set[TopicPartition] = set()
    for _ in range(r.count(nullable=True)):
        topic = r.string()
        for _ in range(r.count()):
            partitions.add((topic, r.take(_I32)[0]))
    last_update_ms, start_ms = r.take(_TIMESTAMPS)
    r.end()
    if producer_id < 0 or producer_epoch < 0:
        raise RecordFormatError(f"__transaction_state value of {transactional_id!r} has producer id "
                                f"{producer_id} epoch {producer_epoch}")  # fmt: skip
    return TxnMetadata(transactional_id, producer_id, producer_epoch, timeout_ms, TxnState(status),
                       frozenset(partitions), start_ms, last_update_ms)  # fmt: skip


def decode_record(key: bytes | None, value: bytes | None) -> tuple[str, TxnMetadata | None]:
    """One record as ``(transactional id, metadata or None for a tombstone)``."""
    if key is None:
        raise RecordFormatError("__transaction_state record without a key")
    transactional_id = decode_key(key)
    return transactional_id, None if value is None else decode_value(transactional_id, value)


def encode_record(metadata: TxnMetadata) -> tuple[bytes, bytes | None]:
    return encode_key(metadata.transactional_id), encode_value(metadata)
