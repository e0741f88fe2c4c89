"""A partition log's state and its reads: :class:`LogReads`, the base class of :class:`~log.log.Log` (one
class in two modules, docs/CONVENTIONS.md §10).

It holds the segments, the offsets and the lock, the read-only views, and what readers call: ``read`` and
``read_slice`` (whole batches, or where they are for a zero-copy send), ``offset_for_timestamp``, and the
aborted-transaction index lookups (``collect_aborted``). Every method holds the
lock for its whole duration (the thread-safety contract is :class:`~log.log.Log`'s).
"""

from __future__ import annotations

import threading
from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from common.clock import Clock
from log.config import LogConfig
from log.errors import OffsetOutOfRangeError, StorageError
from log.policy import SegmentInfo
from log.record.header import BASE_OFFSET
from log.segment import Segment
from log.txn_index import AbortedTxn

EARLIEST_TIMESTAMP = -2  # ListOffsets: the log start offset
LATEST_TIMESTAMP = -1  # ListOffsets: the log end offset


class FetchData(NamedTuple):
    """The answer to :meth:`Log.read`: whole batches, unchanged, and where they came from."""

    records: bytes  # zero or more whole batches
    fetch_offset: int  # the offset asked for
    first_offset: int  # base offset of the first batch in records (fetch_offset when empty)
    segment_base_offset: int  # segment the records come from
    position: int  # their file position in that segment
    log_start_offset: int
    log_end_offset: int

    @property
    def size_bytes(self) -> int:
        return len(self.records)


@dataclass(frozen=True, slots=True)
class FetchSlice:
    """The answer to :meth:`Log.read_slice`: where the batches are in a segment file, for a zero-copy send.

    ``fd`` is a duplicate descriptor of that file owned by the caller (close it), -1 when ``size_bytes``
    is 0. The slice may end inside a batch (see :meth:`Segment.locate`).
    """

    fd: int
    position: int
    size_bytes: int
    fetch_offset: int
    log_start_offset: int
    log_end_offset: int


