"""The leader-epoch cache inside a Partition over a real Log (EC1-EC3 persisted in ``leader-epoch-checkpoint``),
and HW7 (a follower's new life restarts its progress)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from common.clock import ManualClock
from log.config import LogConfig
from log.errors import CorruptRecordError
from log.log import Log
from log.record import build_batch
from replication.epoch_cache import CHECKPOINT_NAME, EpochEndOffset
from replication.errors import FencedLeaderEpochError, NotLeaderOrFollowerError
from replication.high_watermark import HighWatermark
from replication.partition import Partition
from tests.broker.test_partition import Reg

START_MS = 1_700_000_000_000


def records(n: int) -> bytes:
    return build_batch([b"x"] * n, timestamp_ms=START_MS)


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    return tmp_path / "t-0"


@pytest.fixture
def log(log_dir: Path) -> Iterator[Log]:
    opened = Log.open(log_dir, LogConfig(), ManualClock())
    yield opened
    if not opened.closed:
        opened.close()


def lead(p: Partition, epoch: int) -> None:
    assert p.make_leader(Reg((0,), (0,), 0, leader_epoch=epoch, partition_epoch=epoch))


def test_ec1_a_new_leader_epoch_is_checkpointed_at_the_log_end_before_writes(log: Log, log_dir: Path) -> None:
    p = Partition("id", "t", 0, log, 0, ManualClock())
    lead(p, 2)
    assert (log_dir / CHECKPOINT_NAME).read_text() == "0\n1\n2 0\n"
    p.append_as_leader(records(3), acks=1)
    lead(p, 5)
    assert p.leader_epoch_entries == ((2, 0), (5, 3))
    assert (log_dir / CHECKPOINT_NAME).read_text() == "0\n2\n2 0\n5 3\n"


def test_ec2_end_offset_for_epoch_as_leader(log: Log) -> None:
    p = Partition("id", "t", 0, log, 0, ManualClock())
    lead(p, 2)
    p.append_as_leader(records(3), acks=1)
    lead(p, 5)
    p.append_as_leader(records(2), acks=1)
    assert p.end_offset_for_epoch(2) == EpochEndOffset(2, 3)
    assert p.end_offset_for_epoch(4) == EpochEndOffset(2, 3)
    assert p.end_offset_for_epoch(5) == EpochEndOffset(5, 5)
    assert p.end_offset_for_epoch(1).undefined
    with pytest.raises(FencedLeaderEpochError):
        p.end_offset_for_epoch(5, current_leader_epoch=4)


def test_end_offset_for_epoch_needs_the_leader(log: Log) -> None:
    p = Partition("id", "t", 0, log, 0, ManualClock())
    assert p.make_follower(Reg((0, 1), (0, 1), 1, leader_epoch=3))
    with pytest.raises(NotLeaderOrFollowerError):
        p.end_offset_for_epoch(3)


def test_ec3_the_cache_survives_a_restart_and_is_cut_to_the_log(log: Log, log_dir: Path) -> None:
    p = Partition("id", "t", 0, log, 0, ManualClock())
    lead(p, 2)
    p.append_as_leader(records(3), acks=1)
    lead(p, 5)
    p.append_as_leader(records(2), acks=1)
    p.close()
    reopened = Log.open(log_dir, LogConfig(), ManualClock())
    reopened.truncate_to(3)  # as if the epoch-5 batch had not reached the disk
    again = Partition("id", "t", 0, reopened, 0, ManualClock())
    assert again.leader_epoch_entries == ((2, 0),)
    again.close()


def test_the_cache_is_rebuilt_from_the_batches_when_the_checkpoint_is_missing(log: Log, log_dir: Path) -> None:
    p = Partition("id", "t", 0, log, 0, ManualClock())
    lead(p, 2)
    p.append_as_leader(records(3), acks=1)
    lead(p, 5)
    p.append_as_leader(records(2), acks=1)
    p.close()
    (log_dir / CHECKPOINT_NAME).unlink()
    again = Partition("id", "t", 0, Log.open(log_dir, LogConfig(), ManualClock()), 0, ManualClock())
    assert again.leader_epoch_entries == ((2, 0), (5, 3))
    assert (log_dir / CHECKPOINT_NAME).exists()
    again.close()


def test_hw7_a_follower_fetch_from_a_new_life_restarts_its_progress() -> None:
    hw = HighWatermark.start(1, replicas=[1, 2], isr=[1], high_watermark=0, leader_leo=10)
    hw.on_follower_fetch(2, 10, now_ms=5.0, broker_epoch=7)
    assert hw.followers[2].last_caught_up_ms == 5.0
    hw.on_follower_fetch(2, 4, now_ms=9.0, broker_epoch=8)
    assert hw.followers[2].broker_epoch == 8
    assert hw.followers[2].log_end_offset == 4
    assert hw.followers[2].last_caught_up_ms == -1.0


class Crash(Exception):
    """The process dies here (kill -9): nothing after this point happens."""


def test_ec4_a_kill_between_the_batch_and_the_checkpoint_leaves_no_epoch_missing(
    log: Log, log_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 16 item 2: a follower appends the first batch of epoch 3; the process dies where the old code
    had written the batch but not yet the checkpoint. After the restart the cache covers every batch."""
    p = Partition("id", "t", 0, log, 1, ManualClock())
    assert p.make_follower(Reg((0, 1), (0, 1), 0, leader_epoch=3))
    p.append_as_follower(build_batch([b"x"] * 2, timestamp_ms=START_MS, partition_leader_epoch=2), 0, 3)

    def die(*args: object) -> None:
        raise Crash

    monkeypatch.setattr("replication.epoch_cache.save", die)
    with pytest.raises(Crash):
        p.append_as_follower(build_batch([b"y"], timestamp_ms=START_MS, base_offset=2, partition_leader_epoch=3), 0, 3)
    monkeypatch.undo()
    assert p.log_end_offset == 2  # EC4: the checkpoint first, so the batch was not written either
    again = Partition("id", "t", 0, Log.open(log_dir, LogConfig(), ManualClock()), 1, ManualClock())  # no clean close
    in_log = {2: 0, 3: 2} if again.log_end_offset == 3 else {2: 0}
    assert dict(again.leader_epoch_entries) == in_log
    again.close()


