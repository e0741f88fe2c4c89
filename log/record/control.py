"""Control batches: the transaction markers (COMMIT / ABORT) a transaction coordinator writes to a partition.

A marker is a batch with the ``transactional`` and ``control`` attributes, the producer id and epoch of the
transaction it ends, base sequence -1, and exactly one record (Kafka's ``EndTransactionMarker``)::

    record key      version            int16   0
                    type               int16   0 = ABORT, 1 = COMMIT
    record value    version            int16   0
                    coordinator_epoch  int32   the coordinator's epoch (its __transaction_state leader epoch)

Readers accept a value of a newer version and ignore what follows its known fields, as Kafka's do. Pure.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from log.errors import CorruptRecordError
from log.record.builder import BatchBuilder
from log.record.header import NO_SEQUENCE, BatchHeader
from log.record.reader import CONTROL_KEY, CONTROL_TYPE_ABORT, CONTROL_TYPE_COMMIT, read_batch

MARKER_VALUE = struct.Struct(
    ">"
    "h"  # version
    "i"  # coordinator_epoch
)
CONTROL_KEY_VERSION = 0
MARKER_VALUE_VERSION = 0

__all__ = ["CONTROL_TYPE_ABORT", "CONTROL_TYPE_COMMIT", "EndTransactionMarker", "build_marker_batch", "read_marker"]


@dataclass(frozen=True, slots=True)
class EndTransactionMarker:
    """The end of one producer's transaction on a partition."""

    control_type: int  # CONTROL_TYPE_ABORT or CONTROL_TYPE_COMMIT
    coordinator_epoch: int

    def __post_init__(self) -> None:
        if self.control_type not in (CONTROL_TYPE_ABORT, CONTROL_TYPE_COMMIT):
            raise ValueError(f"control type {self.control_type} is not ABORT (0) or COMMIT (1)")

    @property
    def is_commit(self) -> bool:
        return self.control_type == CONTROL_TYPE_COMMIT

    def encode_key(self) -> bytes:
        return CONTROL_KEY.pack(CONTROL_KEY_VERSION, self.control_type)

    def encode_value(self) -> bytes:
        return MARKER_VALUE.pack(MARKER_VALUE_VERSION, self.coordinator_epoch)


def decode_marker(key: bytes | None, value: bytes | None, offset: int = -1) -> EndTransactionMarker:
    """The marker of a control record's key and value; CorruptRecordError names what is wrong."""
    if key is None or len(key) < CONTROL_KEY.size:
        raise CorruptRecordError(f"control record at offset {offset} has no control key")
    key_version, control_type = CONTROL_KEY.unpack_from(key)
    if key_version < 0:
        raise CorruptRecordError(f"control record at offset {offset} has key version {key_version}")
    if control_type not in (CONTROL_TYPE_ABORT, CONTROL_TYPE_COMMIT):
        raise CorruptRecordError(f"control record at offset {offset} has type {control_type}, not a marker")
    if value is None or len(value) < MARKER_VALUE.size:
        raise CorruptRecordError(f"transaction marker at offset {offset} has no well-formed value")
    version, coordinator_epoch = MARKER_VALUE.unpack_from(value)
    if version < 0:
        raise CorruptRecordError(f"transaction marker at offset {offset} has value version {version}")
    return EndTransactionMarker(int(control_type), int(coordinator_epoch))


def build_marker_batch(
    producer_id: int,
    producer_epoch: int,
    marker: EndTransactionMarker,
    timestamp_ms: int,
    *,
    base_offset: int = 0,
    partition_leader_epoch: int = -1,
) -> bytes:
    """The control batch of ``marker`` for the transaction of ``producer_id``/``producer_epoch``."""
    if producer_id < 0 or producer_epoch < 0:
        raise ValueError(f"a marker needs a producer id and epoch, not {producer_id}/{producer_epoch}")
    builder = BatchBuilder(
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=NO_SEQUENCE,
        is_transactional=True,
        is_control=True,
    )
    builder.append(timestamp_ms, marker.encode_key(), marker.encode_value())
    return builder.build()


def read_marker(batch: bytes | bytearray | memoryview, pos: int = 0) -> tuple[BatchHeader, EndTransactionMarker]:
    """Validate the control batch at ``batch[pos:]`` and decode its marker (exactly one record)."""
    header, records = read_batch(batch, pos)
    if not (header.is_control and header.is_transactional):
        raise CorruptRecordError(f"batch at offset {header.base_offset} is not a transactional control batch")
    if len(records) != 1:
        raise CorruptRecordError(f"control batch at offset {header.base_offset} holds {len(records)} records, not 1")
    if header.producer_id < 0 or header.producer_epoch < 0:
        raise CorruptRecordError(f"control batch at offset {header.base_offset} has no producer id and epoch")
    record = records[0]
    return header, decode_marker(record.key, record.value, record.offset)