class LogReads:
    """The fields of one partition's log, the lock that guards them, and the reads; :class:`~log.log.Log`
    (the only subclass) adds the writes, opening and recovery."""

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        clock: Clock,
        segments: list[Segment],
        *,
        log_start_offset: int,
        recovery_point: int,
    ) -> None:
        self._dir = directory
        self._config = config
        self._clock = clock
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        active = segments[-1]
        self._log_end_offset = max(active.next_offset, active.base_offset)
        self._log_start_offset = min(max(log_start_offset, segments[0].base_offset), self._log_end_offset)
        self._recovery_point = min(max(recovery_point, 0), self._log_end_offset)
        self._checkpointed: tuple[int, int] | None = None
        self._last_flush_ms = clock.time_ms()
        self._dir_dirty = False
        self._closed = False
        self._lock = threading.RLock()
        self._check_invariants()

    # ------------------------------------------------------------------------------- properties

    @property
    def dir(self) -> Path:
        return self._dir

    @property
    def config(self) -> LogConfig:
        return self._config

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._log_end_offset

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def size_bytes(self) -> int:
        with self._lock:
            return sum(s.size_bytes for s in self._segments)

    @property
    def segments(self) -> tuple[SegmentInfo, ...]:
        """Snapshots of the segments, oldest first; the last is the active one."""
        with self._lock:
            return tuple(s.info() for s in self._segments)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def active_segment_base_offset(self) -> int:
        """Base offset of the active segment: a change after an append means the log rolled (producer-state
        snapshots are taken then, by the owner of the log)."""
        return self._bases[-1]

    # ------------------------------------------------------------------------------------ read

    def read(
        self, offset: int, max_bytes: int, *, max_offset: int | None = None, min_one_batch: bool = True
    ) -> FetchData:
        """Whole batches from the one holding ``offset``, up to ``max_bytes``, from one segment.

        ``min_one_batch`` returns the first batch even when it is larger than ``max_bytes``;
        ``max_offset`` (exclusive, e.g. the high watermark) stops before batches starting at or after
        it. ``offset == log_end_offset`` gives no records; outside ``[log_start_offset,
        log_end_offset]`` raises OffsetOutOfRangeError.
        """
        with self._lock:
            for segment in self._segments_from(offset):
                found = segment.read(offset, max_bytes, max_offset, min_one_batch)
                if found is not None:
                    position, records = found
                    first_offset = BASE_OFFSET.unpack_from(records, 0)[0] if records else offset
                    return self._fetch_data(records, offset, first_offset, segment, position)
            active = self._segments[-1]
            return self._fetch_data(b"", offset, offset, active, active.size_bytes)

    def read_slice(
        self, offset: int, max_bytes: int, *, max_offset: int | None = None, min_one_batch: bool = True
    ) -> FetchSlice:
        """As :meth:`read`, but the place of the bytes instead of the bytes (see :class:`FetchSlice`)."""
        with self._lock:
            for segment in self._segments_from(offset):
                found = segment.locate(offset, max_bytes, max_offset, min_one_batch)
                if found is not None:
                    position, size = found
                    fd = segment.duplicate_fd() if size else -1
                    return FetchSlice(fd, position, size, offset, self._log_start_offset, self._log_end_offset)
            return FetchSlice(-1, 0, 0, offset, self._log_start_offset, self._log_end_offset)

    def _segments_from(self, offset: int) -> list[Segment]:
        """The segments a read at ``offset`` looks at, in order (none at the log end); the lock is held.
        Raises OffsetOutOfRangeError outside ``[log_start_offset, log_end_offset]``."""
        self._ensure_open()
        if not self._log_start_offset <= offset <= self._log_end_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} is out of range: log start offset {self._log_start_offset}, "
                f"log end offset {self._log_end_offset} in {self._dir}"
            )
        if offset == self._log_end_offset:
            return []
        return self._segments[max(bisect_right(self._bases, offset) - 1, 0) :]

    def _fetch_data(self, records: bytes, offset: int, first: int, segment: Segment, position: int) -> FetchData:
        return FetchData(
            records,
            offset,
            first,
            segment.base_offset,
            position,
            self._log_start_offset,
            self._log_end_offset,
        )

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record with timestamp >= ``timestamp_ms``, or None.

        ``-2`` (earliest) gives ``(log_start_offset, -1)``, ``-1`` (latest) ``(log_end_offset, -1)``.
        """
        with self._lock:
            self._ensure_open()
            if timestamp_ms == EARLIEST_TIMESTAMP:
                return self._log_start_offset, -1
            if timestamp_ms == LATEST_TIMESTAMP:
                return self._log_end_offset, -1
            if timestamp_ms < 0:
                raise ValueError(f"timestamp {timestamp_ms} is negative and not -1 or -2")
            for segment in self._segments:
                if segment.max_timestamp >= timestamp_ms:
                    found = segment.find_offset_by_timestamp(timestamp_ms, self._log_start_offset)
                    if found is not None:
                        return found
            return None

    # --------------------------------------------------------------------------- transactions

    def collect_aborted(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """The aborted transactions a read of ``[fetch_offset, upper_bound)`` must be told about (Kafka's
        ``collectAbortedTransactions``): from the segment holding ``fetch_offset`` on, until an entry's last
        stable offset says no later segment can add one."""
        with self._lock:
            self._ensure_open()
            found: list[AbortedTxn] = []
            start = max(self._segment_index(fetch_offset), 0)
            for segment in self._segments[start:]:  # a marker may lie far past upper_bound: no early stop
                entries, complete = segment.txn_index.collect(fetch_offset, upper_bound)
                found.extend(entries)
                if complete:
                    break
            return found

    # --------------------------------------------------------------------------------- helpers

    def _segment_index(self, offset: int) -> int:
        return bisect_right(self._bases, offset) - 1

    def _ensure_open(self) -> None:
        if self._closed:
            raise StorageError(f"log {self._dir} is closed")

    def _check_invariants(self, full: bool = False) -> None:
        """docs/CONVENTIONS.md §8: offsets never go back, the start stays below the end, segments stay ordered."""
        active = self._segments[-1]
        assert self._bases[0] <= self._log_start_offset <= self._log_end_offset, (
            f"need first segment {self._bases[0]} <= log start {self._log_start_offset} "
            f"<= log end {self._log_end_offset}"
        )
        assert 0 <= self._recovery_point <= self._log_end_offset, (
            f"recovery point {self._recovery_point} outside [0, {self._log_end_offset}]"
        )
        assert active.base_offset <= self._log_end_offset, f"active segment {active.base_offset} past the end"
        assert active.next_offset <= self._log_end_offset, f"active segment ends past {self._log_end_offset}"
        if full:
            assert self._bases == [s.base_offset for s in self._segments]
            assert all(a < b for a, b in zip(self._bases, self._bases[1:], strict=False)), self._bases
            assert all(s.next_offset <= b for s, b in zip(self._segments, self._bases[1:], strict=False))
