"""The cleaner's decisions as pure functions: what is cleanable, how dirty a log is, which log goes next.

Vocabulary (Kafka's ``LogCleanerManager``)::

    clean section      segments that end at or below the first dirty offset: cleaned before
    dirty section      segments from the first dirty offset on
    first uncleanable  min(upper bound the caller gives (the high watermark), the active segment's base,
                       the base of the first dirty segment younger than min.compaction.lag.ms)
    cleanable          the non-active segments, oldest first, whose records all lie below the first
                       uncleanable offset (whole segments only: nothing at or above it is ever touched)
    dirty ratio        dirty cleanable bytes / (clean bytes + dirty cleanable bytes)

A log is due for cleaning when its dirty ratio exceeds ``min.cleanable.dirty.ratio``, when its oldest
dirty cleanable segment began more than ``max.compaction.lag.ms`` ago, or when a delete horizon of a
tombstone it holds has passed (KIP-534: the tombstone can go now, and only a new pass removes it).
Among due logs the one with the highest dirty ratio goes first (Kafka's ``grabFilthiestCompactedLog``).

Cleaned segments are merged in groups (Kafka's ``groupSegmentsBySize``): consecutive segments whose
original sizes add up to at most ``segment.bytes`` and whose offsets fit one segment's int32 relative
offsets become one cleaned segment.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from log.config import LONG_MAX, LogConfig
from log.policy import MAX_RELATIVE_OFFSET, SegmentInfo

BYTES_PER_MAP_ENTRY = 24  # Kafka's SkimpyOffsetMap: a 16-byte MD5 of the key plus an 8-byte offset


@dataclass(frozen=True, slots=True)
class CleanerConfig:
    """The broker's ``log.cleaner.*`` settings that the cleaner acts on (Kafka's names and defaults)."""

    enable: bool = True  # log.cleaner.enable
    threads: int = 1  # log.cleaner.threads
    backoff_ms: int = 15_000  # log.cleaner.backoff.ms: sleep when no log is due
    dedupe_buffer_size: int = 128 * 1024 * 1024  # log.cleaner.dedupe.buffer.size, shared by all threads
    io_buffer_size: int = 512 * 1024  # log.cleaner.io.buffer.size: read unit (grown for larger batches)
    io_buffer_load_factor: float = 0.9  # log.cleaner.io.buffer.load.factor: how full the map may get

    def __post_init__(self) -> None:
        if self.threads < 1:
            raise ValueError(f"log.cleaner.threads must be at least 1, not {self.threads}")
        if self.dedupe_buffer_size < BYTES_PER_MAP_ENTRY * self.threads:
            raise ValueError(f"log.cleaner.dedupe.buffer.size={self.dedupe_buffer_size} is too small")
        if self.io_buffer_size < 1:
            raise ValueError(f"log.cleaner.io.buffer.size must be positive, not {self.io_buffer_size}")
        if not 0.0 < self.io_buffer_load_factor <= 1.0:
            raise ValueError(f"log.cleaner.io.buffer.load.factor must be in (0, 1], not {self.io_buffer_load_factor}")

    @property
    def max_map_entries(self) -> int:
        """Keys one thread's offset map may hold in one pass (Kafka's sizing of the dedupe buffer)."""
        per_thread = self.dedupe_buffer_size // self.threads
        return max(1, int(per_thread // BYTES_PER_MAP_ENTRY * self.io_buffer_load_factor))


@dataclass(frozen=True, slots=True)
class Cleanable:
    """Where a log stands for the cleaner, computed from a snapshot of its segments."""

    segments: tuple[SegmentInfo, ...]  # the snapshot, oldest first; the last is the active one
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_count: int  # segments[:clean_count] end at or below the first dirty offset
    cleanable_count: int  # segments[:cleanable_count] may be cleaned (never the active one)
    clean_bytes: int
    dirty_bytes: int  # bytes of segments[clean_count:cleanable_count]
    needs_compaction_now: bool  # max.compaction.lag.ms passed for the oldest dirty cleanable segment

    @property
    def dirty_ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0

    @property
    def dirty_segments(self) -> tuple[SegmentInfo, ...]:
        return self.segments[self.clean_count : self.cleanable_count]


def first_dirty_offset(checkpointed: int | None, log_start_offset: int, active_base_offset: int) -> int:
    """Kafka's rule: a checkpoint below the log start or past the active segment is reset to the log start."""
    if checkpointed is None or checkpointed < log_start_offset or checkpointed > active_base_offset:
        return log_start_offset
    return checkpointed


