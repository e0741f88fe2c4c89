"""The metadata log's state machine, without Raft: each test cites the rule of controller/raft/state.py."""

from __future__ import annotations

import zlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.raft.errors import StateDecodeError
from controller.raft.state import (
    FENCED_LEADER_EPOCH,
    INVALID_REQUEST,
    NOT_CONTROLLER,
    UNEXPECTED_BASE_OFFSET,
    AppendResult,
    LogEntry,
    MetadataLogState,
    NeedsSnapshot,
)
from tests.support.quorum_node import concat_fold, split_concat_snapshot


def new_state(**kw: int) -> MetadataLogState:
    return MetadataLogState(concat_fold, **kw)


def with_marker(term: int = 1, node_id: int = 7, **kw: int) -> MetadataLogState:
    state = new_state(**kw)
    assert state.apply_leader_change(term, node_id, b"LC").ok
    return state


def read(state: MetadataLogState, offset: int, **kw: int) -> list[LogEntry]:
    out = state.records_from(offset, **kw)
    assert isinstance(out, list)
    return out


def payloads(state: MetadataLogState) -> list[bytes]:
    records = state.records_from(state.log_start_offset, max_records=1 << 20)
    assert not isinstance(records, NeedsSnapshot)
    return split_concat_snapshot(state.snapshot().data) + [e.payload for e in records]


# --- A1: exactly once ----------------------------------------------------------------------------


def test_same_request_id_twice_writes_once_and_answers_the_same() -> None:
    """A1: a request id already applied returns its first result and adds nothing."""
    state = with_marker()
    first = state.apply_append(b"req-1", 1, [b"a", b"b"])
    again = state.apply_append(b"req-1", 1, [b"a", b"b"])
    assert first == again == AppendResult(ok=True, base_offset=1, last_offset=2)
    assert payloads(state) == [b"LC", b"a", b"b"]
    assert state.end_offset == 3


def test_first_outcome_of_a_request_id_is_final_even_a_rejection() -> None:
    """A1: a rejected request id stays rejected, even once its term's marker is applied."""
    state = with_marker(term=1)
    assert state.apply_append(b"early", 2, [b"x"]) == AppendResult.failure(NOT_CONTROLLER)
    assert state.apply_leader_change(2, 8, b"LC2").ok
    assert state.apply_append(b"early", 2, [b"x"]) == AppendResult.failure(NOT_CONTROLLER)
    assert payloads(state) == [b"LC", b"LC2"]


def test_dedup_window_is_bounded_and_forgets_the_oldest() -> None:
    """A1: the window holds the last ``dedup_window`` ids in apply order; older ones are forgotten."""
    state = with_marker(dedup_window=3)
    for i in range(4):
        assert state.apply_append(b"r%d" % i, 1, [b"p%d" % i]).ok
    assert state.dedup_result(b"r0") is None
    assert [state.dedup_result(b"r%d" % i) is not None for i in (1, 2, 3)] == [True, True, True]
    assert state.apply_append(b"r3", 1, [b"p3"]).base_offset == 4  # still remembered: no new copy
    assert state.end_offset == 5


# --- A2, L1, L2: fencing by term -----------------------------------------------------------------


def test_append_before_any_marker_is_rejected() -> None:
    """A2: before the first marker no term is active, every append is NOT_CONTROLLER."""
    state = new_state()
    assert state.apply_append(b"r", 0, [b"x"]) == AppendResult.failure(NOT_CONTROLLER)
    assert state.apply_append(b"s", 1, [b"x"]) == AppendResult.failure(NOT_CONTROLLER)
    assert state.end_offset == 0


def test_append_with_an_older_or_unmarked_term_is_a_no_op() -> None:
    """A2: only the newest applied marker's term may write: older = deposed, newer = no marker yet."""
    state = with_marker(term=5)
    assert state.apply_append(b"old", 4, [b"x"]) == AppendResult.failure(NOT_CONTROLLER)
    assert state.apply_append(b"new", 6, [b"x"]) == AppendResult.failure(NOT_CONTROLLER)
    assert state.apply_append(b"cur", 5, [b"x"]).ok
    assert state.apply_leader_change(6, 2, b"LC6").ok
    assert state.apply_append(b"late", 5, [b"y"]) == AppendResult.failure(NOT_CONTROLLER)
    assert payloads(state) == [b"LC", b"x", b"LC6"]


