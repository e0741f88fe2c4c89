"""Recovery: the longest valid prefix after a crash at any byte, checkpoints, markers, stray files."""

from __future__ import annotations

import logging
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.clock import ManualClock
from log.checkpoint import parse_checkpoint, read_checkpoint, write_checkpoint
from log.config import LogConfig
from log.errors import StorageError
from log.log import Log
from log.record.header import HEADER_SIZE, parse_header, validate_batch
from log.recovery import scan_valid_prefix
from tests.log.conftest import START_MS, make_batch, small_config, split_batches

CONFIG = small_config(segment_bytes=700)


def written_log(directory: Path, count: int, config: LogConfig = CONFIG) -> list[bytes]:
    """Append ``count`` batches of varied sizes, crash (no close); return the batches as stored."""
    rng = random.Random(count)
    log = Log.open(directory, config, ManualClock(START_MS))
    for i in range(count):
        values = [b"v" * rng.randrange(1, 25) for _ in range(rng.randrange(1, 4))]
        log.append(make_batch(values), leader_epoch=i)
    stored = all_batches(log)
    log.close_handlers()
    return stored


def all_batches(log: Log) -> list[bytes]:
    out: list[bytes] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        batches = split_batches(log.read(offset, 1 << 20).records)
        out += batches
        offset = parse_header(batches[-1]).next_offset
    return out


def segment_layout(directory: Path) -> list[tuple[Path, bytes]]:
    return [(p, p.read_bytes()) for p in sorted(directory.glob("*.log"))]


def restore(directory: Path, layout: list[tuple[Path, bytes]]) -> None:
    """Put exactly these .log files in ``directory``, with as few file-system calls as possible.

    Stale index files may stay: with recovery point 0 every segment is scanned and re-indexed.
    """
    directory.mkdir(exist_ok=True)
    names = {path.name for path, _ in layout}
    for path in directory.iterdir():
        if path.suffix == ".log" and path.name not in names or path.name == "offsets.checkpoint":
            path.unlink()
    for path, data in layout:
        (directory / path.name).write_bytes(data)


def reopen_and_check(directory: Path, expected: list[bytes]) -> None:
    """The recovered log holds exactly ``expected`` and appends continue right after it."""
    log = Log.open(directory, CONFIG, ManualClock(START_MS), recovery_point=0)
    try:
        assert all_batches(log) == expected
        next_offset = parse_header(expected[-1]).next_offset if expected else 0
        assert log.log_end_offset == next_offset
        assert log.append(make_batch([b"after"])).first_offset == next_offset
    finally:
        log.close_handlers()


def batches_before(layout: list[tuple[Path, bytes]], file_index: int, position: int) -> list[bytes]:
    """The batches that were complete before byte ``position`` of segment file ``file_index``."""
    kept: list[bytes] = []
    for i, (_, data) in enumerate(layout[: file_index + 1]):
        end = position if i == file_index else len(data)
        kept += [b for b in split_batches(data[: _whole_prefix(data, end)])]
    return kept


def _whole_prefix(data: bytes, end: int) -> int:
    pos = 0
    while pos < len(data):
        size = parse_header(data, pos).batch_length + 12
        if pos + size > end:
            break
        pos += size
    return pos


# ----------------------------------------------------------------------------- crash at any byte


def test_truncation_at_every_byte_keeps_exactly_the_complete_batches(tmp_path: Path) -> None:
    """A torn write: whatever prefix of the files reached the disk, recovery keeps its whole batches.

    A cut inside a batch of a middle segment also deletes the later segments. A cut exactly between
    two batches of a middle segment cannot be told from a legitimate gap at a segment's end (log
    compaction leaves them), so, as in Kafka, the later segments stay: the log keeps every batch
    written before the cut and is still valid, with a gap. (With rolls flushing the old segment
    before the new one gets data, that state needs a disk that loses flushed writes.)
    """
    source = tmp_path / "source"
    written_log(source, 9)
    layout = segment_layout(source)
    assert len(layout) == 2, "the test needs a cut in a middle segment to delete later ones"
    target = tmp_path / "target"
    for file_index, (_, data) in enumerate(layout):
        starts = set(_batch_starts(data))
        for position in range(len(data)):
            cut = [(p, d[:position] if i == file_index else d) for i, (p, d) in enumerate(layout)]
            restore(target, cut)
            before = batches_before(layout, file_index, position)
            if file_index + 1 < len(layout) and position in starts:
                later = [b for _, d in layout[file_index + 1 :] for b in split_batches(d)]
                reopen_and_check(target, before + later)
            else:
                reopen_and_check(target, before)


