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

The decoding loop (and every check) is :mod:`log.record.columns`'s: this module turns each batch's
columns into :class:`Record` tuples for callers that want one object per record. Pure: no I/O.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from itertools import repeat
from typing import NamedTuple

from log.errors import CorruptRecordError
from log.record import compression as codecs
from log.record.columns import Buffer, Columns, iter_batch_columns, read_batch_columns
from log.record.header import ATTR_CONTROL, ATTR_TIMESTAMP_TYPE, ATTR_TRANSACTIONAL, BatchHeader

CONTROL_KEY = struct.Struct(
    ">"
    "h"  # version, 0
    "h"  # type: 0 = ABORT, 1 = COMMIT
)
CONTROL_TYPE_ABORT = 0
CONTROL_TYPE_COMMIT = 1


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
    header, columns = read_batch_columns(buf, pos, max_decompressed_bytes=max_decompressed_bytes)
    return header, to_records(columns)


def iter_batches_with_records(
    buf: Buffer, *, max_decompressed_bytes: int = codecs.DEFAULT_MAX_DECOMPRESSED_BYTES
) -> Iterator[tuple[BatchHeader, list[Record]]]:
    """Yield ``(header, records)`` for each complete batch of ``buf``; a trailing partial batch is skipped.

    A fetch response may end in the middle of a batch (``max_bytes`` cuts it): like Kafka's consumers
    we ignore that tail. A complete but bad batch raises.
    """
    for header, columns in iter_batch_columns(buf, max_decompressed_bytes=max_decompressed_bytes):
        yield header, to_records(columns)


def iter_records(
    buf: Buffer, *, max_decompressed_bytes: int = codecs.DEFAULT_MAX_DECOMPRESSED_BYTES
) -> Iterator[Record]:
    """Yield every record of every complete batch in ``buf``, control records included (marked)."""
    for _, records in iter_batches_with_records(buf, max_decompressed_bytes=max_decompressed_bytes):
        yield from records


def to_records(columns: Columns) -> list[Record]:
    """The decoded columns of one batch as records (one tuple each, built without ``Record.__new__``'s
    Python-level call: ~10% slower than a dedicated record loop, and there is only one decoder)."""
    new = tuple.__new__
    fields = zip(
        columns.offsets, columns.timestamps, columns.keys, columns.values, columns.headers, repeat(columns.attributes)
    )
    return [new(Record, record) for record in fields]
