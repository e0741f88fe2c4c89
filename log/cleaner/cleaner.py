"""Cleaning one log: the file work around the pure rules of ``plan``, ``offset_map`` and ``retention``.

A pass (Kafka's ``Cleaner.doClean``), given a :class:`~log.cleaner.plan.Cleanable` snapshot:

1. build the offset map from the dirty cleanable segments, batch by batch, until it is full
   (``end_offset``: the offset after the last batch mapped), and note each producer's last batch; the
   records of aborted transactions stay out of the map (``transactions`` TX1);
2. group the segments below ``end_offset`` (clean and dirty ones) by size (``plan.group_segments``);
3. for each group, write the surviving batches of its segments into ``<B>.log.cleaned`` (+ indexes,
   built by :class:`~log.segment.Segment` as for any append; an empty batch when the group's last batch
   lost every record, see ``swap``), fsync and close it, then ask the Log to
   swap it in (:meth:`Log.replace_segments` + ``swap.install_cleaned``, under the Log's lock). A group
   whose segments changed meanwhile (retention, truncation) ends the pass; groups already swapped stay.

Segments are read through their own file descriptors, without the Log's lock: a non-active segment
never changes in place, and the swap checks that it is still the same segment. Appends, reads and
rolls go on meanwhile; only the swap itself holds the lock, for a few renames and an index load.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from log.append import PreparedBatch
from log.cleaner.offset_map import OffsetMap
from log.cleaner.plan import Cleanable, CleanerConfig, group_segments
from log.cleaner.retention import RetentionContext, filter_batch, group_end_batch
from log.cleaner.swap import StepHook, install_cleaned, remove_cleaned
from log.cleaner.transactions import TransactionFilter
from log.errors import CorruptRecordError, StorageError
from log.log import Log
from log.logdir import CLEANED_SUFFIX
from log.policy import SegmentInfo
from log.record.header import HEADER_SIZE, BatchHeader, batch_size_at, parse_header
from log.segment import LOG_SUFFIX, Segment, file_stem
from log.txn_index import AbortedTxn

logger = logging.getLogger(__name__)


class SegmentGoneError(StorageError):
    """A segment the pass planned to read was deleted meanwhile (retention, truncation)."""


@dataclass(frozen=True, slots=True)
class CleanResult:
    """What one pass did (Kafka's ``CleanerStats``, trimmed)."""

    first_dirty_offset: int  # where the pass started mapping
    end_offset: int  # the new first dirty offset: everything below it was cleaned with this map
    complete: bool  # False when a group could not be swapped (its segments changed): end_offset unchanged
    segments_before: int
    segments_after: int
    map_bytes_read: int  # bytes read to build the offset map (the dirty section)
    bytes_read: int  # bytes read by the cleaning itself (every segment cleaned)
    bytes_written: int
    records_read: int
    records_retained: int
    map_entries: int
    tombstone_horizon_ms: int | None  # earliest delete horizon of a tombstone left in the log


def read_batches(path: Path, size_bytes: int, io_buffer_size: int) -> Iterator[tuple[int, bytes]]:
    """Yield ``(position, batch bytes)`` of the first ``size_bytes`` of a .log, reading ``io_buffer_size`` at once.

    The buffer grows to hold a batch larger than it. Structural problems raise CorruptRecordError.
    """
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        raise SegmentGoneError(f"{path} was deleted while being cleaned") from None
    try:
        pos = 0
        while pos < size_bytes:
            chunk = os.pread(fd, min(io_buffer_size, size_bytes - pos), pos)
            offset = 0
            while True:
                size = batch_size_at(chunk, offset)
                if size is None or offset + size > len(chunk):
                    break
                if size < HEADER_SIZE:
                    raise CorruptRecordError(f"{path}: batch of {size} bytes at position {pos + offset}")
                yield pos + offset, chunk[offset : offset + size]
                offset += size
            if offset == 0:  # one batch larger than the buffer: read it whole
                size = batch_size_at(chunk, 0)
                if size is None or pos + size > size_bytes:
                    raise CorruptRecordError(f"{path}: torn batch at position {pos}")
                io_buffer_size = max(io_buffer_size, size)
                continue
            pos += offset
    finally:
        os.close(fd)


@dataclass(slots=True)
class _Totals:
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_retained: int = 0
    horizon_ms: int | None = None

    def add(self, size_bytes: int, records_read: int, records_retained: int, horizon_ms: int | None) -> None:
        self.bytes_read += size_bytes
        self.records_read += records_read
        self.records_retained += records_retained
        if horizon_ms is not None:
            self.horizon_ms = horizon_ms if self.horizon_ms is None else min(self.horizon_ms, horizon_ms)


class Cleaner:
    """Cleans logs one pass at a time. Not thread-safe: one per cleaner thread."""

    def __init__(
        self,
        config: CleanerConfig,
        on_swap_step: StepHook | None = None,
        should_stop: Callable[[], bool] | None = None,
    ) -> None:
        self.config = config
        self._on_swap_step = on_swap_step  # tests: simulate a crash inside a swap
        self._should_stop = should_stop or (lambda: False)  # checked between groups: a pass ends early

    def clean(self, log: Log, cleanable: Cleanable, now_ms: int) -> CleanResult:
        """One pass over ``log`` as planned by ``cleanable`` (see the module docstring).

        A segment deleted meanwhile (retention, truncation) ends the pass early, incomplete.
        """
        try:
            return self._clean(log, cleanable, now_ms)
        except SegmentGoneError as e:
            logger.info("%s; the cleaning pass ends", e)
            return CleanResult(
                first_dirty_offset=cleanable.first_dirty_offset,
                end_offset=cleanable.first_dirty_offset,
                complete=False,
                segments_before=len(cleanable.segments),
                segments_after=len(log.segments),
                map_bytes_read=0,
                bytes_read=0,
                bytes_written=0,
                records_read=0,
                records_retained=0,
                map_entries=0,
                tombstone_horizon_ms=None,
            )

    def _clean(self, log: Log, cleanable: Cleanable, now_ms: int) -> CleanResult:
        segments = cleanable.segments
        offsets = OffsetMap(self.config.max_map_entries)
        producers: dict[int, int] = {}
        map_bytes_read = self._scan_producers(log.dir, segments[: cleanable.clean_count], producers)
        mapped = 0
        full = False
        dirty = cleanable.dirty_segments
        # TX1: the aborted transactions of the dirty range; their records stay out of the map
        in_map = TransactionFilter(_aborted_in(log, dirty[0].base_offset, dirty[-1].next_offset) if dirty else ())
        for info in dirty:
            if full or self._should_stop():
                break
            for _, batch in read_batches(_log_path(log.dir, info), info.size_bytes, self.config.io_buffer_size):
                header = parse_header(batch)
                map_bytes_read += len(batch)
                if header.producer_id >= 0:
                    producers[header.producer_id] = header.last_offset
                aborted = in_map.on_batch(batch, header)
                if full or header.last_offset < cleanable.first_dirty_offset:  # full, or mapped by an earlier pass
                    continue
                full = not offsets.add_batch(batch, header, keys=not aborted)
            mapped += 1
        end_offset = max(offsets.latest_offset + 1, cleanable.first_dirty_offset)
        if mapped and not full and mapped == len(cleanable.dirty_segments):
            end_offset = max(end_offset, cleanable.dirty_segments[-1].next_offset)
        to_clean = [s for s in segments[: cleanable.cleanable_count] if s.base_offset < end_offset]
        # TX1-TX3 over the whole range cleaned, one filter for the pass (its groups in offset order), from the
        # index entries as they are before any group is swapped
        transactions = TransactionFilter(
            _aborted_in(log, to_clean[0].base_offset, to_clean[-1].next_offset) if to_clean else ()
        )
        ctx = RetentionContext.for_pass(
            offsets, now_ms, log.config.delete_retention_ms, producers, cleanable.first_dirty_offset, transactions
        )
        return self._clean_groups(log, cleanable, to_clean, ctx, end_offset, map_bytes_read)

    def _clean_groups(
        self,
        log: Log,
        cleanable: Cleanable,
        to_clean: list[SegmentInfo],
        ctx: RetentionContext,
        end_offset: int,
        map_bytes_read: int,
    ) -> CleanResult:
        totals = _Totals()
        complete = not self._should_stop()
        for start, end in group_segments(to_clean, log.config.segment_bytes) if complete else ():
            if self._should_stop():
                complete = False
                break
            group = to_clean[start:end]
            base = group[0].base_offset
            self._write_group(log, group, ctx, totals)
            install = partial(
                install_cleaned, log.dir, base, config=log.config, now_ms=ctx.now_ms, on_step=self._on_swap_step
            )
            try:
                swapped = log.replace_segments(group, install)
            except StorageError as e:  # closed meanwhile (partition deleted, or reopened with a new config)
                remove_cleaned(log.dir, base)  # never touches a committed .swap: recovery owns that one
                logger.warning("%s: the cleaning pass ends: %s", log.dir, e)
                complete = False
                break
            if not swapped:
                remove_cleaned(log.dir, base)
                logger.info("%s: segments from %d changed while being cleaned; the pass ends", log.dir, base)
                complete = False
                break
        return CleanResult(
            first_dirty_offset=cleanable.first_dirty_offset,
            end_offset=end_offset if complete else cleanable.first_dirty_offset,
            complete=complete,
            segments_before=len(cleanable.segments),
            segments_after=len(log.segments),
            map_bytes_read=map_bytes_read,
            bytes_read=totals.bytes_read,
            bytes_written=totals.bytes_written,
            records_read=totals.records_read,
            records_retained=totals.records_retained,
            map_entries=len(ctx.offsets),
            tombstone_horizon_ms=totals.horizon_ms,
        )

    def _write_group(self, log: Log, group: list[SegmentInfo], ctx: RetentionContext, totals: _Totals) -> None:
        """Write the survivors of ``group`` to ``<B>.*.cleaned``, fsynced and closed."""
        base = group[0].base_offset
        segment = Segment.create(log.dir, base, log.config, ctx.now_ms, file_suffix=CLEANED_SUFFIX)
        last: BatchHeader | None = None
        try:
            for info in group:
                pending: list[PreparedBatch] = []
                for _, batch in read_batches(_log_path(log.dir, info), info.size_bytes, self.config.io_buffer_size):
                    last = parse_header(batch)
                    outcome = filter_batch(batch, last, ctx)
                    totals.add(len(batch), outcome.records_read, outcome.records_retained, outcome.tombstone_horizon_ms)
                    if outcome.data is not None:
                        pending.append(PreparedBatch(parse_header(outcome.data), (outcome.data,)))
                if pending:
                    segment.append(pending, ctx.now_ms)
            if last is not None and segment.next_offset < last.next_offset:
                # The group's last batch went away: an empty batch keeps its offsets, so the cleaned
                # segment ends where the group did and recovery of an interrupted swap (log.logdir)
                # replaces exactly the group's segments.
                marker = group_end_batch(last)
                segment.append([PreparedBatch(parse_header(marker), (marker,))], ctx.now_ms)
            segment.on_become_inactive()
            segment.flush()
            totals.bytes_written += segment.size_bytes
        except BaseException:
            segment.close()
            remove_cleaned(log.dir, base)
            raise
        segment.close()

    def _scan_producers(self, directory: Path, segments: tuple[SegmentInfo, ...], producers: dict[int, int]) -> int:
        """Note the last batch of each producer in the clean section (headers only); returns bytes read."""
        total = 0
        for info in segments:
            for _, batch in read_batches(_log_path(directory, info), info.size_bytes, self.config.io_buffer_size):
                header = parse_header(batch)
                if header.producer_id >= 0:
                    producers[header.producer_id] = header.last_offset
                total += len(batch)
        return total


def _aborted_in(log: Log, start: int, end: int) -> list[AbortedTxn]:
    """The aborted transactions with records in ``[start, end)`` (their index entries, wherever the marker is)."""
    try:
        return log.collect_aborted(start, end)
    except StorageError as e:  # closed meanwhile (partition deleted, or reopened with a new config)
        raise SegmentGoneError(f"{log.dir}: {e}") from e


def _log_path(directory: Path, info: SegmentInfo) -> Path:
    return directory / (file_stem(info.base_offset) + LOG_SUFFIX)
