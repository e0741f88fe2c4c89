"""Idempotent producers' state (log/producer_state.py rules S1-S8) and its snapshot files
(log/producer_state_file.py): codec, snapshot at roll, recovery by snapshot + tail replay, truncation."""

from __future__ import annotations

from pathlib import Path

import pytest

from common.clock import ManualClock
from log.config import LogConfig
from log.errors import InvalidRecordError, StorageError
from log.log import Log
from log.producer_state import (
    BatchMetadata,
    ExpirySchedule,
    InvalidProducerEpochError,
    OutOfOrderSequenceError,
    ProducerEntry,
    ProducerStateManager,
    UnknownProducerIdError,
)
from log.producer_state_file import (
    decode,
    encode,
    list_snapshots,
    load,
    replay,
    snapshot_path,
    write_snapshot,
)
from log.record import build_batch, iter_batches, parse_header
from log.record.control import CONTROL_TYPE_COMMIT, EndTransactionMarker, build_marker_batch
from log.record.header import BatchHeader

START_MS = 1_700_000_000_000


def header(pid: int, epoch: int, seq: int, n: int = 1, *, ts: int = START_MS, txn: bool = False) -> BatchHeader:
    data = build_batch(
        [b"v"] * n, timestamp_ms=ts, producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=txn
    )
    return parse_header(data)


def written(state: ProducerStateManager, h: BatchHeader) -> int:
    """Check and write ``h`` at the map end; returns its first offset."""
    assert state.check_append([h]).duplicate is None
    offset = state.map_end_offset
    state.update(h, offset)
    return offset


def test_s1_producer_fields_must_be_complete() -> None:
    state = ProducerStateManager()
    with pytest.raises(InvalidRecordError, match="producer epoch -1"):
        state.check_append([header(7, -1, 0)])
    marker = parse_header(build_marker_batch(7, 0, EndTransactionMarker(CONTROL_TYPE_COMMIT, 0), START_MS))
    with pytest.raises(InvalidRecordError, match="only the transaction coordinator writes markers"):
        state.check_append([marker])


def test_s3_an_unknown_producer_starts_at_sequence_zero() -> None:
    state = ProducerStateManager()
    with pytest.raises(UnknownProducerIdError, match="starts at sequence 5"):
        state.check_append([header(7, 0, 5)])
    assert state.check_append([header(7, 0, 0)]).duplicate is None


def test_s2_an_older_epoch_is_fenced() -> None:
    state = ProducerStateManager()
    written(state, header(7, 3, 0))
    with pytest.raises(InvalidProducerEpochError, match="epoch 2 is older than its current epoch 3"):
        state.check_append([header(7, 2, 1)])


def test_s4_a_new_epoch_starts_at_zero() -> None:
    state = ProducerStateManager()
    written(state, header(7, 0, 0, 3))
    with pytest.raises(OutOfOrderSequenceError, match="new epoch 1 at sequence 3"):
        state.check_append([header(7, 1, 3)])
    written(state, header(7, 1, 0))
    entry = state.entry(7)
    assert entry is not None
    assert entry.producer_epoch == 1
    assert len(entry.batches) == 1


def test_s5_a_duplicate_inside_any_of_the_last_five_runs_gets_its_original_offsets() -> None:
    state = ProducerStateManager()
    state.map_end_offset = 100  # other producers' batches came first
    offsets = []
    for seq in range(7):  # another producer in between: every batch of 7 is a run of its own
        offsets.append(written(state, header(7, 0, seq * 2, 2)))
        written(state, header(9, 0, seq))
    assert len(state.entry(7).batches) == 5  # type: ignore[union-attr]
    for seq in range(2, 7):  # the last five
        dup = state.check_append([header(7, 0, seq * 2, 2)]).duplicate
        assert dup == BatchMetadata(seq * 2, seq * 2 + 1, offsets[seq], offsets[seq] + 1, START_MS)
    with pytest.raises(OutOfOrderSequenceError):  # older than the last five: Kafka answers out of order
        state.check_append([header(7, 0, 0, 2)])


