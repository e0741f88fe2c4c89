"""One segment: writes, index rule, reads, truncation, timestamp lookup, load vs rebuild."""

from __future__ import annotations

import dataclasses
import os
import shutil
import struct
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch  # conftest imported kafka warning-free

from log.append import PreparedAppend, prepare_leader_append, validate_leader_append
from log.config import LogConfig
from log.errors import CorruptRecordError
from log.record.header import BatchHeader, parse_header
from log.record.validator import RecordPolicy
from log.segment import (
    _RECENT_BATCHES,
    Segment,
    iter_headers,
    parse_base_offset,
    record_timestamps,
    whole_batches_end,
)
from tests.log.conftest import (
    CODEC_GZIP,
    CODEC_LZ4,
    CODEC_NONE,
    CODEC_ZSTD,
    START_MS,
    make_batch,
    small_config,
    split_batches,
)

BASE = 100


def state(segment: Segment) -> tuple[object, ...]:
    """What a reload must reproduce. The rolling base is not: after a restart it is the first batch's
    timestamp (Kafka's rule), before it the clock at the first append."""
    info = dataclasses.replace(segment.info(), rolling_base_ms=0)
    return info, segment.offset_index.items(), segment.time_index.items(), segment._bytes_since_index


def prepared(batch: bytes, offset: int) -> PreparedAppend:
    validated = validate_leader_append(memoryview(batch), 1 << 30, RecordPolicy(START_MS), None)
    return prepare_leader_append(validated, offset, 7, None)


def fill(segment: Segment, batches: list[bytes]) -> list[tuple[int, BatchHeader]]:
    """Append each batch on its own; return the (position, header) of each as written."""
    out = []
    offset = segment.next_offset
    for batch in batches:
        p = prepared(batch, offset)
        position = segment.append(p.batches, START_MS)
        out.append((position, p.batches[0].header))
        offset = p.next_offset
    return out


def some_batches(n: int, records: int = 3) -> list[bytes]:
    return [
        make_batch([b"r%d-%d" % (i, j) for j in range(records)], base_timestamp=START_MS + 10 * i)
        for i in range(n)
    ]


@pytest.fixture
def segment(tmp_path: Path) -> Iterator[Segment]:
    seg = Segment.create(tmp_path, BASE, small_config(), START_MS)
    yield seg
    seg.close()


def test_file_names_carry_the_base_offset(tmp_path: Path, segment: Segment) -> None:
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [f"{100:020d}.index", f"{100:020d}.log", f"{100:020d}.timeindex"]
    assert parse_base_offset("00000000000000000100.log") == 100
    assert parse_base_offset("00000000000000000100.log.swap") == 100
    assert parse_base_offset("100.log") is None
    assert parse_base_offset("offsets.checkpoint") is None


def test_append_writes_patched_batches_back_to_back(tmp_path: Path, segment: Segment) -> None:
    written = fill(segment, some_batches(5))
    data = (tmp_path / "00000000000000000100.log").read_bytes()
    assert len(data) == segment.size_bytes
    batches = split_batches(data)
    assert [parse_header(b).base_offset for b in batches] == [100, 103, 106, 109, 112]
    assert all(parse_header(b).partition_leader_epoch == 7 for b in batches)
    assert [pos for pos, _ in written] == [sum(len(b) for b in batches[:i]) for i in range(5)]
    assert segment.next_offset == 115


def test_index_entries_point_at_batches_and_respect_the_interval(segment: Segment) -> None:
    written = fill(segment, some_batches(60))
    headers_at = {pos: header for pos, header in written}
    entries = segment.offset_index.items()
    assert entries, "60 batches of ~90 bytes with a 256-byte interval must be indexed"
    for relative, position in entries:
        assert headers_at[position].last_offset == BASE + relative
    positions = [0] + [p for _, p in entries]
    sizes = {pos: h.size_bytes for pos, h in written}
    for earlier, later in zip(positions, positions[1:], strict=False):
        assert later - earlier > 256  # an entry only after more than index.interval.bytes
        assert later - earlier <= 256 + max(sizes.values())  # and as soon as that is exceeded


def test_find_batch_returns_the_batch_holding_each_offset(segment: Segment) -> None:
    written = fill(segment, some_batches(40))
    for position, header in written:
        for offset in range(header.base_offset, header.next_offset):
            assert segment.find_batch(offset) == (position, header)
    assert segment.find_batch(segment.next_offset) is None


