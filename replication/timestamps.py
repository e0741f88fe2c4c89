"""ListOffsets lookups in a log: earliest, latest, by time, and by the largest timestamp (KIP-734: a scan of
the one segment that holds it)."""

from __future__ import annotations

from log.log import Log
from log.record.header import iter_batches
from log.record.reader import read_batch

_SCAN_CHUNK_BYTES = 1 << 20
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3


def lookup_offset(log: Log, timestamp_ms: int, upper: int, *, latest_known: bool = True) -> tuple[int, int] | None:
    """``(offset, timestamp)`` for -2 earliest, -1 latest (``upper``; None when not ``latest_known``), -3 the
    record with the largest timestamp below ``upper``, or the first record at or after a time that is below
    ``upper``; None when none qualifies (Kafka's ``fetchOffsetForTimestamp``). ValueError for any other
    negative timestamp."""
    if timestamp_ms == EARLIEST_TIMESTAMP:
        return log.log_start_offset, -1
    if timestamp_ms == LATEST_TIMESTAMP:
        return (upper, -1) if latest_known else None
    if timestamp_ms == MAX_TIMESTAMP:
        return offset_of_max_timestamp(log, upper)
    if timestamp_ms < 0:
        raise ValueError(f"timestamp {timestamp_ms} is not -1, -2, -3 or a time")
    found = log.offset_for_timestamp(timestamp_ms)
    return found if found is not None and found[0] < upper else None


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
