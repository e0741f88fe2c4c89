"""A seeded simulation of the membership state machine against a model coordinator that changes the
target assignment, answers late, fails, and fences; the application reconciles at random moments.

Checked on every step (the seed is printed on failure):
- never two heartbeats in flight (PROTOCOL.md §2);
- an ``owned`` set sent is exactly what the application holds at that moment (revocations reach the
  coordinator only once the application has given the partitions up);
- a member epoch sent is 0 (join), -1/-2 (leave) or the last one answered;
- after the faults stop, the member converges: STABLE, owning the model's target, which the coordinator
  has heard.
"""

from __future__ import annotations

import random

import pytest

from odradek.group.membership import (
    HeartbeatRequest,
    HeartbeatResponse,
    Membership,
    MembershipSettings,
    MemberState,
    Subscription,
)
from odradek.types import TopicPartition

PARTITIONS = [TopicPartition("t", p) for p in range(6)]
SETTINGS = MembershipSettings("g", None, "", "", 60_000, 45_000, 500, 50, 400)


class ModelCoordinator:
    """One member's view of a coordinator: a target that changes, epochs that rise with it."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.epoch = 0
        self.member_id = ""
        self.target: frozenset[TopicPartition] = frozenset()
        self.sent_target: frozenset[TopicPartition] | None = None
        self.reported: frozenset[TopicPartition] | None = None
        self.ids = 0

    def change_target(self) -> None:
        self.target = frozenset(self.rng.sample(PARTITIONS, self.rng.randint(0, len(PARTITIONS))))
        self.epoch += 1

    def answer(self, request: HeartbeatRequest, faults: bool) -> HeartbeatResponse | str:
        """A response, or an error code in a string (a failed call) when faults are on."""
        if faults and self.rng.random() < 0.1:
            return self.rng.choice(["NETWORK_EXCEPTION", "REQUEST_TIMED_OUT"])
        if faults and self.rng.random() < 0.05:
            return HeartbeatResponse(error_code=self.rng.choice(["NOT_COORDINATOR", "COORDINATOR_LOAD_IN_PROGRESS"]))
        if request.member_epoch < 0:
            self.member_id, self.sent_target, self.reported = "", None, None
            return HeartbeatResponse(member_id=request.member_id, member_epoch=request.member_epoch)
        if request.member_epoch == 0:
            self.ids += 1
            self.member_id, self.sent_target, self.reported = f"m{self.ids}", None, None
            self.epoch += 1
        elif request.member_id != self.member_id or (faults and self.rng.random() < 0.03):
            self.member_id = ""
            return HeartbeatResponse(error_code="FENCED_MEMBER_EPOCH")
        if request.owned is not None:
            self.reported = request.owned
        response = HeartbeatResponse(member_id=self.member_id, member_epoch=self.epoch, heartbeat_interval_ms=500)
        if self.target != self.sent_target:
            self.sent_target = self.target
            return HeartbeatResponse(
                member_id=self.member_id, member_epoch=self.epoch, heartbeat_interval_ms=500, assignment=self.target
            )
        return response


def run(seed: int) -> None:
    rng = random.Random(seed)
    coordinator = ModelCoordinator(rng)
    m = Membership(SETTINGS, 0)
    m.subscribe(Subscription(topics=("t",)), 0)
    app_owned: frozenset[TopicPartition] = frozenset()
    in_flight: HeartbeatRequest | None = None
    pending_work = None
    last_epoch = 0
    now = 0.0
    for step in range(1_500):
        faults = step < 1_000
        now += rng.choice([1, 10, 50, 200])
        m.record_poll(now)
        if faults and rng.random() < 0.03:
            coordinator.change_target()
        request = m.next_heartbeat(now)
        if request is not None:
            assert in_flight is None, "two heartbeats in flight"
            assert m.next_heartbeat(now) is None
            if request.owned is not None:
                assert request.owned == app_owned, "owned sent differs from what the application holds"
            assert request.member_epoch in (0, -1, -2, last_epoch), (request.member_epoch, last_epoch)
            in_flight = request
        if in_flight is not None and rng.random() < 0.5:  # answers come late, sometimes
            answer = coordinator.answer(in_flight, faults)
            if isinstance(answer, str):
                m.on_failure(in_flight, answer, "", now)
            else:
                m.on_response(in_flight, answer, now)
                if not answer.error_code and answer.member_epoch > 0:
                    last_epoch = answer.member_epoch
            in_flight = None
        if pending_work is None and rng.random() < 0.3:
            pending_work = m.take_reconciliation()
        if pending_work is not None and rng.random() < 0.5:  # the listener ran: the application's holdings move
            app_owned = frozenset() if pending_work.lost or pending_work.leaving else pending_work.target
            m.reconciled(pending_work, now)
            pending_work = None
        if m.state is MemberState.JOINING:
            last_epoch = 0
    assert m.state is MemberState.STABLE, m.state
    assert app_owned == coordinator.target
    assert m.owned == coordinator.target
    assert coordinator.reported == coordinator.target  # the coordinator heard it


@pytest.mark.parametrize("seed", range(300))
def test_membership_simulation(seed: int) -> None:
    try:
        run(seed)
    except AssertionError as exc:
        raise AssertionError(f"seed {seed}: {exc}") from exc
