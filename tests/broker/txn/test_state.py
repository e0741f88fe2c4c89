"""The transaction coordinator's state machine (broker/txn/state.py, rules TC1-TC12): unit tests per rule and a
Hypothesis state machine that drives clients, zombies, the coordinator's own timeouts and failed writes, and
checks the rules after every step, including that a reload of what was written rebuilds the state (TC11)."""

from __future__ import annotations

from itertools import count

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from broker.txn.errors import (
    CONCURRENT_TRANSACTIONS,
    INVALID_PRODUCER_ID_MAPPING,
    INVALID_REQUEST,
    INVALID_TRANSACTION_TIMEOUT,
    INVALID_TXN_STATE,
    PRODUCER_FENCED,
)
from broker.txn.records import decode_record, encode_record
from broker.txn.state import (
    MAX_CLIENT_EPOCH,
    VALID_PREVIOUS,
    Decision,
    TransactionStateManager,
    Transition,
    TxnMetadata,
    TxnState,
    check_transition,
)

T0 = 1_700_000_000_000
TIMEOUT = 60_000
TP0, TP1, TP2 = ("a", 0), ("a", 1), ("b", 0)
S = TxnState


class Ids:
    def __init__(self, start: int = 1000) -> None:
        self._next = count(start)

    def __call__(self) -> int:
        return next(self._next)


def written(manager: TransactionStateManager, decision: Decision) -> TxnMetadata:
    """Persist ``decision``'s transition (TC3) and return the installed metadata."""
    assert decision.transition is not None, decision
    manager.complete(decision.transition)
    return decision.transition.after


def started(manager: TransactionStateManager, ids: Ids, txn: str = "tx", now: int = T0) -> TxnMetadata:
    return written(manager, manager.init_producer_id(txn, TIMEOUT, -1, -1, now, ids))


def ongoing(manager: TransactionStateManager, ids: Ids, txn: str = "tx") -> TxnMetadata:
    m = started(manager, ids, txn)
    return written(manager, manager.add_partitions(txn, m.producer_id, m.producer_epoch, [TP0, TP1], T0 + 1))


def test_state_ids_and_names_are_kafkas() -> None:
    assert [(s.value, s.kafka_name) for s in TxnState] == [
        (0, "Empty"), (1, "Ongoing"), (2, "PrepareCommit"), (3, "PrepareAbort"), (4, "CompleteCommit"),
        (5, "CompleteAbort"), (6, "Dead"), (7, "PrepareEpochFence"),
    ]  # fmt: skip


def test_tc4_new_id_gets_a_producer_id_with_epoch_0_once_written() -> None:
    manager, ids = TransactionStateManager(0, 5), Ids()
    decision = manager.init_producer_id("tx", TIMEOUT, -1, -1, T0, ids)
    assert decision.error == ""
    assert manager.metadata("tx") is None  # TC3: not before it is written
    m = written(manager, decision)
    assert (m.producer_id, m.producer_epoch, m.state, m.partitions) == (1000, 0, S.EMPTY, frozenset())
    assert manager.metadata("tx") == m


def test_tc4_reinit_bumps_the_epoch_and_past_the_last_epoch_takes_a_new_id() -> None:
    manager, ids = TransactionStateManager(0, 5), Ids()
    m = started(manager, ids)
    again = written(manager, manager.init_producer_id("tx", TIMEOUT, -1, -1, T0, ids))
    assert (again.producer_id, again.producer_epoch) == (m.producer_id, 1)
    manager.load([("tx", TxnMetadata("tx", 7, MAX_CLIENT_EPOCH, TIMEOUT, S.COMPLETE_COMMIT, frozenset(), -1, T0))])
    fresh = written(manager, manager.init_producer_id("tx", TIMEOUT, -1, -1, T0, ids))
    assert (fresh.producer_id, fresh.producer_epoch) == (1001, 0)


def test_tc4_timeout_must_be_in_range() -> None:
    manager, ids = TransactionStateManager(0, 5, max_timeout_ms=1000), Ids()
    for bad in (0, -1, 1001):
        assert manager.init_producer_id("tx", bad, -1, -1, T0, ids).error == INVALID_TRANSACTION_TIMEOUT
    assert manager.init_producer_id("", 1000, -1, -1, T0, ids).error == INVALID_REQUEST
    assert manager.metadata("tx") is None


