"""The RecordBatch v2 header: layout, parsing, validation and offset assignment.

Wire and disk layout (big-endian), Kafka's RecordBatch v2 (magic 2)::

    offset  size  field
         0     8  baseOffset            first offset of the batch (assigned by the leader)
         8     4  batchLength           bytes that follow this field (total size - 12)
        12     4  partitionLeaderEpoch  leader epoch of the appending leader
        16     1  magic                 always 2
        17     4  crc                   CRC-32C (Castagnoli) of bytes [21, end)
        21     2  attributes            see the ATTR_* masks below
        23     4  lastOffsetDelta       offset of the last record minus baseOffset
        27     8  baseTimestamp         timestamp of the first record
        35     8  maxTimestamp          largest timestamp in the batch
        43     8  producerId            -1 when not idempotent
        51     2  producerEpoch         -1 when not idempotent
        53     4  baseSequence          -1 when not idempotent
        57     4  recordsCount          number of records
        61     .  records               varint-framed records, compressed as a whole if attributes say so

``baseOffset``, ``batchLength`` and ``partitionLeaderEpoch`` lie outside the CRC, which is why a
leader can assign offsets and stamp its epoch without recomputing it.

This module is pure: it reads and patches buffers, nothing else.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

from crc32c import crc32c

from log.errors import CorruptRecordError

HEADER = struct.Struct(
    ">"
    "q"  # baseOffset
    "i"  # batchLength
    "i"  # partitionLeaderEpoch
    "b"  # magic
    "I"  # crc
    "h"  # attributes
    "i"  # lastOffsetDelta
    "q"  # baseTimestamp
    "q"  # maxTimestamp
    "q"  # producerId
    "h"  # producerEpoch
    "i"  # baseSequence
    "i"  # recordsCount
)
HEADER_SIZE = HEADER.size  # 61
assert HEADER_SIZE == 61

LOG_OVERHEAD = 12  # baseOffset + batchLength: the bytes not counted by batchLength
BASE_OFFSET = struct.Struct(">q")  # at 0
LENGTH_PREFIX = struct.Struct(">qi")  # baseOffset, batchLength
PARTITION_LEADER_EPOCH = struct.Struct(">i")  # at 12
PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21  # CRC covers [ATTRIBUTES_OFFSET, end)
MAGIC = 2
CRC = struct.Struct(">I")  # the crc field, at CRC_OFFSET
PRODUCER_STATE = struct.Struct(">qhi")  # producerId, producerEpoch, baseSequence
PRODUCER_STATE_OFFSET = 43
assert PRODUCER_STATE_OFFSET + PRODUCER_STATE.size + 4 == HEADER_SIZE  # then recordsCount, the header's last field

ATTR_COMPRESSION_MASK = 0x07
ATTR_TIMESTAMP_TYPE = 0x08  # 0 = CreateTime, 1 = LogAppendTime
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20
ATTR_DELETE_HORIZON = 0x40

MIN_RECORD_SIZE = 7  # length varint + attributes, timestampDelta, offsetDelta, keyLength, valueLength, headers

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """The fixed 61-byte header of one RecordBatch v2, decoded."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size_bytes(self) -> int:
        """Total size of the batch on the wire, header included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & ATTR_COMPRESSION_MASK

    @property
    def is_log_append_time(self) -> bool:
        return bool(self.attributes & ATTR_TIMESTAMP_TYPE)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) & 0x7FFFFFFF


def parse_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Decode the header at ``buf[pos:]`` without checking it (see :func:`validate_batch`)."""
    if len(buf) - pos < HEADER_SIZE:
        raise CorruptRecordError(
            f"record batch header truncated: {len(buf) - pos} bytes at position {pos}, need {HEADER_SIZE}"
        )
    return BatchHeader(*HEADER.unpack_from(buf, pos))


def batch_size_at(buf: bytes | bytearray | memoryview, pos: int) -> int | None:
    """Total size of the batch starting at ``pos``, or None if fewer than 12 bytes remain."""
    if len(buf) - pos < LOG_OVERHEAD:
        return None
    _, length = LENGTH_PREFIX.unpack_from(buf, pos)
    return int(length) + LOG_OVERHEAD


