"""Reading RecordBatch v2 batches: the consumer's hot path.

Layout of the records section (uncompressed, or after decompressing it as a whole)::

    length          varint   bytes that follow this field (at least 6)
    attributes      int8     unused by magic 2; read and ignored
    timestampDelta  varlong  timestamp - baseTimestamp
    offsetDelta     varint   offset - baseOffset: grows strictly, at most lastOffsetDelta (gaps allowed)
    keyLength       varint   -1 for a null key; any other negative length is corrupt
    key             bytes
    valueLength     varint   -1 for a null value
    value           bytes
    headersCount    varint   >= 0
    headers         [headerKeyLength varint (>= 0), headerKey UTF-8,
                     headerValueLength varint (-1 = null), headerValue bytes] * headersCount

Every batch is validated first (:func:`log.record.header.validate_batch`: magic, lengths, CRC).
Then the decoder checks what the CRC cannot vouch for, since a buggy or hostile producer computes a
valid CRC over garbage: each varint is well formed and in range, each record ends exactly where its
length says, offsets grow, the batch holds exactly ``recordsCount`` records and nothing after them,
header keys are UTF-8. Any violation raises :class:`CorruptRecordError`, never IndexError or struct.error.

The loop inlines the 1- and 2-byte varint cases (every length below 8 KiB) and slices ``bytes``
directly, so a record costs one tuple and the key/value slices. Pure: no I/O.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import NamedTuple

from log.errors import CorruptRecordError
from log.record import compression as codecs
from log.record.header import (
    ATTR_COMPRESSION_MASK,
    ATTR_CONTROL,
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
    HEADER_SIZE,
    BatchHeader,
    batch_size_at,
    validate_batch,
)
from log.record.varint import ZIGZAG_DECODE, decode_varint, decode_varlong

Buffer = bytes | bytearray | memoryview

CONTROL_KEY = struct.Struct(
    ">"
    "h"  # version, 0
    "h"  # type: 0 = ABORT, 1 = COMMIT
)
CONTROL_TYPE_ABORT = 0
CONTROL_TYPE_COMMIT = 1
MIN_RECORD_BODY_BYTES = 6  # attributes + 1-byte timestampDelta, offsetDelta, keyLength, valueLength, count


class Record(NamedTuple):
    """One decoded record. Immutable and as cheap to create as a tuple.

    ``batch_attributes`` are the attributes of the batch it came in (records of magic 2 have none of
    their own): they tell control records (transaction markers, which consumers skip) and
    LogAppendTime timestamps apart.
    """

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    batch_attributes: int

    @property
    def is_control(self) -> bool:
        return bool(self.batch_attributes & ATTR_CONTROL)

    @property
    def is_transactional(self) -> bool:
        return bool(self.batch_attributes & ATTR_TRANSACTIONAL)

    @property
    def is_log_append_time(self) -> bool:
        return bool(self.batch_attributes & ATTR_TIMESTAMP_TYPE)

    def control_type(self) -> int:
        """For a control record: CONTROL_TYPE_ABORT or CONTROL_TYPE_COMMIT."""
        if not self.is_control or self.key is None or len(self.key) < CONTROL_KEY.size:
            raise CorruptRecordError(f"record at offset {self.offset} is not a well-formed control record")
        version, kind = CONTROL_KEY.unpack_from(self.key)
        if version < 0:
            raise CorruptRecordError(f"control record at offset {self.offset} has version {version}")
        return int(kind)


def read_batch(
    buf: Buffer, pos: int = 0, *, max_decompressed_bytes: int = codecs.DEFAULT_MAX_DECOMPRESSED_BYTES
) -> tuple[BatchHeader, list[Record]]:
    """Validate the batch at ``buf[pos:]`` (CRC included), decompress it if needed, decode its records."""
    header = validate_batch(buf, pos)
    if type(buf) is not bytes:  # the loop slices bytes: copy this batch, not the whole buffer
        buf = bytes(memoryview(buf)[pos : pos + header.size_bytes])
        pos = 0
    return header, _records(buf, pos, header, max_decompressed_bytes)


def iter_batches_with_records(
    buf: Buffer, *, max_decompressed_bytes: int = codecs.DEFAULT_MAX_DECOMPRESSED_BYTES
) -> Iterator[tuple[BatchHeader, list[Record]]]:
    """Yield ``(header, records)`` for each complete batch of ``buf``; a trailing partial batch is skipped.

    A fetch response may end in the middle of a batch (``max_bytes`` cuts it): like Kafka's consumers
    we ignore that tail. A complete but bad batch raises.
    """
    data = buf if type(buf) is bytes else bytes(buf)
    n = len(data)
    pos = 0
    while True:
        size = batch_size_at(data, pos)
        if size is None or (size >= HEADER_SIZE and pos + size > n):
            return  # fewer than 12 bytes left, or a partial batch: the fetch cut it
        header = validate_batch(data, pos, n)
        yield header, _records(data, pos, header, max_decompressed_bytes)
        pos += size


def iter_records(
    buf: Buffer, *, max_decompressed_bytes: int = codecs.DEFAULT_MAX_DECOMPRESSED_BYTES
) -> Iterator[Record]:
    """Yield every record of every complete batch in ``buf``, control records included (marked)."""
    for _, records in iter_batches_with_records(buf, max_decompressed_bytes=max_decompressed_bytes):
        yield from records


def _records(data: bytes, pos: int, header: BatchHeader, max_decompressed_bytes: int) -> list[Record]:
    """Decode the records of the validated batch at ``data[pos:]``."""
    start = pos + HEADER_SIZE
    end = pos + header.size_bytes
    codec = header.attributes & ATTR_COMPRESSION_MASK
    if codec != codecs.NONE:
        section = codecs.decompress(codec, memoryview(data)[start:end], max_decompressed_bytes)
        return decode_records(section, 0, len(section), header)
    return decode_records(data, start, end, header)


def decode_records(data: bytes, pos: int, end: int, header: BatchHeader) -> list[Record]:
    """Decode ``header.records_count`` records from ``data[pos:end]``, which they must fill exactly."""
    count = header.records_count
    try:
        records = _decode(data, pos, end, header)
    except IndexError:
        raise CorruptRecordError(
            f"records of the batch at offset {header.base_offset} run past the end of their section"
        ) from None
    if len(records) != count:  # _decode stops early only at the end of the section
        raise CorruptRecordError(
            f"batch at offset {header.base_offset} declares {count} records but holds {len(records)}"
        )
    return records


def _decode(data: bytes, pos: int, end: int, header: BatchHeader) -> list[Record]:
    """The tight loop. Varints of 1 and 2 bytes are decoded inline, longer ones by the checked decoders."""
    base_offset = header.base_offset
    base_timestamp = header.base_timestamp
    attributes = header.attributes
    log_append_time = header.max_timestamp if attributes & ATTR_TIMESTAMP_TYPE else None
    unzigzag = ZIGZAG_DECODE
    new_record = tuple.__new__
    record_type = Record
    records: list[Record] = []
    append = records.append
    previous_delta = -1
    for _ in range(header.records_count):
        if pos >= end:
            break
        b = data[pos]  # length
        if b < 0x80:
            length = unzigzag[b]
            pos += 1
        elif data[pos + 1] < 0x80:
            length = unzigzag[(b & 0x7F) | (data[pos + 1] << 7)]
            pos += 2
        else:
            length, pos = decode_varint(data, pos)
        record_end = pos + length
        if not MIN_RECORD_BODY_BYTES <= length <= end - pos:
            raise _bad_length(header, length, end - pos)
        b = data[pos + 1]  # timestampDelta (after the attributes byte)
        if b < 0x80:
            ts_delta = unzigzag[b]
            pos += 2
        elif data[pos + 2] < 0x80:
            ts_delta = unzigzag[(b & 0x7F) | (data[pos + 2] << 7)]
            pos += 3
        else:
            ts_delta, pos = decode_varlong(data, pos + 1)
        b = data[pos]  # offsetDelta
        if b < 0x80:
            offset_delta = unzigzag[b]
            pos += 1
        elif data[pos + 1] < 0x80:
            offset_delta = unzigzag[(b & 0x7F) | (data[pos + 1] << 7)]
            pos += 2
        else:
            offset_delta, pos = decode_varint(data, pos)
        if offset_delta <= previous_delta:
            raise _bad_offset_delta(header, offset_delta, previous_delta)
        previous_delta = offset_delta
        b = data[pos]  # keyLength
        if b == 1:
            key = None
            pos += 1
        elif b < 0x80:
            n = unzigzag[b]
            if n < 0:
                raise _bad_field(header, "key", n)
            pos += 1
            key = data[pos : pos + n]
            pos += n
        else:
            key, pos = _read_bytes(data, pos, "key")
        b = data[pos]  # valueLength
        if b == 1:
            value = None
            pos += 1
        elif b < 0x80:
            n = unzigzag[b]
            if n < 0:
                raise _bad_field(header, "value", n)
            pos += 1
            value = data[pos : pos + n]
            pos += n
        elif data[pos + 1] < 0x80:
            pos += 2
            n = unzigzag[(b & 0x7F) | (data[pos - 1] << 7)]
            if n < 0:
                raise _bad_field(header, "value", n)
            value = data[pos : pos + n]
            pos += n
        else:
            value, pos = _read_bytes(data, pos, "value")
        if data[pos] == 0:  # headersCount
            headers: tuple[tuple[str, bytes | None], ...] = ()
            pos += 1
        else:
            headers, pos = _read_headers(data, pos)
        if pos != record_end:
            raise CorruptRecordError(
                f"record at offset delta {offset_delta} of the batch at offset {base_offset} should end "
                f"at byte {record_end} of its section but its fields end at byte {pos}"
            )
        timestamp = base_timestamp + ts_delta if log_append_time is None else log_append_time
        offset = base_offset + offset_delta
        append(new_record(record_type, (offset, timestamp, key, value, headers, attributes)))
    if pos != end:
        raise CorruptRecordError(
            f"batch at offset {base_offset} has {end - pos} bytes after its {header.records_count} records"
        )
    if previous_delta > header.last_offset_delta:
        raise CorruptRecordError(
            f"record offset delta {previous_delta} exceeds lastOffsetDelta {header.last_offset_delta} "
            f"of the batch at offset {base_offset}"
        )
    return records


def _bad_length(header: BatchHeader, length: int, remaining: int) -> CorruptRecordError:
    return CorruptRecordError(
        f"record of length {length} in the batch at offset {header.base_offset} does not fit: "
        f"{remaining} bytes remain and a record needs at least {MIN_RECORD_BODY_BYTES}"
    )


def _bad_offset_delta(header: BatchHeader, offset_delta: int, previous: int) -> CorruptRecordError:
    return CorruptRecordError(
        f"record offset delta {offset_delta} follows {previous} in the batch at offset {header.base_offset}: "
        f"offset deltas must grow strictly, from 0"
    )


def _bad_field(header: BatchHeader, field: str, length: int) -> CorruptRecordError:
    return CorruptRecordError(f"invalid {field} length {length} in the batch at offset {header.base_offset}")


def _read_bytes(data: bytes, pos: int, field: str) -> tuple[bytes | None, int]:
    """A nullable byte string: varint length (-1 = null) and the bytes."""
    n, pos = decode_varint(data, pos)
    if n < 0:
        if n == -1:
            return None, pos
        raise CorruptRecordError(f"invalid {field} length {n} at position {pos}")
    if pos + n > len(data):
        raise CorruptRecordError(f"{field} of {n} bytes at position {pos} runs past the end of the data")
    return data[pos : pos + n], pos + n


def _read_headers(data: bytes, pos: int) -> tuple[tuple[tuple[str, bytes | None], ...], int]:
    """headersCount and the headers; keys must be non-null UTF-8."""
    count, pos = decode_varint(data, pos)
    if count < 0:
        raise CorruptRecordError(f"invalid header count {count} at position {pos}")
    headers = []
    for _ in range(count):
        raw, pos = _read_bytes(data, pos, "header key")
        if raw is None:
            raise CorruptRecordError(f"null header key at position {pos}")
        try:
            name = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptRecordError(f"header key at position {pos} is not UTF-8: {exc}") from None
        value, pos = _read_bytes(data, pos, "header value")
        headers.append((name, value))
    return tuple(headers), pos