def test_tc4_init_during_a_transaction_fences_and_aborts_it() -> None:
    manager, ids = TransactionStateManager(0, 5), Ids()
    m = ongoing(manager, ids)
    decision = manager.init_producer_id("tx", TIMEOUT, -1, -1, T0 + 2, ids)
    assert decision.error == CONCURRENT_TRANSACTIONS
    assert decision.transition is not None
    assert decision.transition.fenced
    after = written(manager, decision)
    assert (after.state, after.producer_epoch, after.partitions) == (S.PREPARE_ABORT, m.producer_epoch + 1,
                                                                     m.partitions)  # fmt: skip
    # The zombie (old epoch) is fenced from now on (TC5) ...
    assert manager.add_partitions("tx", m.producer_id, m.producer_epoch, [TP2], T0 + 3).error == PRODUCER_FENCED
    assert manager.end_txn("tx", m.producer_id, m.producer_epoch, True, T0 + 3).error == PRODUCER_FENCED
    # ... and the new instance retries until the markers are written.
    assert manager.init_producer_id("tx", TIMEOUT, -1, -1, T0 + 3, ids).error == CONCURRENT_TRANSACTIONS
    assert [x.transactional_id for x in manager.awaiting_markers()] == ["tx"]
    done = written(manager, manager.markers_written("tx", T0 + 4))
    assert (done.state, done.partitions) == (S.COMPLETE_ABORT, frozenset())
    final = written(manager, manager.init_producer_id("tx", TIMEOUT, -1, -1, T0 + 5, ids))
    assert (final.producer_id, final.producer_epoch, final.state) == (m.producer_id, m.producer_epoch + 2, S.EMPTY)


def test_tc4_kip360_reinit_must_name_the_current_epoch() -> None:
    manager, ids = TransactionStateManager(0, 5), Ids()
    m = started(manager, ids)
    bumped = written(manager, manager.init_producer_id("tx", TIMEOUT, m.producer_id, 0, T0, ids))
    assert bumped.producer_epoch == 1
    stale = manager.init_producer_id("tx", TIMEOUT, m.producer_id, 0, T0, ids)
    assert stale.error == PRODUCER_FENCED  # the deviation: the replaced (id, epoch) cannot retry
    assert stale.transition is None


def test_tc2_tc3_a_transition_in_flight_answers_retry_and_a_failed_one_changes_nothing() -> None:
    manager, ids = TransactionStateManager(0, 5), Ids()
    m = ongoing(manager, ids)
    decision = manager.end_txn("tx", m.producer_id, m.producer_epoch, True, T0 + 2)
    assert decision.transition is not None
    # TC2: before the id and epoch checks: even a stranger is told to retry.
    assert manager.end_txn("tx", 99, 99, True, T0 + 2).error == CONCURRENT_TRANSACTIONS
    assert manager.add_partitions("tx", m.producer_id, m.producer_epoch, [TP2], T0).error == CONCURRENT_TRANSACTIONS
    assert manager.init_producer_id("tx", TIMEOUT, -1, -1, T0, ids).error == CONCURRENT_TRANSACTIONS
    manager.fail(decision.transition)
    assert manager.metadata("tx") == m
    assert manager.pending("tx") is None


def test_tc3_a_failed_fence_does_not_bump_the_epoch() -> None:
    manager, ids = TransactionStateManager(0, 5), Ids()
    m = ongoing(manager, ids)
    decision = manager.init_producer_id("tx", TIMEOUT, -1, -1, T0, ids)
    assert decision.transition is not None
    manager.fail(decision.transition)
    assert manager.metadata("tx") == m
    assert manager.add_partitions("tx", m.producer_id, m.producer_epoch, [TP2], T0).error == ""


def test_tc5_wrong_id_or_epoch() -> None:
    manager, ids = TransactionStateManager(0, 5), Ids()
    m = started(manager, ids)
    assert manager.add_partitions("nope", m.producer_id, 0, [TP0], T0).error == INVALID_PRODUCER_ID_MAPPING
    assert manager.add_partitions("tx", m.producer_id + 1, 0, [TP0], T0).error == INVALID_PRODUCER_ID_MAPPING
    assert manager.add_partitions("tx", m.producer_id, 1, [TP0], T0).error == PRODUCER_FENCED
    assert manager.end_txn("tx", m.producer_id, 1, False, T0).error == PRODUCER_FENCED
    assert manager.metadata("tx") == m