def test_find_batch_at_the_tail_agrees_with_the_scan_of_the_file(tmp_path: Path, segment: Segment) -> None:
    """A reader at the end finds its batch among the last ones appended (no file read): for every offset, before
    and after a truncation and the appends after it, the answer is the one a reopened segment finds by scanning
    the file from the index."""

    def answers(seg: Segment) -> list[tuple[int, BatchHeader] | None]:
        return [seg.find_batch(offset) for offset in range(BASE - 1, seg.next_offset + 2)]

    def scanned() -> list[tuple[int, BatchHeader] | None]:
        reopened, _ = Segment.open(tmp_path, BASE, small_config(), START_MS, recover=False, min_offset=BASE)
        try:
            assert not reopened._recent  # nothing appended since it was opened: every answer comes from the file
            return answers(reopened)
        finally:
            reopened.close()

    written = fill(segment, some_batches(3 * _RECENT_BATCHES))  # more than the tail keeps
    assert len(segment._recent) == _RECENT_BATCHES
    assert answers(segment) == scanned()
    segment.truncate_to(written[-10][1].base_offset + 1)  # inside the kept tail
    assert answers(segment) == scanned()
    segment.truncate_to(written[20][1].base_offset)  # below it
    assert not segment._recent
    fill(segment, some_batches(5, records=2))
    assert answers(segment) == scanned()
    assert segment.find_batch(segment.next_offset) is None


def test_read_respects_max_bytes_max_offset_and_min_one_batch(segment: Segment) -> None:
    written = fill(segment, some_batches(10))
    size = written[0][1].size_bytes
    position, records = segment.read(BASE + 4, 3 * size + 5, None, True) or (0, b"")
    assert position == written[1][0]
    assert [parse_header(b).base_offset for b in split_batches(records)] == [103, 106, 109]
    _, records = segment.read(BASE, 10, None, True) or (0, b"")
    assert len(split_batches(records)) == 1  # larger than max_bytes but whole
    assert segment.read(BASE, 10, None, False) == (0, b"")
    _, records = segment.read(BASE, 10**6, BASE + 7, True) or (0, b"")
    assert [parse_header(b).base_offset for b in split_batches(records)] == [100, 103, 106]
    assert segment.read(BASE + 6, 10**6, BASE + 6, True) == (written[2][0], b"")
    assert segment.read(BASE + 30, 10**6, None, True) is None


def test_truncate_to_cuts_file_and_indexes(segment: Segment) -> None:
    written = fill(segment, some_batches(50))
    cut_at = written[30]
    first_dropped = segment.truncate_to(cut_at[1].base_offset + 1)  # mid-batch: drops that batch
    assert first_dropped == cut_at[1].base_offset
    assert segment.size_bytes == cut_at[0]
    assert segment.next_offset == cut_at[1].base_offset
    assert all(BASE + rel < cut_at[1].base_offset for rel, _ in segment.offset_index.items())
    assert segment.max_timestamp == written[29][1].max_timestamp
    assert segment.truncate_to(10**9) is None


def test_reload_restores_state_without_a_full_scan(tmp_path: Path, segment: Segment) -> None:
    fill(segment, some_batches(30))
    before = state(segment)
    segment.close()
    loaded, cut = Segment.open(tmp_path, BASE, small_config(), START_MS, recover=False, min_offset=BASE)
    after = state(loaded)
    assert loaded.info().rolling_base_ms == START_MS + 2  # max timestamp of the first batch
    loaded.close()
    assert cut == 0
    assert after == before


@settings(max_examples=40, deadline=None, derandomize=True)
@given(
    sizes=st.lists(st.integers(1, 6), min_size=1, max_size=40),
    timestamps=st.lists(st.integers(START_MS - 1000, START_MS + 1000), min_size=40, max_size=40),
    interval=st.sampled_from([0, 64, 256, 1000]),
)
def test_rebuilt_indexes_equal_the_ones_built_by_appends(
    sizes: list[int], timestamps: list[int], interval: int
) -> None:
    config = LogConfig(index_interval_bytes=interval)
    batches = [make_batch([b"v"] * n, base_timestamp=timestamps[i]) for i, n in enumerate(sizes)]
    with tempfile.TemporaryDirectory() as d:
        segment = Segment.create(Path(d), 0, config, START_MS)
        fill(segment, batches)
        expected = state(segment)
        segment.close()
        for recover in (True, False):
            reopened, cut = Segment.open(Path(d), 0, config, START_MS, recover=recover, min_offset=0)
            got = state(reopened)
            reopened.close()
            assert cut == 0
            assert got == expected


@pytest.mark.parametrize(
    "damage",
    ["garbage_size", "positions_backwards", "position_inside_a_batch", "missing", "time_past_end"],
)
def test_index_sanity_failure_rebuilds_from_the_log(tmp_path: Path, segment: Segment, damage: str) -> None:
    fill(segment, some_batches(40))
    expected = (segment.offset_index.items(), segment.time_index.items())
    segment.close()
    index = tmp_path / "00000000000000000100.index"
    timeindex = tmp_path / "00000000000000000100.timeindex"
    entries = expected[0]
    if damage == "garbage_size":
        index.write_bytes(index.read_bytes() + b"\x01\x02\x03")
    elif damage == "positions_backwards":
        index.write_bytes(struct.pack(">ii", 5, 900) + struct.pack(">ii", 9, 300))
    elif damage == "position_inside_a_batch":
        rel, pos = entries[-1]
        moved = struct.pack(">ii", rel, pos + 1)
        index.write_bytes(b"".join(struct.pack(">ii", r, p) for r, p in entries[:-1]) + moved)
    elif damage == "missing":
        index.unlink()
    else:
        timeindex.write_bytes(timeindex.read_bytes() + struct.pack(">qi", START_MS * 2, 10**6))
    loaded, cut = Segment.open(tmp_path, BASE, small_config(), START_MS, recover=False, min_offset=BASE)
    got = (loaded.offset_index.items(), loaded.time_index.items())
    loaded.close()
    assert cut == 0
    assert got == expected
    assert index.stat().st_size == 8 * len(expected[0])