def test_append_at_an_unexpected_base_offset_is_a_no_op() -> None:
    """A5: a command that names the offset its decision assumed is written only if the log still ends there
    (KRaft's scheduleAtomicAppend); a retry under the same id keeps that first answer (A1)."""
    state = with_marker(term=5)
    end = state.end_offset
    assert state.apply_append(b"a", 5, [b"x"], end).ok
    stale = state.apply_append(b"b", 5, [b"y"], end)  # decided on the image before "a"
    assert stale == AppendResult.failure(UNEXPECTED_BASE_OFFSET)
    assert state.apply_append(b"b", 5, [b"y"], end + 1) == stale
    assert state.apply_append(b"c", 5, [b"z"], end + 1).ok
    assert state.apply_append(b"d", 5, [b"w"]).ok  # no expectation: no check
    assert payloads(state) == [b"LC", b"x", b"z", b"w"]


def test_leader_change_with_newer_term_becomes_a_record_and_the_active_epoch() -> None:
    """L1: a newer marker is appended (its payload is the record) and sets term and active node."""
    state = new_state()
    assert state.apply_leader_change(3, 2, b"LeaderChange(3,2)") == AppendResult(True, None, 0, 0)
    assert (state.term, state.active_node_id) == (3, 2)
    assert state.records_from(0) == [LogEntry(0, 3, b"LeaderChange(3,2)")]


@pytest.mark.parametrize("term", [2, 3])
def test_leader_change_with_same_or_older_term_is_fenced(term: int) -> None:
    """L2: a marker not newer than the newest applied one is a no-op (FENCED_LEADER_EPOCH)."""
    state = with_marker(term=3, node_id=1)
    assert state.apply_leader_change(term, 9, b"stale") == AppendResult.failure(FENCED_LEADER_EPOCH)
    assert (state.term, state.active_node_id, state.end_offset) == (3, 1, 1)


@pytest.mark.parametrize(
    ("request_id", "term", "batch"),
    [
        (b"", 1, [b"x"]),
        (b"r" * 65, 1, [b"x"]),
        ("str-id", 1, [b"x"]),
        (b"r", 1, []),
        (b"r", 1, [b"x", "not-bytes"]),
        (b"r", True, [b"x"]),
        (b"r", 1, b"bytes-not-a-list"),
    ],
)
def test_malformed_append_is_a_no_op(request_id: object, term: object, batch: object) -> None:
    """A4: wrong types or an empty batch are answered INVALID_REQUEST and change nothing."""
    state = with_marker()
    before = state.to_bytes() if request_id in (b"", b"r" * 65, "str-id") else None
    result = state.apply_append(request_id, term, batch)  # type: ignore[arg-type]
    assert result == AppendResult.failure(INVALID_REQUEST)
    assert state.end_offset == 1
    if before is not None:
        assert state.to_bytes() == before


# --- trimming ------------------------------------------------------------------------------------


def test_trimming_folds_the_oldest_records_into_the_snapshot() -> None:
    """Trimming: past max_records_before_snapshot, the oldest are folded until `kept` remain."""
    calls: list[tuple[bytes | None, int, list[bytes]]] = []

    def fold(snapshot: bytes | None, end: int, batch: list[bytes]) -> bytes:
        calls.append((snapshot, end, batch))
        return concat_fold(snapshot, end, batch)

    state = MetadataLogState(fold, max_records_before_snapshot=5, records_kept_after_snapshot=2)
    state.apply_leader_change(1, 0, b"m")
    for i in range(5):
        state.apply_append(b"r%d" % i, 1, [b"p%d" % i])
    # 6 records > 5: fold the oldest 4 (m, p0, p1, p2), keep p3, p4.
    assert calls == [(None, 0, [b"m", b"p0", b"p1", b"p2"])]
    assert (state.log_start_offset, state.end_offset, state.record_count) == (4, 6, 2)
    snap = state.snapshot()
    assert (snap.end_offset, snap.term) == (4, 1)
    assert state.records_from(3) == NeedsSnapshot(4)
    assert state.records_from(4) == [LogEntry(4, 1, b"p3"), LogEntry(5, 1, b"p4")]
    for i in range(5, 9):
        state.apply_append(b"r%d" % i, 1, [b"p%d" % i])
    assert calls[1] == (snap.data, 4, [b"p3", b"p4", b"p5", b"p6"])
    assert payloads(state) == [b"m"] + [b"p%d" % i for i in range(9)]