def test_tc6_add_partitions_starts_and_extends_a_transaction() -> None:
    manager, ids = TransactionStateManager(0, 5), Ids()
    m = started(manager, ids)
    assert manager.add_partitions("tx", m.producer_id, 0, [], T0).error == INVALID_REQUEST
    first = written(manager, manager.add_partitions("tx", m.producer_id, 0, [TP0], T0 + 10))
    assert (first.state, first.partitions, first.txn_start_timestamp_ms) == (S.ONGOING, {TP0}, T0 + 10)
    assert manager.add_partitions("tx", m.producer_id, 0, [TP0], T0 + 20) == Decision()  # a subset: nothing
    more = written(manager, manager.add_partitions("tx", m.producer_id, 0, [TP1, TP2], T0 + 30))
    assert (more.partitions, more.txn_start_timestamp_ms) == ({TP0, TP1, TP2}, T0 + 10)
    written(manager, manager.end_txn("tx", m.producer_id, 0, True, T0 + 40))
    assert manager.add_partitions("tx", m.producer_id, 0, [TP0], T0 + 41).error == CONCURRENT_TRANSACTIONS
    written(manager, manager.markers_written("tx", T0 + 50))
    again = written(manager, manager.add_partitions("tx", m.producer_id, 0, [TP2], T0 + 60))
    assert (again.partitions, again.txn_start_timestamp_ms) == ({TP2}, T0 + 60)  # a new transaction


@pytest.mark.parametrize(
    ("state", "commit", "error", "target"),
    [
        (S.ONGOING, True, "", S.PREPARE_COMMIT),
        (S.ONGOING, False, "", S.PREPARE_ABORT),
        (S.COMPLETE_COMMIT, True, "", None),
        (S.COMPLETE_ABORT, False, "", None),
        (S.PREPARE_COMMIT, True, CONCURRENT_TRANSACTIONS, None),
        (S.PREPARE_ABORT, False, CONCURRENT_TRANSACTIONS, None),
        (S.COMPLETE_COMMIT, False, INVALID_TXN_STATE, None),
        (S.COMPLETE_ABORT, True, INVALID_TXN_STATE, None),
        (S.PREPARE_COMMIT, False, INVALID_TXN_STATE, None),
        (S.PREPARE_ABORT, True, INVALID_TXN_STATE, None),
        (S.EMPTY, True, INVALID_TXN_STATE, None),
        (S.EMPTY, False, INVALID_TXN_STATE, None),
    ],
)
def test_tc7_end_txn_table(state: TxnState, commit: bool, error: str, target: TxnState | None) -> None:
    manager = TransactionStateManager(0, 5)
    parts = frozenset() if state in (S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT) else frozenset({TP0})
    m = TxnMetadata("tx", 1, 3, TIMEOUT, state, parts, T0, T0)
    manager.load([("tx", m)])
    decision = manager.end_txn("tx", 1, 3, commit, T0 + 1)
    assert decision.error == error
    if target is None:
        assert decision.transition is None
    else:
        assert written(manager, decision).state == target


def test_tc8_markers_only_for_a_decided_transaction() -> None:
    manager, ids = TransactionStateManager(0, 5), Ids()
    m = ongoing(manager, ids)
    assert manager.markers_written("tx", T0).error == INVALID_TXN_STATE
    written(manager, manager.end_txn("tx", m.producer_id, m.producer_epoch, True, T0 + 2))
    done = written(manager, manager.markers_written("tx", T0 + 3))
    assert (done.state, done.partitions, done.producer_epoch) == (S.COMPLETE_COMMIT, frozenset(), m.producer_epoch)
    assert manager.end_txn("tx", m.producer_id, m.producer_epoch, True, T0 + 4) == Decision()  # TC7 retry


def test_tc9_timeout_fences_and_aborts() -> None:
    manager, ids = TransactionStateManager(0, 5), Ids()
    m = ongoing(manager, ids)  # started at T0 + 1
    assert manager.timed_out(T0 + TIMEOUT) == []
    assert manager.abort_timed_out("tx", T0 + TIMEOUT).error == INVALID_TXN_STATE
    assert manager.timed_out(T0 + 1 + TIMEOUT) == ["tx"]
    aborted = written(manager, manager.abort_timed_out("tx", T0 + 1 + TIMEOUT))
    assert (aborted.state, aborted.producer_epoch) == (S.PREPARE_ABORT, m.producer_epoch + 1)
    assert manager.timed_out(T0 + 10 * TIMEOUT) == []
    assert manager.end_txn("tx", m.producer_id, m.producer_epoch, True, T0).error == PRODUCER_FENCED


