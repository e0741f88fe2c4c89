"""The partition Log's API: append, read, roll, retention, truncation, flush, close; each error path."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from crc32c import crc32c

from common.clock import ManualClock
from log.config import LogConfig
from log.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    StorageError,
)
from log.log import Log
from log.record.header import HEADER_SIZE, parse_header, validate_batch
from tests.log.conftest import (
    START_MS,
    OpenLog,
    base_offset_of,
    batch_of_size,
    body_of,
    make_batch,
    small_config,
    split_batches,
)


def offsets_in(log: Log) -> list[int]:
    """Base offsets of every batch, read back through the public API."""
    out: list[int] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20)
        batches = split_batches(data.records)
        if not batches:
            break
        out += [base_offset_of(b) for b in batches]
        offset = parse_header(batches[-1]).next_offset
    return out


def segment_files(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir() if p.suffix == ".log")


# ------------------------------------------------------------------------------------------ append


def test_append_assigns_offsets_and_epoch_and_keeps_the_rest(open_log: OpenLog) -> None:
    log = open_log()
    batch = make_batch([b"a", b"b", b"c"])
    first = log.append(batch, leader_epoch=4)
    second = log.append(batch, leader_epoch=5)
    assert (first.first_offset, first.last_offset, first.record_count) == (0, 2, 3)
    assert (second.first_offset, second.last_offset) == (3, 5)
    assert first.size_bytes == len(batch)
    assert first.max_timestamp == START_MS + 2
    assert first.offset_of_max_timestamp == 2
    assert first.log_append_time == -1
    stored = split_batches(log.read(0, 1 << 20).records)
    assert [parse_header(b).base_offset for b in stored] == [0, 3]
    assert [parse_header(b).partition_leader_epoch for b in stored] == [4, 5]
    assert all(body_of(b) == body_of(batch) for b in stored)
    validate_batch(stored[1])  # the CRC still holds: only fields outside it changed
    assert log.log_end_offset == 6


def test_several_batches_in_one_append(open_log: OpenLog) -> None:
    log = open_log()
    info = log.append(make_batch([b"a"] * 2) + make_batch([b"b"] * 3) + make_batch([b"c"]))
    assert (info.first_offset, info.last_offset, info.record_count) == (0, 5, 6)
    assert offsets_in(log) == [0, 2, 5]


@pytest.mark.parametrize("source", [bytes, bytearray, memoryview])
def test_append_accepts_any_buffer(open_log: OpenLog, source: type) -> None:
    log = open_log()
    batch = make_batch([b"x"])
    log.append(source(batch))
    assert body_of(log.read(0, 1000).records) == body_of(batch)


@pytest.mark.parametrize("where", ["first", "last"])
def test_a_corrupt_batch_writes_nothing_not_even_good_ones(open_log: OpenLog, where: str) -> None:
    log = open_log()
    log.append(make_batch([b"before"]))
    size_before = log.size_bytes
    good = make_batch([b"good"])
    bad = bytearray(make_batch([b"bad"]))
    bad[-1] ^= 0x01
    data = bytes(bad) + good if where == "first" else good + good + bytes(bad)
    with pytest.raises(CorruptRecordError, match="CRC"):
        log.append(data)
    assert log.log_end_offset == 1
    assert log.size_bytes == size_before
    assert (log.dir / "00000000000000000000.log").stat().st_size == size_before


@pytest.mark.parametrize(
    ("data", "error", "match"),
    [
        (b"", InvalidRecordError, "no record batch"),
        (make_batch([b"x"])[:40], CorruptRecordError, "truncated"),
        (make_batch([b"x"]) + b"\x00" * 5, CorruptRecordError, "trailing"),
    ],
)
def test_malformed_appends_are_refused(open_log: OpenLog, data: bytes, error: type, match: str) -> None:
    log = open_log()
    with pytest.raises(error, match=match):
        log.append(data)
    assert log.log_end_offset == 0
    assert log.size_bytes == 0


def test_a_batch_above_max_message_bytes_is_refused(open_log: OpenLog) -> None:
    log = open_log(small_config(max_message_bytes=500))
    log.append(batch_of_size(500))
    with pytest.raises(RecordTooLargeError, match="max.message.bytes=500"):
        log.append(batch_of_size(200) + batch_of_size(501))
    assert log.log_end_offset == 1


def test_a_batch_above_segment_bytes_is_refused(open_log: OpenLog) -> None:
    log = open_log(small_config(segment_bytes=1000, max_message_bytes=10_000))
    with pytest.raises(RecordTooLargeError, match="segment.bytes"):
        log.append(batch_of_size(600) + batch_of_size(1001))
    assert log.size_bytes == 0


def test_an_append_above_segment_bytes_goes_into_successive_segments(open_log: OpenLog) -> None:
    """Several batches larger together than a segment (a producer packs a partition's batches in one request, a
    follower gets many in one fetch): a roll between batches, never inside one."""
    log = open_log(small_config(segment_bytes=1000, max_message_bytes=10_000))
    log.append(batch_of_size(300))
    info = log.append(batch_of_size(600) + batch_of_size(600) + batch_of_size(300))
    assert (info.first_offset, info.last_offset, info.record_count) == (1, 3, 3)
    assert [s.base_offset for s in log.segments] == [0, 2]  # 300 + 600 | 600 + 300
    assert [s.size_bytes for s in log.segments] == [900, 900]
    follower = open_log(small_config(segment_bytes=1000, max_message_bytes=10_000), path=log.dir.parent / "f")
    fetched = bytes(log.read(0, 10_000).records) + bytes(log.read(2, 10_000).records)  # a read stops at a segment end
    assert len(fetched) == 1800
    follower.append_as_follower(fetched)
    assert [s.base_offset for s in follower.segments] == [0, 2]
    assert follower.log_end_offset == 4


def test_leader_append_needs_dense_batches(open_log: OpenLog) -> None:
    batch = bytearray(make_batch([b"a", b"b"]))
    batch[23:27] = (5).to_bytes(4, "big")  # lastOffsetDelta, inside the CRC: rebuild the CRC
    batch[17:21] = crc32c(bytes(batch[21:])).to_bytes(4, "big")
    log = open_log()
    with pytest.raises(InvalidRecordError, match="lastOffsetDelta=5"):
        log.append(bytes(batch))


def test_log_append_time_stamps_the_batch_and_fixes_its_crc(open_log: OpenLog, clock: ManualClock) -> None:
    log = open_log(small_config(message_timestamp_type="LogAppendTime"))
    clock.advance(5000)
    info = log.append(make_batch([b"a", b"b"], base_timestamp=START_MS - 10**6))
    assert info.log_append_time == START_MS + 5000
    assert info.max_timestamp == START_MS + 5000
    assert info.offset_of_max_timestamp == 0
    header = validate_batch(log.read(0, 1000).records)
    assert header.is_log_append_time
    assert header.max_timestamp == START_MS + 5000
    assert log.offset_for_timestamp(START_MS + 4000) == (0, START_MS + 5000)


def test_create_time_the_leader_writes_the_true_max_timestamp(open_log: OpenLog) -> None:
    """Kafka's leader sets maxTimestamp (and the CreateTime bit) from the records when the producer's differ."""
    lying = bytearray(make_batch([b"a", b"b"], timestamps=[START_MS, START_MS + 7]))
    lying[35:43] = (START_MS + 10**6).to_bytes(8, "big")  # maxTimestamp
    lying[22] |= 0x08  # the LogAppendTime bit, on a CreateTime topic
    lying[17:21] = crc32c(bytes(lying[21:])).to_bytes(4, "big")
    log = open_log()
    info = log.append(bytes(lying))
    assert info.max_timestamp == START_MS + 7
    stored = log.read(0, 1000).records
    header = validate_batch(stored)  # the CRC was recomputed
    assert (header.max_timestamp, header.is_log_append_time) == (START_MS + 7, False)
    assert stored[HEADER_SIZE:] == lying[HEADER_SIZE:]  # the records are written as they came


def test_records_out_of_the_timestamp_bounds_write_nothing(open_log: OpenLog, clock: ManualClock) -> None:
    log = open_log(small_config(message_timestamp_after_max_ms=1000, message_timestamp_before_max_ms=1000))
    log.append(make_batch([b"in"], base_timestamp=START_MS + 1000))
    for timestamp in (START_MS + 1001, START_MS - 1001):
        with pytest.raises(InvalidTimestampError, match="out of range"):
            log.append(make_batch([b"ok"], base_timestamp=START_MS) + make_batch([b"late"], base_timestamp=timestamp))
    assert log.log_end_offset == 1


def test_follower_append_keeps_offsets_and_epochs(open_log: OpenLog) -> None:
    leader = open_log(path=open_log().dir.parent / "leader")
    leader.append(make_batch([b"a"] * 3), leader_epoch=2)
    leader.append(make_batch([b"b"] * 2), leader_epoch=3)
    follower = open_log(path=leader.dir.parent / "follower")
    data = leader.read(0, 1 << 20).records
    info = follower.append_as_follower(data)
    assert (info.first_offset, info.last_offset) == (0, 4)
    assert follower.read(0, 1 << 20).records == data
    with pytest.raises(InvalidRecordError, match="below the log end offset"):
        follower.append_as_follower(data)
    gap = bytearray(make_batch([b"c"]))
    gap[0:8] = (10).to_bytes(8, "big")
    follower.append_as_follower(bytes(gap))
    assert follower.log_end_offset == 11
    assert follower.read(5, 1000).first_offset == 10


def test_follower_append_refuses_batches_out_of_order(open_log: OpenLog) -> None:
    first, second = bytearray(make_batch([b"a"] * 3)), bytearray(make_batch([b"b"]))
    first[0:8] = (10).to_bytes(8, "big")
    second[0:8] = (11).to_bytes(8, "big")
    log = open_log()
    with pytest.raises(InvalidRecordError, match="below the end of batch 0"):
        log.append_as_follower(bytes(first + second))
    assert log.size_bytes == 0


# -------------------------------------------------------------------------------------------- read


def test_read_ranges_and_out_of_range(open_log: OpenLog) -> None:
    log = open_log()
    for _ in range(5):
        log.append(make_batch([b"r"] * 2))
    assert log.read(10, 100).records == b""
    assert log.read(10, 100).log_end_offset == 10
    out_of_range = r"offset 11 is out of range: log start offset 0, log end offset 10"
    with pytest.raises(OffsetOutOfRangeError, match=out_of_range):
        log.read(11, 100)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, 100)
    data = log.read(3, 10_000)
    assert data.first_offset == 2  # the batch holding offset 3 starts at 2
    assert [base_offset_of(b) for b in split_batches(data.records)] == [2, 4, 6, 8]


def test_read_min_one_batch_and_max_offset(open_log: OpenLog) -> None:
    log = open_log(small_config(max_message_bytes=10_000, segment_bytes=100_000))
    log.append(batch_of_size(3000))
    log.append(batch_of_size(100))
    big = log.read(0, 500)
    assert len(big.records) == 3000
    assert log.read(0, 500, min_one_batch=False).records == b""
    assert len(log.read(0, 3099).records) == 3000
    assert len(log.read(0, 3100).records) == 3100
    assert len(log.read(0, 10_000, max_offset=1).records) == 3000
    assert log.read(1, 10_000, max_offset=1).records == b""


def test_reads_never_span_segments_but_reach_every_one(open_log: OpenLog) -> None:
    log = open_log(small_config(segment_bytes=1000))
    for i in range(30):
        log.append(make_batch([b"v%d" % i] * 4))
    assert len(log.segments) > 3
    data = log.read(0, 1 << 20)
    assert data.segment_base_offset == 0
    assert parse_header(split_batches(data.records)[-1]).next_offset == log.segments[1].base_offset
    assert offsets_in(log) == list(range(0, 120, 4))


# -------------------------------------------------------------------------------------------- roll


def test_roll_by_size(open_log: OpenLog) -> None:
    log = open_log(small_config(segment_bytes=1000))
    for _ in range(5):
        log.append(batch_of_size(300))
    assert [s.size_bytes for s in log.segments] == [900, 600]
    assert [s.base_offset for s in log.segments] == [0, 3]
    assert segment_files(log.dir) == ["00000000000000000000.log", "00000000000000000003.log"]


def test_roll_by_age_uses_the_injected_clock(open_log: OpenLog, clock: ManualClock) -> None:
    log = open_log(small_config(segment_ms=1000))
    log.append(make_batch([b"a"]))
    clock.advance(1000)
    log.append(make_batch([b"b"]))
    assert len(log.segments) == 1  # exactly segment.ms is not past it
    clock.advance(1)
    log.append(make_batch([b"c"]))
    assert [s.base_offset for s in log.segments] == [0, 2]


def test_roll_when_the_index_is_full(open_log: OpenLog) -> None:
    log = open_log(small_config(segment_index_bytes=24, index_interval_bytes=0, segment_bytes=100_000))
    for i in range(7):
        log.append(make_batch([b"x"], base_timestamp=START_MS + i))
    # interval 0: every batch after the first is indexed; 24 bytes hold two time index entries.
    assert [s.base_offset for s in log.segments] == [0, 3, 6]
    assert log.segments[0].index_full


def test_forced_roll_and_empty_active_segment(open_log: OpenLog) -> None:
    log = open_log()
    assert log.roll() == 0  # empty: nothing to roll
    log.append(make_batch([b"x"] * 2))
    assert log.roll() == 2
    assert log.roll() == 2
    assert [s.base_offset for s in log.segments] == [0, 2]
    assert log.recovery_point == 2  # a rolled segment is flushed


# --------------------------------------------------------------------------------------- retention


def fill_segments(log: Log, clock: ManualClock, count: int, *, key: bytes | None = None) -> None:
    """``count`` full segments of 3 batches (timestamps = clock), plus one batch in an active one."""
    for _ in range(count * 3 + 1):
        log.append(batch_of_size(300, timestamp=clock.time_ms(), key=key))
        clock.advance(1000)


def test_retention_by_time_never_deletes_the_active_segment(open_log: OpenLog, clock: ManualClock) -> None:
    log = open_log(small_config(segment_bytes=1000, retention_ms=5000))
    fill_segments(log, clock, 3)  # segments' largest timestamps: +2000, +5000, +8000; now +10000
    assert log.delete_retention() == 1  # 8000 ms old; the next is exactly 5000 ms old: kept
    assert log.log_start_offset == 3
    assert [s.base_offset for s in log.segments] == [3, 6, 9]
    clock.advance(10**6)
    assert log.delete_retention() == 2
    assert [s.base_offset for s in log.segments] == [9]
    assert log.delete_retention() == 0
    with pytest.raises(OffsetOutOfRangeError):
        log.read(8, 100)


def test_retention_by_size(open_log: OpenLog, clock: ManualClock) -> None:
    log = open_log(small_config(segment_bytes=1000, retention_bytes=1900))
    fill_segments(log, clock, 3)  # 900 + 900 + 900 + 300 = 3000 bytes
    assert log.delete_retention() == 1  # 2100 left: dropping another 900 would go below 1900
    assert log.size_bytes == 2100


def test_retention_stops_at_the_high_watermark(open_log: OpenLog, clock: ManualClock) -> None:
    log = open_log(small_config(segment_bytes=1000, retention_ms=0))
    fill_segments(log, clock, 3)
    clock.advance(10**6)
    assert log.delete_retention(high_watermark=5) == 1
    assert log.delete_retention(high_watermark=6) == 1
    assert log.delete_retention() == 1


def test_compact_only_policy_keeps_old_segments(open_log: OpenLog, clock: ManualClock) -> None:
    log = open_log(small_config(segment_bytes=1000, retention_ms=0, cleanup_policy=frozenset({"compact"})))
    fill_segments(log, clock, 2, key=b"k")  # a compacted topic takes only keyed records
    clock.advance(10**6)
    assert log.delete_retention() == 0


def test_delete_records_moves_the_start_and_drops_segments(open_log: OpenLog, clock: ManualClock) -> None:
    log = open_log(small_config(segment_bytes=1000))
    fill_segments(log, clock, 3)
    assert log.delete_records(4) == 4
    assert [s.base_offset for s in log.segments] == [3, 6, 9]
    assert log.read(4, 100).first_offset == 4
    with pytest.raises(OffsetOutOfRangeError):
        log.read(3, 100)
    assert log.delete_records(2) == 4  # never back
    with pytest.raises(OffsetOutOfRangeError, match="log end offset is 10"):
        log.delete_records(11)
    assert log.delete_records(10) == 10
    assert [s.base_offset for s in log.segments] == [9]
    log.close()
    reopened = Log.open(log.dir, small_config(segment_bytes=1000), clock)
    assert reopened.log_start_offset == 10  # checkpointed
    reopened.close()


# -------------------------------------------------------------------------------------- truncation


def test_truncate_to_a_batch_boundary_and_mid_batch(open_log: OpenLog) -> None:
    log = open_log(small_config(segment_bytes=1000))
    for _ in range(12):
        log.append(make_batch([b"x" * 50] * 3))
    assert len(log.segments) >= 3
    assert not log.truncate_to(36)
    assert log.truncate_to(31)  # inside the batch [30, 33): it goes whole
    assert log.log_end_offset == 30
    assert log.truncate_to(9)
    assert log.log_end_offset == 9
    assert offsets_in(log) == [0, 3, 6]
    assert segment_files(log.dir)[-1] <= f"{9:020d}.log"
    assert log.append(make_batch([b"y"])).first_offset == 9  # followers re-fill from there


def test_truncate_below_the_first_segment_starts_over(open_log: OpenLog) -> None:
    log = open_log()
    log.truncate_fully_and_start_at(100)
    log.append(make_batch([b"a"]))
    assert (log.log_start_offset, log.log_end_offset) == (100, 101)
    assert log.truncate_to(50)
    assert (log.log_start_offset, log.log_end_offset) == (50, 50)
    assert segment_files(log.dir) == [f"{50:020d}.log"]


def test_truncate_fully_and_start_at(open_log: OpenLog) -> None:
    log = open_log(small_config(segment_bytes=1000))
    for _ in range(10):
        log.append(make_batch([b"x" * 100]))
    log.truncate_fully_and_start_at(1234)
    assert (log.log_start_offset, log.log_end_offset, log.recovery_point) == (1234, 1234, 1234)
    assert segment_files(log.dir) == [f"{1234:020d}.log"]
    assert log.append(make_batch([b"z"])).first_offset == 1234


# -------------------------------------------------------------------------------- flush and close


def test_flush_moves_the_recovery_point(open_log: OpenLog) -> None:
    log = open_log()
    for _ in range(3):
        log.append(make_batch([b"x"] * 2))
    assert log.recovery_point == 0
    log.flush(4)
    assert log.recovery_point == 4
    log.flush(2)
    assert log.recovery_point == 4  # never back
    log.flush()
    assert log.recovery_point == 6


def test_flush_messages_and_flush_ms(open_log: OpenLog, clock: ManualClock) -> None:
    log = open_log(small_config(flush_messages=5))
    log.append(make_batch([b"x"] * 3))
    assert log.recovery_point == 0
    log.append(make_batch([b"x"] * 2))
    assert log.recovery_point == 5
    timed = open_log(small_config(flush_ms=1000), path=log.dir.parent / "timed")
    timed.append(make_batch([b"x"]))
    assert timed.recovery_point == 0
    clock.advance(1000)
    timed.append(make_batch([b"x"]))
    assert timed.recovery_point == 2


def test_close_writes_checkpoint_and_marker(open_log: OpenLog, clock: ManualClock) -> None:
    log = open_log()
    for _ in range(4):
        log.append(make_batch([b"x"] * 2))
    log.close()
    log.close()  # idempotent
    assert (log.dir / "clean-shutdown").exists()
    text = (log.dir / "offsets.checkpoint").read_text()
    assert text == "0\n2\nrecovery-point 8\nlog-start-offset 0\n"
    with pytest.raises(StorageError, match="closed"):
        log.append(make_batch([b"x"]))
    reopened = Log.open(log.dir, small_config(), clock)
    assert not (log.dir / "clean-shutdown").exists()
    assert (reopened.log_end_offset, reopened.recovery_point) == (8, 8)
    assert reopened.append(make_batch([b"y"])).first_offset == 8
    reopened.close()


def test_offset_for_timestamp(open_log: OpenLog) -> None:
    log = open_log(small_config(segment_bytes=600))
    for t in [30, 10, 50, 20, 40]:
        log.append(make_batch([b"v" * 40] * 2, base_timestamp=START_MS + t))
    assert len(log.segments) > 1
    # offsets 0..9 carry timestamps 30 31 | 10 11 | 50 51 | 20 21 | 40 41 (+START_MS)
    assert log.offset_for_timestamp(START_MS + 11) == (0, START_MS + 30)
    assert log.offset_for_timestamp(START_MS + 31) == (1, START_MS + 31)
    assert log.offset_for_timestamp(START_MS + 32) == (4, START_MS + 50)
    assert log.offset_for_timestamp(START_MS + 51) == (5, START_MS + 51)
    assert log.offset_for_timestamp(START_MS + 52) is None
    assert log.offset_for_timestamp(-2) == (0, -1)
    assert log.offset_for_timestamp(-1) == (10, -1)
    with pytest.raises(ValueError, match="negative"):
        log.offset_for_timestamp(-5)


def test_properties_and_defaults(tmp_path: Path, clock: ManualClock) -> None:
    log = Log.open(str(tmp_path / "nested" / "p"), LogConfig(), clock)
    assert log.dir == tmp_path / "nested" / "p"
    assert (log.log_start_offset, log.log_end_offset, log.size_bytes) == (0, 0, 0)
    assert len(log.segments) == 1
    assert log.segments[0].is_empty
    log.close()


def test_offset_for_timestamp_survives_restarts(open_log: OpenLog, clock: ManualClock) -> None:
    log = open_log(small_config(segment_bytes=800))
    for i in range(40):
        log.append(make_batch([b"t" * 10] * 2, base_timestamp=START_MS + 7 * ((i * 13) % 40)))
    answers = [log.offset_for_timestamp(START_MS + t) for t in range(0, 300, 5)]
    assert any(a is not None for a in answers)
    log.close()
    clean = Log.open(log.dir, small_config(segment_bytes=800), clock)
    assert [clean.offset_for_timestamp(START_MS + t) for t in range(0, 300, 5)] == answers
    clean.close_handlers()
    crashed = Log.open(log.dir, small_config(segment_bytes=800), clock, recovery_point=0)
    assert [crashed.offset_for_timestamp(START_MS + t) for t in range(0, 300, 5)] == answers
    crashed.close_handlers()


def test_a_failed_write_is_cut_back(open_log: OpenLog, monkeypatch: pytest.MonkeyPatch) -> None:
    """A disk error in the middle of a write leaves the log as it was (docs/CONVENTIONS.md §12)."""
    log = open_log()
    log.append(make_batch([b"before"]))
    size = log.size_bytes
    real_pwritev = os.pwritev

    def half_then_fail(fd: int, buffers: list[memoryview], offset: int) -> int:
        real_pwritev(fd, [buffers[0][:10]], offset)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "pwritev", half_then_fail)  # log.segment calls os.pwritev
    with pytest.raises(StorageError, match="No space left"):
        log.append(make_batch([b"lost"]))
    monkeypatch.undo()
    assert (log.log_end_offset, log.size_bytes) == (1, size)
    assert (log.dir / f"{0:020d}.log").stat().st_size == size
    assert log.append(make_batch([b"after"])).first_offset == 1


def test_reads_concurrent_with_appends_see_whole_batches(open_log: OpenLog) -> None:
    """Every public method holds the log's lock: a reader never sees half an append or a moving end."""
    log = open_log(small_config(segment_bytes=2000))
    errors: list[BaseException] = []
    done = threading.Event()

    def reader() -> None:
        try:
            while not done.is_set():
                end = log.log_end_offset
                data = log.read(max(end - 5, 0), 600)
                offsets = [validate_batch(b).base_offset for b in split_batches(data.records)]
                assert offsets == sorted(offsets)
                assert data.log_end_offset >= end
        except BaseException as e:  # reported to the main thread below
            errors.append(e)

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for i in range(300):
            log.append(make_batch([b"c%d" % i] * 2))
    finally:
        done.set()
        thread.join(timeout=30)
    assert not thread.is_alive()
    assert errors == []
    assert log.log_end_offset == 600