def test_a_failing_fold_leaves_the_log_as_before_the_fold() -> None:
    """Trimming: if fold raises, the error propagates and no record is lost or folded."""

    def bad_fold(snapshot: bytes | None, end: int, batch: list[bytes]) -> bytes:
        raise RuntimeError("boom")

    state = MetadataLogState(bad_fold, max_records_before_snapshot=2, records_kept_after_snapshot=0)
    state.apply_leader_change(1, 0, b"m")
    state.apply_append(b"a", 1, [b"x"])
    with pytest.raises(RuntimeError, match="boom"):
        state.apply_append(b"b", 1, [b"y"])
    assert (state.log_start_offset, state.end_offset, state.snapshot().data) == (0, 3, None)


@pytest.mark.parametrize(("limit", "kept"), [(0, None), (3, 3), (3, -1)])
def test_trimming_limits_are_checked(limit: int, kept: int | None) -> None:
    with pytest.raises(ValueError, match="records_kept_after_snapshot"):
        MetadataLogState(concat_fold, max_records_before_snapshot=limit, records_kept_after_snapshot=kept)


# --- records_from --------------------------------------------------------------------------------


def test_records_from_edges() -> None:
    """records_from: empty at and past the end, NeedsSnapshot below the start, bad arguments refused."""
    state = with_marker()
    state.apply_append(b"r", 1, [b"a", b"b", b"c"])
    assert state.records_from(4) == []
    assert state.records_from(100) == []
    assert [e.offset for e in read(state, 2, max_records=1)] == [2, 3]  # from the middle: the rest of it
    with pytest.raises(ValueError, match="bad read"):
        state.records_from(-1)
    with pytest.raises(ValueError, match="bad read"):
        state.records_from(0, max_records=0)


def test_records_from_never_cuts_a_command_in_the_middle() -> None:
    """The records of one command (e.g. a topic and all its partitions) come in one answer or not at all:
    a broker publishes an image per answer and must never see part of a topic. The first batch always
    comes whole, over the limits if need be, so a reader always progresses."""
    state = with_marker()  # offset 0
    state.apply_append(b"r1", 1, [b"a" * 10, b"b" * 10, b"c" * 10])  # 1..3
    state.apply_append(b"r2", 1, [b"d" * 10, b"e" * 10])  # 4..5
    state.apply_append(b"r3", 1, [b"f" * 10])  # 6
    assert [e.offset for e in read(state, 0, max_records=1)] == [0]
    assert [e.offset for e in read(state, 0, max_records=2)] == [0]
    assert [e.offset for e in read(state, 0, max_records=4)] == [0, 1, 2, 3]
    assert [e.offset for e in read(state, 1, max_records=1)] == [1, 2, 3]
    assert [e.offset for e in read(state, 1, max_records=4)] == [1, 2, 3]
    assert [e.offset for e in read(state, 1, max_records=6)] == [1, 2, 3, 4, 5, 6]
    assert [e.offset for e in read(state, 1, max_bytes=5)] == [1, 2, 3]
    assert [e.offset for e in read(state, 1, max_bytes=49)] == [1, 2, 3]
    assert [e.offset for e in read(state, 1, max_bytes=50)] == [1, 2, 3, 4, 5]
    assert [e.offset for e in read(state, 4, max_bytes=1)] == [4, 5]


def test_batches_survive_the_dump_and_a_fold_in_the_middle_of_one() -> None:
    state = with_marker(max_records_before_snapshot=4, records_kept_after_snapshot=2)
    state.apply_append(b"r1", 1, [b"a", b"b"])  # 1..2
    state.apply_append(b"r2", 1, [b"c", b"d", b"e"])  # 3..5: folds 0..3, keeps 4..5 (a cut batch)
    assert state.log_start_offset == 4
    assert [e.offset for e in read(state, 4, max_records=1)] == [4, 5]
    state.apply_append(b"r3", 1, [b"f"])  # 6
    copy = new_state(max_records_before_snapshot=4, records_kept_after_snapshot=2)
    copy.load_bytes(state.to_bytes())
    assert [e.offset for e in read(copy, 4, max_records=1)] == [4, 5]
    assert [e.offset for e in read(copy, 6, max_records=1)] == [6]
    assert copy.to_bytes() == state.to_bytes()


# --- serialization and determinism ---------------------------------------------------------------