def test_a_flipped_byte_cuts_the_log_before_its_batch(tmp_path: Path) -> None:
    """Bit rot inside the CRC'd bytes (or the length, magic) ends the valid prefix at that batch.

    Every header byte is flipped; in the records, where any flip is alike to the CRC, every third.
    """
    source = tmp_path / "source"
    written_log(source, 9)
    layout = segment_layout(source)
    target = tmp_path / "target"
    for file_index, (_, data) in enumerate(layout):
        for position in range(len(data)):
            batch_start = max(p for p in _batch_starts(data) if p <= position)
            field = position - batch_start
            if field >= HEADER_SIZE and field % 3:
                continue
            flipped = bytearray(data)
            flipped[position] ^= 0x10
            cut = [(p, bytes(flipped) if i == file_index else d) for i, (p, d) in enumerate(layout)]
            restore(target, cut)
            if field < 8 or 12 <= field < 16:
                check_outside_crc_flip(target, batches_before(layout, file_index, batch_start))
            else:
                reopen_and_check(target, batches_before(layout, file_index, batch_start))


def _batch_starts(data: bytes) -> list[int]:
    starts, pos = [], 0
    while pos < len(data):
        starts.append(pos)
        pos += parse_header(data, pos).batch_length + 12
    return starts


def check_outside_crc_flip(directory: Path, before: list[bytes]) -> None:
    """baseOffset and partitionLeaderEpoch lie outside the CRC: only order checks can catch a flip."""
    log = Log.open(directory, CONFIG, ManualClock(START_MS), recovery_point=0)
    try:
        got = all_batches(log)
        assert got[: len(before)] == before
        offsets = [parse_header(b).base_offset for b in got]
        assert offsets == sorted(set(offsets))
        for batch in got:
            validate_batch(batch)
        assert log.append(make_batch([b"after"])).first_offset == log.log_end_offset - 1
    finally:
        log.close_handlers()


@settings(max_examples=25, deadline=None, derandomize=True)
@given(count=st.integers(1, 40), data=st.data())
def test_torn_tail_of_a_larger_log(
    tmp_path_factory: pytest.TempPathFactory, count: int, data: st.DataObject
) -> None:
    source = tmp_path_factory.mktemp("src")
    written_log(source, count, small_config(segment_bytes=2000))
    layout = segment_layout(source)
    file_index = len(layout) - 1
    position = data.draw(st.integers(0, len(layout[file_index][1])), label="position")
    target = tmp_path_factory.mktemp("dst")
    restore(target, [(p, d[:position] if i == file_index else d) for i, (p, d) in enumerate(layout)])
    reopen_and_check(target, batches_before(layout, file_index, position))


# ------------------------------------------------------------------------- pure prefix scanning


def test_scan_valid_prefix_reports_where_and_why() -> None:
    a, b = bytearray(make_batch([b"a"] * 2)), bytearray(make_batch([b"b"]))
    b[0:8] = (2).to_bytes(8, "big")
    whole = bytes(a + b)
    result = scan_valid_prefix(whole, 0)
    assert (result.valid_bytes, result.next_offset, result.stop_reason) == (len(whole), 3, None)
    assert [pos for pos, _ in result.batches] == [0, len(a)]
    torn = scan_valid_prefix(whole[:-1], 0)
    assert (torn.valid_bytes, torn.next_offset) == (len(a), 2)
    assert "claims" in (torn.stop_reason or "")
    backwards = scan_valid_prefix(bytes(a + a), 0)
    assert backwards.valid_bytes == len(a)
    assert "expected at least 2" in (backwards.stop_reason or "")
    assert scan_valid_prefix(whole, 0, min_offset=1).valid_bytes == 0
    assert scan_valid_prefix(b"", 7).next_offset == 7
    far = bytearray(a)
    far[0:8] = (2**31).to_bytes(8, "big")
    assert "too far past" in (scan_valid_prefix(bytes(far), 0).stop_reason or "")
    assert "torn batch prefix" in (scan_valid_prefix(whole + b"\x00" * 5, 0).stop_reason or "")


# ------------------------------------------------------------------- markers and recovery points


def corrupt_last_batch_body(directory: Path) -> None:
    path = sorted(directory.glob("*.log"))[-1]
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF
    path.write_bytes(bytes(data))


def test_clean_shutdown_skips_the_scan_and_a_crash_does_not(tmp_path: Path) -> None:
    clock = ManualClock(START_MS)
    log = Log.open(tmp_path, CONFIG, clock)
    for _ in range(3):
        log.append(make_batch([b"x" * 20]))
    log.close()
    corrupt_last_batch_body(tmp_path)  # only a CRC check can see this
    trusting = Log.open(tmp_path, CONFIG, clock)
    assert trusting.log_end_offset == 3  # clean shutdown: the segment was not scanned
    trusting.close_handlers()  # crash: no marker now
    scanning = Log.open(tmp_path, CONFIG, clock)
    assert scanning.log_end_offset == 2
    scanning.close_handlers()


