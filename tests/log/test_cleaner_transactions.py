"""The log cleaner and transactions (``log.cleaner.transactions``, rules TX1-TX4): aborted records are removed
and never hide a committed record of their key, markers go two passes and ``delete.retention.ms`` after
their transaction's last record, and a read_committed reader sees the same records before and after any
number of passes. Units on the filter, examples on a real log, and a Hypothesis property over random
interleavings of committed and aborted transactions and plain records."""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from common.clock import ManualClock
from log.cleaner.manager import CleanerManager
from log.cleaner.retention import delete_horizon_ms
from log.cleaner.transactions import TransactionFilter
from log.log import Log
from log.record.control import CONTROL_TYPE_ABORT, CONTROL_TYPE_COMMIT, EndTransactionMarker, build_marker_batch
from log.record.header import parse_header
from log.record.reader import read_batch
from log.txn_index import AbortedTxn
from odradek.read_committed import AbortedTransactionFilter
from tests.log.conftest import START_MS, small_config
from tests.log.test_cleaner_support import Rec, clean, keyed_batch, read_batches
from tests.log.test_transactions import ABORT, COMMIT, T0, data_header

RETENTION_MS = 100
CONFIG = small_config(cleanup_policy=frozenset({"compact"}), segment_bytes=500, index_interval_bytes=64,
                      delete_retention_ms=RETENTION_MS)  # fmt: skip


def marker_header(pid: int, offset: int, marker: EndTransactionMarker) -> object:
    return parse_header(build_marker_batch(pid, 0, marker, T0, base_offset=offset))


# ----------------------------------------------------------------------------------------------- units


def test_tx1_batches_of_an_aborted_transaction_and_only_those() -> None:
    f = TransactionFilter([AbortedTxn(7, 2, 5, 6)])
    assert not f.on_data(data_header(7, 0))  # before the aborted transaction began: 7's committed one
    assert not f.on_data(data_header(1, 1, txn=False))
    assert f.on_data(data_header(7, 2))
    assert not f.on_data(data_header(8, 3))  # another producer
    assert f.on_data(data_header(7, 4))
    assert not f.on_marker(marker_header(7, 5, ABORT), commit=False)  # its batches were met: kept (TX2)
    assert not f.on_data(data_header(7, 6))  # 7's next transaction


def test_tx2_a_marker_goes_once_no_batch_of_its_transaction_is_met() -> None:
    f = TransactionFilter([AbortedTxn(7, 0, 0, 1)])
    assert f.on_marker(marker_header(7, 0, ABORT), commit=False)  # an aborted transaction already emptied
    assert f.on_marker(marker_header(8, 1, COMMIT), commit=True)  # a committed one, all records compacted away
    assert not f.on_data(data_header(8, 2))
    assert not f.on_marker(marker_header(8, 3, COMMIT), commit=True)  # its record is still there
    assert f.on_marker(marker_header(9, 4, ABORT), commit=False)  # an abort the index does not list: alone


def test_entries_listed_twice_count_once() -> None:
    entry = AbortedTxn(7, 0, 3, 4)
    f = TransactionFilter([entry, entry])
    assert f.on_data(data_header(7, 0))
    assert not f.on_marker(marker_header(7, 3, ABORT), commit=False)
    assert not f.on_data(data_header(7, 5))  # the duplicate did not reopen it


# ------------------------------------------------------------------------------------------- on a log


@dataclass
class TxnLog:
    """A log written as a partition leader would: transactional batches, markers, index entries (L4)."""

    log: Log
    clock: ManualClock
    open: dict[int, int] = field(default_factory=dict)  # pid -> first offset of its open transaction
    txn_of: dict[int, list[int]] = field(default_factory=dict)  # pid -> offsets of its open transaction
    aborted: set[int] = field(default_factory=set)  # offsets of records of aborted transactions
    committed: list[tuple[int, bytes, bytes]] = field(default_factory=list)  # (offset, key, value) decided so
    pending: dict[int, list[tuple[int, bytes, bytes]]] = field(default_factory=dict)
    marker_of: dict[int, int] = field(default_factory=dict)  # offset of a transactional batch -> of its marker

    def view(self, upto: int) -> dict[bytes, bytes]:
        """The read_committed view below ``upto``: the latest committed value per key."""
        return {key: value for offset, key, value in sorted(self.committed) if offset < upto}

    def write(self, pid: int, key: bytes, value: bytes) -> None:
        rec = Rec(key, value, self.clock.time_ms())
        info = self.log.append(keyed_batch([rec], producer_id=pid, producer_epoch=0, base_sequence=0,
                                           transactional=True))  # fmt: skip
        self.open.setdefault(pid, info.first_offset)
        self.txn_of.setdefault(pid, []).append(info.first_offset)
        self.pending.setdefault(pid, []).append((info.first_offset, key, value))

    def plain(self, key: bytes, value: bytes) -> None:
        info = self.log.append(keyed_batch([Rec(key, value, self.clock.time_ms())]))
        self.committed.append((info.first_offset, key, value))

    def end(self, pid: int, commit: bool) -> None:
        if pid not in self.open:
            return
        first = self.open.pop(pid)
        kind = CONTROL_TYPE_COMMIT if commit else CONTROL_TYPE_ABORT
        info = self.log.append_marker(build_marker_batch(pid, 0, EndTransactionMarker(kind, 0), self.clock.time_ms()))
        offsets, writes = self.txn_of.pop(pid), self.pending.pop(pid)
        self.marker_of.update((offset, info.first_offset) for offset in offsets)
        if commit:
            self.committed.extend(writes)
        else:
            lso = min(self.open.values(), default=info.first_offset + 1)
            self.log.append_aborted(AbortedTxn(pid, first, info.first_offset, lso))
            self.aborted.update(offsets)


