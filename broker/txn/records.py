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

from broker.coordinator_fields import FieldReader, FieldWriter, RecordFormatError
from broker.txn.state import TxnMetadata, TxnState

KEY_VERSION = 0
VALUE_VERSION = 0
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


def encode_key(transactional_id: str) -> bytes:
    return FieldWriter().i16(KEY_VERSION).string(transactional_id).bytes()


def encode_value(metadata: TxnMetadata) -> bytes | None:
    """The value of ``metadata``; None (a tombstone) for Dead."""
    if metadata.state == TxnState.DEAD:
        return None
    if metadata.state not in WRITTEN_STATES:
        raise ValueError(f"state {metadata.state.kafka_name} is never written")
    if metadata.state == TxnState.EMPTY and metadata.partitions:
        raise ValueError("an Empty transactional id has no partitions")
    w = FieldWriter().pack(_VALUE_HEAD, VALUE_VERSION, metadata.producer_id, metadata.producer_epoch,
                           metadata.txn_timeout_ms, int(metadata.state))  # fmt: skip
    if metadata.state == TxnState.EMPTY:
        w.i32(-1)  # a null array
    else:
        w.partitions(metadata.partitions)
    return w.pack(_TIMESTAMPS, metadata.txn_last_update_timestamp_ms, metadata.txn_start_timestamp_ms).bytes()


def decode_key(data: bytes) -> str:
    r = FieldReader(data, "__transaction_state key")
    version = r.i16()
    if version != KEY_VERSION:
        raise RecordFormatError(f"__transaction_state key version {version} is unknown")
    transactional_id = r.string()
    r.end()
    if not transactional_id:
        raise RecordFormatError("__transaction_state key with an empty transactional id")
    return transactional_id


def decode_value(transactional_id: str, data: bytes) -> TxnMetadata:
    r = FieldReader(data, f"__transaction_state value of {transactional_id!r}")
    version, producer_id, producer_epoch, timeout_ms, status = r.take(_VALUE_HEAD)
    if version != VALUE_VERSION:
        raise RecordFormatError(f"__transaction_state value version {version} of {transactional_id!r} is unknown")
    if status not in {int(s) for s in WRITTEN_STATES}:
        raise RecordFormatError(f"__transaction_state value of {transactional_id!r} has status {status}")
    partitions = r.partitions(nullable=True)  # null when Empty
    last_update_ms, start_ms = r.take(_TIMESTAMPS)
    r.end()
    if producer_id < 0 or producer_epoch < 0:
        raise RecordFormatError(f"__transaction_state value of {transactional_id!r} has producer id "
                                f"{producer_id} epoch {producer_epoch}")  # fmt: skip
    return TxnMetadata(transactional_id, producer_id, producer_epoch, timeout_ms, TxnState(status),
                       partitions, start_ms, last_update_ms)  # fmt: skip


def decode_record(key: bytes | None, value: bytes | None) -> tuple[str, TxnMetadata | None]:
    """One record as ``(transactional id, metadata or None for a tombstone)``."""
    if key is None:
        raise RecordFormatError("__transaction_state record without a key")
    transactional_id = decode_key(key)
    return transactional_id, None if value is None else decode_value(transactional_id, value)


def encode_record(metadata: TxnMetadata) -> tuple[bytes, bytes | None]:
    return encode_key(metadata.transactional_id), encode_value(metadata)
