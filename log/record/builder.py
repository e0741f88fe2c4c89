"""Building RecordBatch v2 batches: the producer's hot path.

A batch is the 61-byte header (see :mod:`log.record.header`) followed by the records section,
compressed as a whole when the attributes name a codec. Each record, uncompressed::

    length          varint   bytes that follow this field
    attributes      int8     unused, always 0
    timestampDelta  varlong  timestamp - baseTimestamp (may be negative)
    offsetDelta     varint   offset - baseOffset
    keyLength       varint   -1 for a null key
    key             bytes
    valueLength     varint   -1 for a null value
    value           bytes
    headersCount    varint
    headers         [headerKeyLength varint, headerKey UTF-8, headerValueLength varint (-1 = null),
                     headerValue bytes] * headersCount

The builder keeps the encoded pieces of every record in one list and joins them once in
:meth:`BatchBuilder.build`; varint prefixes come from precomputed tables (:mod:`log.record.varint`),
so appending a record costs a handful of table lookups and one list extension. The header's
``baseTimestamp`` is the first record's timestamp, ``maxTimestamp`` the largest, and ``crc`` the
CRC-32C of everything from ``attributes`` to the end, as Kafka's ``MemoryRecordsBuilder`` writes them.

Not thread-safe: one producer thread fills a builder, then hands the built bytes over.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from log.record import compression as codecs
from log.record.header import (
    ATTR_CONTROL,
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    set_crc,
)
from log.record.varint import INT32_MAX, TABLE_SIZE, UNSIGNED_VARINT, encode_varint, encode_varlong

Header = tuple[str, bytes | None]

_BELOW_ANY_TIMESTAMP = -(2**63) - 1  # the first record's timestamp always exceeds it
_NULL = b"\x01"  # varint -1: a null key, value or header value
_NO_HEADERS = b"\x00"  # varint 0: headersCount

# Lookup tables of (encoding, its length): a table hit replaces a varint encoder call and a len().
# Indexes are never negative, so an IndexError means "too large for the table": the general path.
_VARINT: tuple[tuple[bytes, int], ...] = tuple((v, len(v)) for v in UNSIGNED_VARINT)  # by zigzag value
# attributes (always 0) + timestampDelta, by zigzagged delta: one piece instead of two.
_ATTRS_TS: tuple[tuple[bytes, int], ...] = tuple((b"\x00" + v, 1 + len(v)) for v in UNSIGNED_VARINT[: 1 << 12])
# offsetDelta + a null key, by offset delta: the common producer record.
_OFFSET_NULL_KEY: tuple[tuple[bytes, int], ...] = tuple((v + _NULL, len(v) + 1) for v in UNSIGNED_VARINT[0::2])


def _length(n: int) -> bytes:
    """Varint of a non-negative length or offset delta (int32)."""
    return UNSIGNED_VARINT[n << 1] if n < TABLE_SIZE >> 1 else encode_varint(n)


def encode_record(
    ts_delta: int, offset_delta: int, key: bytes | None, value: bytes | None, headers: Sequence[Header]
) -> tuple[tuple[bytes, ...], int]:
    """One record as pieces to join (length prefix first) and their total size: the general path."""
    pieces = [b"\x00" + encode_varlong(ts_delta), encode_varint(offset_delta)]
    if key is None:
        pieces.append(_NULL)
    else:
        pieces += (_length(len(key)), key)
    if value is None:
        pieces.append(_NULL)
    else:
        pieces += (_length(len(value)), value)
    pieces.append(encode_headers(headers) if headers else _NO_HEADERS)
    size = sum(map(len, pieces))
    prefix = encode_varint(size)
    return (prefix, *pieces), len(prefix) + size


def batch_attributes(
    compression: int,
    *,
    producer_id: int = -1,
    is_transactional: bool = False,
    is_control: bool = False,
    log_append_time: bool = False,
) -> int:
    """The header's ``attributes``; fails early on a codec we cannot write (snappy, unknown ids)."""
    if compression != codecs.NONE:
        codecs.check_supported(compression)
    if is_transactional and producer_id < 0:
        raise ValueError("a transactional batch needs a producer id")
    return (
        compression
        | (ATTR_TIMESTAMP_TYPE if log_append_time else 0)
        | (ATTR_TRANSACTIONAL if is_transactional else 0)
        | (ATTR_CONTROL if is_control else 0)
    )


