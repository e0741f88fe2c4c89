"""Columnar decoding of RecordBatch v2: one list per field instead of one object per record.

:func:`decode_columns` gives the same values as :func:`log.record.reader.read_batch` (same checks, same
:class:`CorruptRecordError` messages for the same faults) but as column lists, for callers that build
columnar data (Arrow arrays for the Spark source) and would otherwise create a record object per record
and transpose them again. It is the one decoder: :mod:`log.record.reader` builds its records from it.

Timestamps are already resolved: a LogAppendTime batch gives every record the batch's maxTimestamp, as
the record reader does. Control batches (transaction markers) are decoded like any other; the caller
checks :attr:`Columns.is_control` through the batch attributes. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from log.errors import CorruptRecordError
from log.record import compression as codecs
from log.record.header import (
    ATTR_COMPRESSION_MASK,
    ATTR_CONTROL,
    ATTR_TIMESTAMP_TYPE,
    HEADER_SIZE,
    BatchHeader,
    batch_size_at,
    validate_batch,
)
from log.record.varint import ZIGZAG_DECODE, decode_varint, decode_varlong

Buffer = bytes | bytearray | memoryview
MIN_RECORD_BODY_BYTES = 6  # attributes + 1-byte timestampDelta, offsetDelta, keyLength, valueLength, count

Headers = tuple[tuple[str, bytes | None], ...]


@dataclass(slots=True)
class Columns:
    """The records of one batch, one list per field, all of ``len(offsets)`` items.

    ``headers`` holds ``()`` for a record without headers. ``attributes`` are the batch's (records of
    magic 2 have none of their own).
    """

    attributes: int
    offsets: list[int] = field(default_factory=list)
    timestamps: list[int] = field(default_factory=list)
    keys: list[bytes | None] = field(default_factory=list)
    values: list[bytes | None] = field(default_factory=list)
    headers: list[Headers] = field(default_factory=list)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def is_log_append_time(self) -> bool:
        return bool(self.attributes & ATTR_TIMESTAMP_TYPE)

    def __len__(self) -> int:
        return len(self.offsets)


def read_batch_columns(
    buf: Buffer, pos: int = 0, *, max_decompressed_bytes: int = codecs.DEFAULT_MAX_DECOMPRESSED_BYTES
) -> tuple[BatchHeader, Columns]:
    """Validate the batch at ``buf[pos:]`` (CRC included), decompress it if needed, decode it as columns."""
    header = validate_batch(buf, pos)
    if type(buf) is not bytes:  # the loop slices bytes: copy this batch, not the whole buffer
        buf = bytes(memoryview(buf)[pos : pos + header.size_bytes])
        pos = 0
    return header, _columns(buf, pos, header, max_decompressed_bytes)


def iter_batch_columns(
    buf: Buffer, *, max_decompressed_bytes: int = codecs.DEFAULT_MAX_DECOMPRESSED_BYTES
) -> Iterator[tuple[BatchHeader, Columns]]:
    """Yield ``(header, columns)`` for each complete batch of ``buf``, decoding each as it is reached; a
    trailing partial batch is skipped (a fetch's ``max_bytes`` cuts it), as in
    :func:`log.record.reader.iter_batches_with_records`. A complete but bad batch raises."""
    data = buf if type(buf) is bytes else bytes(buf)
    n = len(data)
    pos = 0
    while True:
        size = batch_size_at(data, pos)
        if size is None or (size >= HEADER_SIZE and pos + size > n):
            return
        header = validate_batch(data, pos, n)
        yield header, _columns(data, pos, header, max_decompressed_bytes)
        pos += size


def _columns(data: bytes, pos: int, header: BatchHeader, max_decompressed_bytes: int) -> Columns:
    start = pos + HEADER_SIZE
    end = pos + header.size_bytes
    codec = header.attributes & ATTR_COMPRESSION_MASK
    if codec != codecs.NONE:
        section = codecs.decompress(codec, memoryview(data)[start:end], max_decompressed_bytes)
        return decode_columns(section, 0, len(section), header)
    return decode_columns(data, start, end, header)


def decode_columns(data: bytes, pos: int, end: int, header: BatchHeader) -> Columns:
    """Decode ``header.records_count`` records from ``data[pos:end]``, which they must fill exactly."""
    columns = Columns(header.attributes)
    try:
        _decode_into(columns, data, pos, end, header)
    except IndexError:
        raise CorruptRecordError(
            f"records of the batch at offset {header.base_offset} run past the end of their section"
        ) from None
    if len(columns.offsets) != header.records_count:
        raise CorruptRecordError(
            f"batch at offset {header.base_offset} declares {header.records_count} records "
            f"but holds {len(columns.offsets)}"
        )
    return columns


def _decode_into(columns: Columns, data: bytes, pos: int, end: int, header: BatchHeader) -> None:
    """The tight loop. Varints of 1 and 2 bytes are decoded inline, longer ones by the checked decoders;
    ``bytes`` are sliced directly, so a record costs its key/value slices and five list appends.

    Offsets and timestamps are collected as deltas and rebased at the end in one comprehension each.
    """
    base_offset = header.base_offset
    unzigzag = ZIGZAG_DECODE
    offset_deltas: list[int] = []
    ts_deltas: list[int] = []
    add_offset = offset_deltas.append
    add_ts = ts_deltas.append
    add_key = columns.keys.append
    add_value = columns.values.append
    headers_list = columns.headers
    add_headers = headers_list.append
    no_headers: Headers = ()
    previous_delta = -1
    for _ in range(header.records_count):
        if pos >= end:
            break
        # Deliberate unrolling (the consumer's hot loop): each varint's 1- and 2-byte cases written out, the key
        # and value blocks alike; longer varints go to decode_varint and _read_bytes.
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
            add_ts(unzigzag[b])
            pos += 2
        elif data[pos + 2] < 0x80:
            add_ts(unzigzag[(b & 0x7F) | (data[pos + 2] << 7)])
            pos += 3
        else:
            ts_delta, pos = decode_varlong(data, pos + 1)
            add_ts(ts_delta)
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
        add_offset(offset_delta)
        b = data[pos]  # keyLength
        if b == 1:
            add_key(None)
            pos += 1
        elif b < 0x80:
            n = unzigzag[b]
            if n < 0:
                raise _bad_field(header, "key", n)
            pos += 1
            add_key(data[pos : pos + n])
            pos += n
        else:
            key, pos = _read_bytes(data, pos, "key")
            add_key(key)
        b = data[pos]  # valueLength
        if b == 1:
            add_value(None)
            pos += 1
        elif b < 0x80:
            n = unzigzag[b]
            if n < 0:
                raise _bad_field(header, "value", n)
            pos += 1
            add_value(data[pos : pos + n])
            pos += n
        elif data[pos + 1] < 0x80:
            pos += 2
            n = unzigzag[(b & 0x7F) | (data[pos - 1] << 7)]
            if n < 0:
                raise _bad_field(header, "value", n)
            add_value(data[pos : pos + n])
            pos += n
        else:
            value, pos = _read_bytes(data, pos, "value")
            add_value(value)
        if data[pos] == 0:  # headersCount
            add_headers(no_headers)
            pos += 1
        else:
            headers, pos = _read_headers(data, pos)
            add_headers(headers)
        if pos != record_end:
            raise CorruptRecordError(
                f"record at offset delta {offset_delta} of the batch at offset {base_offset} should end "
                f"at byte {record_end} of its section but its fields end at byte {pos}"
            )
    if pos != end:
        raise CorruptRecordError(
            f"batch at offset {base_offset} has {end - pos} bytes after its {header.records_count} records"
        )
    if previous_delta > header.last_offset_delta:
        raise CorruptRecordError(
            f"record offset delta {previous_delta} exceeds lastOffsetDelta {header.last_offset_delta} "
            f"of the batch at offset {base_offset}"
        )
    columns.offsets = [base_offset + d for d in offset_deltas]
    if header.attributes & ATTR_TIMESTAMP_TYPE:
        columns.timestamps = [header.max_timestamp] * len(ts_deltas)
    else:
        base_timestamp = header.base_timestamp
        columns.timestamps = [base_timestamp + d for d in ts_deltas]


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
