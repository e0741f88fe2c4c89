"""The producer state inside a Partition (replication/partition.py over log/producer_state*.py): the leader's
checks before the append, followers building the same state from replicated batches, snapshots when the log
rolls and at close, recovery after a crash, truncation, expiration."""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from common.clock import ManualClock
from log.append import AppendInfo
from log.config import LogConfig
from log.errors import CorruptRecordError
from log.log import Log
from log.producer_state import InvalidProducerEpochError, OutOfOrderSequenceError, UnknownProducerIdError
from log.producer_state_file import list_snapshots
from log.record import build_batch
from replication.errors import NotLeaderOrFollowerError
from replication.partition import Partition
from tests.support.launcher import wait_until

START_MS = 1_700_000_000_000
CONFIG = LogConfig(segment_bytes=1024)


@dataclass(frozen=True)
class Reg:
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int = 1
    partition_epoch: int = 1


def batch(pid: int, epoch: int, seq: int, n: int = 1, *, ts: int = START_MS) -> bytes:
    return build_batch([b"x" * 50] * n, timestamp_ms=ts, producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def open_partition(path: Path, broker: int, clock: ManualClock, **kwargs: Any) -> Partition:
    return Partition("id", "t", 0, Log.open(path, CONFIG, clock), broker, clock, **kwargs)


def leader(path: Path, clock: ManualClock, **kwargs: Any) -> Partition:
    p = open_partition(path, 0, clock, **kwargs)
    assert p.make_leader(Reg((0, 1), (0,), 0))
    return p


def follower(path: Path, clock: ManualClock) -> Partition:
    p = open_partition(path, 1, clock)
    assert p.make_follower(Reg((0, 1), (0,), 0))
    return p


def replicate(source: Partition, target: Partition) -> None:
    while target.log_end_offset < source.log_end_offset:
        records = source.read(target.log_end_offset, 1 << 20, replica_id=1).records
        assert target.append_as_follower(records, 0, 1) is not None  # the leader's HW lags: all may be cut


def test_a_duplicate_is_answered_with_its_original_offsets_and_not_appended(tmp_path: Path) -> None:
    clock = ManualClock(START_MS)
    p = leader(tmp_path / "l", clock)
    p.append_as_leader(batch(9, 0, 0, 3), acks=1)  # another producer first
    first = p.append_as_leader(batch(7, 0, 0, 2), acks=1)
    p.append_as_leader(batch(7, 0, 2, 1), acks=1)
    end = p.log_end_offset
    again = p.append_as_leader(batch(7, 0, 0, 2), acks=1)
    assert (again.first_offset, again.last_offset) == (first.first_offset, first.last_offset) == (3, 4)
    assert p.log_end_offset == end
    p.close()


def test_sequence_errors_write_nothing(tmp_path: Path) -> None:
    clock = ManualClock(START_MS)
    p = leader(tmp_path / "l", clock, sequence_wait_ms=0)  # batches ahead of their turn are refused at once
    p.append_as_leader(batch(7, 2, 0), acks=1)
    for bad, error in (
        (batch(7, 2, 5), OutOfOrderSequenceError),
        (batch(7, 1, 1), InvalidProducerEpochError),
        (batch(8, 0, 4), UnknownProducerIdError),
        (batch(7, 2, 1) + batch(7, 2, 3), OutOfOrderSequenceError),  # the second batch of the append is a gap
    ):
        with pytest.raises(error):
            p.append_as_leader(bad, acks=1)
    assert p.log_end_offset == 1
    assert p.append_as_leader(batch(7, 2, 1), acks=1).first_offset == 1  # the producer goes on
    p.close()


def test_a_batch_ahead_of_its_turn_is_held_until_the_batches_before_it_are_written(tmp_path: Path) -> None:
    """S8 and sequence order: requests of one producer may reach the leader on different gRPC threads in the
    other order; a batch that is only ahead is held (the lock released) and goes in right after the batches
    before it, in sequence order."""
    clock = ManualClock(START_MS)
    p = leader(tmp_path / "l", clock, sequence_wait_ms=60_000)
    p.append_as_leader(batch(7, 0, 0, 2), acks=1)
    results: list[AppendInfo] = []
    early = _hold(p, batch(7, 0, 4, 1), results)
    assert p.append_as_leader(batch(9, 0, 0, 1), acks=1).first_offset == 2  # others go on meanwhile
    assert p.append_as_leader(batch(7, 0, 2, 2), acks=1).first_offset == 3  # the batches before it arrive
    early.join(10.0)
    assert [(r.first_offset, r.last_offset) for r in results] == [(5, 5)]
    assert p.log_end_offset == 6
    p.close()


def test_a_new_producer_and_a_new_epoch_hold_batches_until_sequence_0(tmp_path: Path) -> None:
    """S8: without state, or in a new epoch, a batch after sequence 0 is ahead too."""
    clock = ManualClock(START_MS)
    p = leader(tmp_path / "l", clock, sequence_wait_ms=60_000)
    p.append_as_leader(batch(7, 0, 0, 1), acks=1)
    for early_batch, first_batch in ((batch(8, 0, 2), batch(8, 0, 0, 2)), (batch(7, 1, 1), batch(7, 1, 0))):
        results: list[AppendInfo] = []
        early = _hold(p, early_batch, results)
        end = p.append_as_leader(first_batch, acks=1).last_offset
        early.join(10.0)
        assert [r.first_offset for r in results] == [end + 1]
    p.close()


def _hold(p: Partition, records: bytes, results: list[AppendInfo]) -> threading.Thread:
    """Append ``records`` on a thread, once it is held (S8)."""
    early = threading.Thread(target=lambda: results.append(p.append_as_leader(records, acks=1)))
    early.start()
    wait_until(lambda: _waiting(early), 10.0, "the early batch to be held")
    return early


def _hold_catching(p: Partition, records: bytes, errors: list[BaseException]) -> threading.Thread:
    """As :func:`_hold`, noting the append's error in ``errors``."""
    early = threading.Thread(target=lambda: _append_catching(p, records, errors))
    early.start()
    wait_until(lambda: _waiting(early), 10.0, "the early batch to be held")
    return early


def test_a_held_batch_is_refused_once_the_partition_clock_passes_the_wait(tmp_path: Path) -> None:
    """The hold is bounded by the partition's clock: a gap nobody fills is OUT_OF_ORDER_SEQUENCE_NUMBER."""
    clock = ManualClock(START_MS)
    p = leader(tmp_path / "l", clock, sequence_wait_ms=500)
    p.append_as_leader(batch(7, 0, 0, 2), acks=1)
    errors: list[BaseException] = []
    early = _hold_catching(p, batch(7, 0, 4, 1), errors)
    clock.advance(499)
    p.append_as_leader(batch(9, 0, 0, 1), acks=1)  # wakes it: still within the wait, it is held again
    wait_until(lambda: _waiting(early), 10.0, "the early batch to be held again")
    assert early.is_alive()
    assert not errors
    clock.advance(1)
    early.join(10.0)
    assert not early.is_alive()
    assert [type(e) for e in errors] == [OutOfOrderSequenceError]
    assert p.log_end_offset == 3
    p.close()


def test_a_held_batch_fails_at_once_when_the_leader_steps_down(tmp_path: Path) -> None:
    clock = ManualClock(START_MS)
    p = leader(tmp_path / "l", clock, sequence_wait_ms=60_000)
    p.append_as_leader(batch(7, 0, 0, 1), acks=1)
    errors: list[BaseException] = []
    early = _hold_catching(p, batch(7, 0, 3, 1), errors)
    assert p.make_follower(Reg((0, 1), (0, 1), 1, leader_epoch=2, partition_epoch=2))
    early.join(10.0)
    assert [type(e) for e in errors] == [NotLeaderOrFollowerError]
    assert p.log_end_offset == 1
    p.close()


def _append_catching(
    p: Partition, records: bytes, errors: list[BaseException], deadline_ms: float | None = None
) -> None:
    try:
        p.append_as_leader(records, acks=1, deadline_ms=deadline_ms)
    except Exception as exc:
        errors.append(exc)


def _waiting(thread: threading.Thread) -> bool:
    """The thread sits in Condition.wait (its frame shows the wait), or has finished."""
    frame = sys._current_frames().get(thread.ident or -1)
    while frame is not None:
        if frame.f_code.co_name == "wait":
            return True
        frame = frame.f_back
    return not thread.is_alive()


def test_followers_build_the_same_state_and_take_over_dedup(tmp_path: Path) -> None:
    clock = ManualClock(START_MS)
    lead, follow = leader(tmp_path / "l", clock), follower(tmp_path / "f", clock)
    for seq in range(12):
        lead.append_as_leader(batch(7, 0, seq) + batch(8, 1, 2 * seq, 2), acks=1)
    replicate(lead, follow)
    assert follow.producer_entries() == lead.producer_entries()
    # Failover: the follower leads; a retry of a batch the old leader wrote is still a duplicate.
    assert follow.make_leader(Reg((0, 1), (1,), 1, leader_epoch=2, partition_epoch=2))
    dup = follow.append_as_leader(batch(7, 0, 11), acks=1)
    assert dup.first_offset == 11 * 3
    assert follow.log_end_offset == lead.log_end_offset
    lead.close()
    follow.close()


def test_state_survives_a_clean_restart_and_a_crash(tmp_path: Path) -> None:
    clock = ManualClock(START_MS)
    p = leader(tmp_path / "l", clock)
    for seq in range(30):  # ~110-byte batches into 1 KiB segments: several rolls
        p.append_as_leader(batch(7, 0, seq), acks=1)
    assert list_snapshots(tmp_path / "l")  # written when the log rolled
    expected = p.producer_entries()
    p.close()
    reopened = leader(tmp_path / "l", clock)
    assert reopened.producer_entries() == expected
    assert list_snapshots(tmp_path / "l")[-1] == reopened.log_end_offset  # the one written at close
    for seq in range(30, 35):
        reopened.append_as_leader(batch(7, 0, seq), acks=1)
    expected = reopened.producer_entries()
    reopened.log.close_handlers()  # a crash: no snapshot at close; recovery replays the tail
    crashed = leader(tmp_path / "l", clock)
    assert crashed.producer_entries() == expected
    assert crashed.append_as_leader(batch(7, 0, 34), acks=1).first_offset == 34  # still a duplicate
    crashed.close()


def test_truncation_rebuilds_the_state(tmp_path: Path) -> None:
    clock = ManualClock(START_MS)
    lead, follow = leader(tmp_path / "l", clock), follower(tmp_path / "f", clock)
    for seq in range(20):
        lead.append_as_leader(batch(7, 0, seq), acks=1)
    replicate(lead, follow)
    assert follow.truncate_as_follower(12, 1)
    entry = follow.producer_entries()[7]
    assert entry.last_seq == 11
    assert [(b.first_seq, b.last_seq, b.first_offset, b.last_offset) for b in entry.batches] == [(0, 11, 0, 11)]
    assert all(offset <= 12 for offset in list_snapshots(tmp_path / "f"))
    lead.close()
    follow.close()


def test_producers_expire_after_producer_id_expiration_ms(tmp_path: Path) -> None:
    clock = ManualClock(START_MS)
    p = leader(
        tmp_path / "l",
        clock,
        producer_id_expiration_ms=60_000,
        producer_id_expiration_check_interval_ms=1000,
        sequence_wait_ms=0,  # UNKNOWN_PRODUCER_ID at once (S8 would hold a batch after sequence 0 first)
    )
    p.append_as_leader(batch(7, 0, 0, ts=START_MS), acks=1)
    clock.advance(30_000)
    p.append_as_leader(batch(8, 0, 0, ts=START_MS + 30_000), acks=1)
    clock.advance(31_000)
    p.append_as_leader(batch(8, 0, 1, ts=START_MS + 61_000), acks=1)  # the check runs with appends
    assert set(p.producer_entries()) == {8}
    with pytest.raises(UnknownProducerIdError):  # 7 expired: its next batch is not recognized
        p.append_as_leader(batch(7, 0, 1), acks=1)
    p.close()


def test_producers_expire_by_broker_time_not_by_the_timestamps_they_wrote(tmp_path: Path) -> None:
    """Issue 15: a producer whose batches carry a timestamp far in the future still expires
    producer.id.expiration.ms after this broker last wrote one of its batches (leader and follower alike)."""
    clock = ManualClock(START_MS)
    options = {"producer_id_expiration_ms": 60_000, "producer_id_expiration_check_interval_ms": 1000,
               "sequence_wait_ms": 0}  # fmt: skip
    p = leader(tmp_path / "l", clock, **options)
    f = open_partition(tmp_path / "f", 1, clock, **options)
    assert f.make_follower(Reg((0, 1), (0,), 0))
    # the default message.timestamp.after.max.ms (1 hour) lets a timestamp 59 minutes ahead in
    p.append_as_leader(batch(7, 0, 0, ts=START_MS + 59 * 60_000), acks=1)
    replicate(p, f)
    assert p.producer_entries()[7].last_timestamp_ms == f.producer_entries()[7].last_timestamp_ms == START_MS
    clock.advance(61_000)
    p.append_as_leader(batch(8, 0, 0), acks=1)  # the check runs with appends
    replicate(p, f)
    assert set(p.producer_entries()) == set(f.producer_entries()) == {8}
    p.close()
    f.close()


def test_a_partition_remembers_at_most_producer_id_max_producers(tmp_path: Path) -> None:
    """S9: a new producer beyond the bound evicts the one written to longest ago; the others keep their dedup."""
    clock = ManualClock(START_MS)
    p = leader(tmp_path / "l", clock, producer_id_max=3, sequence_wait_ms=0)
    for pid in (1, 2, 3):
        p.append_as_leader(batch(pid, 0, 0), acks=1)
        clock.advance(1)
    p.append_as_leader(batch(1, 0, 1), acks=1)  # 1 is now the most recent
    p.append_as_leader(batch(4, 0, 0), acks=1)  # evicts 2
    assert set(p.producer_entries()) == {1, 3, 4}
    assert p.append_as_leader(batch(1, 0, 1), acks=1).first_offset == 3  # still deduplicated
    with pytest.raises(UnknownProducerIdError):
        p.append_as_leader(batch(2, 0, 1), acks=1)
    p.close()
    reopened = leader(tmp_path / "l", clock, producer_id_max=2, sequence_wait_ms=0)  # a smaller bound at load
    assert set(reopened.producer_entries()) == {1, 4}
    reopened.close()


def test_a_malformed_batch_is_refused_before_its_sequence_is_looked_at(tmp_path: Path) -> None:
    """Validation first (Kafka's LogValidator before the producer state): a corrupt batch that is also ahead of
    its turn is CORRUPT_MESSAGE at once, never held (S8)."""
    clock = ManualClock(START_MS)
    p = leader(tmp_path / "l", clock, sequence_wait_ms=60_000)
    p.append_as_leader(batch(7, 0, 0), acks=1)
    damaged = bytearray(batch(7, 0, 5))
    damaged[-3] ^= 0xFF  # inside the record: the CRC fails
    with pytest.raises(CorruptRecordError):
        p.append_as_leader(bytes(damaged), acks=1)
    assert p.log_end_offset == 1
    p.close()


def test_a_held_batch_waits_no_longer_than_its_request_deadline(tmp_path: Path) -> None:
    """One deadline per request: the hold ends at ``deadline_ms`` when that comes before sequence_wait_ms."""
    clock = ManualClock(START_MS)
    p = leader(tmp_path / "l", clock, sequence_wait_ms=60_000)
    p.append_as_leader(batch(7, 0, 0), acks=1)
    errors: list[BaseException] = []
    early = threading.Thread(target=lambda: _append_catching(p, batch(7, 0, 3), errors, clock.monotonic_ms() + 100))
    early.start()
    wait_until(lambda: _waiting(early), 10.0, "the early batch to be held")
    clock.advance(100)  # the request's deadline, long before the 60 s hold bound
    early.join(10.0)
    assert not early.is_alive()
    assert [type(e) for e in errors] == [OutOfOrderSequenceError]
    p.close()


def test_batches_held_at_once_are_bounded_across_partitions(tmp_path: Path) -> None:
    """A held batch keeps its request's thread: beyond the broker's slots one is refused at once (S8)."""
    clock = ManualClock(START_MS)
    slots = threading.BoundedSemaphore(1)
    a = leader(tmp_path / "a", clock, sequence_wait_ms=60_000, held_batch_slots=slots)
    b = leader(tmp_path / "b", clock, sequence_wait_ms=60_000, held_batch_slots=slots)
    a.append_as_leader(batch(7, 0, 0), acks=1)
    results: list[AppendInfo] = []
    held = _hold(a, batch(7, 0, 2), results)  # takes the only slot
    with pytest.raises(UnknownProducerIdError):
        b.append_as_leader(batch(8, 0, 1), acks=1)  # ahead too, but no slot: refused, not held
    a.append_as_leader(batch(7, 0, 1), acks=1)
    held.join(10.0)
    assert [r.first_offset for r in results] == [2]
    assert b.append_as_leader(batch(8, 0, 0), acks=1).first_offset == 0
    assert slots.acquire(blocking=False)  # the slot came back
    a.close()
    b.close()