def cleanable_range(
    segments: Sequence[SegmentInfo],
    config: LogConfig,
    *,
    checkpointed_dirty_offset: int | None,
    log_start_offset: int,
    upper_bound: int,
    now_ms: int,
) -> Cleanable:
    """What may be cleaned now (see the module docstring); ``upper_bound`` is exclusive (the high watermark)."""
    snapshot = tuple(segments)
    active = snapshot[-1]
    dirty = first_dirty_offset(checkpointed_dirty_offset, log_start_offset, active.base_offset)
    uncleanable = min(upper_bound, active.base_offset)
    if config.min_compaction_lag_ms > 0:
        for segment in snapshot[:-1]:
            young = segment.largest_timestamp > now_ms - config.min_compaction_lag_ms
            if segment.next_offset > dirty and young:
                uncleanable = min(uncleanable, segment.base_offset)
                break
    cleanable_count = 0
    for segment in snapshot[:-1]:
        if segment.next_offset > uncleanable:
            break
        cleanable_count += 1
    clean_count = 0
    for segment in snapshot[:cleanable_count]:
        if segment.next_offset > dirty or segment.base_offset >= dirty:
            break
        clean_count += 1
    dirty_part = snapshot[clean_count:cleanable_count]
    lag = config.max_compaction_lag_ms
    overdue = lag < LONG_MAX and any(s.size_bytes and now_ms - s.rolling_base_ms >= lag for s in dirty_part)
    return Cleanable(
        segments=snapshot,
        first_dirty_offset=dirty,
        first_uncleanable_offset=uncleanable,
        clean_count=clean_count,
        cleanable_count=cleanable_count,
        clean_bytes=sum(s.size_bytes for s in snapshot[:clean_count]),
        dirty_bytes=sum(s.size_bytes for s in dirty_part),
        needs_compaction_now=overdue,
    )


def is_due(cleanable: Cleanable, config: LogConfig, now_ms: int, tombstone_horizon_ms: int | None) -> bool:
    """Whether the log should be cleaned now (see the module docstring)."""
    if cleanable.cleanable_count == 0:
        return False
    if cleanable.dirty_bytes > 0 and (
        cleanable.needs_compaction_now or cleanable.dirty_ratio > config.min_cleanable_dirty_ratio
    ):
        return True
    return tombstone_horizon_ms is not None and tombstone_horizon_ms <= now_ms


def group_segments(segments: Sequence[SegmentInfo], max_size_bytes: int) -> list[tuple[int, int]]:
    """Split ``segments`` into runs ``[start, end)`` of indexes, each to become one cleaned segment.

    A run grows while its original sizes sum to at most ``max_size_bytes`` and its last offset stays
    within an int32 of its first segment's base offset; every run holds at least one segment.
    """
    groups: list[tuple[int, int]] = []
    start = 0
    while start < len(segments):
        size = segments[start].size_bytes
        end = start + 1
        while end < len(segments):
            following = segments[end]
            last_offset = max(following.next_offset - 1, following.base_offset)
            if size + following.size_bytes > max_size_bytes:
                break
            if last_offset - segments[start].base_offset > MAX_RELATIVE_OFFSET:
                break
            size += following.size_bytes
            end += 1
        groups.append((start, end))
        start = end
    return groups


def filthiest(candidates: Sequence[tuple[str, Cleanable]]) -> tuple[str, Cleanable] | None:
    """The due candidate with the highest dirty ratio (overdue ones first), or None."""
    if not candidates:
        return None
    return max(candidates, key=lambda c: (c[1].needs_compaction_now, c[1].dirty_ratio))
