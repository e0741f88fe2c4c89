"""ListOffsets by the largest timestamp (KIP-734): a scan of the one segment that holds it."""

from __future__ import annotations

from log.log import Log
from log.record.header import iter_batches
from log.record.reader import read_batch

_SCAN_CHUNK_BYTES = 1 << 20


def offset_of_max_timestamp(log: Log, upper: int) -> tuple[int, int] | None:
    """The first record with the largest timestamp below ``upper`` (KIP-734, record-exact as in KAFKA-16310).

    Segments say which one holds the largest batch timestamp; only that segment is read, in chunks.
    """
    segments = [s for s in log.segments if s.base_offset < upper and s.max_timestamp >= 0]
    if not segments:
        return None
    best = max(segments, key=lambda s: s.max_timestamp)  # the first of equals: max() keeps the first
    offset = max(best.base_offset, log.log_start_offset)
    end = min(best.next_offset, upper)
    while offset < end:
        chunk = log.read(offset, _SCAN_CHUNK_BYTES, max_offset=upper).records
        if not chunk:
            break
        for pos, header in iter_batches(chunk, validate=False):
            if header.max_timestamp == best.max_timestamp and header.base_offset < upper:
                _, records = read_batch(chunk, pos)
                for record in records:
                    if record.timestamp == best.max_timestamp or header.is_log_append_time:
                        return record.offset, best.max_timestamp
            offset = header.next_offset
    return None