def encode_headers(headers: Sequence[Header]) -> bytes:
    """Encode ``headersCount`` and the headers (keys are str, encoded as UTF-8; values may be None)."""
    parts = [_length(len(headers))]
    for name, value in headers:
        raw = name.encode("utf-8")
        parts.append(_length(len(raw)))
        parts.append(raw)
        if value is None:
            parts.append(_NULL)
        else:
            parts.append(_length(len(value)))
            parts.append(value)
    return b"".join(parts)


class BatchBuilder:
    """Accumulates records and builds one RecordBatch v2.

    ``append`` returns each record's offset delta: 0, 1, 2, ... (``append_with_offset_delta`` leaves
    gaps, as compaction does). ``estimated_size_bytes`` is the exact uncompressed size so far, header
    included, which bounds the built size for ``batch.size`` decisions. ``build`` may be called once.
    """

    __slots__ = (
        "_compression",
        "_attributes",
        "_base_offset",
        "_partition_leader_epoch",
        "_producer_id",
        "_producer_epoch",
        "_base_sequence",
        "_buf",
        "_invalid",
        "_next_offset_delta",
        "_skipped",
        "_base_timestamp",
        "_max_timestamp",
        "_size",
        "_built",
    )

    def __init__(
        self,
        compression: int = 0,
        *,
        base_offset: int = 0,
        partition_leader_epoch: int = -1,
        producer_id: int = -1,
        producer_epoch: int = -1,
        base_sequence: int = -1,
        is_transactional: bool = False,
        is_control: bool = False,
        log_append_time: bool = False,
    ) -> None:
        self._compression = compression
        self._attributes = batch_attributes(
            compression,
            producer_id=producer_id,
            is_transactional=is_transactional,
            is_control=is_control,
            log_append_time=log_append_time,
        )
        self._base_offset = base_offset
        self._partition_leader_epoch = partition_leader_epoch
        self._producer_id = producer_id
        self._producer_epoch = producer_epoch
        self._base_sequence = base_sequence
        self._buf = bytearray()  # the encoded records (a bytearray: no object per record for the GC)
        self._invalid = False  # a key, value or header value was not bytes: build() raises TypeError
        self._next_offset_delta = 0
        self._skipped = 0  # offset deltas left unused by append_with_offset_delta
        self._base_timestamp: int | None = None
        self._max_timestamp = _BELOW_ANY_TIMESTAMP
        self._size = HEADER_SIZE
        self._built = False

    @property
    def record_count(self) -> int:
        return self._next_offset_delta - self._skipped

    @property
    def compression(self) -> int:
        return self._compression

    def estimated_size_bytes(self) -> int:
        """Size of the batch if built now without compression (an upper bound when compressing)."""
        return self._size

    def set_producer_state(
        self, producer_id: int, producer_epoch: int, base_sequence: int, *, is_transactional: bool = False
    ) -> None:
        """Set the header's producer id, epoch and base sequence before ``build`` (Kafka's
        ``MemoryRecordsBuilder.setProducerState``): an idempotent batch is built once, with its CRC. A
        transactional producer's batch also gets the transactional attribute then (it needs the id)."""
        if self._built:
            raise RuntimeError("set_producer_state() after build()")
        if is_transactional:
            if producer_id < 0:
                raise ValueError("a transactional batch needs a producer id")
            self._attributes |= ATTR_TRANSACTIONAL
        self._producer_id = producer_id
        self._producer_epoch = producer_epoch
        self._base_sequence = base_sequence

    def append(self, timestamp_ms: int, key: bytes | None, value: bytes | None, headers: Sequence[Header] = ()) -> int:
        """Add one record; returns its offset delta. Keys, values and header values are bytes or None."""
        delta = self._next_offset_delta
        base = self._base_timestamp
        ts_delta = timestamp_ms - (timestamp_ms if base is None else base)
        buf = self._buf
        mark = len(buf)
        try:  # a key, value or header value of the wrong type: TypeError, reported by build()
            if value is not None and not headers:
                try:  # table lookups; IndexError = a value too large for a table: the general path
                    head, size = _ATTRS_TS[(ts_delta << 1) ^ (ts_delta >> 63)]
                    vlen = len(value)
                    vpre, n = _VARINT[vlen << 1]
                    if key is None:
                        od, m = _OFFSET_NULL_KEY[delta]
                        size += m + n + vlen + 1
                        prefix, p = _VARINT[size << 1]
                        size += p
                        # Written piece by piece into the bytearray: no tuple per record for the GC.
                        buf += prefix
                        buf += head
                        buf += od
                    else:
                        od, m = _VARINT[delta << 1]
                        klen = len(key)
                        kpre, k = _VARINT[klen << 1]
                        size += m + k + klen + n + vlen + 1
                        prefix, p = _VARINT[size << 1]
                        size += p
                        buf += prefix
                        buf += head
                        buf += od
                        buf += kpre
                        buf += key
                    buf += vpre
                    buf += value
                    buf += _NO_HEADERS
                except IndexError:
                    del buf[mark:]
                    pieces, size = encode_record(ts_delta, delta, key, value, headers)
                    for piece in pieces:
                        buf += piece
            else:
                pieces, size = encode_record(ts_delta, delta, key, value, headers)
                for piece in pieces:
                    buf += piece
        except TypeError:
            if len(buf) == mark:
                raise  # raised before anything was written: a bad argument, nothing to undo
            del buf[mark:]  # a piece that is not bytes-like: the record counts, build() raises
            self._invalid = True
        # Only now, with the record encoded, does the builder change: a rejected record leaves no trace.
        if timestamp_ms > self._max_timestamp:
            self._max_timestamp = timestamp_ms
            if base is None:
                self._base_timestamp = timestamp_ms
        self._size += size
        self._next_offset_delta = delta + 1
        return delta

    def append_with_offset_delta(
        self,
        offset_delta: int,
        timestamp_ms: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[Header] = (),
    ) -> int:
        """Add one record at an explicit offset delta, which must exceed the previous one."""
        if not self._next_offset_delta <= offset_delta <= INT32_MAX:
            raise ValueError(f"offset delta {offset_delta} must be at least {self._next_offset_delta} and fit an int32")
        previous = self._next_offset_delta
        self._skipped += offset_delta - previous
        self._next_offset_delta = offset_delta
        try:
            return self.append(timestamp_ms, key, value, headers)
        except BaseException:
            self._skipped -= offset_delta - previous
            self._next_offset_delta = previous
            raise

    def build(self) -> bytes:
        """Join, compress if asked, fill in the header and CRC; returns the whole batch."""
        if self._built:
            raise RuntimeError("build() was already called on this BatchBuilder")
        if self.record_count == 0 or self._base_timestamp is None:
            raise ValueError("cannot build an empty record batch")
        self._built = True
        if self._invalid:
            raise TypeError("record keys, values and header values must be bytes or None")
        records = bytes(self._buf)
        self._buf = bytearray()
        return assemble_batch(
            records,
            compression=self._compression,
            attributes=self._attributes,
            base_offset=self._base_offset,
            partition_leader_epoch=self._partition_leader_epoch,
            last_offset_delta=self._next_offset_delta - 1,
            base_timestamp=self._base_timestamp,
            max_timestamp=self._max_timestamp,
            producer_id=self._producer_id,
            producer_epoch=self._producer_epoch,
            base_sequence=self._base_sequence,
            records_count=self.record_count,
        )


