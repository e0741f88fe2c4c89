"""A partition's transactions: control batches (log/record/control.py), the aborted-transaction index
(log/txn_index.py), the open transactions and the LSO (log/transactions.py, rules L1-L5), and the consumer's
filter (odradek/read_committed.py, R1-R4). The state machine at the end writes real batches to a model
partition and checks the LSO against a brute-force model and that a read_committed read returns exactly the
records of committed transactions and of non-transactional producers."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from log.errors import CorruptRecordError
from log.index import IndexSanityError
from log.record import build_batch, parse_header
from log.record.builder import BatchBuilder
from log.record.control import (
    CONTROL_TYPE_ABORT,
    CONTROL_TYPE_COMMIT,
    EndTransactionMarker,
    build_marker_batch,
    decode_marker,
    read_marker,
)
from log.record.header import ATTR_CONTROL, ATTR_TRANSACTIONAL, BatchHeader
from log.record.reader import read_batch
from log.transactions import (
    ProducerFencedError,
    TransactionCoordinatorFencedError,
    TransactionTracker,
)
from log.txn_index import ENTRY_SIZE, AbortedTxn, TransactionIndex, collect_aborted, decode_entries
from odradek.read_committed import AbortedTransactionFilter

T0 = 1_700_000_000_000
COMMIT = EndTransactionMarker(CONTROL_TYPE_COMMIT, 4)
ABORT = EndTransactionMarker(CONTROL_TYPE_ABORT, 4)


def data_header(pid: int, offset: int, n: int = 1, *, txn: bool = True, epoch: int = 0) -> BatchHeader:
    batch = build_batch([b"v"] * n, timestamp_ms=T0, producer_id=pid, producer_epoch=epoch, base_sequence=0,
                        is_transactional=txn, base_offset=offset)  # fmt: skip
    return parse_header(batch)


# ------------------------------------------------------------------------------------------- control


def test_marker_batch_layout_is_kafkas() -> None:
    batch = build_marker_batch(42, 3, COMMIT, T0, base_offset=17)
    header, marker = read_marker(batch)
    assert header.attributes & (ATTR_CONTROL | ATTR_TRANSACTIONAL) == ATTR_CONTROL | ATTR_TRANSACTIONAL
    assert (header.base_offset, header.producer_id, header.producer_epoch, header.base_sequence) == (17, 42, 3, -1)
    assert (header.records_count, header.last_offset_delta) == (1, 0)
    assert marker == COMMIT
    _, records = read_batch(batch)
    assert records[0].key == b"\x00\x00\x00\x01"  # version 0, COMMIT
    assert records[0].value == b"\x00\x00" + struct.pack(">i", 4)  # version 0, coordinator epoch
    assert records[0].control_type() == CONTROL_TYPE_COMMIT


def test_marker_value_of_a_newer_version_is_read() -> None:
    assert decode_marker(b"\x00\x00\x00\x00", b"\x00\x01\x00\x00\x00\x09extra") == EndTransactionMarker(0, 9)


@pytest.mark.parametrize(
    ("key", "value", "match"),
    [
        (None, b"\x00\x00\x00\x00\x00\x01", "no control key"),
        (b"\x00\x00\x00\x02", b"\x00\x00\x00\x00\x00\x01", "type 2"),
        (b"\xff\xff\x00\x01", b"\x00\x00\x00\x00\x00\x01", "key version -1"),
        (b"\x00\x00\x00\x01", b"\x00\x00", "no well-formed value"),
        (b"\x00\x00\x00\x01", b"\xff\xff\x00\x00\x00\x01", "value version -1"),
    ],
)
def test_bad_markers_are_corrupt(key: bytes | None, value: bytes | None, match: str) -> None:
    with pytest.raises(CorruptRecordError, match=match):
        decode_marker(key, value)


def test_read_marker_refuses_other_batches() -> None:
    with pytest.raises(CorruptRecordError, match="not a transactional control batch"):
        read_marker(build_batch([b"x"], timestamp_ms=T0, producer_id=1, producer_epoch=0, base_sequence=0,
                                is_transactional=True))  # fmt: skip
    two = BatchBuilder(producer_id=1, producer_epoch=0, is_transactional=True, is_control=True)
    two.append(T0, COMMIT.encode_key(), COMMIT.encode_value())
    two.append(T0, COMMIT.encode_key(), COMMIT.encode_value())
    with pytest.raises(CorruptRecordError, match="2 records"):
        read_marker(two.build())
    with pytest.raises(ValueError, match="producer id"):
        build_marker_batch(-1, 0, COMMIT, T0)
    with pytest.raises(ValueError, match="control type"):
        EndTransactionMarker(2, 0)


# ----------------------------------------------------------------------------------------- txn index


def test_index_layout_append_load_truncate(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000100.txnindex"
    index = TransactionIndex(path, 100)
    assert not path.exists()  # created with its first entry
    index.append(AbortedTxn(7, 90, 105, 106))
    index.append(AbortedTxn(8, 101, 110, 95))
    assert path.read_bytes()[:ENTRY_SIZE] == struct.pack(">hqqqq", 0, 7, 90, 105, 106)
    again = TransactionIndex(path, 100)
    again.load(next_offset=111)
    assert again.entries == index.entries
    with pytest.raises(ValueError, match="does not end after"):
        again.append(AbortedTxn(9, 100, 110, 111))
    again.truncate_to(110)
    assert path.stat().st_size == ENTRY_SIZE
    assert [e.producer_id for e in again.entries] == [7]
    with pytest.raises(IndexSanityError, match="outside the segment"):
        TransactionIndex(path, 100).load(next_offset=105)


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"\x00" * 33, "multiple of 34"),
        (struct.pack(">hqqqq", 1, 7, 1, 2, 3), "version 1"),
        (struct.pack(">hqqqq", 0, 7, 5, 2, 3), r"\(7, 5, 2, 3\)"),
        (struct.pack(">hqqqq", 0, 7, 1, 5, 6) + struct.pack(">hqqqq", 0, 8, 1, 5, 6), "not after"),
    ],
)
def test_index_sanity_check(data: bytes, match: str) -> None:
    with pytest.raises(IndexSanityError, match=match):
        decode_entries(data)


def test_collect_aborted_is_kafkas_search() -> None:
    entries = [AbortedTxn(1, 0, 10, 5), AbortedTxn(2, 3, 20, 30), AbortedTxn(3, 25, 40, 41)]
    assert collect_aborted(entries, 11, 25) == ([AbortedTxn(2, 3, 20, 30)], True)  # complete at lso 30 >= 25
    assert collect_aborted(entries, 0, 100) == (entries, False)
    assert collect_aborted(entries, 41, 100) == ([], False)


# ----------------------------------------------------------------------------------------- tracker


def test_l1_l3_l4_open_close_and_lso() -> None:
    tracker = TransactionTracker()
    tracker.on_batch(data_header(1, 0, txn=False), 0)  # not transactional: nothing opens
    assert tracker.last_stable_offset(1) == 1
    tracker.on_batch(data_header(7, 1, 2), 1)  # opens at 1
    tracker.on_batch(data_header(8, 3), 3)  # opens at 3
    tracker.on_batch(data_header(7, 4), 4)  # extends 7
    assert tracker.open_transaction(7) is not None
    assert tracker.last_stable_offset(5) == 1
    completed, aborted = tracker.on_marker(7, ABORT, 5)
    assert (completed.first_offset, completed.last_offset, completed.is_aborted) == (1, 5, True)
    assert aborted == AbortedTxn(7, 1, 5, 3)  # L4: the other open transaction starts at 3
    assert tracker.last_stable_offset(6) == 1  # L3: the marker at 5 is not below the HW 6 ... yet
    tracker.update_high_watermark(6)
    assert tracker.last_stable_offset(6) == 3
    _, none = tracker.on_marker(8, COMMIT, 6)
    assert none is None
    assert tracker.last_stable_offset(6) == 3  # L3: the LSO never exceeds the HW
    tracker.update_high_watermark(7)
    assert tracker.last_stable_offset(7) == 7
    _, empty = tracker.on_marker(9, ABORT, 7)  # L1: an empty transaction
    assert empty == AbortedTxn(9, 7, 7, 8)


def test_l2_fenced_coordinators_and_producers() -> None:
    tracker = TransactionTracker()
    tracker.on_marker(7, EndTransactionMarker(CONTROL_TYPE_COMMIT, 5), 0)
    with pytest.raises(TransactionCoordinatorFencedError, match="epoch 4"):
        tracker.check_marker(7, 0, EndTransactionMarker(CONTROL_TYPE_ABORT, 4), 0)
    with pytest.raises(ProducerFencedError):
        tracker.check_marker(7, 1, EndTransactionMarker(CONTROL_TYPE_ABORT, 5), 2)
    tracker.check_marker(7, 2, EndTransactionMarker(CONTROL_TYPE_ABORT, 5), 2)
    tracker.check_marker(8, 0, EndTransactionMarker(CONTROL_TYPE_ABORT, 0), -1)


def test_l5_truncation_reopens_and_forgets() -> None:
    tracker = TransactionTracker()
    tracker.on_batch(data_header(7, 0), 0)
    tracker.on_batch(data_header(8, 1), 1)
    tracker.on_marker(7, COMMIT, 2)
    tracker.on_batch(data_header(9, 3), 3)
    tracker.truncate_to(2)
    assert [t.producer_id for t in tracker.open_transactions] == [7, 8]  # 7's marker is gone, 9 began after
    assert tracker.last_stable_offset(2) == 0


# ---------------------------------------------------------------------------------- read_committed


def test_r1_r4_filter() -> None:
    f = AbortedTransactionFilter([(7, 1)])
    assert not f.skip(data_header(1, 0, txn=False))
    assert f.skip(data_header(7, 1))  # R1, R2
    assert not f.skip(data_header(8, 2))  # another producer's transaction
    control = parse_header(build_marker_batch(7, 0, ABORT, T0, base_offset=3))
    assert f.skip(control, ABORT.encode_key())  # R3, R4
    assert not f.skip(data_header(7, 4))  # 7's next transaction is not aborted
    commit = parse_header(build_marker_batch(8, 0, COMMIT, T0, base_offset=5))
    assert f.skip(commit, COMMIT.encode_key())  # R4


# ------------------------------------------------------------------------------- the state machine

PIDS = (1, 2, 3)
NON_TXN_PID = 9


class PartitionMachine(RuleBasedStateMachine):
    """Transactional producers, a non-transactional one, markers, HW moves and truncations of one partition."""

    @initialize()
    def setup(self) -> None:
        self.batches: list[tuple[BatchHeader, bytes]] = []  # the log
        self.tracker = TransactionTracker()
        self.index: list[AbortedTxn] = []
        self.hw = 0
        self.decided: dict[tuple[int, int], bool] = {}  # (pid, first offset) -> committed
        self.open_first: dict[int, int] = {}

    @property
    def leo(self) -> int:
        return self.batches[-1][0].next_offset if self.batches else 0

    def _append(self, batch: bytes) -> BatchHeader:
        header = parse_header(batch)
        self.batches.append((header, batch))
        return header

    @rule(pid=st.sampled_from(PIDS), n=st.integers(1, 3))
    def produce(self, pid: int, n: int) -> None:
        offset = self.leo
        header = self._append(build_batch([f"{pid}@{offset + i}".encode() for i in range(n)], timestamp_ms=T0,
                                          producer_id=pid, producer_epoch=0, base_sequence=0,
                                          is_transactional=True, base_offset=offset))  # fmt: skip
        self.tracker.on_batch(header, offset)
        self.open_first.setdefault(pid, offset)

    @rule(n=st.integers(1, 2))
    def produce_plain(self, n: int) -> None:
        offset = self.leo
        header = self._append(build_batch([f"plain@{offset + i}".encode() for i in range(n)], timestamp_ms=T0,
                                          base_offset=offset))  # fmt: skip
        self.tracker.on_batch(header, offset)

    @rule(pid=st.sampled_from(PIDS), commit=st.booleans())
    def marker(self, pid: int, commit: bool) -> None:
        offset = self.leo
        marker = COMMIT if commit else ABORT
        self._append(build_marker_batch(pid, 0, marker, T0, base_offset=offset))
        completed, aborted = self.tracker.on_marker(pid, marker, offset)
        first = self.open_first.pop(pid, offset)
        assert completed.first_offset == first  # L1
        self.decided[(pid, first)] = commit
        assert (aborted is None) == commit
        if aborted is not None:
            others = [f for p, f in self.open_first.items()]
            assert aborted.last_stable_offset == (min(others) if others else offset + 1)  # L4
            self.index.append(aborted)
        event("commit" if commit else "abort")

    def _boundaries(self) -> list[int]:
        """Offsets between batches at or above the HW (where an HW or a truncation can fall)."""
        return [self.hw] + [h.next_offset for h, _ in self.batches if h.next_offset > self.hw]

    @rule(data=st.data())
    def advance_hw(self, data: st.DataObject) -> None:
        self.hw = data.draw(st.sampled_from(self._boundaries()))
        self.tracker.update_high_watermark(self.hw)

    @rule(data=st.data())
    def truncate_above_hw(self, data: st.DataObject) -> None:
        """A follower truncating its unreplicated tail (never below the HW: L5's simple case)."""
        to = data.draw(st.sampled_from(self._boundaries()))
        self.batches = [b for b in self.batches if b[0].next_offset <= to]
        self.tracker.truncate_to(to)
        self.index = [e for e in self.index if e.last_offset < to]
        self.decided = {k: v for k, v in self.decided.items() if self._marker_offset(*k) is not None}
        self.open_first = {}
        for header, _ in self.batches:
            if header.is_control:
                self.open_first.pop(header.producer_id, None)
            elif header.is_transactional:
                self.open_first.setdefault(header.producer_id, header.base_offset)
        event("truncate")

    def _marker_offset(self, pid: int, first: int) -> int | None:
        for header, _ in self.batches:
            if header.is_control and header.producer_id == pid and header.base_offset >= first:
                return header.base_offset
        return None

    def _model_lso(self) -> int:
        unstable = list(self.open_first.values())
        for (pid, first), _ in self.decided.items():
            marker = self._marker_offset(pid, first)
            assert marker is not None
            if marker >= self.hw:
                unstable.append(first)
        return min([*unstable, self.hw])

    @invariant()
    def lso_matches_the_model(self) -> None:
        lso = self.tracker.last_stable_offset(self.hw)
        assert lso == self._model_lso()  # L3
        assert lso <= self.hw

    @invariant()
    def read_committed_sees_exactly_the_committed(self) -> None:
        lso = self.tracker.last_stable_offset(self.hw)
        aborted, _ = collect_aborted(self.index, 0, lso)
        f = AbortedTransactionFilter([(a.producer_id, a.first_offset) for a in aborted])
        seen: list[bytes] = []
        for header, batch in self.batches:
            if header.last_offset >= lso:
                break
            _, records = read_batch(batch)
            if not f.skip(header, records[0].key if header.is_control else None):
                seen.extend(r.value or b"" for r in records)
        expected: list[bytes] = []
        txn_of: dict[int, int] = {}
        for header, batch in self.batches:
            if header.last_offset >= lso:
                break
            if header.is_control:
                txn_of.pop(header.producer_id, None)
                continue
            if header.is_transactional:
                first = txn_of.setdefault(header.producer_id, header.base_offset)
                if not self.decided.get((header.producer_id, first), False):
                    assert (header.producer_id, first) in self.decided, "below the LSO means decided"
                    continue
            expected.extend(r.value or b"" for r in read_batch(batch)[1])
        assert seen == expected


TestPartitionMachine = PartitionMachine.TestCase
TestPartitionMachine.settings = settings(
    max_examples=200, stateful_step_count=50, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