def test_state_round_trips_through_bytes() -> None:
    state = with_marker(max_records_before_snapshot=4, records_kept_after_snapshot=1)
    for i in range(6):
        state.apply_append(b"r%d" % i, 1, [b"p%d" % i])
    state.apply_append(b"bad", 9, [b"x"])
    copy = new_state(max_records_before_snapshot=4, records_kept_after_snapshot=1)
    copy.load_bytes(state.to_bytes())
    assert copy.to_bytes() == state.to_bytes()
    assert copy.dedup_result(b"bad") == AppendResult.failure(NOT_CONTROLLER)
    assert copy.records_from(copy.log_start_offset) == state.records_from(state.log_start_offset)
    assert (copy.term, copy.active_node_id, copy.snapshot()) == (
        state.term,
        state.active_node_id,
        state.snapshot(),
    )


@pytest.mark.parametrize("damage", ["flip", "truncate", "magic"])
def test_corrupt_state_bytes_are_refused_and_change_nothing(damage: str) -> None:
    state = with_marker()
    state.apply_append(b"r", 1, [b"payload"])
    data = bytearray(state.to_bytes())
    if damage == "flip":
        data[20] ^= 1
    elif damage == "truncate":
        del data[-5:]
    else:
        data[0:8] = b"XXXXXXXX"
    target = with_marker(term=3)
    before = target.to_bytes()
    with pytest.raises(StateDecodeError):
        target.load_bytes(bytes(data))
    assert target.to_bytes() == before


_commands = st.lists(
    st.one_of(
        st.tuples(st.just("marker"), st.integers(1, 6), st.integers(0, 2)),
        st.tuples(
            st.just("append"),
            st.sampled_from([b"a", b"b", b"c", b"d", b"e", b"f"]),
            st.integers(0, 6),
            st.integers(1, 3),
        ),
    ),
    max_size=40,
)


def _apply(state: MetadataLogState, command: tuple[Any, ...], seq: int) -> AppendResult:
    if command[0] == "marker":
        _, term, node = command
        return state.apply_leader_change(term, node, b"LC%d" % term)
    _, rid, term, count = command
    return state.apply_append(rid, term, [rid + b"-%d-%d" % (seq, j) for j in range(count)])


@settings(max_examples=200, deadline=None)
@given(_commands, st.integers(0, 40))
def test_replicas_agree_whatever_retries_and_restarts(commands: list[tuple[Any, ...]], cut: int) -> None:
    """A1-A3 and trimming are deterministic: a replica that saw every command twice (retries) and one
    restored from bytes midway end with the same bytes; offsets stay contiguous."""
    kw = {"max_records_before_snapshot": 6, "records_kept_after_snapshot": 2, "dedup_window": 4}
    plain, retried, restarted = new_state(**kw), new_state(**kw), new_state(**kw)
    for seq, command in enumerate(commands):
        first = _apply(plain, command, seq)
        if command[0] == "append":  # a retry right after: same id, same outcome, nothing added
            assert _apply(retried, command, seq) == first
            assert _apply(retried, command, seq) == first
        else:
            _apply(retried, command, seq)
        if seq == cut:
            fresh = new_state(**kw)
            fresh.load_bytes(restarted.to_bytes())
            restarted = fresh
        _apply(restarted, command, seq)
    assert plain.to_bytes() == retried.to_bytes() == restarted.to_bytes()
    records = plain.records_from(plain.log_start_offset)
    assert not isinstance(records, NeedsSnapshot)
    assert [e.offset for e in records] == list(range(plain.log_start_offset, plain.end_offset))
    assert len(split_concat_snapshot(plain.snapshot().data)) == plain.log_start_offset


def test_a_version_1_state_still_loads_each_record_a_batch() -> None:
    """States written before batches were kept (version 1, no batch_end flag) load; each record is then a
    batch of its own (the boundaries are unknown), as every read was before."""
    from controller.raft import state as state_module

    body = state_module._STATE_HEADER.pack(state_module._STATE_MAGIC, 1, 0, 0, 1, 0, -1, 3, 0)
    for payload in (b"LC", b"a", b"b"):
        body += state_module._RECORD_V1.pack(1, len(payload)) + payload
    old = body + state_module._CRC.pack(zlib.crc32(body))
    state = new_state()
    state.load_bytes(old)
    assert [e.payload for e in read(state, 0)] == [b"LC", b"a", b"b"]
    assert [e.offset for e in read(state, 1, max_records=1)] == [1]
    assert state.apply_append(b"r", 1, [b"c", b"d"]).ok
    assert [e.offset for e in read(state, 3, max_records=1)] == [3, 4]