def test_ec5_after_an_unclean_shutdown_the_cache_is_completed_from_the_recovered_batches(
    log: Log, log_dir: Path
) -> None:
    """Issue 16 item 2: a checkpoint older than the log (lost, or written by a version that appended first)
    misses epoch 5; opening without a clean shutdown reads the epochs of the recovered batches."""
    p = Partition("id", "t", 0, log, 0, ManualClock())
    lead(p, 2)
    p.append_as_leader(records(3), acks=1)
    old_file = (log_dir / CHECKPOINT_NAME).read_text()
    lead(p, 5)
    p.append_as_leader(records(2), acks=1)
    (log_dir / CHECKPOINT_NAME).write_text(old_file)  # the process died with this file on disk
    again = Partition("id", "t", 0, Log.open(log_dir, LogConfig(), ManualClock()), 0, ManualClock())
    assert again.leader_epoch_entries == ((2, 0), (5, 3))
    assert (log_dir / CHECKPOINT_NAME).read_text() == "0\n2\n2 0\n5 3\n"
    again.close()


def test_ec4_a_refused_follower_append_restores_the_entries(log: Log, log_dir: Path) -> None:
    p = Partition("id", "t", 0, log, 1, ManualClock())
    assert p.make_follower(Reg((0, 1), (0, 1), 0, leader_epoch=4))
    p.append_as_follower(build_batch([b"x"], timestamp_ms=START_MS, partition_leader_epoch=2), 0, 4)
    bad = bytearray(build_batch([b"y"], timestamp_ms=START_MS, base_offset=1, partition_leader_epoch=4))
    bad[-1] ^= 0xFF  # fails its CRC
    with pytest.raises(CorruptRecordError):
        p.append_as_follower(bytes(bad), 0, 4)
    assert p.leader_epoch_entries == ((2, 0),)
    assert (log_dir / CHECKPOINT_NAME).read_text() == "0\n1\n2 0\n"