def test_s5_consecutive_batches_merge_into_one_run_with_exact_offsets() -> None:
    state = ProducerStateManager()
    state.map_end_offset = 10
    for seq in range(0, 60, 3):
        written(state, header(7, 0, seq, 3))
    entry = state.entry(7)
    assert entry is not None
    assert entry.batches == (BatchMetadata(0, 59, 10, 69, START_MS),)
    dup = state.check_append([header(7, 0, 6, 3)]).duplicate  # 18 batches back: still recognized
    assert dup is not None
    assert (dup.first_offset, dup.last_offset) == (16, 18)
    whole = state.check_append([header(7, 0, 30, 3), header(7, 0, 33, 3)]).duplicate  # a resent request
    assert whole is not None
    assert (whole.first_offset, whole.last_offset) == (40, 45)


def test_s5_an_append_written_only_in_part_refuses_the_whole_append() -> None:
    state = ProducerStateManager()
    written(state, header(7, 0, 0))
    with pytest.raises(OutOfOrderSequenceError, match="resent as it was"):
        state.check_append([header(7, 0, 0), header(7, 0, 1)])
    with pytest.raises(OutOfOrderSequenceError, match="resent as it was"):
        state.check_append([header(7, 0, 0), header(8, 0, 0)])


def test_s6_a_gap_or_a_repeat_out_of_the_window_is_out_of_order() -> None:
    state = ProducerStateManager()
    written(state, header(7, 0, 0, 5))
    with pytest.raises(OutOfOrderSequenceError, match="sent sequence 6, expected 5"):
        state.check_append([header(7, 0, 6)])
    with pytest.raises(OutOfOrderSequenceError):
        state.check_append([header(7, 0, 3, 4)])  # overlaps the last batch and goes past it


def test_s6_sequences_wrap_at_int32() -> None:
    state = ProducerStateManager()
    state.update(header(7, 0, 2**31 - 2, 1), 0)
    written(state, header(7, 0, 2**31 - 1, 1))
    written(state, header(7, 0, 0, 1))
    entry = state.entry(7)
    assert entry is not None
    assert entry.last_seq == 0


def test_s7_batches_in_one_append_are_checked_in_order_and_a_refusal_changes_nothing() -> None:
    state = ProducerStateManager()
    written(state, header(7, 0, 0))
    before = state.entries
    assert state.check_append([header(7, 0, 1), header(7, 0, 2), header(8, 0, 0)]).duplicate is None
    with pytest.raises(OutOfOrderSequenceError):
        state.check_append([header(7, 0, 1), header(8, 0, 0), header(7, 0, 3)])
    assert state.entries == before


def test_s7_a_hostile_batch_does_not_touch_other_producers() -> None:
    state = ProducerStateManager()
    written(state, header(7, 2, 0))
    written(state, header(8, 0, 0))
    before = state.entries
    for bad in (header(7, 1, 1), header(7, 2, 9), header(8, 0, 5), header(9, 0, 3)):
        with pytest.raises((OutOfOrderSequenceError, InvalidProducerEpochError, UnknownProducerIdError)):
            state.check_append([bad])
    assert state.entries == before


def _refusal(
    state: ProducerStateManager, headers: list[BatchHeader]
) -> OutOfOrderSequenceError | UnknownProducerIdError:
    with pytest.raises((OutOfOrderSequenceError, UnknownProducerIdError)) as caught:
        state.check_append(headers)
    assert isinstance(caught.value, OutOfOrderSequenceError | UnknownProducerIdError)
    return caught.value


def test_s8_a_refusal_says_whether_the_batch_is_only_ahead_of_its_turn() -> None:
    state = ProducerStateManager()
    written(state, header(7, 2, 0, 5))
    state.update(header(9, 0, 2**31 - 1), 10)
    ahead = [
        [header(7, 2, 6)],  # the batch of sequence 5 is missing
        [header(7, 2, 5 + 2**30 - 1)],  # far ahead, still ahead
        [header(7, 3, 4)],  # a new epoch, before its sequence 0
        [header(8, 0, 3)],  # a new producer, before its sequence 0
        [header(9, 0, 1)],  # after the wrap, sequence 0 is missing
        [header(8, 0, 0), header(7, 2, 6)],  # the producer's first batch in the append
    ]
    final = [
        [header(7, 2, 3, 4)],  # overlaps the written batches: never acceptable
        [header(7, 2, 5 + 2**30)],  # behind (more than half the sequence space ahead)
        [header(7, 2, 5), header(7, 2, 7)],  # a gap inside the append
        [header(7, 2, 4), header(7, 2, 5)],  # written in part (S5)
        [header(7, 2, 4), header(7, 2, 6)],  # a duplicate, then a gap: not the producer's first batch
    ]
    for headers in ahead:
        assert _refusal(state, headers).ahead, headers
    for headers in final:
        assert not _refusal(state, headers).ahead, headers