def test_tc10_idle_ids_expire_as_tombstones() -> None:
    manager, ids = TransactionStateManager(0, 5), Ids()
    started(manager, ids, "idle", now=T0)
    ongoing(manager, ids, "busy")
    assert manager.expirable(T0 + 999, 1000) == []
    assert manager.expirable(T0 + 1000, 1000) == ["idle"]
    decision = manager.expire("idle", T0 + 1000, 1000)
    assert decision.transition is not None
    assert encode_record(decision.transition.after)[1] is None  # a tombstone
    written(manager, decision)
    assert manager.metadata("idle") is None
    assert manager.expire("busy", T0 + 10**9, 1000).error == INVALID_TXN_STATE


def test_tc1_the_transition_table_is_kafkas() -> None:
    assert VALID_PREVIOUS[S.PREPARE_COMMIT] == {S.ONGOING}
    assert VALID_PREVIOUS[S.PREPARE_ABORT] == {S.ONGOING, S.PREPARE_EPOCH_FENCE}
    assert VALID_PREVIOUS[S.COMPLETE_COMMIT] == {S.PREPARE_COMMIT}
    assert VALID_PREVIOUS[S.DEAD] == {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}
    m = TxnMetadata("tx", 1, 0, TIMEOUT, S.EMPTY, frozenset(), -1, T0)
    bad = Transition(m, TxnMetadata("tx", 1, 0, TIMEOUT, S.PREPARE_COMMIT, frozenset({TP0}), -1, T0))
    with pytest.raises(AssertionError, match="TC1"):
        check_transition(bad)


# --------------------------------------------------------------------------------- the state machine

TXN_IDS = ("t1", "t2")
WRITES = st.sampled_from(["ok", "ok", "ok", "ok", "fail", "hold"])
ZOMBIE = st.sampled_from([False, False, False, True])
PARTITIONS = (TP0, TP1, TP2)


