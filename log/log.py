"""The partition log: segments in one directory; append, read, roll, retention, truncation, recovery.

Directory layout and stray-file handling: ``log.logdir``; segment files: ``log.segment``; index
files: ``log.index``; checkpoint format: ``log.checkpoint``. Two files are the Log's own::

    file                 content
    offsets.checkpoint   checkpoint format, two entries:
                           recovery-point     every offset below it is fsynced; recovery scans from
                                              the segment holding it
                           log-start-offset   the first offset readers may see
    clean-shutdown       empty marker: close() finished; open() may skip the recovery scan

Ordering that matters (persist before you act, act before you answer):

* append: every batch is validated before anything is written; the write goes to the file before the
  in-memory log end offset moves, and a failed write is cut back, so a failed append changes nothing.
* close: flush, then the checkpoint, then the marker: the marker vouches for both.
* open: the marker is removed (durably) after loading and before the first write.
* truncation deletes later segments newest first, then cuts the file, then checkpoints the lowered
  recovery point, so every crash state is a prefix of the log.
* retention and delete_records checkpoint the new log start offset before deleting files.
* compaction (replace_segments): the cleaner writes a cleaned segment aside, then under the lock the
  renames of ``log.cleaner.swap`` run, ``.log.cleaned`` -> ``.log.swap`` being the commit point that
  recovery (``log.logdir``) completes; readers see the old segments or the new one, never a mix.

The checkpoint is written by close(), whenever the log start offset moves or truncation lowers the
recovery point, and by flush() when the recovery point moves into a later segment (a flush inside
one segment does not rewrite it: recovery scans that whole segment anyway).
"""

from __future__ import annotations

import logging
from bisect import bisect_right
from collections.abc import Callable, Sequence
from pathlib import Path

from common.clock import Clock
from common.files import fsync_dir
from log.append import (
    AppendInfo,
    PreparedAppend,
    PreparedBatch,
    ValidatedAppend,
    as_bytes_view,
    prepare_follower_append,
    prepare_leader_append,
    segment_chunks,
    validate_leader_append,
)
from log.checkpoint import remove_marker, write_checkpoint, write_marker
from log.config import LogConfig
from log.errors import OffsetOutOfRangeError, StorageError
from log.flush_stats import report_flush
from log.log_reads import LogReads
from log.logdir import CHECKPOINT_FILE, CLEAN_SHUTDOWN_FILE, load_segments, prepare_directory, read_offsets
from log.policy import MAX_RELATIVE_OFFSET, SegmentInfo, flush_due, retention_count, roll_reason
from log.record.control import read_marker
from log.record.validator import RecordPolicy
from log.segment import Segment
from log.txn_index import AbortedTxn

logger = logging.getLogger(__name__)

RECOVERY_POINT_KEY = "recovery-point"
LOG_START_OFFSET_KEY = "log-start-offset"