def test_expiration_by_the_last_batch_timestamp() -> None:
    state = ProducerStateManager()
    written(state, header(7, 0, 0, ts=START_MS))
    written(state, header(8, 0, 0, ts=START_MS + 500))
    schedule = ExpirySchedule(expiration_ms=1000, check_interval_ms=100, now_ms=START_MS)
    assert schedule.maybe_expire(state, START_MS + 99) == []  # no check due yet
    assert schedule.maybe_expire(state, START_MS + 1000) == [7]
    assert schedule.maybe_expire(state, START_MS + 1050) == []  # next check at +1100
    assert schedule.maybe_expire(state, START_MS + 1500) == [8]
    assert len(state) == 0


# ---------------------------------------------------------------------------------------- snapshots


def test_snapshot_codec_round_trip_and_crc() -> None:
    entries = [
        ProducerEntry(7, 3, (BatchMetadata(0, 4, 10, 14, START_MS), BatchMetadata(5, 5, 20, 20, START_MS + 1)), 9),
        ProducerEntry(2**40, 0, (), START_MS),
    ]
    data = encode(entries)
    assert decode(data) == entries
    corrupt = bytearray(data)
    corrupt[-1] ^= 1
    with pytest.raises(StorageError, match="CRC"):
        decode(bytes(corrupt))
    with pytest.raises(StorageError, match="truncated"):
        decode(data[:3])


def _append(log: Log, pid: int, epoch: int, seq: int, n: int = 1) -> None:
    log.append(build_batch([b"x" * 100] * n, timestamp_ms=START_MS, producer_id=pid, producer_epoch=epoch,
                           base_sequence=seq))  # fmt: skip


def _replay_below(log: Log, end: int) -> ProducerStateManager:
    state, offset = ProducerStateManager(), 0
    while offset < end:  # a read returns batches of one segment
        for _, h in iter_batches(log.read(offset, 1 << 20).records):
            if h.next_offset <= end:
                state.update(h, h.base_offset)
            offset = h.next_offset
    return state


def test_recovery_loads_the_newest_snapshot_and_replays_the_tail(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "p", LogConfig(segment_bytes=1024), ManualClock(START_MS))
    for seq in range(10):
        _append(log, 7, 0, seq)
        _append(log, 8, 1, seq * 2, 2)
    full = ProducerStateManager()
    assert replay(log, full, 0) == 20
    assert full.map_end_offset == log.log_end_offset == 30
    write_snapshot(log.dir, _replay_below(log, 12))  # a snapshot in the middle: the tail after it is replayed
    assert list_snapshots(log.dir) == [12]
    loaded = load(log)
    assert loaded.entries == full.entries
    assert loaded.map_end_offset == 30
    entry = loaded.entry(8)
    assert entry is not None
    assert [b.first_seq for b in entry.batches] == [10, 12, 14, 16, 18]
    log.close()


def test_a_bad_snapshot_is_skipped_and_snapshots_past_the_log_end_are_deleted(tmp_path: Path) -> None:
    clock = ManualClock(START_MS)
    log = Log.open(tmp_path / "p", LogConfig(), clock)
    for seq in range(4):
        _append(log, 7, 0, seq)
    expected = load(log).entries
    snapshot_path(log.dir, 2).write_bytes(b"garbage!!!!!")
    snapshot_path(log.dir, 99).write_bytes(encode([ProducerEntry(5, 0, (), 0)]))
    assert load(log).entries == expected
    assert list_snapshots(log.dir) == [2]  # the one past the end is gone; the bad one was only skipped
    log.close()