def test_recovery_cuts_a_torn_tail(tmp_path: Path, segment: Segment) -> None:
    written = fill(segment, some_batches(10))
    segment.close()
    log_file = tmp_path / "00000000000000000100.log"
    with log_file.open("r+b") as f:
        f.truncate(written[7][0] + 20)
    loaded, cut = Segment.open(tmp_path, BASE, small_config(), START_MS, recover=True, min_offset=BASE)
    assert cut == 20
    assert loaded.size_bytes == written[7][0] == log_file.stat().st_size
    assert loaded.next_offset == written[7][1].base_offset
    loaded.close()


def test_iter_headers_rejects_malformed_data(tmp_path: Path) -> None:
    path = tmp_path / "junk"
    good = make_batch([b"x"])
    path.write_bytes(good + b"\x00" * 30)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert len(list(iter_headers(fd, 0, len(good)))) == 1
        with pytest.raises(CorruptRecordError, match="torn"):
            list(iter_headers(fd, 0, len(good) + 30))
        with pytest.raises(CorruptRecordError, match="malformed"):
            list(iter_headers(fd, 1, len(good)))
    finally:
        os.close(fd)


def test_whole_batches_end() -> None:
    a, b = make_batch([b"a"]), make_batch([b"bb"])
    b_at_5 = bytearray(b)
    b_at_5[0:8] = (5).to_bytes(8, "big")
    chunk = a + bytes(b_at_5)
    assert whole_batches_end(chunk, None) == len(chunk)
    assert whole_batches_end(chunk[:-1], None) == len(a)
    assert whole_batches_end(chunk, 5) == len(a)
    assert whole_batches_end(chunk, 6) == len(chunk)
    assert whole_batches_end(b"\x00" * 5, None) == 0


@pytest.mark.parametrize("codec", [CODEC_NONE, CODEC_GZIP, CODEC_LZ4, CODEC_ZSTD])
def test_record_timestamps_agree_with_kafka_python(codec: int) -> None:
    stamps = [START_MS + d for d in (5, -3, 40, 0, 12)]
    batch = make_batch([b"v%d" % i * 20 for i in range(5)], timestamps=stamps, compression=codec)
    p = prepared(batch, 500)
    written = b"".join(bytes(piece) for piece in p.batches[0].pieces)
    expected = [(r.offset, r.timestamp) for r in DefaultRecordBatch(written)]
    assert list(record_timestamps(written)) == expected
    assert expected[0] == (500, stamps[0])


@pytest.mark.parametrize("codec", [CODEC_NONE, CODEC_ZSTD])
def test_find_offset_by_timestamp_matches_brute_force(segment: Segment, codec: int) -> None:
    rng = [7, 3, 9, 1, 8, 2, 6, 4, 10, 5] * 4
    batches = [
        make_batch([b"x" * 30] * 3, timestamps=[START_MS + 100 * t + j for j in (2, 0, 1)], compression=codec)
        for t in rng
    ]
    fill(segment, batches)
    records = []
    for batch in split_batches(segment.read(BASE, 10**7, None, True)[1]):  # type: ignore[index]
        records += [(r.offset, r.timestamp) for r in DefaultRecordBatch(batch)]
    for target in range(START_MS, START_MS + 1100, 7):
        for start in (BASE, BASE + 50):
            expected = next(((o, t) for o, t in records if t >= target and o >= start), None)
            assert segment.find_offset_by_timestamp(target, start) == expected, (target, start)


def test_create_discards_stale_index_files(tmp_path: Path) -> None:
    (tmp_path / f"{5:020d}.index").write_bytes(struct.pack(">ii", 3, 999))
    (tmp_path / f"{5:020d}.timeindex").write_bytes(struct.pack(">qi", START_MS, 3))
    seg = Segment.create(tmp_path, 5, small_config(), START_MS)
    seg.close()
    assert (tmp_path / f"{5:020d}.index").stat().st_size == 0
    assert (tmp_path / f"{5:020d}.timeindex").stat().st_size == 0


def test_delete_removes_all_three_files(tmp_path: Path) -> None:
    seg = Segment.create(tmp_path, 5, small_config(), START_MS)
    fill(seg, some_batches(3))
    seg.delete()
    assert list(tmp_path.iterdir()) == []


def test_open_closes_files_when_loading_fails(tmp_path: Path) -> None:
    directory = tmp_path / "copy"
    directory.mkdir()
    seg = Segment.create(directory, 0, small_config(), START_MS)
    seg.close()
    shutil.rmtree(directory)
    with pytest.raises(FileNotFoundError):
        Segment.open(directory, 0, small_config(), START_MS, recover=True, min_offset=0)