def validate_batch(buf: bytes | bytearray | memoryview, pos: int = 0, end: int | None = None) -> BatchHeader:
    """Check the batch starting at ``buf[pos:]`` and return its header.

    Checks, in order: the header is complete, magic is 2, ``batchLength`` fits the buffer and covers
    the header, ``lastOffsetDelta`` and ``recordsCount`` are sane (an uncompressed batch cannot hold
    more records than :data:`MIN_RECORD_SIZE`-byte records fit in its body), and the CRC-32C of
    ``[attributes, end)`` matches. Raises :class:`CorruptRecordError` naming what is wrong. No header
    field is used before the length, magic and CRC are checked. The records themselves are not
    decoded here: the CRC only says they were not damaged on the way, not that they are well formed
    (a leader decodes them: :mod:`log.record.validator`).
    """
    end = len(buf) if end is None else end
    header = parse_header(buf, pos)
    if header.magic != MAGIC:
        raise CorruptRecordError(
            f"unsupported record batch magic {header.magic} at position {pos}, expected 2"
        )
    size = header.size_bytes
    if header.batch_length < HEADER_SIZE - LOG_OVERHEAD:
        raise CorruptRecordError(
            f"record batch length {header.batch_length} at position {pos} is below the header size"
        )
    if pos + size > end:
        raise CorruptRecordError(
            f"record batch at position {pos} claims {size} bytes but only {end - pos} remain"
        )
    if header.records_count < 0 or header.last_offset_delta < 0:
        raise CorruptRecordError(
            f"record batch at position {pos} has records_count={header.records_count}, "
            f"last_offset_delta={header.last_offset_delta}"
        )
    if header.records_count > 0 and header.last_offset_delta < header.records_count - 1:
        raise CorruptRecordError(
            f"record batch at position {pos} has {header.records_count} records "
            f"but last_offset_delta={header.last_offset_delta}"
        )
    body = size - HEADER_SIZE
    if header.attributes & ATTR_COMPRESSION_MASK == 0 and header.records_count > body // MIN_RECORD_SIZE:
        raise CorruptRecordError(
            f"record batch at position {pos} claims {header.records_count} records but its {body} bytes of "
            f"records hold at most {body // MIN_RECORD_SIZE} (a record takes at least {MIN_RECORD_SIZE} bytes)"
        )
    actual = crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET : pos + size])
    if actual != header.crc:
        raise CorruptRecordError(
            f"record batch at position {pos} fails its CRC: "
            f"stored {header.crc:#010x}, computed {actual:#010x}"
        )
    return header


def patch_base_offset(batch: bytearray | memoryview, pos: int, base_offset: int) -> None:
    """Overwrite ``baseOffset`` of the batch at ``pos`` (outside the CRC)."""
    BASE_OFFSET.pack_into(batch, pos, base_offset)


def patch_partition_leader_epoch(batch: bytearray | memoryview, pos: int, epoch: int) -> None:
    """Overwrite ``partitionLeaderEpoch`` of the batch at ``pos`` (outside the CRC)."""
    PARTITION_LEADER_EPOCH.pack_into(batch, pos + PARTITION_LEADER_EPOCH_OFFSET, epoch)


def set_crc(head: bytearray, body: bytes | bytearray | memoryview) -> None:
    """Write into ``head`` (one batch's first HEADER_SIZE bytes) the CRC-32C of its covered header bytes and
    ``body`` (the records that follow the header)."""
    with memoryview(head) as view:
        crc = crc32c(body, crc32c(view[ATTRIBUTES_OFFSET:HEADER_SIZE]))
    CRC.pack_into(head, CRC_OFFSET, crc)


def patch_producer_state(batch: bytes, producer_id: int, producer_epoch: int, base_sequence: int) -> bytes:
    """A copy of ``batch`` (one whole batch) with its producer id, epoch and base sequence set and its CRC
    recomputed (these fields lie inside the CRC)."""
    head = bytearray(batch[:HEADER_SIZE])
    PRODUCER_STATE.pack_into(head, PRODUCER_STATE_OFFSET, producer_id, producer_epoch, base_sequence)
    body = memoryview(batch)[HEADER_SIZE:]
    set_crc(head, body)
    return b"".join((head, body))


def iter_batches(
    buf: bytes | bytearray | memoryview, validate: bool = True
) -> Iterator[tuple[int, BatchHeader]]:
    """Yield ``(position, header)`` for each complete batch in ``buf``, in order.

    With ``validate`` each batch is fully checked (CRC included); a bad batch raises. A trailing
    partial batch is not yielded. Without ``validate`` a batch whose ``batchLength`` does not cover its
    header is yielded (the caller may look at it) and ends the iteration: its length cannot be trusted to
    find the next one, and a length of -12 would otherwise never move the position.
    """
    pos = 0
    n = len(buf)
    while True:
        size = batch_size_at(buf, pos)
        if size is None or (pos + size > n and size >= HEADER_SIZE):
            return
        header = validate_batch(buf, pos, n) if validate else parse_header(buf, pos)
        yield pos, header
        if size < HEADER_SIZE:
            return
        pos += size
