"""The offset and time indexes: lookups, truncation, file layout, and the load-time sanity check."""

from __future__ import annotations

import struct
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from log.index import (
    IndexSanityError,
    OffsetIndex,
    TimeIndex,
    check_time_entries,
)

BASE = 1000


def offset_index(tmp_path: Path, max_bytes: int = 1 << 20) -> OffsetIndex:
    return OffsetIndex(tmp_path / "00000000000000001000.index", BASE, max_bytes)


def time_index(tmp_path: Path, max_bytes: int = 1 << 20) -> TimeIndex:
    return TimeIndex(tmp_path / "00000000000000001000.timeindex", BASE, max_bytes)


def test_offset_index_file_is_kafkas_layout(tmp_path: Path) -> None:
    index = offset_index(tmp_path)
    index.append(BASE + 5, 100)
    index.append(BASE + 9, 250)
    index.close()
    data = (tmp_path / "00000000000000001000.index").read_bytes()
    assert data == struct.pack(">ii", 5, 100) + struct.pack(">ii", 9, 250)


def test_time_index_file_is_kafkas_layout(tmp_path: Path) -> None:
    index = time_index(tmp_path)
    assert index.maybe_append(1_700_000_000_000, BASE + 3)
    index.close()
    data = (tmp_path / "00000000000000001000.timeindex").read_bytes()
    assert data == struct.pack(">qi", 1_700_000_000_000, 3)


def test_offset_lookup(tmp_path: Path) -> None:
    index = offset_index(tmp_path)
    assert index.lookup(BASE + 50) == 0  # empty: scan from the start
    index.append(BASE + 10, 300)
    index.append(BASE + 20, 600)
    assert index.lookup(BASE + 9) == 0
    assert index.lookup(BASE + 10) == 300
    assert index.lookup(BASE + 19) == 300
    assert index.lookup(BASE + 20) == 600
    assert index.lookup(BASE + 10**6) == 600
    index.close()


def test_offset_index_refuses_to_go_back(tmp_path: Path) -> None:
    index = offset_index(tmp_path)
    index.append(BASE + 10, 300)
    with pytest.raises(AssertionError, match="must grow"):
        index.append(BASE + 10, 400)
    index.close()


def test_time_index_appends_only_growing_timestamps(tmp_path: Path) -> None:
    index = time_index(tmp_path)
    assert index.last_entry() == (-1, BASE)
    assert not index.maybe_append(-1, BASE)
    assert index.maybe_append(100, BASE + 1)
    assert not index.maybe_append(100, BASE + 2)
    assert not index.maybe_append(50, BASE + 3)
    assert index.maybe_append(200, BASE + 4)
    assert index.items() == [(100, 1), (200, 4)]
    assert index.lookup(99) == (-1, BASE)
    assert index.lookup(150) == (100, BASE + 1)
    assert index.lookup(10**15) == (200, BASE + 4)
    index.close()


def test_truncation_drops_entries_at_or_after_the_offset(tmp_path: Path) -> None:
    offsets, times = offset_index(tmp_path), time_index(tmp_path)
    for i in range(1, 6):
        offsets.append(BASE + 10 * i, 100 * i)
        times.maybe_append(1000 * i, BASE + 10 * i)
    offsets.truncate_to(BASE + 30)
    times.truncate_to(BASE + 30)
    assert offsets.items() == [(10, 100), (20, 200)]
    assert times.items() == [(1000, 10), (2000, 20)]
    offsets.close()
    times.close()
    assert (tmp_path / "00000000000000001000.index").stat().st_size == 16
    assert (tmp_path / "00000000000000001000.timeindex").stat().st_size == 24


def test_is_full_counts_entries_against_segment_index_bytes(tmp_path: Path) -> None:
    index = offset_index(tmp_path, max_bytes=20)  # room for 2 entries of 8 bytes
    index.append(BASE + 1, 10)
    assert not index.is_full
    index.append(BASE + 2, 20)
    assert index.is_full
    index.close()


