"""The partition state: the high-watermark rules (replication/partition.py HW1-HW6, Kafka's) and the Partition
over a real Log: roles, epochs, appends, reads for consumers and followers."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.clock import ManualClock
from log.config import LogConfig
from log.errors import CorruptRecordError, OffsetOutOfRangeError, RecordTooLargeError
from log.log import Log
from log.record import build_batch, iter_batches
from replication.errors import (
    FencedLeaderEpochError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    UnknownLeaderEpochError,
)
from replication.high_watermark import HighWatermark
from replication.partition import Partition
from replication.views import Role

START_MS = 1_700_000_000_000


@dataclass(frozen=True)
class Reg:
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int = 0
    partition_epoch: int = 0


def batch(n: int = 1, *, timestamp_ms: int = START_MS, size: int = 1) -> bytes:
    return build_batch([b"x" * size] * n, timestamp_ms=timestamp_ms)


# ----------------------------------------------------------------------------------- HighWatermark rules


def test_hw1_the_high_watermark_is_the_smallest_log_end_offset_over_the_isr() -> None:
    hw = HighWatermark.start(1, replicas=[1, 2, 3], isr=[1, 2, 3], high_watermark=0, leader_leo=10)
    hw.on_follower_fetch(2, 7, now_ms=0)
    assert hw.high_watermark == 0  # HW4: broker 3 has not fetched yet
    hw.on_follower_fetch(3, 5, now_ms=0)
    assert hw.high_watermark == 5
    hw.on_follower_fetch(3, 10, now_ms=0)
    assert hw.high_watermark == 7


def test_hw1_replicas_outside_the_isr_do_not_hold_it_back() -> None:
    hw = HighWatermark.start(1, replicas=[1, 2, 3], isr=[1, 2], high_watermark=0, leader_leo=10)
    hw.on_follower_fetch(2, 10, now_ms=0)
    assert hw.high_watermark == 10  # broker 3 never fetched: not in the ISR, does not count


def test_hw2_the_high_watermark_never_goes_back() -> None:
    hw = HighWatermark.start(1, replicas=[1, 2], isr=[1, 2], high_watermark=0, leader_leo=10)
    hw.on_follower_fetch(2, 8, now_ms=0)
    assert hw.high_watermark == 8
    hw.update_isr([1, 2, 3], [1, 2, 3])  # a new member with an unknown offset
    hw.on_follower_fetch(3, 2, now_ms=0)  # far behind
    assert hw.high_watermark == 8


def test_hw3_a_new_leader_keeps_its_high_watermark_capped_at_its_log_end() -> None:
    hw = HighWatermark.start(1, replicas=[1, 2], isr=[1, 2], high_watermark=20, leader_leo=12)
    assert hw.high_watermark == 12


def test_hw5_with_the_isr_only_the_leader_the_high_watermark_follows_every_append() -> None:
    hw = HighWatermark.start(1, replicas=[1, 2], isr=[1], high_watermark=0, leader_leo=3)
    assert hw.high_watermark == 3
    assert hw.on_leader_append(9)
    assert hw.high_watermark == 9


def test_an_isr_shrink_can_move_the_high_watermark() -> None:
    hw = HighWatermark.start(1, replicas=[1, 2, 3], isr=[1, 2, 3], high_watermark=0, leader_leo=10)
    hw.on_follower_fetch(2, 10, now_ms=0)
    assert hw.high_watermark == 0
    assert hw.update_isr([1, 2], [1, 2, 3])  # broker 3 (never fetched) leaves the ISR
    assert hw.high_watermark == 10


def test_hw6_caught_up_time() -> None:
    """Kafka's Replica.updateFetchStateOrThrow: caught up now when the fetch reaches the leader's end; caught
    up as of the previous fetch when it reaches the end the leader had at that fetch."""
    hw = HighWatermark.start(1, replicas=[1, 2], isr=[1, 2], high_watermark=0, leader_leo=10)
    hw.on_follower_fetch(2, 4, now_ms=100)
    assert hw.followers[2].last_caught_up_ms == -1
    hw.on_leader_append(15)
    hw.on_follower_fetch(2, 10, now_ms=200)  # reaches the end of the leader at its previous fetch (10)
    assert hw.followers[2].last_caught_up_ms == 100
    hw.on_follower_fetch(2, 15, now_ms=300)
    assert hw.followers[2].last_caught_up_ms == 300


def test_a_fetch_from_a_non_replica_is_refused() -> None:
    hw = HighWatermark.start(1, replicas=[1, 2], isr=[1, 2], high_watermark=0, leader_leo=10)
    with pytest.raises(NotLeaderOrFollowerError):
        hw.on_follower_fetch(9, 1, now_ms=0)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["append", "fetch", "isr"]), st.integers(0, 3), st.integers(0, 20))))
def test_hw_invariants_under_any_sequence(steps: list[tuple[str, int, int]]) -> None:
    """HW2 and HW3 under any interleaving of appends, follower fetches and ISR changes; HW1 as a bound: the
    high watermark never exceeds the smallest known log end offset of the ISR."""
    hw = HighWatermark.start(0, replicas=[0, 1, 2, 3], isr=[0, 1, 2, 3], high_watermark=0, leader_leo=0)
    previous = 0
    for kind, who, amount in steps:
        if kind == "append":
            hw.on_leader_append(hw.leader_log_end_offset + amount)
        elif kind == "fetch" and who != 0:
            hw.on_follower_fetch(who, min(amount, hw.leader_log_end_offset), now_ms=0)
        elif kind == "isr":
            hw.update_isr({0} | {r for r in (1, 2, 3) if (amount >> r) & 1}, [0, 1, 2, 3])
        assert previous <= hw.high_watermark <= hw.leader_log_end_offset
        previous = hw.high_watermark


# ------------------------------------------------------------------------------------- the Partition


@pytest.fixture
def log(tmp_path: Path) -> Iterator[Log]:
    opened = Log.open(tmp_path / "t-0", LogConfig(), ManualClock())
    yield opened
    opened.close()


def leader_partition(
    log: Log, *, isr: tuple[int, ...] = (0,), replicas: tuple[int, ...] = (0,), epoch: int = 3
) -> Partition:
    p = Partition("id", "t", 0, log, 0, ManualClock())
    assert p.make_leader(Reg(replicas, isr, 0, leader_epoch=epoch))
    return p


def test_append_as_leader_stamps_the_leader_epoch_and_moves_the_high_watermark(log: Log) -> None:
    p = leader_partition(log, epoch=7)
    info = p.append_as_leader(batch(3), acks=1)
    assert (info.first_offset, info.last_offset) == (0, 2)
    assert p.high_watermark == p.log_end_offset == 3  # HW5
    records = p.read(0, 1 << 20).records
    assert [h.partition_leader_epoch for _, h in iter_batches(records)] == [7]


def test_writes_are_refused_unless_leader(log: Log) -> None:
    p = Partition("id", "t", 0, log, 0, ManualClock())
    with pytest.raises(NotLeaderOrFollowerError):
        p.append_as_leader(batch(), acks=1)  # role NONE
    p.make_follower(Reg((1, 0), (1, 0), 1))
    assert p.role is Role.FOLLOWER
    with pytest.raises(NotLeaderOrFollowerError):
        p.append_as_leader(batch(), acks=1)
    with pytest.raises(NotLeaderOrFollowerError):
        p.read(0, 100)
    assert log.log_end_offset == 0


def test_acks_all_needs_min_insync_replicas(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig(min_insync_replicas=2), ManualClock())
    p = leader_partition(log, isr=(0,), replicas=(0, 1))
    with pytest.raises(NotEnoughReplicasError):
        p.append_as_leader(batch(), acks=-1)
    assert log.log_end_offset == 0  # nothing written
    p.append_as_leader(batch(), acks=1)  # acks=1 does not care
    assert log.log_end_offset == 1
    log.close()


def test_bad_batches_change_nothing(log: Log, tmp_path: Path) -> None:
    p = leader_partition(log)
    good = bytearray(batch())
    good[-1] ^= 0xFF  # breaks the CRC
    with pytest.raises(CorruptRecordError):
        p.append_as_leader(bytes(good), acks=1)
    with pytest.raises(CorruptRecordError):
        p.append_as_leader(b"garbage" * 20, acks=1)
    small = Log.open(tmp_path / "small-0", LogConfig(max_message_bytes=100), ManualClock())
    q = leader_partition(small)
    with pytest.raises(RecordTooLargeError):
        q.append_as_leader(batch(size=500), acks=1)
    assert log.log_end_offset == 0
    assert small.log_end_offset == 0
    assert p.high_watermark == 0
    small.close()


def test_consumers_read_below_the_high_watermark_followers_to_the_end(log: Log) -> None:
    p = leader_partition(log, isr=(0, 1), replicas=(0, 1))
    p.append_as_leader(batch(2), acks=1)
    assert p.high_watermark == 0  # follower 1 has not fetched (HW4)
    assert p.read(0, 1 << 20).records == b""  # consumer: nothing committed yet
    follower = p.read(0, 1 << 20, replica_id=1)
    assert len(follower.records) > 0
    assert not follower.high_watermark_moved
    moved = p.read(2, 1 << 20, replica_id=1)  # the follower has both records now
    assert moved.high_watermark_moved
    assert moved.high_watermark == 2
    assert len(p.read(0, 1 << 20).records) == len(follower.records)


def test_offsets_out_of_range(log: Log) -> None:
    p = leader_partition(log)
    p.append_as_leader(batch(2), acks=1)
    assert p.read(2, 100).records == b""  # at the end: nothing, no error
    with pytest.raises(OffsetOutOfRangeError):
        p.read(3, 100)


def test_current_leader_epoch_checks(log: Log) -> None:
    p = leader_partition(log, epoch=5)
    p.append_as_leader(batch(), acks=1)
    assert p.read(0, 100, current_leader_epoch=5).leader_epoch == 5
    assert p.read(0, 100, current_leader_epoch=-1).records
    with pytest.raises(FencedLeaderEpochError):
        p.read(0, 100, current_leader_epoch=4)
    with pytest.raises(UnknownLeaderEpochError):
        p.read(0, 100, current_leader_epoch=6)


def test_stale_registrations_are_ignored(log: Log) -> None:
    p = leader_partition(log, epoch=5)
    assert not p.make_follower(Reg((0, 1), (0, 1), 1, leader_epoch=4))
    assert p.role is Role.LEADER
    assert p.leader_epoch == 5
    assert p.make_follower(Reg((0, 1), (0, 1), 1, leader_epoch=6))
    assert p.role is Role.FOLLOWER  # type: ignore[comparison-overlap]  # mypy narrowed the property above
    assert p.leader_id == 1


def test_a_follower_fetch_from_a_non_replica_is_refused(log: Log) -> None:
    p = leader_partition(log, isr=(0, 1), replicas=(0, 1))
    with pytest.raises(NotLeaderOrFollowerError):
        p.read(0, 100, replica_id=2)


def test_fetch_positions_count_appended_bytes(log: Log) -> None:
    p = leader_partition(log, isr=(0, 1), replicas=(0, 1))
    one = batch(1)
    p.append_as_leader(one, acks=1)
    p.append_as_leader(one, acks=1)
    assert p.fetch_position(for_replica=True).appended_bytes == 2 * len(one)
    assert p.fetch_position(for_replica=False).appended_bytes == 0  # HW still 0
    p.read(1, 100, replica_id=1)  # follower at 1: HW 1
    consumer = p.fetch_position(for_replica=False)
    assert (consumer.offset, consumer.appended_bytes) == (1, len(one))


def test_list_offsets_by_time(log: Log) -> None:
    p = leader_partition(log, isr=(0, 1), replicas=(0, 1))
    p.append_as_leader(batch(2, timestamp_ms=1000), acks=1)
    p.append_as_leader(batch(1, timestamp_ms=5000), acks=1)
    p.append_as_leader(batch(1, timestamp_ms=3000), acks=1)
    assert p.offset_for_timestamp(-2) == (0, -1)
    assert p.offset_for_timestamp(-1) == (0, -1)  # the high watermark for consumers
    assert p.offset_for_timestamp(-1, for_replica=True) == (4, -1)
    assert p.offset_for_timestamp(2000) is None  # offset 2 is above the high watermark
    p.read(4, 100, replica_id=1)
    assert p.offset_for_timestamp(-1) == (4, -1)
    assert p.offset_for_timestamp(2000) == (2, 5000)
    assert p.offset_for_timestamp(-3) == (2, 5000)
    assert p.offset_for_timestamp(9000) is None


def test_a_config_change_reopens_the_log_and_keeps_the_data(log: Log) -> None:
    p = leader_partition(log)
    p.append_as_leader(batch(2), acks=1)
    p.update_config(LogConfig(retention_ms=1000))
    assert p.config.retention_ms == 1000
    assert p.log is not log
    assert log.closed
    assert p.log_end_offset == 2
    assert p.read(0, 1 << 20).records
    p.log.close()
