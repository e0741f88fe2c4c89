"""The Log's decisions as pure functions: when to roll, what retention deletes, when to flush.

Each takes plain values (a :class:`SegmentInfo` snapshot, the config, a time) and returns a decision;
``log.log`` applies it to files. Kafka's rules, cited per function.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from log.config import LogConfig

MAX_RELATIVE_OFFSET = 2**31 - 1  # relative offsets are int32 in both indexes


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    """A read-only snapshot of one segment, as the Log's ``segments`` property returns it."""

    base_offset: int
    next_offset: int  # offset after the segment's last batch; base_offset when empty
    size_bytes: int
    max_timestamp: int  # largest batch max timestamp, -1 when no batch carries one
    largest_timestamp: int  # max_timestamp, or the segment's creation time when there is none
    rolling_base_ms: int  # when the segment's age starts (first batch appended), for segment.ms
    index_full: bool  # the offset or time index has reached segment.index.bytes

    @property
    def is_empty(self) -> bool:
        return self.size_bytes == 0


def roll_reason(
    config: LogConfig, active: SegmentInfo, now_ms: int, append_size_bytes: int, append_last_offset: int
) -> str | None:
    """Why the active segment must roll before an append, or None (Kafka's ``LogSegment.shouldRoll``).

    An empty segment never rolls. Otherwise it rolls when the append would take it past
    ``segment.bytes``; when more than ``segment.ms`` passed (by the clock) since its first batch was
    appended (no jitter); when an index is full; or when the append's last offset no longer fits a
    relative int32 offset.
    """
    if active.size_bytes == 0:
        return None
    if active.size_bytes > config.segment_bytes - append_size_bytes:
        return f"size {active.size_bytes} + {append_size_bytes} exceeds segment.bytes={config.segment_bytes}"
    age_ms = now_ms - active.rolling_base_ms
    if age_ms > config.segment_ms:
        return f"age {age_ms} ms exceeds segment.ms={config.segment_ms}"
    if active.index_full:
        return f"index full (segment.index.bytes={config.segment_index_bytes})"
    if append_last_offset - active.base_offset > MAX_RELATIVE_OFFSET:
        return f"offset {append_last_offset} does not fit relative to {active.base_offset}"
    return None


def retention_count(
    segments: Sequence[SegmentInfo],
    config: LogConfig,
    now_ms: int,
    log_start_offset: int,
    high_watermark: int | None = None,
) -> int:
    """How many of the oldest segments retention deletes (Kafka's ``deleteOldSegments``).

    Candidates are every segment but the last (the active one is never deleted) and, given a high
    watermark, only segments that end at or below it. Each rule deletes a prefix of the candidates:

    * ``retention.ms`` (>= 0, policy includes delete): ``now - largest_timestamp > retention.ms``;
    * ``retention.bytes`` (>= 0, policy includes delete): the oldest segments while the log stays at or
      above ``retention.bytes`` without them;
    * log start offset (any policy): segments that end at or below ``log_start_offset``.

    The result is the longest of those prefixes.
    """
    candidates = max(0, len(segments) - 1)
    if high_watermark is not None:
        candidates = _prefix(
            segments[:candidates], lambda i, s: segments[i + 1].base_offset <= high_watermark
        )
    eligible = segments[:candidates]
    count = _prefix(eligible, lambda i, s: segments[i + 1].base_offset <= log_start_offset)
    if config.delete_enabled and config.retention_ms >= 0:
        count = max(count, _prefix(eligible, lambda i, s: now_ms - s.largest_timestamp > config.retention_ms))
    if config.delete_enabled and config.retention_bytes >= 0:
        excess = sum(s.size_bytes for s in segments) - config.retention_bytes
        count = max(count, _size_prefix(eligible, excess))
    return count


def _prefix(segments: Sequence[SegmentInfo], breached: Callable[[int, SegmentInfo], bool]) -> int:
    for i, segment in enumerate(segments):
        if not breached(i, segment):
            return i
    return len(segments)


def _size_prefix(segments: Sequence[SegmentInfo], excess_bytes: int) -> int:
    count = 0
    for segment in segments:
        if excess_bytes - segment.size_bytes < 0:
            break
        excess_bytes -= segment.size_bytes
        count += 1
    return count


def flush_due(config: LogConfig, unflushed_messages: int, now_ms: int, last_flush_ms: int) -> bool:
    """Whether ``flush.messages`` or ``flush.ms`` asks for an fsync now (never when nothing is unflushed)."""
    if unflushed_messages <= 0:
        return False
    return unflushed_messages >= config.flush_messages or now_ms - last_flush_ms >= config.flush_ms
