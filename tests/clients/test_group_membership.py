"""The pure membership state machine (odradek.group.membership), driven by hand with a manual clock.

Each test names the rule of ``broker/group/PROTOCOL.md`` (or KIP-848) it checks.
"""

from __future__ import annotations

import pytest

from odradek.group.membership import (
    HeartbeatResponse,
    Membership,
    MembershipSettings,
    MemberState,
    Reconciliation,
    Subscription,
)
from odradek.types import TopicPartition

A0, A1, A2, A3 = (TopicPartition("a", p) for p in range(4))
SUB = Subscription(topics=("a",))


def settings(**overrides: object) -> MembershipSettings:
    values: dict[str, object] = {
        "group_id": "g",
        "instance_id": None,
        "rack_id": "",
        "server_assignor": "",
        "rebalance_timeout_ms": 10_000,
        "session_timeout_ms": 45_000,
        "heartbeat_interval_ms": 3_000,
        "retry_backoff_ms": 100,
        "retry_backoff_max_ms": 1_000,
    }
    values.update(overrides)
    return MembershipSettings(**values)  # type: ignore[arg-type]


def answer(epoch: int, assignment: set[TopicPartition] | None = None, **kw: object) -> HeartbeatResponse:
    values: dict[str, object] = {"member_id": "m1", "member_epoch": epoch, "heartbeat_interval_ms": 1_000}
    values.update(kw)
    return HeartbeatResponse(assignment=None if assignment is None else frozenset(assignment), **values)  # type: ignore[arg-type]


def joined(m: Membership, owned: set[TopicPartition], epoch: int = 1, now: float = 0) -> None:
    """Join and reconcile to ``owned``."""
    m.subscribe(SUB, now)
    sent = m.next_heartbeat(now)
    assert sent is not None
    m.on_response(sent, answer(epoch, owned), now)
    work = m.take_reconciliation()
    if owned:
        assert work is not None
        m.reconciled(work, now)
        ack = m.next_heartbeat(now)
        assert ack is not None
        m.on_response(ack, answer(epoch), now)
    assert m.state is MemberState.STABLE


def test_join_sends_epoch_zero_with_subscription_and_owned_partitions() -> None:
    """PROTOCOL.md §2: the join carries epoch 0, an empty member id, the subscription and (no) owned partitions."""
    m = Membership(settings(instance_id="i-1", server_assignor="range"), 0)
    assert m.next_heartbeat(0) is None  # unsubscribed: nothing to send
    m.subscribe(SUB, 0)
    sent = m.next_heartbeat(0)
    assert sent is not None
    assert (sent.member_id, sent.member_epoch, sent.instance_id, sent.server_assignor) == ("", 0, "i-1", "range")
    assert sent.subscription == SUB
    assert sent.owned == frozenset()
    assert m.next_heartbeat(0) is None  # never two in flight


def test_revoke_before_assign_then_acknowledge() -> None:
    """PROTOCOL.md §2 reconciliation: revoke owned - A, then assign A - owned, then heartbeat at once."""
    m = Membership(settings(), 0)
    joined(m, {A0, A1})
    assert m.member_id == "m1"
    assert m.member_epoch == 1
    hb = m.next_heartbeat(1_000)
    assert hb is not None
    assert hb.subscription is None
    assert hb.owned is None
    m.on_response(hb, answer(1, {A1, A2}), 1_000)
    assert m.state is MemberState.RECONCILING
    work = m.take_reconciliation()
    assert work == Reconciliation(
        revoked=frozenset({A0}), assigned=frozenset({A2}), lost=frozenset(), target=frozenset({A1, A2})
    )
    assert m.next_heartbeat(1_000) is None  # not due before the interval: the ack waits for the application
    m.reconciled(work, 1_001)
    assert m.state is MemberState.ACKNOWLEDGING
    ack = m.next_heartbeat(1_001)
    assert ack is not None
    assert ack.owned == frozenset({A1, A2})
    m.on_response(ack, answer(2), 1_001)
    assert m.state is MemberState.STABLE
    assert m.member_epoch == 2


def test_assignment_in_steps_keeps_reconciling() -> None:
    """PROTOCOL.md §2: an assignment may arrive in several steps, each a complete set."""
    m = Membership(settings(), 0)
    joined(m, {A0})
    hb = m.next_heartbeat(1_000)
    assert hb is not None
    m.on_response(hb, answer(2, {A0, A1}), 1_000)
    work = m.take_reconciliation()
    assert work is not None
    assert work.assigned == {A1}
    # a periodic heartbeat brings a newer target while the application is still working on the first one
    periodic = m.next_heartbeat(2_000)
    assert periodic is not None
    assert periodic.owned is None
    m.on_response(periodic, answer(3, {A0, A1, A2}), 2_000)
    m.reconciled(work, 2_001)
    assert m.state is MemberState.RECONCILING
    assert m.owned == {A0, A1}
    second = m.take_reconciliation()
    assert second is not None
    assert second.assigned == {A2}
    assert not second.revoked


