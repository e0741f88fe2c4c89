"""Eligible leader replicas (KIP-966) in the pure core: rules ELR1-ELR3, E6, E7 of controller/core/elections.py
and A9 of controller/core/partitions.py (issue 16, item 6).

The story the rules are for: RF 3, min.insync.replicas 2. Two brokers are fenced in turn (the ISR shrinks to
the last member), then the last member crashes and comes back without its unflushed tail. Before ELR the
controller had to elect it (the only ISR member: E4 kept it there), losing records the others had
acknowledged with it; now the broker fenced second, which holds the high watermark (the HW stops below
min.insync.replicas, HW8), is an eligible leader replica and is preferred.
"""

from __future__ import annotations

import pytest

from metadata.records import NO_LEADER
from proto import controller_pb2 as pb
from tests.controller.conftest import CoreHarness, incarnation, make_harness

MIN_ISR = {"min.insync.replicas": "2"}


@pytest.fixture
def h() -> CoreHarness:
    harness = make_harness()  # eligible.leader.replicas.enable defaults to true
    harness.start_brokers([0, 1, 2])
    harness.create_topic("t", assignments=[[0, 1, 2]], partitions=-1, rf=-1, configs=MIN_ISR)
    return harness


def register(h: CoreHarness, broker_id: int, generation: int, *, clean: bool) -> None:
    """A new incarnation of ``broker_id``; ``clean``: it names its last registration's epoch (KIP-966)."""
    request = pb.RegisterBrokerRequest(broker_id=broker_id, incarnation_id=incarnation(broker_id, generation),
                                       endpoints={"PLAINTEXT": f"127.0.0.1:{9092 + broker_id}"})  # fmt: skip
    if clean:
        request.previous_broker_epoch = h.epoch(broker_id)
    assert not h.call("RegisterBroker", request).error.code


def state(h: CoreHarness) -> tuple[int, tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    reg = h.partition("t")
    return reg.leader, reg.isr, reg.elr, reg.last_known_elr


def test_elr1_members_fenced_below_min_isr_become_eligible_leaders(h: CoreHarness) -> None:
    h.heartbeat(2, want_fence=True)
    assert state(h) == (0, (0, 1), (), ())  # at min.insync.replicas: no ELR
    h.heartbeat(1, want_fence=True)
    assert state(h) == (0, (0,), (1,), ())  # below it: 1 holds the HW (it stops now, HW8)
    h.heartbeat(0, want_fence=True)
    assert state(h) == (NO_LEADER, (), (1, 0), (0,))  # the ISR may be empty; ELR3 remembers the last leader


def test_e6_a_clean_elr_member_leads_instead_of_the_last_isr_member_that_lost_its_tail(h: CoreHarness) -> None:
    """Issue 16 item 6: the last ISR member (0) crashed and came back uncleanly; 1 (ELR) is preferred."""
    h.heartbeat(2, want_fence=True)
    h.heartbeat(1, want_fence=True)
    h.heartbeat(0, want_fence=True)
    register(h, 0, 1, clean=False)  # ELR2: it leaves the ELR
    assert state(h) == (NO_LEADER, (), (1,), (0,))
    h.heartbeat(0)  # 0 is unfenced, but 1 (fenced, clean) is the only safe choice: still offline
    assert state(h)[0] == NO_LEADER
    h.heartbeat(1)  # 1 comes back (the same life, e.g. after a network cut): E6
    assert state(h) == (1, (1,), (), ())  # min.insync 2 > |ISR| = 1, ELR now empty (0 left it uncleanly)


def test_e7_after_every_replica_crashed_the_last_leader_comes_back(h: CoreHarness) -> None:
    h.heartbeat(2, want_fence=True)
    h.heartbeat(1, want_fence=True)
    h.heartbeat(0, want_fence=True)
    register(h, 1, 1, clean=False)
    register(h, 0, 1, clean=False)
    assert state(h) == (NO_LEADER, (), (), (0,))
    h.heartbeat(1)
    assert state(h)[0] == NO_LEADER  # 1 was not the last leader: waiting for 0 (as Kafka 3 did)
    h.heartbeat(0)
    assert state(h) == (0, (0,), (), ())


def test_elr2_a_clean_shutdown_keeps_the_elr_seat(h: CoreHarness) -> None:
    h.heartbeat(2, want_fence=True)
    h.heartbeat(1, want_fence=True)
    register(h, 1, 1, clean=True)
    assert state(h) == (0, (0,), (1,), ())


def test_a9_an_expansion_to_min_isr_clears_the_elr(h: CoreHarness) -> None:
    h.heartbeat(2, want_fence=True)
    h.heartbeat(1, want_fence=True)
    h.heartbeat(1)  # back, unfenced: still in the ELR until the leader adds it
    reg = h.partition("t")
    request = pb.AlterPartitionRequest(
        broker_id=0, broker_epoch=h.epoch(0), topic_id=h.topic_id("t"), partition=0,
        leader_epoch=reg.leader_epoch, partition_epoch=reg.partition_epoch, new_isr=[0, 1],
    )  # fmt: skip
    assert not h.call("AlterPartition", request).error.code
    assert state(h) == (0, (0, 1), (), ())


def test_a9_a_shrink_below_min_isr_moves_the_removed_member_to_the_elr(h: CoreHarness) -> None:
    h.heartbeat(2, want_fence=True)
    reg = h.partition("t")
    request = pb.AlterPartitionRequest(
        broker_id=0, broker_epoch=h.epoch(0), topic_id=h.topic_id("t"), partition=0,
        leader_epoch=reg.leader_epoch, partition_epoch=reg.partition_epoch, new_isr=[0],
    )  # fmt: skip
    assert not h.call("AlterPartition", request).error.code
    assert state(h) == (0, (0,), (1,), ())


def test_with_eligible_leader_replicas_off_the_last_isr_member_is_the_only_choice() -> None:
    """The old behaviour (E4), what the issue calls the gap between Kafka 3 and 4."""
    h = make_harness({"eligible.leader.replicas.enable": "false"})
    h.start_brokers([0, 1, 2])
    h.create_topic("t", assignments=[[0, 1, 2]], partitions=-1, rf=-1, configs=MIN_ISR)
    h.heartbeat(2, want_fence=True)
    h.heartbeat(1, want_fence=True)
    h.heartbeat(0, want_fence=True)
    register(h, 0, 1, clean=False)
    h.heartbeat(1)
    h.heartbeat(0)
    assert state(h) == (0, (0,), (), ())  # 0 leads although 1 was the one holding every acknowledged record
