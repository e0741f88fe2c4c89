"""The cleaner's pure rules (``log.cleaner.plan``) on hand-made segment snapshots, and its configuration."""

from __future__ import annotations

import pytest

from log.cleaner.plan import (
    Cleanable,
    CleanerConfig,
    cleanable_range,
    filthiest,
    first_dirty_offset,
    group_segments,
    is_due,
)
from log.config import LogConfig
from log.policy import SegmentInfo

NOW = 1_700_000_000_000
COMPACT = LogConfig(cleanup_policy=frozenset({"compact"}))


def seg(base: int, end: int, size: int = 1000, ts: int = NOW - 10_000) -> SegmentInfo:
    return SegmentInfo(base, end, size, ts, ts, ts, False)


# Four closed segments [0,100) [100,200) [200,300) [300,400) and the active one from 400.
SEGMENTS = [seg(0, 100), seg(100, 200), seg(200, 300), seg(300, 400), seg(400, 450, 500)]


def plan(config: LogConfig = COMPACT, dirty: int | None = None, bound: int = 450, now: int = NOW) -> Cleanable:
    return cleanable_range(
        SEGMENTS, config, checkpointed_dirty_offset=dirty, log_start_offset=0, upper_bound=bound, now_ms=now
    )


def test_never_cleaned_log_is_all_dirty_up_to_the_active_segment() -> None:
    c = plan()
    assert (c.first_dirty_offset, c.first_uncleanable_offset) == (0, 400)
    assert (c.clean_count, c.cleanable_count) == (0, 4)
    assert c.dirty_ratio == 1.0


def test_dirty_ratio_counts_clean_and_dirty_cleanable_bytes() -> None:
    c = plan(dirty=300)
    assert (c.clean_count, c.cleanable_count) == (3, 4)
    assert (c.clean_bytes, c.dirty_bytes) == (3000, 1000)
    assert c.dirty_ratio == 0.25
    assert not is_due(c, COMPACT, NOW, None), "0.25 is below min.cleanable.dirty.ratio=0.5"
    assert is_due(c, LogConfig(cleanup_policy=frozenset({"compact"}), min_cleanable_dirty_ratio=0.2), NOW, None)


def test_upper_bound_stops_at_whole_segments() -> None:
    c = plan(bound=250)
    assert c.first_uncleanable_offset == 250
    assert c.cleanable_count == 2, "the segment holding the bound is not cleanable"


def test_min_compaction_lag_makes_young_segments_uncleanable() -> None:
    config = LogConfig(cleanup_policy=frozenset({"compact"}), min_compaction_lag_ms=5_000)
    young = [seg(0, 100), seg(100, 200, ts=NOW - 1_000), seg(200, 300), seg(300, 320, 10)]
    c = cleanable_range(young, config, checkpointed_dirty_offset=None, log_start_offset=0, upper_bound=320, now_ms=NOW)
    assert (c.first_uncleanable_offset, c.cleanable_count) == (100, 1)


def test_max_compaction_lag_makes_a_log_due_whatever_its_ratio() -> None:
    config = LogConfig(cleanup_policy=frozenset({"compact"}), max_compaction_lag_ms=5_000)
    c = plan(config, dirty=300)
    assert c.needs_compaction_now
    assert is_due(c, config, NOW, None)
    assert not plan(config, dirty=300, now=NOW - 6_000).needs_compaction_now


def test_a_passed_delete_horizon_makes_a_clean_log_due() -> None:
    c = plan(dirty=400)
    assert c.dirty_bytes == 0
    assert not is_due(c, COMPACT, NOW, None)
    assert not is_due(c, COMPACT, NOW, NOW + 1)
    assert is_due(c, COMPACT, NOW, NOW)


@pytest.mark.parametrize(("checkpointed", "expected"), [(None, 50), (10, 50), (120, 120), (400, 400), (401, 50)])
def test_first_dirty_offset_resets_outside_the_log(checkpointed: int | None, expected: int) -> None:
    assert first_dirty_offset(checkpointed, log_start_offset=50, active_base_offset=400) == expected


def test_groups_respect_segment_bytes_and_int32_offsets() -> None:
    segments = [seg(0, 10, 300), seg(10, 20, 300), seg(20, 30, 300), seg(30, 40, 900), seg(40, 50, 50)]
    assert group_segments(segments, 1000) == [(0, 3), (3, 5)]
    assert group_segments(segments, 100) == [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5)]
    far = [seg(0, 10, 1), seg(2**31 - 5, 2**31 + 5, 1)]
    assert group_segments(far, 10**9) == [(0, 1), (1, 2)]
    assert group_segments([], 1000) == []


def test_filthiest_prefers_overdue_then_ratio() -> None:
    low, high = plan(dirty=300), plan()
    assert filthiest([("low", low), ("high", high)]) == ("high", high)
    assert filthiest([]) is None


def test_cleaner_config_sizes_the_map_per_thread() -> None:
    assert CleanerConfig().max_map_entries == int(128 * 1024 * 1024 // 24 * 0.9)
    assert CleanerConfig(threads=2, dedupe_buffer_size=48_000, io_buffer_load_factor=1.0).max_map_entries == 1000
    with pytest.raises(ValueError, match=r"log\.cleaner\.threads"):
        CleanerConfig(threads=0)
    with pytest.raises(ValueError, match=r"load\.factor"):
        CleanerConfig(io_buffer_load_factor=0.0)