def test_fenced_member_loses_partitions_then_rejoins_with_a_new_id() -> None:
    """PROTOCOL.md §2 errors: FENCED_MEMBER_EPOCH drops every partition without commit, rejoins at epoch 0."""
    m = Membership(settings(), 0)
    joined(m, {A0, A1}, epoch=4)
    hb = m.next_heartbeat(1_000)
    assert hb is not None
    m.on_response(hb, HeartbeatResponse(error_code="FENCED_MEMBER_EPOCH"), 1_000)
    assert m.state is MemberState.FENCED
    assert m.next_heartbeat(1_000) is None  # no rejoin before the application dropped its partitions
    work = m.take_reconciliation()
    assert work is not None
    assert work.lost == {A0, A1}
    assert not work.revoked
    m.reconciled(work, 1_001)
    rejoin = m.next_heartbeat(1_001)
    assert rejoin is not None
    assert (rejoin.member_id, rejoin.member_epoch, rejoin.owned, rejoin.subscription) == ("", 0, frozenset(), SUB)


@pytest.mark.parametrize("code", ["FENCED_INSTANCE_ID", "UNSUPPORTED_ASSIGNOR", "GROUP_MAX_SIZE_REACHED"])
def test_fatal_errors_stop_heartbeats(code: str) -> None:
    """PROTOCOL.md §2: FENCED_INSTANCE_ID and configuration errors are fatal for the member."""
    m = Membership(settings(instance_id="i"), 0)
    joined(m, {A0})
    hb = m.next_heartbeat(1_000)
    assert hb is not None
    m.on_response(hb, HeartbeatResponse(error_code=code, error_message="why"), 1_000)
    assert m.state is MemberState.FATAL
    assert m.fatal_error == (code, "why")
    assert m.next_heartbeat(10_000) is None


def test_coordinator_errors_retry_with_backoff_and_resend_everything() -> None:
    """PROTOCOL.md §1: NOT_COORDINATOR keeps member id and epoch; the retry resends the owned partitions."""
    m = Membership(settings(), 0)
    joined(m, {A0}, epoch=3)
    hb = m.next_heartbeat(1_000)
    assert hb is not None
    m.on_failure(hb, "NETWORK_EXCEPTION", "down", 1_000)
    assert m.heartbeat_due_in_ms(1_000) == pytest.approx(100)
    assert m.next_heartbeat(1_050) is None
    retry = m.next_heartbeat(1_100)
    assert retry is not None
    assert (retry.member_id, retry.member_epoch) == ("m1", 3)
    assert retry.owned == {A0}
    assert retry.subscription == SUB
    m.on_response(retry, HeartbeatResponse(error_code="NOT_COORDINATOR"), 1_100)
    assert m.heartbeat_due_in_ms(1_100) == pytest.approx(200)  # backoff grows
    assert m.state is MemberState.STABLE


def test_leave_revokes_first_then_sends_epoch_minus_one() -> None:
    """PROTOCOL.md §2 leaving: close() revokes (listener, commit), then member_epoch=-1."""
    m = Membership(settings(), 0)
    joined(m, {A0, A1})
    m.leave(static=True)  # not a static member: -1 anyway
    assert m.next_heartbeat(0) is None
    work = m.take_reconciliation()
    assert work is not None
    assert work.leaving
    assert work.revoked == {A0, A1}
    m.reconciled(work, 5)
    sent = m.next_heartbeat(5)
    assert sent is not None
    assert sent.member_epoch == -1
    assert sent.member_id == "m1"
    m.on_response(sent, answer(-1), 6)
    assert m.state is MemberState.UNSUBSCRIBED
    assert m.leave_done


def test_static_member_leaves_with_epoch_minus_two() -> None:
    """PROTOCOL.md §2: a static member leaves with -2 so its partitions wait for it."""
    m = Membership(settings(instance_id="i-7"), 0)
    joined(m, {A0})
    m.leave(static=True)
    work = m.take_reconciliation()
    assert work is not None
    m.reconciled(work, 1)
    sent = m.next_heartbeat(1)
    assert sent is not None
    assert (sent.member_epoch, sent.instance_id) == (-2, "i-7")