def assemble_batch(
    records: bytes,
    *,
    compression: int,
    attributes: int,
    base_offset: int,
    partition_leader_epoch: int,
    last_offset_delta: int,
    base_timestamp: int,
    max_timestamp: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    records_count: int,
) -> bytes:
    """Compress an encoded records section if asked and prepend the header with its CRC."""
    if compression != codecs.NONE:
        records = codecs.compress(compression, records)
    try:
        header = bytearray(
            HEADER.pack(
                base_offset,
                HEADER_SIZE - LOG_OVERHEAD + len(records),
                partition_leader_epoch,
                MAGIC,
                0,  # crc, filled in below
                attributes,
                last_offset_delta,
                base_timestamp,
                max_timestamp,
                producer_id,
                producer_epoch,
                base_sequence,
                records_count,
            )
        )
    except struct.error as exc:
        raise ValueError(f"a record batch header field is out of range: {exc}") from None
    set_crc(header, records)
    return b"".join((header, records))


def build_batch(
    values: Sequence[bytes | None],
    *,
    keys: Sequence[bytes | None] | None = None,
    timestamp_ms: int,
    compression: int = 0,
    base_offset: int = 0,
    partition_leader_epoch: int = -1,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    is_transactional: bool = False,
) -> bytes:
    """Build a batch of records that share one timestamp and have no headers, in one call.

    The producer's fast path: the same bytes as a :class:`BatchBuilder` fed the same records, without
    a method call per record. ``keys``, when given, pairs with ``values`` one to one.
    """
    attributes = batch_attributes(compression, producer_id=producer_id, is_transactional=is_transactional)
    if keys is None:
        records = _encode_null_key_records(values)
    elif len(keys) != len(values):
        raise ValueError(f"{len(keys)} keys for {len(values)} values")
    else:
        records = _encode_keyed_records(keys, values)
    count = len(values)
    if count == 0:
        raise ValueError("cannot build an empty record batch")
    return assemble_batch(
        records,
        compression=compression,
        attributes=attributes,
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        last_offset_delta=count - 1,
        base_timestamp=timestamp_ms,
        max_timestamp=timestamp_ms,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        records_count=count,
    )


