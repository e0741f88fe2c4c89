"""One log segment: a .log file of whole batches, its sparse .index and its .timeindex.

Files of a segment whose first offset is B, in the partition directory::

    file                    content
    <B:020d>.log            RecordBatch v2 batches back to back (layout in log.record.header)
    <B:020d>.index          offset index entries, 8 bytes each (layout in log.index)
    <B:020d>.timeindex      time index entries, 12 bytes each (layout in log.index)
    <B:020d>.txnindex       aborted transactions, 34 bytes each (layout in log.txn_index); only once the
                            segment holds an ABORT marker. Entries are added by the log's owner, which knows
                            the transactions (``replication.unified_log``); the segment loads, truncates,
                            flushes and deletes the file with its own.

Every batch in the segment has a base offset >= B and a last offset < B + 2**31. Writes go to the
end of the .log at the segment's known size (``pwritev`` of the patched header and the unchanged
body); reads use ``pread`` and return ``bytes``, which stay valid whatever happens to the file later.

Index rule (Kafka's ``LogSegment.append``): before a batch is noted, if more than
``index.interval.bytes`` were appended since the last entry, the batch gets an offset-index entry
(its last offset -> its position) and the time index gets (max timestamp so far -> the last offset
of the batch holding it) if that timestamp grew. When the segment stops being active (roll, close)
its final max timestamp is appended to the time index, so a loaded segment knows it.

Loading (:meth:`Segment.open`) either trusts the files (sanity-checks the indexes, then scans batch
headers from the last index entry to the end) or recovers (scans the whole .log with CRCs, cuts it
at the longest valid prefix and rebuilds both indexes); a failed sanity check falls back to recovery.

Not thread-safe: a Segment belongs to one Log, which serializes every call.
"""

from __future__ import annotations

import bisect
import logging
import mmap
import os
from collections import deque
from collections.abc import Iterator, Sequence
from pathlib import Path

from log.append import PreparedBatch
from log.config import LogConfig
from log.errors import CorruptRecordError, StorageError, UnsupportedCompressionError
from log.index import IndexSanityError, OffsetIndex, TimeIndex
from log.policy import SegmentInfo
from log.record.header import (
    BASE_OFFSET,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    BatchHeader,
    batch_size_at,
    parse_header,
)
from log.record.reader import read_batch
from log.recovery import PrefixScan
from log.txn_index import TransactionIndex

logger = logging.getLogger(__name__)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"  # log.txn_index
NO_TIMESTAMP = -1
_RECENT_BATCHES = 64  # the tail's batches a reader at the end finds without reading the file
_WINDOW_BYTES = 16 * 1024  # a few index intervals of small batches; 1.5% extra on a 1 MiB batch
_IOV_MAX = os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024


def file_stem(base_offset: int) -> str:
    return f"{base_offset:020d}"


def parse_base_offset(name: str) -> int | None:
    """The base offset in a segment file name (``00000000000000000042.log`` -> 42), or None."""
    stem = name.split(".", 1)[0]
    return int(stem) if len(stem) == 20 and stem.isascii() and stem.isdigit() else None


def _last_offset(entry: tuple[int, BatchHeader]) -> int:
    return entry[1].last_offset


def iter_headers(fd: int, start: int, end: int) -> Iterator[tuple[int, BatchHeader]]:
    """Yield ``(position, header)`` of the batches in ``[start, end)`` of a file, reading windows.

    Structural checks only (complete header, magic 2, length inside ``end``); no CRC. A violation
    raises :class:`CorruptRecordError`.
    """
    window = b""
    window_start = start
    pos = start
    while pos < end:
        if pos - window_start + HEADER_SIZE > len(window):
            window = os.pread(fd, min(_WINDOW_BYTES, end - pos), pos)
            window_start = pos
        if len(window) - (pos - window_start) < HEADER_SIZE:
            raise CorruptRecordError(f"torn batch header at position {pos} (segment ends at {end})")
        header = parse_header(window, pos - window_start)
        if (
            header.magic != MAGIC
            or header.batch_length < HEADER_SIZE - LOG_OVERHEAD
            or pos + header.size_bytes > end
        ):
            raise CorruptRecordError(
                f"malformed batch at position {pos}: magic {header.magic}, length {header.batch_length}"
            )
        yield pos, header
        pos += header.size_bytes