def test_poll_timer_expiry_leaves_and_the_next_poll_rejoins() -> None:
    """KIP-848: a member that does not poll within max.poll.interval.ms leaves (epoch -1, even static) and
    its partitions are lost; the next poll rejoins."""
    m = Membership(settings(rebalance_timeout_ms=5_000, instance_id="s"), 0)
    joined(m, {A0, A1})
    m.record_poll(1_000)
    assert not m.check_poll_timer(6_000)
    assert m.check_poll_timer(6_001)
    leave = m.next_heartbeat(6_001)
    assert leave is not None
    assert leave.member_epoch == -1
    m.on_response(leave, answer(-1), 6_002)
    assert m.state is MemberState.STALE
    assert m.next_heartbeat(7_000) is None
    m.record_poll(9_000)
    work = m.take_reconciliation()
    assert work is not None
    assert work.lost == {A0, A1}
    m.reconciled(work, 9_000)
    rejoin = m.next_heartbeat(9_000)
    assert rejoin is not None
    assert rejoin.member_epoch == 0
    assert rejoin.owned == frozenset()


def test_subscription_change_is_sent_once() -> None:
    """PROTOCOL.md §2: subscribed_topic_names only when they change (subscription_changed=true)."""
    m = Membership(settings(), 0)
    joined(m, set())
    m.subscribe(Subscription(pattern="a.*"), 10)
    sent = m.next_heartbeat(10)
    assert sent is not None
    assert sent.subscription == Subscription(pattern="a.*")
    m.on_response(sent, answer(1), 10)
    later = m.next_heartbeat(2_000)
    assert later is not None
    assert later.subscription is None


def test_unknown_member_while_leaving_ends_the_leave() -> None:
    m = Membership(settings(), 0)
    joined(m, set())
    m.leave(static=False)
    work = m.take_reconciliation()
    assert work is not None
    m.reconciled(work, 0)
    sent = m.next_heartbeat(0)
    assert sent is not None
    m.on_response(sent, HeartbeatResponse(error_code="UNKNOWN_MEMBER_ID"), 1)
    assert m.leave_done


def test_heartbeats_go_on_while_revoking_before_a_leave_and_bring_the_epoch() -> None:
    """PROTOCOL.md §3: the revocation commit (in the listener, before the leave) needs the current epoch."""
    m = Membership(settings(), 0)
    joined(m, {A0}, epoch=2)
    m.leave(static=False)
    work = m.take_reconciliation()  # the application is in on_partitions_revoked now
    assert work is not None
    hb = m.next_heartbeat(1_000)
    assert hb is not None
    assert hb.member_epoch == 2
    assert hb.subscription is None
    m.on_response(hb, answer(5, {A0, A1}), 1_000)
    assert m.member_epoch == 5  # the commit uses it
    assert m.state is MemberState.PREPARE_LEAVING  # no new assignment while leaving
    m.reconciled(work, 1_001)
    leave = m.next_heartbeat(1_001)
    assert leave is not None
    assert leave.member_epoch == -1


def test_heartbeat_soon_follows_the_heartbeat_in_flight() -> None:
    """PROTOCOL.md §3: after STALE_MEMBER_EPOCH on a commit, a heartbeat brings the current epoch."""
    m = Membership(settings(), 0)
    joined(m, {A0})
    hb = m.next_heartbeat(1_000)
    assert hb is not None
    m.heartbeat_soon(1_010)  # one is in flight: the next one goes right after its answer
    m.on_response(hb, answer(1), 1_020)
    assert m.heartbeat_due_in_ms(1_020) == 0
    follow = m.next_heartbeat(1_020)
    assert follow is not None
    m.on_response(follow, answer(1), 1_030)
    assert m.heartbeat_due_in_ms(1_030) == pytest.approx(1_000)  # back to the interval


def test_a_poll_during_the_poll_timer_leave_rejoins_once_it_is_answered() -> None:
    m = Membership(settings(rebalance_timeout_ms=1_000), 0)
    joined(m, set())
    assert m.check_poll_timer(1_001)
    leave = m.next_heartbeat(1_001)
    assert leave is not None
    m.record_poll(1_002)  # the application is back before the leave was answered
    lost = m.take_reconciliation()
    assert lost is not None
    m.reconciled(lost, 1_002)
    assert m.state is MemberState.LEAVING
    m.on_response(leave, answer(-1), 1_003)
    assert m.state is MemberState.JOINING
    rejoin = m.next_heartbeat(1_003)
    assert rejoin is not None
    assert rejoin.member_epoch == 0
