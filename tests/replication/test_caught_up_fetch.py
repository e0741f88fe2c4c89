"""``Partition.note_caught_up_fetch``: a fetch that will wait skips its first read only where that read would
find nothing and raise nothing, and a follower's fetch is then recorded as the read records it (HW4, the
caught-up time of ISR1). Every case is checked against what ``Partition.read`` does with the same arguments."""

from __future__ import annotations

from pathlib import Path

from common.clock import ManualClock
from log.config import LogConfig
from log.log import Log
from replication.partition import Partition
from replication.partition_reads import IdleFetch
from tests.broker.test_partition import Reg
from tests.replication.test_partition_replication import LAG_MS, records
from tests.replication.test_partition_transactions import T0, Coordinator, txn_batch


def read_finds_nothing(p: Partition, fetch_offset: int, **kwargs: object) -> bool:
    """What the skipped read would have done: no records, no divergence, no error."""
    try:
        read = p.read(fetch_offset, 1 << 20, **kwargs)  # type: ignore[arg-type]
    except Exception:
        return False
    return not read.records and read.diverging_epoch is None


def test_a_caught_up_follower_is_recorded_as_its_read_would_record_it(leader: Partition) -> None:
    leader.append_as_leader(records(3), acks=1)
    assert leader.note_caught_up_fetch(3, replica_id=1, current_leader_epoch=1) is IdleFetch.UNCHANGED
    assert leader.follower_offsets()[1] == 3
    assert leader.high_watermark == 0  # HW4: broker 2 has not fetched yet
    assert leader.note_caught_up_fetch(3, replica_id=2, current_leader_epoch=1) is IdleFetch.HW_MOVED
    assert leader.high_watermark == 3
    assert leader.note_caught_up_fetch(3, replica_id=2, current_leader_epoch=1) is IdleFetch.UNCHANGED
    assert read_finds_nothing(leader, 3, replica_id=2, current_leader_epoch=1)


def test_its_caught_up_time_keeps_the_follower_in_the_isr(leader: Partition, clock: ManualClock) -> None:
    """ISR1 counts the caught-up time: fetches recorded without a read keep a follower in, one that stops
    fetching is proposed out."""
    leader.append_as_leader(records(2), acks=1)
    for _ in range(3):
        clock.advance(LAG_MS * 0.6)
        for replica in (1, 2):
            leader.note_caught_up_fetch(2, replica_id=replica, current_leader_epoch=1)
    assert leader.isr_change(LAG_MS) is None
    leader.append_as_leader(records(1), acks=1)
    clock.advance(LAG_MS * 0.6)
    assert leader.note_caught_up_fetch(3, replica_id=1, current_leader_epoch=1) is IdleFetch.UNCHANGED
    clock.advance(LAG_MS * 0.6)  # broker 2 last caught up 1.2 lag times ago
    change = leader.isr_change(LAG_MS)
    assert change is not None
    assert sorted(change.new_isr) == [0, 1]


def test_a_follower_that_would_get_records_or_an_error_is_read(leader: Partition) -> None:
    leader.append_as_leader(records(3), acks=1)
    cases: list[tuple[int, dict[str, object]]] = [
        (2, {"replica_id": 1, "current_leader_epoch": 1}),  # records to send
        (3, {"replica_id": 1, "current_leader_epoch": 0}),  # FENCED_LEADER_EPOCH
        (3, {"replica_id": 1, "current_leader_epoch": 2}),  # UNKNOWN_LEADER_EPOCH
        (3, {"replica_id": 7, "current_leader_epoch": 1}),  # not a replica
        (3, {"replica_id": 0, "current_leader_epoch": 1}),  # the leader itself
        (4, {"replica_id": 1, "current_leader_epoch": 1}),  # past the log end: out of range
    ]
    for offset, kwargs in cases:
        assert leader.note_caught_up_fetch(offset, **kwargs) is IdleFetch.READ, (offset, kwargs)  # type: ignore[arg-type]
    assert leader.follower_offsets() == {1: -1, 2: -1}  # nothing was recorded
    for offset, kwargs in cases:  # and the read would have sent records or raised
        assert not read_finds_nothing(leader, offset, **kwargs), (offset, kwargs)