def whole_batches_end(chunk: bytes, max_offset: int | None) -> int:
    """Length of the longest prefix of ``chunk`` made of whole batches starting below ``max_offset``."""
    pos = 0
    n = len(chunk)
    while True:
        size = batch_size_at(chunk, pos)
        if size is None or pos + size > n or size < HEADER_SIZE:  # a length below the header: not a batch
            return pos
        if max_offset is not None and BASE_OFFSET.unpack_from(chunk, pos)[0] >= max_offset:
            return pos
        pos += size


def record_timestamps(batch: bytes) -> Iterator[tuple[int, int]]:
    """Yield ``(offset, timestamp)`` of each record of one batch (CRC-checked and decompressed).

    LogAppendTime batches give every record the batch max timestamp (the reader's rule).
    """
    _, records = read_batch(batch)
    for record in records:
        yield record.offset, record.timestamp


def _pwritev_all(fd: int, pieces: Sequence[bytes | memoryview], position: int) -> None:
    views = [memoryview(p) for p in pieces if len(p)]
    i = 0
    while i < len(views):
        written = os.pwritev(fd, views[i : i + _IOV_MAX], position)
        position += written
        while written and i < len(views):
            n = len(views[i])
            if written >= n:
                written -= n
                i += 1
            else:
                views[i] = views[i][written:]
                written = 0


