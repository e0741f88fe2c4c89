"""A Partition over a real Log as follower (TR2-TR6 applied, EC1 from fetched batches, HW2/HW3 from the
leader) and as leader proposing ISR changes (ISR1-ISR7 through ``isr_change`` / ``on_isr_answer``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from common.clock import ManualClock
from log.config import LogConfig
from log.log import Log
from log.record import build_batch
from replication.epoch_cache import EpochEndOffset
from replication.partition import ISR_RESEND_MS, Partition
from tests.broker.test_partition import Reg

START_MS = 1_700_000_000_000
LAG_MS = 1_000.0


def records(n: int) -> bytes:
    return build_batch([b"x"] * n, timestamp_ms=START_MS)


@pytest.fixture
def follower(tmp_path: Path, clock: ManualClock) -> Iterator[Partition]:
    p = Partition("id", "t", 0, Log.open(tmp_path / "follower", LogConfig(), clock), 1, clock)
    assert p.make_follower(Reg((0, 1, 2), (0, 1, 2), 0, leader_epoch=1, partition_epoch=1))
    yield p
    p.close()


def replicate(leader: Partition, follower: Partition, replica_id: int = 1) -> None:
    read = leader.read(follower.log_end_offset, 1 << 20, replica_id=replica_id)
    follower.append_as_follower(read.records, read.high_watermark, follower.leader_epoch)
    leader.read(follower.log_end_offset, 1 << 20, replica_id=replica_id)  # reports the new position (HW4)


def test_follower_appends_keep_offsets_epochs_and_the_leaders_hw(leader: Partition, follower: Partition) -> None:
    leader.append_as_leader(records(3), acks=1)
    replicate(leader, follower)
    assert follower.log_end_offset == 3
    assert follower.leader_epoch_entries == ((1, 0),)  # EC1: learnt from the batches
    assert follower.high_watermark == 0  # the leader's HW waits for replica 2 (HW1)
    replicate(leader, follower, replica_id=2)
    replicate(leader, follower)
    assert follower.high_watermark == 3


def test_tr3_follower_truncates_where_the_epochs_split(follower: Partition, clock: ManualClock) -> None:
    # The follower once led in epoch 1 and wrote 5 records nobody else got; the new leader (epoch 2) has
    # epoch 1 up to offset 3.
    follower.make_leader(Reg((0, 1, 2), (0, 1), 1, leader_epoch=1, partition_epoch=2))  # HW stays 0
    follower.append_as_leader(records(3), acks=1)
    follower.append_as_leader(records(2), acks=1)
    assert follower.make_follower(Reg((0, 1, 2), (0, 2), 0, leader_epoch=2, partition_epoch=3))
    decision = follower.decide_truncation(follower.latest_epoch, EpochEndOffset(1, 3))
    assert decision.truncate_to == 3
    assert decision.done
    assert follower.truncate_as_follower(decision.truncate_to, 2)
    assert follower.log_end_offset == 3
    assert not follower.truncate_as_follower(0, 1)  # a stale epoch does nothing


def test_tr7_a_leader_that_ends_below_the_followers_hw_is_followed_anyway(
    leader: Partition, follower: Partition, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 16 item 1: the follower saw 5 records committed; the new leader (elected uncleanly) has 2.
    The follower truncates to 2 and lowers its HW (with a warning), then takes the leader's new records."""
    leader.append_as_leader(records(2), acks=1)
    leader.append_as_leader(records(3), acks=1)
    replicate(leader, follower)
    replicate(leader, follower, replica_id=2)
    replicate(leader, follower)
    assert (follower.log_end_offset, follower.high_watermark) == (5, 5)
    assert follower.make_follower(Reg((0, 1, 2), (0,), 0, leader_epoch=2, partition_epoch=2))
    decision = follower.decide_truncation(follower.latest_epoch, EpochEndOffset(1, 2))  # the leader's epoch 1 ends at 2
    assert decision.truncate_to == 2
    assert follower.truncate_as_follower(decision.truncate_to, 2)
    assert (follower.log_end_offset, follower.high_watermark) == (2, 2)
    assert "below the high watermark 5" in caplog.text
    assert follower.leader_epoch_entries == ((1, 0),)
    other = build_batch([b"new"] * 3, timestamp_ms=START_MS, base_offset=2, partition_leader_epoch=2)
    assert follower.append_as_follower(other, 5, 2) is not None  # offsets 2-4 now hold the leader's records
    assert (follower.log_end_offset, follower.high_watermark) == (5, 5)
    assert follower.leader_epoch_entries == ((1, 0), (2, 2))


def test_restart_at_the_leaders_log_start(follower: Partition) -> None:
    assert follower.restart_at(40, follower.leader_epoch)
    assert (follower.log_start_offset, follower.log_end_offset, follower.high_watermark) == (40, 40, 40)


def test_isr1_a_lagging_follower_is_proposed_out_and_isr4_holds_the_hw(
    leader: Partition, follower: Partition, clock: ManualClock
) -> None:
    leader.append_as_leader(records(2), acks=1)
    replicate(leader, follower)  # replica 1 caught up; replica 2 never fetches
    clock.advance(LAG_MS + 1)
    request = leader.isr_change(LAG_MS)
    assert request is not None
    assert request.new_isr == (0, 1)
    assert leader.high_watermark == 0  # ISR4: replica 2 still counts while the shrink is pending
    assert leader.isr_change(LAG_MS) is None  # ISR3
    assert leader.on_isr_answer(request, True, (0, 1), 2)
    assert leader.isr == (0, 1)
    assert leader.high_watermark == 2


def test_isr6_a_refused_change_keeps_the_isr(leader: Partition, clock: ManualClock) -> None:
    clock.advance(LAG_MS + 1)
    request = leader.isr_change(LAG_MS)
    assert request is not None
    assert not leader.on_isr_answer(request, False, (), -1)
    assert leader.isr == (0, 1, 2)


def test_isr2_a_caught_up_follower_is_proposed_in(tmp_path: Path, clock: ManualClock, follower: Partition) -> None:
    p = Partition("id", "t", 0, Log.open(tmp_path / "l2", LogConfig(), clock), 0, clock)
    assert p.make_leader(Reg((0, 1), (0,), 0, leader_epoch=1, partition_epoch=1))
    p.append_as_leader(records(2), acks=1)
    assert p.isr_change(LAG_MS) is None  # replica 1 has not fetched
    replicate(p, follower)
    request = p.isr_change(LAG_MS)
    assert request is not None
    assert request.new_isr == (0, 1)
    p.close()


def test_isr6_an_unsettled_change_is_sent_again(leader: Partition, clock: ManualClock) -> None:
    clock.advance(LAG_MS + 1)
    request = leader.isr_change(LAG_MS)
    assert request is not None
    assert not leader.on_isr_answer(request, False, (), -1, settled=False)
    assert leader.isr_change(LAG_MS) is None  # pending, not yet due again
    clock.advance(ISR_RESEND_MS)
    assert leader.isr_change(LAG_MS) == request