_HEAD_0 = _ATTRS_TS[0][0]  # attributes 0, timestampDelta 0: 2 bytes


def _encode_null_key_records(values: Sequence[bytes | None]) -> bytes:
    """Records with null keys, timestamp delta 0 and no headers, joined."""
    parts: list[bytes] = []
    head = _HEAD_0
    for delta, value in enumerate(values):
        try:
            od, m = _OFFSET_NULL_KEY[delta]
            if value is None:
                prefix, p = _VARINT[(m + 4) << 1]  # head (2) + od + null value (1) + headersCount (1)
                parts += (prefix, head, od, _NULL, _NO_HEADERS)
                continue
            vlen = len(value)
            vpre, n = _VARINT[vlen << 1]
            prefix, p = _VARINT[(m + n + vlen + 3) << 1]  # head (2) + od + vpre + value + headersCount (1)
            parts += (prefix, head, od, vpre, value, _NO_HEADERS)
        except IndexError:
            parts += encode_record(0, delta, None, value, ())[0]
    try:
        return b"".join(parts)
    except TypeError:
        raise TypeError("record values must be bytes or None") from None


def _encode_keyed_records(keys: Sequence[bytes | None], values: Sequence[bytes | None]) -> bytes:
    """Records with timestamp delta 0 and no headers, joined."""
    parts: list[bytes] = []
    head = _HEAD_0
    for delta, (key, value) in enumerate(zip(keys, values, strict=True)):
        if key is None or value is None:
            parts += encode_record(0, delta, key, value, ())[0]
            continue
        try:
            od, m = _VARINT[delta << 1]
            klen = len(key)
            kpre, k = _VARINT[klen << 1]
            vlen = len(value)
            vpre, n = _VARINT[vlen << 1]
            prefix, p = _VARINT[(m + k + klen + n + vlen + 3) << 1]
            parts += (prefix, head, od, kpre, key, vpre, value, _NO_HEADERS)
        except IndexError:
            parts += encode_record(0, delta, key, value, ())[0]
    try:
        return b"".join(parts)
    except TypeError:
        raise TypeError("record keys and values must be bytes or None") from None