class Segment:
    """A .log file and its two indexes; see the module docstring."""

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        config: LogConfig,
        now_ms: int,
        *,
        create: bool,
        file_suffix: str = "",
    ) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self._interval = config.index_interval_bytes
        stem = directory / file_stem(base_offset)
        # file_suffix: the log cleaner builds a segment aside as <B>.log.cleaned etc. (log.cleaner.swap)
        self.log_path = stem.with_suffix(LOG_SUFFIX + file_suffix)
        flags = os.O_RDWR | (os.O_CREAT | os.O_TRUNC if create else 0)
        self._fd = os.open(self.log_path, flags, 0o644)
        self.size_bytes = os.fstat(self._fd).st_size
        index_path = stem.with_suffix(INDEX_SUFFIX + file_suffix)
        time_index_path = stem.with_suffix(TIME_INDEX_SUFFIX + file_suffix)
        self._indexes_existed = index_path.exists() and time_index_path.exists()
        self.offset_index = OffsetIndex(index_path, base_offset, config.segment_index_bytes)
        self.time_index = TimeIndex(time_index_path, base_offset, config.segment_index_bytes)
        self.txn_index = TransactionIndex(stem.with_suffix(TXN_INDEX_SUFFIX + file_suffix), base_offset)
        if create:
            self.offset_index.clear()
            self.time_index.clear()
            self.txn_index.reset()
        self.next_offset = base_offset
        self.max_timestamp = NO_TIMESTAMP
        self.offset_of_max_timestamp = -1
        self.created_ms = now_ms
        self.first_batch_ms: int | None = None
        self._bytes_since_index = 0
        # the last batches appended (position, header), oldest first: readers at the log's end (a follower,
        # a caught-up consumer) find their batch here without a pread and a header scan
        self._recent: deque[tuple[int, BatchHeader]] = deque(maxlen=_RECENT_BATCHES)

    # ----------------------------------------------------------------------------------- lifecycle

    @classmethod
    def create(
        cls, directory: Path, base_offset: int, config: LogConfig, now_ms: int, *, file_suffix: str = ""
    ) -> Segment:
        """A new, empty segment (existing files of that name are truncated)."""
        return cls(directory, base_offset, config, now_ms, create=True, file_suffix=file_suffix)

    @classmethod
    def open(
        cls,
        directory: Path,
        base_offset: int,
        config: LogConfig,
        now_ms: int,
        *,
        recover: bool,
        min_offset: int,
    ) -> tuple[Segment, int]:
        """Load an existing segment; returns it and the number of bytes recovery cut from its .log.

        With ``recover`` the whole .log is scanned (CRCs included) and cut at its longest valid
        prefix; otherwise the indexes are sanity-checked and the tail after the last index entry is
        scanned, falling back to recovery when anything is off.
        """
        segment = cls(directory, base_offset, config, now_ms, create=False)
        try:
            if not recover:
                try:
                    segment._load(now_ms)
                    return segment, 0
                except (IndexSanityError, CorruptRecordError) as e:
                    logger.warning("%s: %s; rebuilding its indexes from the log", segment.log_path, e)
            return segment, segment._recover(min_offset, now_ms)
        except BaseException:
            segment.close()
            raise

    def _load(self, now_ms: int) -> None:
        if not self._indexes_existed and self.size_bytes > 0:
            raise IndexSanityError("index files missing")
        self.offset_index.load(self.size_bytes)
        self.time_index.load()
        self._load_tail()
        self._load_first_batch_time(now_ms)
        self._load_txn_index()

    def _load_txn_index(self) -> None:
        """The aborted-transaction index, without the entries past the segment's end (a crash's leftovers);
        a file that is otherwise wrong cannot be rebuilt from this segment alone: StorageError."""
        try:
            dropped = self.txn_index.load_within(self.next_offset)
        except (IndexSanityError, OSError) as e:
            raise StorageError(f"{self.txn_index.path}: {e}") from e
        if dropped:
            logger.warning("%s: dropped %d entries past the segment's end", self.txn_index.path, dropped)

    def _load_tail(self) -> None:
        """Derive next offset, max timestamp and index spacing from the indexes plus a tail scan."""
        self.max_timestamp, self.offset_of_max_timestamp = self.time_index.last_entry()
        if self.max_timestamp == NO_TIMESTAMP:
            self.offset_of_max_timestamp = -1
        last_indexed = self.offset_index.last_position()
        last_indexed_offset = self.offset_index.last_offset()
        start = self.offset_index.lookup(self.time_index.last_entry()[1])
        self.next_offset = self.base_offset
        for pos, header in iter_headers(self._fd, start, self.size_bytes):
            if pos == last_indexed and header.last_offset != last_indexed_offset:
                raise IndexSanityError(f"last index entry disagrees with the batch at position {pos}")
            if header.max_timestamp > self.max_timestamp:
                self.max_timestamp, self.offset_of_max_timestamp = header.max_timestamp, header.last_offset
            self.next_offset = header.next_offset
        if self.time_index.entries and self.time_index.last_entry()[1] >= self.next_offset:
            raise IndexSanityError("time index points past the last batch")
        self._bytes_since_index = self.size_bytes - max(last_indexed, 0)

    def _load_first_batch_time(self, now_ms: int) -> None:
        """Kafka's rolling base after a restart: the first batch's max timestamp, else the load time."""
        if self.size_bytes == 0:
            self.first_batch_ms = None
            return
        first = parse_header(os.pread(self._fd, HEADER_SIZE, 0))
        self.first_batch_ms = first.max_timestamp if first.max_timestamp >= 0 else now_ms

    def _recover(self, min_offset: int, now_ms: int) -> int:
        """Scan the whole .log, cut it at the longest valid prefix, rebuild both indexes."""
        self._reset_state()
        self.offset_index.begin_rebuild()
        self.time_index.begin_rebuild()
        valid = 0
        if self.size_bytes > 0:
            with mmap.mmap(self._fd, self.size_bytes, access=mmap.ACCESS_READ) as mapped:
                view = memoryview(mapped)
                try:
                    scan = PrefixScan(view, self.base_offset, min_offset)
                    for pos, header in scan:
                        self._note_batch(pos, header)
                    valid, reason = scan.valid_bytes, scan.stop_reason
                    del scan
                finally:
                    view.release()
            if valid < self.size_bytes:
                logger.warning(
                    "%s: cutting %d bytes at position %d: %s",
                    self.log_path,
                    self.size_bytes - valid,
                    valid,
                    reason,
                )
        self.offset_index.end_rebuild()
        self.time_index.end_rebuild()
        removed = self.size_bytes - valid
        if removed:
            os.ftruncate(self._fd, valid)
            self.size_bytes = valid
            while self._recent and self._recent[-1][0] >= valid:
                self._recent.pop()
        self._load_first_batch_time(now_ms)
        self._load_txn_index()
        return removed

    def _reset_state(self) -> None:
        self.next_offset = self.base_offset
        self.max_timestamp = NO_TIMESTAMP
        self.offset_of_max_timestamp = -1
        self._bytes_since_index = 0
        self._recent.clear()

    def close(self) -> None:
        self.offset_index.close()
        self.time_index.close()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def delete(self) -> None:
        """Close and remove the files: the .log first, so a crash leaves at most orphan indexes."""
        self.close()
        self.log_path.unlink(missing_ok=True)
        self.offset_index.delete()
        self.time_index.delete()
        self.txn_index.delete()

    def flush(self) -> None:
        os.fsync(self._fd)
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def on_become_inactive(self) -> None:
        """Record the final max timestamp in the time index (Kafka's ``onBecomeInactiveSegment``)."""
        if self.max_timestamp != NO_TIMESTAMP:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)

    # ---------------------------------------------------------------------------------- state

    @property
    def is_empty(self) -> bool:
        return self.size_bytes == 0

    def info(self) -> SegmentInfo:
        return SegmentInfo(
            base_offset=self.base_offset,
            next_offset=self.next_offset,
            size_bytes=self.size_bytes,
            max_timestamp=self.max_timestamp,
            largest_timestamp=self.max_timestamp if self.max_timestamp >= 0 else self.created_ms,
            rolling_base_ms=self.first_batch_ms if self.first_batch_ms is not None else self.created_ms,
            index_full=self.offset_index.is_full or self.time_index.is_full,
        )

    # ------------------------------------------------------------------------------ writing

    def append(self, batches: Sequence[PreparedBatch], now_ms: int) -> int:
        """Write ``batches`` at the end of the .log and index them; returns their position."""
        position = self.size_bytes
        assert batches, "an append writes at least one batch"
        assert batches[0].header.base_offset >= self.next_offset, "segment offsets must grow"
        try:
            _pwritev_all(self._fd, [piece for batch in batches for piece in batch.pieces], position)
        except OSError as e:
            self._undo_write(position)
            raise StorageError(f"cannot append to {self.log_path}: {e}") from e
        pos = position
        for batch in batches:
            self._note_batch(pos, batch.header)
            pos += batch.header.size_bytes
        self.size_bytes = pos
        if self.first_batch_ms is None:
            self.first_batch_ms = now_ms
        return position

    def _undo_write(self, position: int) -> None:
        try:
            os.ftruncate(self._fd, position)
        except OSError:
            logger.exception("%s: cannot cut a failed write back to %d bytes", self.log_path, position)

    def _note_batch(self, pos: int, header: BatchHeader) -> None:
        """Account for a batch at ``pos``: max timestamp, next offset and maybe an index entry pair."""
        if header.max_timestamp > self.max_timestamp:
            self.max_timestamp, self.offset_of_max_timestamp = header.max_timestamp, header.last_offset
        if self._bytes_since_index > self._interval and not self.offset_index.is_full:
            self.offset_index.append(header.last_offset, pos)
            if not self.time_index.is_full:
                self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self._bytes_since_index = 0
        self._bytes_since_index += header.size_bytes
        self.next_offset = header.next_offset
        self._recent.append((pos, header))

    def truncate_to(self, offset: int) -> int | None:
        """Drop every batch whose last offset is >= ``offset``; the first dropped base offset, or None."""
        found = self.find_batch(offset)
        if found is None:
            return None
        position, first_dropped = found
        os.ftruncate(self._fd, position)
        self.size_bytes = position
        while self._recent and self._recent[-1][0] >= position:
            self._recent.pop()
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        self._load_tail()
        if self.size_bytes == 0:
            self.first_batch_ms = None
        return first_dropped.base_offset

    # ------------------------------------------------------------------------------ reading

    def find_batch(self, offset: int) -> tuple[int, BatchHeader] | None:
        """Position and header of the first batch whose last offset is >= ``offset``, or None."""
        recent = self._recent
        if recent and offset >= recent[0][1].base_offset:
            # every batch before the recent ones ends below ``offset``: the answer is among them, or none is
            if offset > recent[-1][1].last_offset:
                return None
            return recent[bisect.bisect_left(recent, offset, key=_last_offset)]
        start = self.offset_index.lookup(offset)
        for pos, header in iter_headers(self._fd, start, self.size_bytes):
            if header.last_offset >= offset:
                return pos, header
        return None

    def read(
        self, offset: int, max_bytes: int, max_offset: int | None, min_one_batch: bool
    ) -> tuple[int, bytes] | None:
        """Whole batches from the one holding ``offset``: ``(position, bytes)``; None if past the end.

        Stops at ``max_bytes`` (but returns the first batch whole when ``min_one_batch``) and before
        the first batch whose base offset is >= ``max_offset``.
        """
        found = self.find_batch(offset)
        if found is None:
            return None
        position, first = found
        if max_offset is not None and first.base_offset >= max_offset:
            return position, b""
        if first.size_bytes > max_bytes:
            return (position, self._pread(first.size_bytes, position)) if min_one_batch else (position, b"")
        chunk = self._pread(min(max_bytes, self.size_bytes - position), position)
        end = whole_batches_end(chunk, max_offset)
        return position, chunk if end == len(chunk) else chunk[:end]

    def locate(
        self, offset: int, max_bytes: int, max_offset: int | None, min_one_batch: bool
    ) -> tuple[int, int] | None:
        """Where :meth:`read` would read, without reading the batches: ``(position, size)``, or None if past
        the end. As Kafka's ``LogSegment.read`` for a zero-copy send, the region ends at ``max_bytes`` even
        inside a batch (readers drop a partial batch at the end of a fetch), or at the first batch whose
        base offset is >= ``max_offset``; the first batch is whole when ``min_one_batch``."""
        found = self.find_batch(offset)
        if found is None:
            return None
        position, first = found
        if max_offset is not None and first.base_offset >= max_offset:
            return position, 0
        if first.size_bytes > max_bytes:
            return position, first.size_bytes if min_one_batch else 0
        end = self.size_bytes
        if max_offset is not None:
            stop = self.find_batch(max_offset)
            if stop is not None:
                stop_position, header = stop
                end = stop_position if header.base_offset >= max_offset else stop_position + header.size_bytes
        return position, min(max_bytes, end - position)

    def duplicate_fd(self) -> int:
        """A new descriptor of the ``.log`` file (the caller closes it): stays valid if the segment closes."""
        return os.dup(self._fd)

    def _pread(self, size: int, position: int) -> bytes:
        data = os.pread(self._fd, size, position)
        if len(data) != size:
            raise StorageError(f"{self.log_path}: short read of {len(data)}/{size} bytes at {position}")
        return data

    def find_offset_by_timestamp(self, timestamp_ms: int, start_offset: int) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record at/after ``start_offset`` with timestamp >= the target.

        Kafka's ``LogSegment.findOffsetByTimestamp``: the time index gives a batch before any candidate,
        batch headers are skipped by their max timestamp, and only the one batch needed is decoded.
        """
        _, indexed_offset = self.time_index.lookup(timestamp_ms)
        start = self.offset_index.lookup(max(indexed_offset, start_offset))
        for pos, header in iter_headers(self._fd, start, self.size_bytes):
            if header.max_timestamp < timestamp_ms or header.last_offset < start_offset:
                continue
            try:
                for offset, timestamp in record_timestamps(self._pread(header.size_bytes, pos)):
                    if timestamp >= timestamp_ms and offset >= start_offset:
                        return offset, timestamp
            except UnsupportedCompressionError:
                # snappy: no codec here. The batch is the right one; its first offset is the best answer.
                return max(header.base_offset, start_offset), header.max_timestamp
        return None