class Log(LogReads):
    """One partition's log. Open with :meth:`Log.open`.

    Thread-safety: every public method holds the log's lock (a ``threading.RLock``) for its whole
    duration, disk I/O included, so any thread may call any method and calls are linearizable: a
    read sees an append entirely or not at all, and never a segment being deleted or truncated. The
    intended use is still one owner (the partition) driving append, roll, truncation, retention and
    flush, with fetch threads calling read(); reads delay appends by at most one ``max_bytes`` pread.
    Records returned by read() are ``bytes`` copies, valid forever.
    """

    # ------------------------------------------------------------------------------------ open

    @classmethod
    def open(cls, path: str | Path, config: LogConfig, clock: Clock, *, recovery_point: int | None = None) -> Log:
        """Open (creating if needed) the log in ``path`` and recover it.

        Without a clean-shutdown marker every segment from the one holding the recovery point on
        (``recovery_point``, else the checkpoint's, else 0) is scanned and cut at its longest valid
        prefix; a cut deletes every later segment. Other segments are loaded with an index sanity
        check and rebuilt if it fails.
        """
        directory = Path(path)
        directory.mkdir(parents=True, exist_ok=True)
        bases = prepare_directory(directory)
        saved = read_offsets(directory)
        clean = (directory / CLEAN_SHUTDOWN_FILE).exists()
        point = recovery_point if recovery_point is not None else saved.get(RECOVERY_POINT_KEY, 0)
        start = saved.get(LOG_START_OFFSET_KEY, 0)
        now = clock.time_ms()
        segments = load_segments(directory, bases, config, now, point, clean)
        try:
            if not segments:
                segments = [Segment.create(directory, max(start, 0), config, now)]
                fsync_dir(directory)
            log = cls(directory, config, clock, segments, log_start_offset=start, recovery_point=point)
            if clean:
                log._recovery_point = log._log_end_offset
            # What the next open would read back; a missing file reads as (0, 0), which is safe.
            log._checkpointed = (saved.get(RECOVERY_POINT_KEY, 0), saved.get(LOG_START_OFFSET_KEY, 0))
            log._write_checkpoint_if_changed()
            remove_marker(directory / CLEAN_SHUTDOWN_FILE)
        except BaseException:
            for segment in segments:
                segment.close()
            raise
        logger.info(
            "opened %s: offsets [%d, %d), recovery point %d, %d segments%s",
            directory,
            log._log_start_offset,
            log._log_end_offset,
            log._recovery_point,
            len(segments),
            " (clean shutdown)" if clean else "",
        )
        return log

    # ---------------------------------------------------------------------------------- append

    def validate(self, batch: bytes | bytearray | memoryview) -> ValidatedAppend:
        """Check a producer's batches as a leader does before appending them (``log.append``): every record
        decoded, against this log's config and clock. Takes no lock (the config is immutable and the clock is
        the clock): a leader validates before it takes its own locks, then passes the result to :meth:`append`.

        Raises CorruptRecordError / InvalidRecordError / InvalidTimestampError for a bad batch and
        RecordTooLargeError for a batch above ``max.message.bytes``.
        """
        config = self._config
        policy = RecordPolicy(
            self._clock.time_ms(),
            config.message_timestamp_before_max_ms,
            config.message_timestamp_after_max_ms,
            log_append_time=config.log_append_time,
            require_keys=config.compact_enabled,
        )
        return validate_leader_append(as_bytes_view(batch), config.max_message_bytes, policy, config)

    def append(self, batch: bytes | bytearray | memoryview | ValidatedAppend, *, leader_epoch: int = -1) -> AppendInfo:
        """Leader append of one or more concatenated producer batches; assigns their offsets.

        ``batch`` is validated first (:meth:`validate`) unless it is the result of it (under this log's
        current config); nothing is written when it fails, and RecordTooLargeError also when one batch is
        above ``segment.bytes``. Batches that are together larger than ``segment.bytes`` go into successive
        segments (a roll between batches).
        """
        validated = batch if isinstance(batch, ValidatedAppend) else self.validate(batch)
        if validated.config is not self._config:  # the config changed since: check again under the new one
            validated = self.validate(validated.buf)
        with self._lock:
            self._ensure_open()
            now = self._clock.time_ms()
            append_time = now if self._config.log_append_time else None
            prepared = prepare_leader_append(validated, self._log_end_offset, leader_epoch, append_time)
            return self._append(prepared, now)

    def append_marker(self, batch: bytes, *, leader_epoch: int = -1) -> AppendInfo:
        """Leader append of one transaction marker (a control batch the broker built for the transaction
        coordinator's WriteTxnMarkers; never a client's batch, which :meth:`validate` refuses if control)."""
        header, _ = read_marker(batch)  # header, CRC, exactly one well-formed marker record
        with self._lock:
            self._ensure_open()
            now = self._clock.time_ms()
            append_time = now if self._config.log_append_time else None
            validated = ValidatedAppend(as_bytes_view(batch), ((0, header, header.max_timestamp),), self._config)
            prepared = prepare_leader_append(validated, self._log_end_offset, leader_epoch, append_time)
            return self._append(prepared, now)

    def append_as_follower(self, batch: bytes | bytearray | memoryview) -> AppendInfo:
        """Append batches that already carry offsets and epochs (replication); keeps both as they are.

        The first batch must start at or after the log end offset (else InvalidRecordError).
        """
        with self._lock:
            self._ensure_open()
            prepared = prepare_follower_append(as_bytes_view(batch), self._log_end_offset)
            return self._append(prepared, self._clock.time_ms())

    def _append(self, prepared: PreparedAppend, now: int) -> AppendInfo:
        chunks = segment_chunks(prepared.batches, self._config.segment_bytes)  # refuses a batch > segment.bytes
        assert prepared.first_offset >= self._log_end_offset, "offsets never go back"
        for batches in chunks:
            segment = self._maybe_roll(batches, now)
            segment.append(batches, now)
            self._log_end_offset = batches[-1].header.last_offset + 1
        self._check_invariants()
        if flush_due(self._config, self._log_end_offset - self._recovery_point, now, self._last_flush_ms):
            self.flush()
        return prepared.info(self._log_start_offset)

    def _maybe_roll(self, batches: list[PreparedBatch], now: int) -> Segment:
        """The segment ``batches`` (consecutive, together at most ``segment.bytes``) go into."""
        active = self._segments[-1]
        first, last = batches[0].header.base_offset, batches[-1].header.last_offset
        size = sum(b.header.size_bytes for b in batches)
        reason = roll_reason(self._config, active.info(), now, size, last)
        if reason is None and last - active.base_offset <= MAX_RELATIVE_OFFSET:
            return active
        logger.debug(
            "%s: rolling segment %d at offset %d: %s",
            self._dir,
            active.base_offset,
            first,
            reason or "offsets too far past an empty segment",
        )
        return self._roll(first, now)

    # ------------------------------------------------------------------------------------ roll

    def roll(self) -> int:
        """Start a new active segment at the log end offset (no-op if the active one is empty).

        Returns the base offset of the active segment.
        """
        with self._lock:
            self._ensure_open()
            if not self._segments[-1].is_empty:
                self._roll(self._log_end_offset, self._clock.time_ms())
            return self._segments[-1].base_offset

    def _roll(self, base_offset: int, now: int) -> Segment:
        old = self._segments[-1]
        assert base_offset >= self._log_end_offset, f"roll at {base_offset} below the log end {self._log_end_offset}"
        if old.is_empty:  # only a follower append far past an empty segment's base gets here
            old.delete()
            self._segments.pop()
            self._bases.pop()
            if not self._segments:
                self._log_start_offset = self._recovery_point = self._log_end_offset = base_offset
                self._write_checkpoint()
        else:
            old.on_become_inactive()
        segment = Segment.create(self._dir, base_offset, self._config, now)
        self._segments.append(segment)
        self._bases.append(base_offset)
        self._dir_dirty = True
        # Kafka flushes a rolled segment right away (asynchronously); keeps recovery to one segment.
        self.flush(min(base_offset, self._log_end_offset))
        self._check_invariants(full=True)
        return segment

    # --------------------------------------------------------------------------- transactions

    def append_aborted(self, aborted: AbortedTxn) -> bool:
        """Index an aborted transaction whose ABORT marker (at ``aborted.last_offset``) is in the log, in the
        ``.txnindex`` of the segment holding the marker; a marker indexed already (a replay) is skipped.
        Returns whether an entry was added."""
        with self._lock:
            self._ensure_open()
            if not self._log_start_offset <= aborted.last_offset < self._log_end_offset:
                raise ValueError(f"marker offset {aborted.last_offset} of {aborted} is not in the log")
            segment = self._segments[self._segment_index(aborted.last_offset)]
            if segment.txn_index.last_offset >= aborted.last_offset:
                return False
            try:
                segment.txn_index.append(aborted)
            except OSError as e:
                raise StorageError(f"cannot append to {segment.txn_index.path}: {e}") from e
            return True

    def flush_txn_indexes(self) -> None:
        """fsync the aborted-transaction indexes (before a producer-state snapshot vouches for them)."""
        with self._lock:
            self._ensure_open()
            for segment in self._segments:
                if len(segment.txn_index):
                    segment.txn_index.flush()

    # ------------------------------------------------------------------------------- retention

    def delete_retention(self, now_ms: int | None = None, *, high_watermark: int | None = None) -> int:
        """Delete the oldest segments that retention.ms / retention.bytes / the log start offset allow.

        Never the active segment; given ``high_watermark``, only segments that end at or below it.
        Returns how many segments were deleted; advances the log start offset past them.
        """
        with self._lock:
            self._ensure_open()
            now = self._clock.time_ms() if now_ms is None else now_ms
            count = retention_count(self.segments, self._config, now, self._log_start_offset, high_watermark)
            if count:
                self._delete_oldest(count, self._segments[count].base_offset)
            return count

    def delete_records(self, offset: int) -> int:
        """Advance the log start offset to ``offset`` (Kafka's DeleteRecords); returns the new one.

        Segments that end at or below it are deleted (never the active one).
        """
        with self._lock:
            self._ensure_open()
            if offset > self._log_end_offset:
                raise OffsetOutOfRangeError(
                    f"cannot delete records below {offset}: log end offset is {self._log_end_offset}"
                )
            if offset <= self._log_start_offset:
                return self._log_start_offset
            count = sum(1 for base in self._bases[1:] if base <= offset)
            self._delete_oldest(count, offset)
            return self._log_start_offset

    def _delete_oldest(self, count: int, new_log_start: int) -> None:
        self._log_start_offset = max(self._log_start_offset, new_log_start)
        self._recovery_point = max(self._recovery_point, self._bases[count])
        self._write_checkpoint()
        for segment in self._segments[:count]:
            segment.delete()
        del self._segments[:count]
        del self._bases[:count]
        self._check_invariants(full=True)

    # ------------------------------------------------------------------------------ compaction

    def replace_segments(self, replaced: Sequence[SegmentInfo], install: Callable[[list[Segment]], Segment]) -> bool:
        """Swap one cleaned segment in for ``replaced``, a run of non-active segments (``log.cleaner``).

        ``install`` gets the Segments to replace and does the file work (``log.cleaner.swap``), under
        the lock, so readers see the old segments or the new one, never a mix. Returns False, changing
        nothing, when the run no longer matches the snapshot (retention, truncation or a roll got there
        first). If ``install`` fails the log is closed: its files are left for recovery at the next open.
        """
        with self._lock:
            self._ensure_open()
            first = self._segment_index(replaced[0].base_offset)
            end = first + len(replaced)
            current = self._segments[max(first, 0) : end]
            wanted = [(s.base_offset, s.next_offset, s.size_bytes) for s in replaced]
            if (
                first < 0
                or end >= len(self._segments)
                or wanted != [(s.base_offset, s.next_offset, s.size_bytes) for s in current]
            ):
                return False
            try:
                segment = install(current)
            except BaseException:
                self.close_handlers()
                raise
            self._segments[first:end] = [segment]
            self._bases[first:end] = [segment.base_offset]
            self._check_invariants(full=True)
            return True

    # ------------------------------------------------------------------------------ truncation

    def truncate_to(self, offset: int) -> bool:
        """Drop every batch whose last offset is >= ``offset`` (followers); True if anything changed.

        The new log end offset is ``offset``, or the base offset of the batch holding it when that
        batch is dropped whole. Later segments are deleted, newest first.
        """
        with self._lock:
            self._ensure_open()
            if offset < 0:
                raise ValueError(f"cannot truncate to a negative offset {offset}")
            if offset >= self._log_end_offset:
                return False
            if offset < self._bases[0]:
                self._truncate_fully(offset)
                return True
            keep = bisect_right(self._bases, offset)
            for segment in reversed(self._segments[keep:]):
                segment.delete()
            del self._segments[keep:]
            del self._bases[keep:]
            first_dropped = self._segments[-1].truncate_to(offset)
            self._log_end_offset = offset if first_dropped is None else min(offset, first_dropped)
            self._log_start_offset = min(self._log_start_offset, self._log_end_offset)
            self._recovery_point = min(self._recovery_point, self._log_end_offset)
            self._write_checkpoint_if_changed()
            self._check_invariants(full=True)
            return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and restart the log empty at ``offset`` (start = end = ``offset``)."""
        with self._lock:
            self._ensure_open()
            if offset < 0:
                raise ValueError(f"cannot start a log at a negative offset {offset}")
            self._truncate_fully(offset)

    def _truncate_fully(self, offset: int) -> None:
        for segment in reversed(self._segments):
            segment.delete()
        self._segments = [Segment.create(self._dir, offset, self._config, self._clock.time_ms())]
        self._bases = [offset]
        fsync_dir(self._dir)
        self._log_end_offset = self._log_start_offset = self._recovery_point = offset
        self._write_checkpoint()
        self._check_invariants(full=True)

    # ------------------------------------------------------------------------------- durability

    def flush(self, up_to: int | None = None) -> None:
        """fsync every segment holding offsets in [recovery point, ``up_to``) and move the recovery point.

        ``up_to`` defaults to (and is capped at) the log end offset.
        """
        with self._lock:
            self._ensure_open()
            target = self._log_end_offset if up_to is None else min(up_to, self._log_end_offset)
            if target <= self._recovery_point:
                return
            started_ms = self._clock.monotonic_ms()
            for i, segment in enumerate(self._segments):
                ends_above = i + 1 == len(self._segments) or self._bases[i + 1] > self._recovery_point
                if segment.base_offset < target and ends_above:
                    segment.flush()
            if self._dir_dirty:
                fsync_dir(self._dir)
                self._dir_dirty = False
            old_segment = self._segment_index(self._checkpointed[0] if self._checkpointed else -1)
            self._recovery_point = target
            self._last_flush_ms = self._clock.time_ms()
            if old_segment != self._segment_index(target):
                self._write_checkpoint()
            report_flush(self._dir.name, self._clock.monotonic_ms() - started_ms)

    def close(self) -> None:
        """Flush everything, write the checkpoint and the clean-shutdown marker, close the files."""
        with self._lock:
            if self._closed:
                return
            active = self._segments[-1]
            active.on_become_inactive()
            self.flush()
            active.flush()  # the final time index entry, even when nothing else was unflushed
            self._write_checkpoint()
            for segment in self._segments:
                segment.close()
            self._closed = True
            write_marker(self._dir / CLEAN_SHUTDOWN_FILE)

    def close_handlers(self) -> None:
        """Close the files without flushing or checkpointing: what a crash leaves (tests, failed disks)."""
        with self._lock:
            for segment in self._segments:
                segment.close()
            self._closed = True

    # --------------------------------------------------------------------------------- helpers

    def _write_checkpoint(self) -> None:
        entries = {RECOVERY_POINT_KEY: self._recovery_point, LOG_START_OFFSET_KEY: self._log_start_offset}
        write_checkpoint(self._dir / CHECKPOINT_FILE, entries)
        self._checkpointed = (self._recovery_point, self._log_start_offset)

    def _write_checkpoint_if_changed(self) -> None:
        if self._checkpointed != (self._recovery_point, self._log_start_offset):
            self._write_checkpoint()
