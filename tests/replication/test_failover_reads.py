"""Reads right after a failover (issue 16, item 4), on a Partition over a real Log.

* KIP-207: a new leader whose high watermark is still below the start of its epoch answers ListOffsets
  "latest" with OFFSET_NOT_AVAILABLE, never with an offset below what the old leader answered.
* KIP-320: a reader that names the epoch of the last batch it fetched learns where that epoch ends in the
  leader's log when the leader does not hold it up to the reader's offset (``diverging_epoch``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from common.clock import ManualClock
from log.config import LogConfig
from log.log import Log
from log.record import build_batch
from replication.epoch_cache import EpochEndOffset
from replication.errors import OffsetNotAvailableError
from replication.partition import Partition
from replication.timestamps import LATEST_TIMESTAMP, MAX_TIMESTAMP
from tests.broker.test_partition import Reg

START_MS = 1_700_000_000_000


def records(n: int, epoch: int, base: int = 0) -> bytes:
    return build_batch([b"x"] * n, timestamp_ms=START_MS, base_offset=base, partition_leader_epoch=epoch)


@pytest.fixture
def follower(tmp_path: Path) -> Iterator[Partition]:
    """Broker 1 follows broker 0 in epoch 0; it has 5 records, of which the leader told it 3 are committed."""
    clock = ManualClock()
    p = Partition("id", "t", 0, Log.open(tmp_path / "t-0", LogConfig(), clock), 1, clock)
    assert p.make_follower(Reg((0, 1, 2), (0, 1, 2), 0, leader_epoch=0))
    p.append_as_follower(records(3, 0), 3, 0)
    p.append_as_follower(records(2, 0, base=3), 3, 0)  # the old leader's HW reached 5 after this fetch
    yield p
    p.close()


def test_kip207_latest_is_not_available_until_the_high_watermark_reaches_the_epoch_start(follower: Partition) -> None:
    assert follower.make_leader(Reg((0, 1, 2), (1, 2), 1, leader_epoch=1, partition_epoch=1))
    assert follower.high_watermark == 3  # below the start of epoch 1 (5): 3 and 4 were acknowledged
    with pytest.raises(OffsetNotAvailableError):
        follower.offset_for_timestamp(LATEST_TIMESTAMP)
    with pytest.raises(OffsetNotAvailableError):
        follower.offset_for_timestamp(START_MS + 1)  # nothing found below the HW: not "no such record"
    assert follower.offset_for_timestamp(START_MS) == (0, START_MS)  # found below the HW: answered
    assert follower.offset_for_timestamp(LATEST_TIMESTAMP, for_replica=True) == (5, -1)
    assert follower.offset_for_timestamp(MAX_TIMESTAMP) is not None
    follower.read(5, 1024, replica_id=2)  # the other ISR member fetches: HW 5
    assert follower.offset_for_timestamp(LATEST_TIMESTAMP) == (5, -1)


def test_kip320_a_reader_of_a_diverged_epoch_learns_where_it_ends(follower: Partition) -> None:
    assert follower.make_follower(Reg((0, 1, 2), (1,), 1, leader_epoch=1, partition_epoch=1))
    assert follower.make_leader(Reg((0, 1, 2), (1,), 1, leader_epoch=1, partition_epoch=1))
    follower.append_as_leader(build_batch([b"y"], timestamp_ms=START_MS), acks=1)  # epoch 1 starts at 5
    read = follower.read(5, 1024, last_fetched_epoch=0)
    assert read.diverging_epoch is None  # epoch 0 ends at 5 here too: the reader agrees
    assert read.records
    read = follower.read(6, 1024, last_fetched_epoch=0)  # the reader has epoch 0 up to 6: 5 is not epoch 0 here
    assert read.diverging_epoch == EpochEndOffset(0, 5)
    assert not read.records
    read = follower.read(6, 1024, last_fetched_epoch=7)  # an epoch newer than any here
    assert read.diverging_epoch == EpochEndOffset(1, 6)
    assert follower.read(6, 1024, last_fetched_epoch=1).diverging_epoch is None