def test_a_consumer_at_the_high_watermark_skips_the_read(leader: Partition) -> None:
    leader.append_as_leader(records(3), acks=1)
    assert leader.note_caught_up_fetch(0) is IdleFetch.UNCHANGED  # the HW is 0: nothing for consumers yet
    assert read_finds_nothing(leader, 0)
    for replica in (1, 2):
        leader.note_caught_up_fetch(3, replica_id=replica, current_leader_epoch=1)
    assert leader.note_caught_up_fetch(0) is IdleFetch.READ  # now there is
    assert not read_finds_nothing(leader, 0)
    assert leader.note_caught_up_fetch(3, current_leader_epoch=1) is IdleFetch.UNCHANGED
    assert leader.note_caught_up_fetch(3, current_leader_epoch=-1) is IdleFetch.UNCHANGED  # no epoch check asked
    assert read_finds_nothing(leader, 3, current_leader_epoch=1)
    leader.append_as_leader(records(1), acks=1)  # log end 4, HW 3: an offset between is not looked at
    assert leader.note_caught_up_fetch(4) is IdleFetch.READ


def test_read_committed_consumers_are_caught_up_at_the_last_stable_offset(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    p = Partition("id", "t", 0, Log.open(tmp_path / "txn", LogConfig(), clock), 0, clock)
    assert p.make_leader(Reg((0,), (0,), 0, leader_epoch=1))
    try:
        p.append_as_leader(records(2), acks=1)  # 0-1
        p.append_as_leader(txn_batch(7, 0, [b"open"]), acks=1, verify=Coordinator())  # 2, still open
        assert (p.high_watermark, p.last_stable_offset) == (3, 2)
        assert p.note_caught_up_fetch(2, read_committed=True) is IdleFetch.UNCHANGED
        assert read_finds_nothing(p, 2, read_committed=True)
        assert p.note_caught_up_fetch(2) is IdleFetch.READ  # read_uncommitted has the open record to read
        assert not read_finds_nothing(p, 2)
        assert p.note_caught_up_fetch(3, read_committed=True) is IdleFetch.READ
    finally:
        p.close()


def test_a_reader_whose_epoch_diverges_is_read(leader: Partition) -> None:
    """KIP-320: a reader at the right offset but with a history this log does not have gets its diverging epoch
    from the read, so it is not skipped."""
    leader.append_as_leader(records(3), acks=1)
    for replica in (1, 2):
        leader.note_caught_up_fetch(3, replica_id=replica, current_leader_epoch=1)
    assert leader.note_caught_up_fetch(3, last_fetched_epoch=1) is IdleFetch.UNCHANGED
    assert read_finds_nothing(leader, 3, last_fetched_epoch=1)
    assert leader.note_caught_up_fetch(3, last_fetched_epoch=0) is IdleFetch.READ  # epoch 0 ended at 0 here
    assert leader.read(3, 1 << 20, last_fetched_epoch=0).diverging_epoch is not None


def test_a_replica_that_does_not_lead_is_read(tmp_path: Path, clock: ManualClock) -> None:
    p = Partition("id", "t", 0, Log.open(tmp_path / "follower", LogConfig(), clock), 1, clock)
    assert p.make_follower(Reg((0, 1, 2), (0, 1, 2), 0, leader_epoch=1, partition_epoch=1))
    try:
        assert p.note_caught_up_fetch(0) is IdleFetch.READ
        assert p.note_caught_up_fetch(0, replica_id=2, current_leader_epoch=1) is IdleFetch.READ
        assert not read_finds_nothing(p, 0)
    finally:
        p.close()