def read_committed_view(log: Log, upto: int | None = None) -> dict[bytes, bytes]:
    """What a read_committed reader of the log up to ``upto`` (its LSO; default the end) keeps, latest value
    per key (odradek.read_committed)."""
    end = log.log_end_offset if upto is None else upto
    entries = log.collect_aborted(log.log_start_offset, end)
    skip = AbortedTransactionFilter([(e.producer_id, e.first_offset) for e in entries])
    view: dict[bytes, bytes] = {}
    for batch, header, recs in read_batches(log, end):
        key = read_batch(batch)[1][0].key if header.is_control and header.records_count else None
        if skip.skip(header, key):
            continue
        for offset, rec in recs:
            if offset >= end:  # read_batches reads whole chunks; a fetch stops at the LSO
                break
            assert rec.key is not None
            assert rec.value is not None
            view[rec.key] = rec.value
    return view


def markers(log: Log) -> list[tuple[int, int, int | None]]:
    """(offset, producer id, delete horizon) of every marker left."""
    return [(h.base_offset, h.producer_id, delete_horizon_ms(h)) for _, h, _ in read_batches(log) if h.is_control]


def open_log(root: Path) -> tuple[Log, ManualClock]:
    clock = ManualClock(START_MS)
    return Log.open(root / "p0", CONFIG, clock), clock


def test_aborted_records_go_first_and_never_hide_a_committed_key(tmp_path: Path) -> None:
    log, clock = open_log(tmp_path)
    w = TxnLog(log, clock)
    w.write(1, b"a", b"committed-a")
    w.write(2, b"a", b"aborted-a")  # later than the committed a: must not win over it
    w.write(2, b"c", b"aborted-c")
    w.end(2, commit=False)
    w.end(1, commit=True)
    w.write(2, b"d", b"later")  # 2 writes again: its abort marker is not its last batch (those stay)
    w.end(2, commit=True)
    log.roll()
    before = read_committed_view(log)
    assert before == {b"a": b"committed-a", b"d": b"later"}
    manager = CleanerManager()
    clean(log, clock.time_ms(), manager=manager)
    assert read_committed_view(log) == before
    left = {o for _, _, recs in read_batches(log) for o, _ in recs}
    assert not left & w.aborted  # TX1
    assert [(pid, horizon) for _, pid, horizon in markers(log)] == [(2, None), (1, None), (2, None)]  # TX2
    clean(log, clock.time_ms(), manager=manager)  # the abort marker is alone now: it gets its horizon
    horizon = clock.time_ms() + RETENTION_MS
    assert [(pid, h) for _, pid, h in markers(log)] == [(2, horizon), (1, None), (2, None)]
    clock.advance(RETENTION_MS - 1)
    clean(log, clock.time_ms(), manager=manager)
    assert [pid for _, pid, _ in markers(log)] == [2, 1, 2]  # not before the horizon (TX3)
    clock.advance(1)
    clean(log, clock.time_ms(), manager=manager)
    assert [pid for _, pid, _ in markers(log)] == [1, 2]  # the commits stay: their records do
    assert read_committed_view(log) == before


def test_a_commit_marker_goes_after_its_records_were_compacted_away(tmp_path: Path) -> None:
    log, clock = open_log(tmp_path)
    w = TxnLog(log, clock)
    w.write(1, b"a", b"old")
    w.end(1, commit=True)
    w.plain(b"a", b"new")  # supersedes the transaction's only record
    w.write(1, b"b", b"b")
    w.end(1, commit=True)
    log.roll()
    manager = CleanerManager()
    for advance in (0, 0, RETENTION_MS):
        clock.advance(advance)
        clean(log, clock.time_ms(), manager=manager)
        assert read_committed_view(log) == {b"a": b"new", b"b": b"b"}
    assert [offset for offset, _, _ in markers(log)] == [4]  # the first commit went, the last one stays


def one_aborted_transaction(tmp_path: Path) -> tuple[Log, ManualClock, TxnLog]:
    """A log holding producer 1's aborted transaction (record at 0, marker at 1), rolled."""
    log, clock = open_log(tmp_path)
    w = TxnLog(log, clock)
    w.write(1, b"a", b"1")
    w.end(1, commit=False)
    log.roll()
    return log, clock, w