def test_load_round_trips(tmp_path: Path) -> None:
    offsets, times = offset_index(tmp_path), time_index(tmp_path)
    offsets.append(BASE + 7, 64)
    times.maybe_append(5, BASE + 7)
    offsets.close()
    times.close()
    offsets, times = offset_index(tmp_path), time_index(tmp_path)
    offsets.load(log_size_bytes=65)
    times.load()
    assert offsets.items() == [(7, 64)]
    assert times.items() == [(5, 7)]
    assert offsets.last_offset() == BASE + 7
    offsets.close()
    times.close()


@pytest.mark.parametrize(
    ("data", "log_size", "match"),
    [
        (b"\x00" * 7, 100, "multiple of 8"),
        (struct.pack(">ii", 5, 10) + struct.pack(">ii", 5, 20), 100, "does not follow"),
        (struct.pack(">ii", 5, 20) + struct.pack(">ii", 6, 10), 100, "does not follow"),
        (struct.pack(">ii", 5, 100), 100, "past the log"),
        (struct.pack(">ii", -3, 10), 100, "does not follow"),  # negative relative offset
    ],
)
def test_offset_index_sanity_failures(tmp_path: Path, data: bytes, log_size: int, match: str) -> None:
    path = tmp_path / "00000000000000001000.index"
    path.write_bytes(data)
    index = offset_index(tmp_path)
    with pytest.raises(IndexSanityError, match=match):
        index.load(log_size)
    index.close()


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"\x00" * 13, "multiple of 12"),
        (struct.pack(">qi", 10, 1) + struct.pack(">qi", 10, 2), "does not follow"),
        (struct.pack(">qi", 10, 5) + struct.pack(">qi", 20, 4), "does not follow"),
        (struct.pack(">qi", 10, -1), "does not follow"),
    ],
)
def test_time_index_sanity_failures(tmp_path: Path, data: bytes, match: str) -> None:
    (tmp_path / "00000000000000001000.timeindex").write_bytes(data)
    index = time_index(tmp_path)
    with pytest.raises(IndexSanityError, match=match):
        index.load()
    index.close()


def test_rebuild_writes_the_file_once_at_the_end(tmp_path: Path) -> None:
    index = offset_index(tmp_path)
    index.append(BASE + 1, 10)
    index.begin_rebuild()
    index.append(BASE + 3, 30)
    index.append(BASE + 4, 40)
    assert (tmp_path / "00000000000000001000.index").stat().st_size == 8  # untouched while rebuilding
    index.end_rebuild()
    assert (tmp_path / "00000000000000001000.index").read_bytes() == struct.pack(">iiii", 3, 30, 4, 40)
    index.close()


@settings(max_examples=100, deadline=None, derandomize=True)
@given(
    keys=st.lists(st.integers(0, 10_000), unique=True, max_size=40).map(sorted),
    targets=st.lists(st.integers(-5, 10_010), min_size=1, max_size=10),
)
def test_offset_lookup_matches_a_linear_search(keys: list[int], targets: list[int]) -> None:
    with tempfile.TemporaryDirectory() as d:
        index = offset_index(Path(d))
        for key in keys:
            index.append(BASE + key, 10 * key + 1)
        for target in targets:
            expected = 0
            for key in keys:
                if key <= target:
                    expected = 10 * key + 1
            assert index.lookup(BASE + target) == expected
        index.close()


@settings(max_examples=100, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.integers(-1, 100), st.integers(-1, 100)), max_size=10))
def test_time_check_accepts_exactly_the_monotonic_lists(entries: list[tuple[int, int]]) -> None:
    monotonic = all(t >= 0 and o >= 0 for t, o in entries) and all(
        a[0] < b[0] and a[1] <= b[1] for a, b in zip(entries, entries[1:], strict=False)
    )
    try:
        check_time_entries(entries, "test")
    except IndexSanityError:
        assert not monotonic
    else:
        assert monotonic