def test_segments_below_the_recovery_point_are_not_scanned(tmp_path: Path) -> None:
    clock = ManualClock(START_MS)
    log = Log.open(tmp_path, CONFIG, clock)
    for _ in range(15):
        log.append(make_batch([b"x" * 40]))
    bases = [s.base_offset for s in log.segments]
    assert len(bases) >= 3
    assert log.recovery_point == bases[-1]  # rolls flushed every older segment
    log.close_handlers()
    first = tmp_path / f"{0:020d}.log"
    data = bytearray(first.read_bytes())
    data[HEADER_SIZE + 2] ^= 0xFF  # inside the records of the first batch
    first.write_bytes(bytes(data))
    trusting = Log.open(tmp_path, CONFIG, clock)
    assert trusting.log_end_offset == 15  # segment 0 is below the recovery point
    trusting.close_handlers()
    scanning = Log.open(tmp_path, CONFIG, clock, recovery_point=0)
    assert (scanning.log_end_offset, [s.base_offset for s in scanning.segments]) == (0, [0])
    assert sorted(p.name for p in tmp_path.glob("*.log")) == [f"{0:020d}.log"]
    scanning.close_handlers()


def test_a_broken_index_below_the_recovery_point_is_rebuilt(tmp_path: Path) -> None:
    clock = ManualClock(START_MS)
    log = Log.open(tmp_path, CONFIG, clock)
    for _ in range(12):
        log.append(make_batch([b"x" * 40]))
    expected = all_batches(log)
    log.close()
    index = tmp_path / f"{0:020d}.index"
    good = index.read_bytes()
    index.write_bytes(good[::-1])  # entries out of order
    reopened = Log.open(tmp_path, CONFIG, clock)
    assert all_batches(reopened) == expected
    assert index.read_bytes() == good
    reopened.close()


def test_stray_files_are_handled(tmp_path: Path) -> None:
    written_log(tmp_path, 8)
    stray = ["00000000000000000000.log.deleted", "00000000000000000099.log.cleaned", "offsets.checkpoint.tmp"]
    for name in stray:
        (tmp_path / name).write_bytes(b"junk")
    (tmp_path / f"{500:020d}.index").write_bytes(b"")  # orphan of an interrupted deletion
    (tmp_path / "notes.txt").write_text("left alone")
    log = Log.open(tmp_path, CONFIG, ManualClock(START_MS))
    names = {p.name for p in tmp_path.iterdir()}
    assert not names & set(stray)
    assert f"{500:020d}.index" not in names
    assert "notes.txt" in names
    log.close_handlers()


def test_a_swap_file_replaces_the_segments_it_covers(tmp_path: Path) -> None:
    expected = written_log(tmp_path, 20)
    layout = segment_layout(tmp_path)
    assert len(layout) >= 3
    # A cleaner's output for the first two segments, renamed to .swap before it was swapped in.
    (tmp_path / f"{0:020d}.log.swap").write_bytes(layout[0][1] + layout[1][1])
    (tmp_path / f"{0:020d}.index.swap").write_bytes(b"")
    layout[1][0].unlink()  # the swap was half done: one old segment already gone
    log = Log.open(tmp_path, CONFIG, ManualClock(START_MS))
    assert all_batches(log) == expected
    assert not list(tmp_path.glob("*.swap"))
    assert [s.base_offset for s in log.segments][0] == 0
    assert len(log.segments) == len(layout) - 1
    log.close_handlers()


def test_an_unreadable_checkpoint_means_full_recovery(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    expected = written_log(tmp_path, 10)
    (tmp_path / "offsets.checkpoint").write_text("garbage")
    with caplog.at_level(logging.WARNING, logger="log.log"):
        log = Log.open(tmp_path, CONFIG, ManualClock(START_MS))
    assert "recovering every segment" in caplog.text
    assert all_batches(log) == expected
    log.close_handlers()


def test_checkpoint_format_and_errors(tmp_path: Path) -> None:
    path = tmp_path / "cp"
    assert read_checkpoint(path) is None
    write_checkpoint(path, {"recovery-point": 5, "topic 3": 12})
    assert path.read_text() == "0\n2\nrecovery-point 5\ntopic 3 12\n"
    assert read_checkpoint(path) == {"recovery-point": 5, "topic 3": 12}
    assert list(tmp_path.iterdir()) == [path]  # no temporary left behind
    bad = [("1\n0\n", "version"), ("0\n2\na 1\n", "says 2"), ("0\n1\na x\n", "malformed"), ("0", "truncated")]
    for text, match in bad:
        with pytest.raises(StorageError, match=match):
            parse_checkpoint(text)
    with pytest.raises(ValueError, match="one line"):
        write_checkpoint(path, {"a\nb": 1})


def test_truncation_is_checkpointed_before_new_data(tmp_path: Path) -> None:
    clock = ManualClock(START_MS)
    log = Log.open(tmp_path, CONFIG, clock)
    for _ in range(6):
        log.append(make_batch([b"x"]))
    log.flush()
    log.truncate_to(2)
    assert read_checkpoint(tmp_path / "offsets.checkpoint") == {"recovery-point": 2, "log-start-offset": 0}
    log.close_handlers()


def test_reopen_with_an_explicit_recovery_point_clamps_to_the_end(tmp_path: Path) -> None:
    written_log(tmp_path, 5)
    log = Log.open(tmp_path, LogConfig(), ManualClock(START_MS), recovery_point=10**9)
    assert log.recovery_point == log.log_end_offset
    log.close_handlers()
