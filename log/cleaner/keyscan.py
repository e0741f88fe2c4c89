"""Reading only the keys and offsets of a batch's records: the offset map's hot path. Pure.

Building the offset map needs each record's key and offset, not its value, timestamp or headers
(layout in ``log.record.reader``). :func:`record_keys` checks the batch like the reader does (header
and CRC via ``validate_batch``, bounded decompression), then walks the records section reading the
``length``, ``offsetDelta`` and ``keyLength`` varints (1- and 2-byte cases inline) and jumps over the
rest of each record by its length: no value slice, no tuple per record beyond the result pair.

Checks on what the CRC cannot vouch for: each record's length is in range and its key fits inside it,
offset deltas grow and stay within ``lastOffsetDelta``, the section holds exactly ``recordsCount``
records and nothing after them. A violation raises :class:`CorruptRecordError`. Damage inside a value
or the headers goes unseen here (they are skipped by the record's length); the cleaner decodes in full
every batch it keeps, so such a record is either refused then or removed unread.
"""

from __future__ import annotations

from log.errors import CorruptRecordError
from log.record import compression as codecs
from log.record.columns import MIN_RECORD_BODY_BYTES
from log.record.header import HEADER_SIZE, BatchHeader, validate_batch
from log.record.varint import ZIGZAG_DECODE, decode_varint

_VARLONG_MAX_BYTES = 10


def record_keys(batch: bytes, header: BatchHeader) -> list[tuple[bytes | None, int]]:
    """``(key, offset)`` of every record of one whole batch (``batch`` is exactly its bytes)."""
    validate_batch(batch)
    codec = header.compression
    if codec != codecs.NONE:
        data = codecs.decompress(codec, memoryview(batch)[HEADER_SIZE:], codecs.DEFAULT_MAX_DECOMPRESSED_BYTES)
        pos, end = 0, len(data)
    else:
        data, pos, end = batch, HEADER_SIZE, len(batch)
    try:
        return _scan(data, pos, end, header)
    except IndexError:
        raise CorruptRecordError(
            f"records of the batch at offset {header.base_offset} run past the end of their section"
        ) from None


def _scan(data: bytes, pos: int, end: int, header: BatchHeader) -> list[tuple[bytes | None, int]]:
    zz = ZIGZAG_DECODE
    base_offset = header.base_offset
    out: list[tuple[bytes | None, int]] = []
    append = out.append
    previous = -1
    for _ in range(header.records_count):
        # Deliberate unrolling (the offset map's hot loop): decode_varint's 1- and 2-byte cases written out
        # for each varint, as in log/record/columns.py; longer varints go to decode_varint.
        b = data[pos]  # length
        if b < 0x80:
            length = zz[b]
            pos += 1
        elif data[pos + 1] < 0x80:
            length = zz[(b & 0x7F) | (data[pos + 1] << 7)]
            pos += 2
        else:
            length, pos = decode_varint(data, pos)
        record_end = pos + length
        if not MIN_RECORD_BODY_BYTES <= length <= end - pos:
            raise CorruptRecordError(f"record of length {length} in the batch at offset {base_offset} does not fit")
        pos += 1  # attributes
        for i in range(_VARLONG_MAX_BYTES):  # timestampDelta: skipped
            if data[pos + i] < 0x80:
                pos += i + 1
                break
        else:
            raise CorruptRecordError(f"malformed timestampDelta in the batch at offset {base_offset}")
        b = data[pos]  # offsetDelta
        if b < 0x80:
            delta = zz[b]
            pos += 1
        elif data[pos + 1] < 0x80:
            delta = zz[(b & 0x7F) | (data[pos + 1] << 7)]
            pos += 2
        else:
            delta, pos = decode_varint(data, pos)
        if delta <= previous:
            raise CorruptRecordError(f"offset delta {delta} does not grow in the batch at offset {base_offset}")
        previous = delta
        b = data[pos]  # keyLength
        if b < 0x80:
            key_length = zz[b]
            pos += 1
        else:
            key_length, pos = decode_varint(data, pos)
        if key_length < 0:
            if key_length != -1:
                raise CorruptRecordError(f"key length {key_length} in the batch at offset {base_offset}")
            key = None
        else:
            if pos + key_length > record_end:
                raise CorruptRecordError(f"a key runs past its record in the batch at offset {base_offset}")
            key = data[pos : pos + key_length]
        append((key, base_offset + delta))
        pos = record_end
    if pos != end:
        raise CorruptRecordError(
            f"batch at offset {base_offset} has {end - pos} bytes after its {header.records_count} records"
        )
    if previous > header.last_offset_delta:
        raise CorruptRecordError(
            f"record offset delta {previous} exceeds lastOffsetDelta {header.last_offset_delta} "
            f"of the batch at offset {base_offset}"
        )
    return out
