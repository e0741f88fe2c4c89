"""Recovery scanning: the longest valid prefix of a segment's bytes. Pure: buffers in, results out.

A segment's .log is a plain concatenation of RecordBatch v2 batches (layout in ``log.record.header``).
A crash can leave a torn last batch, garbage after it (a preallocated or half-written tail), or, on a
bad disk, a corrupt batch in the middle. Recovery keeps the longest prefix of batches that are each
valid, in order:

    check                      why
    12-byte prefix present     else the tail is torn
    header complete, magic 2   else torn or not a batch
    batchLength sane           covers the 61-byte header and fits in the buffer
    CRC-32C matches            header.validate_batch: attributes..end are what the producer wrote
    offsets increasing         baseOffset >= the previous batch's next offset (the segment's base
                               offset, or the previous segment's end, for the first batch)
    relative offset fits       lastOffset - segment base <= 2**31 - 1 (the index's int32)

``baseOffset`` and ``partitionLeaderEpoch`` lie outside the CRC (the leader patches them), so a
flipped bit there is caught only if it breaks the offset order, as in Kafka.

Everything after the first invalid batch is cut, even valid-looking batches: their position in the
log can no longer be trusted. The driver (``log.segment``) truncates the file to ``valid_bytes``,
rebuilds the indexes from the headers, and the Log deletes any later segments.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from log.errors import CorruptRecordError
from log.record.header import BatchHeader, batch_size_at, validate_batch

MAX_RELATIVE_OFFSET = 2**31 - 1


@dataclass(frozen=True, slots=True)
class ScanResult:
    """Outcome of :func:`scan_valid_prefix`."""

    valid_bytes: int  # length of the longest valid prefix
    batches: list[tuple[int, BatchHeader]]  # (position, header) of each valid batch
    next_offset: int  # offset after the last valid batch (``min_offset`` if there is none)
    stop_reason: str | None  # why the scan stopped early; None when the whole buffer is valid


class PrefixScan:
    """Iterate ``(position, header)`` over the valid prefix of ``buf``, stopping at the first bad batch.

    After (or during) iteration, ``valid_bytes``, ``next_offset`` and ``stop_reason`` describe the
    prefix seen so far. Use this instead of :func:`scan_valid_prefix` to avoid holding every header
    of a large segment in memory.
    """

    def __init__(
        self, buf: bytes | bytearray | memoryview, base_offset: int, min_offset: int | None = None
    ) -> None:
        self._buf = buf
        self.base_offset = base_offset
        self.valid_bytes = 0
        self.next_offset = base_offset if min_offset is None else max(base_offset, min_offset)
        self.stop_reason: str | None = None

    def __iter__(self) -> Iterator[tuple[int, BatchHeader]]:
        buf = self._buf
        end = len(buf)
        pos = 0
        while pos < end:
            reason, header = self._check(buf, pos, end)
            if header is None:
                self.stop_reason = reason
                return
            yield pos, header
            pos += header.size_bytes
            self.valid_bytes = pos
            self.next_offset = header.next_offset

    def _check(
        self, buf: bytes | bytearray | memoryview, pos: int, end: int
    ) -> tuple[str, BatchHeader | None]:
        size = batch_size_at(buf, pos)
        if size is None:
            return f"torn batch prefix at position {pos} ({end - pos} bytes left)", None
        try:
            header = validate_batch(buf, pos, end)
        except CorruptRecordError as e:
            return str(e), None
        if header.base_offset < self.next_offset:
            return (
                f"batch at position {pos} has base offset {header.base_offset}, "
                f"expected at least {self.next_offset}"
            ), None
        if header.last_offset - self.base_offset > MAX_RELATIVE_OFFSET:
            return (
                f"batch at position {pos} has last offset {header.last_offset}, too far past "
                f"the segment's base offset {self.base_offset}"
            ), None
        return "", header


def scan_valid_prefix(
    buf: bytes | bytearray | memoryview, base_offset: int, min_offset: int | None = None
) -> ScanResult:
    """The longest valid prefix of ``buf``, a segment whose base offset is ``base_offset``.

    ``min_offset`` (default: ``base_offset``) is the lowest base offset the first batch may have,
    e.g. the end offset of the previous segment.
    """
    scan = PrefixScan(buf, base_offset, min_offset)
    batches = list(scan)
    return ScanResult(scan.valid_bytes, batches, scan.next_offset, scan.stop_reason)