class CoordinatorMachine(RuleBasedStateMachine):
    """Clients (each knows the (id, epoch) it was given; old ones stay around as zombies), the coordinator's
    own timeouts and expirations, writes that fail, and reloads after a 'failover'. Model: the committed and
    aborted transactions per id, and which (id, epoch) pairs were ever handed out."""

    @initialize()
    def setup(self) -> None:
        self.ids = Ids()
        self.now = T0
        self.manager = TransactionStateManager(0, 1)
        self.log: list[tuple[bytes, bytes | None]] = []  # what was written, encoded
        self.in_flight: dict[str, tuple[str, Transition]] = {}  # txn id -> (operation, transition)
        self.clients: dict[str, list[tuple[int, int]]] = {t: [] for t in TXN_IDS}  # handed out, oldest first
        self.history: dict[str, list[tuple[int, int]]] = {t: [] for t in TXN_IDS}  # (pid, epoch) installed
        self.outcomes: dict[str, list[str]] = {t: [] for t in TXN_IDS}
        self.last_ongoing: dict[str, TxnMetadata] = {}

    def _decide(self, op: str, txn: str, decision: Decision, write: str = "ok") -> None:
        """Persist the decision's transition now ("ok"), fail its write ("fail"), or leave it in flight."""
        current = self.manager.metadata(txn)
        if decision.transition is None:
            assert self.manager.metadata(txn) == current
            return
        assert txn not in self.in_flight, "TC2: one transition in flight"
        self.in_flight[txn] = (op, decision.transition)
        if write != "hold":
            self._finish(txn, write == "ok")

    @rule(txn=st.sampled_from(TXN_IDS), with_old=st.booleans(), write=WRITES)
    def init(self, txn: str, with_old: bool, write: str) -> None:
        pid, epoch = self.clients[txn][-1] if with_old and self.clients[txn] else (-1, -1)
        before = self.manager.metadata(txn)
        decision = self.manager.init_producer_id(txn, TIMEOUT, pid, epoch, self.now, self.ids)
        if txn in self.in_flight:
            assert decision.error == CONCURRENT_TRANSACTIONS  # TC2
            assert decision.transition is None
        elif before is not None and before.state == S.ONGOING and decision.transition is not None:
            assert decision.error == CONCURRENT_TRANSACTIONS  # TC4: fence
            assert decision.transition.fenced
        self._decide("init", txn, decision, write)

    @rule(txn=st.sampled_from(TXN_IDS), zombie=ZOMBIE, parts=st.sets(st.sampled_from(PARTITIONS), min_size=1),
          write=WRITES)  # fmt: skip
    def add(self, txn: str, zombie: bool, parts: set[tuple[str, int]], write: str) -> None:
        pid, epoch = self._client(txn, zombie)
        decision = self.manager.add_partitions(txn, pid, epoch, parts, self.now)
        self._check_fencing(txn, pid, epoch, decision)
        self._decide("add", txn, decision, write)

    @rule(txn=st.sampled_from(TXN_IDS), zombie=ZOMBIE, commit=st.booleans(), write=WRITES)
    def end(self, txn: str, zombie: bool, commit: bool, write: str) -> None:
        pid, epoch = self._client(txn, zombie)
        decision = self.manager.end_txn(txn, pid, epoch, commit, self.now)
        self._check_fencing(txn, pid, epoch, decision)
        self._decide("commit" if commit else "abort", txn, decision, write)

    @rule(txn=st.sampled_from(TXN_IDS), write=WRITES)
    def markers(self, txn: str, write: str) -> None:
        self._decide("markers", txn, self.manager.markers_written(txn, self.now), write)

    @rule(ms=st.integers(0, 2 * TIMEOUT))
    def tick(self, ms: int) -> None:
        self.now += ms
        for txn in self.manager.timed_out(self.now):
            m = self.manager.metadata(txn)
            assert m is not None
            assert m.state == S.ONGOING
            assert self.now - m.txn_start_timestamp_ms >= m.txn_timeout_ms
            self._decide("timeout", txn, self.manager.abort_timed_out(txn, self.now))
        for txn in self.manager.expirable(self.now, 3 * TIMEOUT):
            self._decide("expire", txn, self.manager.expire(txn, self.now, 3 * TIMEOUT))

    @precondition(lambda self: bool(self.in_flight))
    @rule(data=st.data(), ok=st.booleans())
    def write_finishes(self, data: st.DataObject, ok: bool) -> None:
        self._finish(data.draw(st.sampled_from(sorted(self.in_flight))), ok)

    def _finish(self, txn: str, ok: bool) -> None:
        op, transition = self.in_flight.pop(txn)
        before = self.manager.metadata(txn)
        if not ok:
            self.manager.fail(transition)
            assert self.manager.metadata(txn) == before  # TC3
            return
        self.manager.complete(transition)
        after = transition.after
        event(f"{op} -> {after.state.kafka_name}")
        self.log.append(encode_record(after))
        if after.state == S.DEAD:
            self.history[txn] = []
            self.clients[txn] = []
            return
        pair = (after.producer_id, after.producer_epoch)
        if op == "init" and after.state == S.EMPTY:
            self.clients[txn].append(pair)
        if self.history[txn] and self.history[txn][-1] != pair:
            last_pid, last_epoch = self.history[txn][-1]
            assert pair[0] > last_pid or (pair[0] == last_pid and pair[1] > last_epoch), "TC12"
        self.history[txn].append(pair)
        assert after.producer_epoch <= MAX_CLIENT_EPOCH + 1
        if after.state == S.ONGOING:
            self.last_ongoing[txn] = after
        if after.state in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            self.outcomes[txn].append(after.state.kafka_name)
        if after.state == S.PREPARE_COMMIT:
            assert op == "commit", "TC7: only the client's commit prepares a commit"
            assert before is not None
            assert before.state == S.ONGOING

    @rule()
    def failover(self) -> None:
        """TC11: a new coordinator loads what was written; what is in flight is lost (never written)."""
        for _, transition in self.in_flight.values():
            self.manager.fail(transition)
        self.in_flight.clear()
        reloaded = TransactionStateManager(0, self.manager.coordinator_epoch + 1)
        reloaded.load(decode_record(k, v) for k, v in self.log)
        assert list(reloaded) == list(self.manager)
        self.manager = reloaded

    def _client(self, txn: str, zombie: bool) -> tuple[int, int]:
        handed = self.clients[txn]
        if not handed:
            return 5, 0
        return handed[0] if zombie else handed[-1]

    def _check_fencing(self, txn: str, pid: int, epoch: int, decision: Decision) -> None:
        current = self.manager.metadata(txn)
        if txn in self.in_flight or current is None:
            return
        if pid == current.producer_id and epoch != current.producer_epoch:
            assert decision.error == PRODUCER_FENCED  # TC5
            assert decision.transition is None

    @invariant()
    def rules_hold(self) -> None:
        for m in self.manager:
            if m.state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
                assert m.partitions == frozenset()
            else:
                assert m.partitions, f"{m.state.kafka_name} without partitions"
                assert m.txn_start_timestamp_ms >= 0
            assert m.state not in (S.DEAD, S.PREPARE_EPOCH_FENCE), "never installed"
            pending = self.manager.pending(m.transactional_id)
            assert (pending is not None) == (m.transactional_id in self.in_flight)


TestCoordinatorMachine = CoordinatorMachine.TestCase
TestCoordinatorMachine.settings = settings(
    max_examples=300, stateful_step_count=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