def test_a_producers_last_marker_stays(tmp_path: Path) -> None:
    """A marker that is its producer's last batch is kept whole, whatever its transaction (its epoch stays)."""
    log, clock, _ = one_aborted_transaction(tmp_path)
    manager = CleanerManager()
    for advance in (0, 0, RETENTION_MS, 0):
        clock.advance(advance)
        clean(log, clock.time_ms(), manager=manager)
    assert read_committed_view(log) == {}
    assert markers(log) == [(1, 1, None)]


def test_the_cleaner_stops_at_the_upper_bound_it_is_given(tmp_path: Path) -> None:
    """TX4: records above the bound (an open transaction's, at the LSO) are not touched."""
    log, clock, w = one_aborted_transaction(tmp_path)
    bound = log.log_end_offset
    w.write(2, b"b", b"2")  # open: the LSO stays at its first offset
    log.roll()
    clean(log, clock.time_ms(), upper_bound=bound)
    assert [o for _, _, recs in read_batches(log) for o, _ in recs] == [bound]


# ----------------------------------------------------------------------------------------------- property

op = st.one_of(
    st.tuples(st.just("write"), st.sampled_from([1, 2]), st.sampled_from([b"a", b"b", b"c"])),
    st.tuples(st.just("end"), st.sampled_from([1, 2]), st.booleans()),
    st.tuples(st.just("plain"), st.sampled_from([b"a", b"b", b"c"])),
    st.tuples(st.just("roll")),
    st.tuples(st.just("clean"), st.sampled_from([0, 1, RETENTION_MS])),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(op, max_size=40))
@example([("write", 1, b"a"), ("end", 1, True), ("write", 1, b"b"), ("end", 1, False)])  # a kept commit marker
@example([("write", 2, b"a"), ("write", 1, b"a"), ("end", 2, False), ("roll",), ("clean", 0), ("end", 1, True)])
def test_read_committed_is_the_same_across_any_cleaning(ops: list[tuple[object, ...]]) -> None:
    """Any interleaving of two transactional producers (commits and aborts) and plain records, cleaned at any
    points (everything decided is cleanable: an open transaction bounds the pass at its first offset, as the
    LSO does): the read_committed view never changes; no record of an aborted transaction survives a pass
    over it; every transactional batch left is still followed by a marker of its producer; and after the
    transactions end and three more passes past delete.retention.ms, no marker outlives its transaction's
    batches."""
    root = Path(tempfile.mkdtemp(prefix="cleaner-txn-"))
    try:
        log, clock = open_log(root)
        w = TxnLog(log, clock)
        manager = CleanerManager()
        n = 0
        for step in ops:
            if step[0] == "write":
                n += 1
                w.write(int(step[1]), bytes(step[2]), b"%d" % n)  # type: ignore[call-overload]
            elif step[0] == "end":
                w.end(int(step[1]), bool(step[2]))  # type: ignore[call-overload]
            elif step[0] == "plain":
                n += 1
                w.plain(bytes(step[1]), b"%d" % n)  # type: ignore[call-overload]
            elif step[0] == "roll":
                log.roll()
            else:
                clock.advance(int(step[1]))  # type: ignore[call-overload]
                bound = min(w.open.values(), default=log.log_end_offset)
                result = clean(log, clock.time_ms(), manager=manager, upper_bound=bound)
                check(log, w, bound, result.end_offset if result.complete else 0)
        for pid in list(w.open):
            w.end(pid, commit=False)
        log.roll()
        for advance in (0, 0, RETENTION_MS, 0):
            clock.advance(advance)
            result = clean(log, clock.time_ms(), manager=manager)
            check(log, w, log.log_end_offset, result.end_offset if result.complete else 0)
        batches = [h for _, h, _ in read_batches(log)]
        for i, h in enumerate(batches):
            last = not any(b.producer_id == h.producer_id for b in batches[i + 1 :])
            if h.is_control and not last:  # its transaction still has a batch, after the producer's previous marker
                before = [b for b in batches[:i] if b.producer_id == h.producer_id]
                since = before[max((j + 1 for j, b in enumerate(before) if b.is_control), default=0):]
                assert since, f"marker at {h.base_offset} outlived its transaction"
    finally:
        log.close_handlers()
        shutil.rmtree(root, ignore_errors=True)


def check(log: Log, w: TxnLog, bound: int, cleaned_end: int) -> None:
    """After a pass that cleaned below ``cleaned_end``, with the LSO at ``bound``."""
    assert read_committed_view(log, bound) == w.view(bound)
    left = [o for _, _, recs in read_batches(log) for o, _ in recs]
    assert not {o for o in left if o < cleaned_end} & w.aborted
    batches = [h for _, h, _ in read_batches(log)]
    marker_offsets = {h.base_offset for h in batches if h.is_control}
    for h in batches:
        if h.is_transactional and not h.is_control and h.base_offset in w.marker_of:
            assert w.marker_of[h.base_offset] in marker_offsets, f"batch at {h.base_offset} lost its marker"
