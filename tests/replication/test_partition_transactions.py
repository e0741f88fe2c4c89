"""Transactions on a partition over real files (docs/TRANSACTIONS.md): verification guards (S11), the
non-transactional write of a producer in a transaction (S10), markers only through the coordinator's path
(S1, S12), the LSO (L3), the .txnindex written on ABORT and found again after a clean close, a crash and a
truncation, read_committed reads and ListOffsets, and the consumer's filter over what a read returns."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from common.clock import ManualClock
from log.config import LogConfig
from log.errors import InvalidRecordError
from log.log import Log
from log.producer_state import InvalidProducerEpochError, InvalidTxnStateError
from log.producer_state_file import ENTRY, SNAPSHOT_HEADER, decode_with_transactions
from log.record import build_batch
from log.record.control import CONTROL_TYPE_ABORT, CONTROL_TYPE_COMMIT, EndTransactionMarker, build_marker_batch
from log.transactions import ProducerFencedError, TransactionCoordinatorFencedError
from log.txn_index import AbortedTxn
from odradek.fetcher import CompletedFetch
from odradek.read_committed import AbortedTransactionFilter
from odradek.types import TopicPartition
from replication.partition import Partition

T0 = 1_700_000_000_000
COMMIT = EndTransactionMarker(CONTROL_TYPE_COMMIT, 1)
ABORT = EndTransactionMarker(CONTROL_TYPE_ABORT, 1)


@dataclass(frozen=True)
class Reg:
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int = 0
    partition_epoch: int = 0


def txn_batch(pid: int, seq: int, values: list[bytes], *, epoch: int = 0, txn: bool = True) -> bytes:
    return build_batch(values, timestamp_ms=T0, producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                       is_transactional=txn)  # fmt: skip


def open_partition(directory: Path, *, leader: bool = True, segment_bytes: int = 1 << 20) -> Partition:
    log = Log.open(directory, LogConfig(segment_bytes=segment_bytes), ManualClock(T0))
    p = Partition("id", "t", 0, log, 0, ManualClock(T0))
    if leader:
        assert p.make_leader(Reg((0,), (0,), 0, leader_epoch=1))
    else:
        assert p.make_follower(Reg((1, 0), (1, 0), 1, leader_epoch=1))
    return p


class Coordinator:
    """The verifier a produce handler would give: records what it was asked, refuses when told to."""

    def __init__(self) -> None:
        self.asked: list[list[tuple[int, int]]] = []
        self.refuse = False

    def __call__(self, key: tuple[str, int], producers: list[tuple[int, int]]) -> None:
        self.asked.append(producers)
        if self.refuse:
            raise InvalidTxnStateError("not in the transaction")


def values_read_committed(p: Partition) -> list[bytes]:
    read = p.read(0, 1 << 20, read_committed=True)
    fetch = CompletedFetch(TopicPartition("t", 0), read.records, 1 << 24,
                           AbortedTransactionFilter((a.producer_id, a.first_offset) for a in read.aborted))  # fmt: skip
    out: list = []
    fetch.take(0, 1000, out)
    return [r.value for r in out]


def test_s11_a_transaction_opens_only_after_verification(tmp_path: Path) -> None:
    p = open_partition(tmp_path / "t-0")
    with pytest.raises(InvalidTxnStateError, match="no verified transaction"):
        p.append_as_leader(txn_batch(7, 0, [b"a"]), acks=1)  # no verifier
    coordinator = Coordinator()
    coordinator.refuse = True
    with pytest.raises(InvalidTxnStateError, match="not in the transaction"):
        p.append_as_leader(txn_batch(7, 0, [b"a"]), acks=1, verify=coordinator)
    assert p.log_end_offset == 0
    coordinator.refuse = False
    p.append_as_leader(txn_batch(7, 0, [b"a"]), acks=1, verify=coordinator)
    p.append_as_leader(txn_batch(7, 1, [b"b"]), acks=1, verify=coordinator)  # open: no second question
    assert coordinator.asked == [[(7, 0)], [(7, 0)]]
    assert p.last_stable_offset == 0  # L3: the open transaction holds it at its first offset
    with pytest.raises(InvalidTxnStateError, match="non-transactional"):  # S10
        p.append_as_leader(txn_batch(7, 2, [b"c"], txn=False), acks=1)


def test_s11_a_verification_from_before_a_marker_is_void(tmp_path: Path) -> None:
    p = open_partition(tmp_path / "t-0")
    coordinator = Coordinator()
    p.append_as_leader(txn_batch(7, 0, [b"a"]), acks=1, verify=coordinator)
    p.append_marker(7, 0, ABORT)

    def abort_meanwhile(key: tuple[str, int], producers: list[tuple[int, int]]) -> None:
        p.append_marker(7, 0, ABORT)  # the coordinator aborted while the leader was asking

    with pytest.raises(InvalidTxnStateError, match="no verified transaction"):
        p.append_as_leader(txn_batch(7, 1, [b"late"]), acks=1, verify=abort_meanwhile)
    assert p.last_stable_offset == p.log_end_offset == 3  # no hanging transaction


def test_markers_come_only_from_the_coordinator_path(tmp_path: Path) -> None:
    p = open_partition(tmp_path / "t-0")
    with pytest.raises(InvalidRecordError, match="control batch"):
        p.append_as_leader(build_marker_batch(7, 0, COMMIT, T0), acks=1)
    p.append_as_leader(txn_batch(7, 0, [b"a"]), acks=1, verify=Coordinator())
    p.append_marker(7, 0, EndTransactionMarker(CONTROL_TYPE_COMMIT, 5))
    with pytest.raises(TransactionCoordinatorFencedError):  # S12
        p.append_marker(7, 0, EndTransactionMarker(CONTROL_TYPE_ABORT, 4))
    p.append_marker(7, 3, EndTransactionMarker(CONTROL_TYPE_ABORT, 5))  # a fence's abort: epoch 3 now
    with pytest.raises(ProducerFencedError):
        p.append_marker(7, 2, EndTransactionMarker(CONTROL_TYPE_ABORT, 5))
    with pytest.raises(InvalidProducerEpochError):  # S2: the zombie of epoch 0 is fenced
        p.append_as_leader(txn_batch(7, 1, [b"zombie"]), acks=1, verify=Coordinator())


def test_lso_index_and_read_committed(tmp_path: Path) -> None:
    p = open_partition(tmp_path / "t-0")
    coordinator = Coordinator()
    p.append_as_leader(txn_batch(1, 0, [b"c1", b"c2"]), acks=1, verify=coordinator)  # 0-1, committed later
    p.append_as_leader(txn_batch(2, 0, [b"x1"]), acks=1, verify=coordinator)  # 2, aborted
    p.append_as_leader(txn_batch(9, 0, [b"plain"], txn=False), acks=1)  # 3
    assert p.last_stable_offset == 0
    assert values_read_committed(p) == []
    p.append_marker(2, 0, ABORT)  # 4
    assert p.last_stable_offset == 0  # 1 is still open
    p.append_marker(1, 0, COMMIT)  # 5
    assert p.last_stable_offset == p.high_watermark == 6
    assert values_read_committed(p) == [b"c1", b"c2", b"plain"]
    read = p.read(0, 1 << 20, read_committed=True)
    assert read.aborted == (AbortedTxn(2, 2, 4, 0),)
    assert (tmp_path / "t-0" / "00000000000000000000.txnindex").stat().st_size == 34
    assert p.offset_for_timestamp(-1, read_committed=True) == (6, -1)
    p.append_as_leader(txn_batch(1, 2, [b"open"]), acks=1, verify=coordinator)  # 6, open
    assert p.offset_for_timestamp(-1, read_committed=True) == (6, -1)
    assert p.offset_for_timestamp(-1) == (7, -1)
    assert p.read(0, 1 << 20, read_committed=False).records != read.records  # uncommitted sees it


def test_index_and_open_transactions_survive_close_and_crash(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    p = open_partition(directory, segment_bytes=200)
    coordinator = Coordinator()
    for i in range(3):  # several segments; transaction 2 spans them
        p.append_as_leader(txn_batch(1, i, [b"a" * 50]), acks=1, verify=coordinator)
        p.append_as_leader(txn_batch(2, i, [b"b" * 50]), acks=1, verify=coordinator)
    p.append_marker(1, 0, ABORT)
    p.append_as_leader(txn_batch(3, 0, [b"c"]), acks=1, verify=coordinator)
    assert len(p.log.segments) > 2
    before = p.read(0, 1 << 20, read_committed=True)
    p.close()
    clean = open_partition(directory)
    assert clean.last_stable_offset == 1  # 2 began at 1 and is still open
    clean.append_marker(2, 0, COMMIT)
    assert clean.log.collect_aborted(0, clean.log_end_offset) == list(before.aborted) == [AbortedTxn(1, 0, 6, 1)]
    end = clean.log_end_offset
    clean.log.close_handlers()  # a crash: no snapshot, no clean-shutdown marker
    crashed = open_partition(directory)
    assert crashed.log_end_offset == end
    assert crashed.last_stable_offset == 7  # 3 is still open; 2 committed (its marker replayed)
    assert crashed.log.collect_aborted(0, end) == [AbortedTxn(1, 0, 6, 1)]
    crashed.close()


def test_crash_that_lost_the_index_entry_rebuilds_it_from_the_log(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    p = open_partition(directory)
    p.append_as_leader(txn_batch(1, 0, [b"a"]), acks=1, verify=Coordinator())
    p.append_marker(1, 0, ABORT)
    p.log.close_handlers()
    index = directory / "00000000000000000000.txnindex"
    index.write_bytes(index.read_bytes()[:20])  # a write cut short
    again = open_partition(directory)
    assert again.log.collect_aborted(0, again.log_end_offset) == [AbortedTxn(1, 0, 1, 2)]
    assert index.stat().st_size == 34
    again.close()


def test_follower_writes_the_index_and_truncation_reopens(tmp_path: Path) -> None:
    leader = open_partition(tmp_path / "leader")
    leader.append_as_leader(txn_batch(1, 0, [b"a"]), acks=1, verify=Coordinator())
    leader.append_marker(1, 0, ABORT)
    leader.append_as_leader(txn_batch(2, 0, [b"b"]), acks=1, verify=Coordinator())
    leader.append_marker(2, 0, COMMIT)
    records = leader.log.read(0, 1 << 20).records
    follower = open_partition(tmp_path / "follower", leader=False)
    follower.append_as_follower(records, leader_high_watermark=0, leader_epoch=1)
    assert follower.log.collect_aborted(0, 4) == [AbortedTxn(1, 0, 1, 2)]
    assert follower.last_stable_offset == 0  # L3: the markers are not below the high watermark yet
    follower.append_as_follower(b"", leader_high_watermark=4, leader_epoch=1)
    assert follower.last_stable_offset == 4
    assert follower.truncate_as_follower(3, leader_epoch=1)  # the COMMIT marker is gone: 2 is open again
    assert follower.last_stable_offset == 2
    assert follower.truncate_as_follower(1, leader_epoch=1)  # the ABORT marker too
    assert follower.log.collect_aborted(0, 1) == []
    assert follower.last_stable_offset == 0


def test_snapshot_carries_open_transactions_and_reads_version_1(tmp_path: Path) -> None:
    p = open_partition(tmp_path / "t-0")
    p.append_as_leader(txn_batch(1, 0, [b"a"]), acks=1, verify=Coordinator())
    p.append_marker(2, 0, EndTransactionMarker(CONTROL_TYPE_ABORT, 6))
    p.close()
    snapshot = next((tmp_path / "t-0").glob("*.snapshot")).read_bytes()
    entries, txns = decode_with_transactions(snapshot)
    assert [t.first_offset for t in txns.open_transactions] == [0]
    assert txns.coordinator_epoch(2) == 6
    assert sorted(e.producer_id for e in entries) == [1, 2]
    v1 = bytearray(SNAPSHOT_HEADER.pack(1, 0, 1) + ENTRY.pack(5, 0, T0, 0))
    from crc32c import crc32c

    v1[2:6] = crc32c(bytes(v1[6:])).to_bytes(4, "big")
    old_entries, old_txns = decode_with_transactions(bytes(v1))
    assert [e.producer_id for e in old_entries] == [5]
    assert old_txns.open_transactions == []


def test_s11_concurrent_verifications_share_one_guard_and_a_marker_voids_it() -> None:
    from log.producer_state import ProducerStateManager
    from log.record import parse_header

    state = ProducerStateManager()
    first, second = state.begin_verification(7, 0), state.begin_verification(7, 0)
    assert first == second  # two requests of the producer in flight: both may append
    header = parse_header(txn_batch(7, 0, [b"a"]))
    state.check_append([header], {7: first})
    state.update(header, 0)
    marker = parse_header(build_marker_batch(7, 0, ABORT, T0, base_offset=1))
    state.update(marker, 1, marker=ABORT)
    assert state.begin_verification(7, 0) != first
    with pytest.raises(InvalidTxnStateError):
        state.check_append([parse_header(txn_batch(7, 1, [b"late"]))], {7: first})
