"""AlterPartition, ElectLeaders and automatic preferred-leader rebalancing of the pure core.

Each test names the rule it checks: A*/L* from controller/core/partitions.py, E* from
controller/core/elections.py (Kafka's ReplicationControlManager and PartitionChangeBuilder).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from metadata.records import NO_LEADER, PartitionChange
from proto import controller_pb2 as pb
from tests.controller.conftest import CoreHarness, make_harness

REBALANCE_S = 300  # Kafka's leader.imbalance.check.interval.seconds default


@pytest.fixture
def topic(harness: CoreHarness) -> CoreHarness:
    """Brokers 0-3 unfenced; topic "t" with one partition, replicas [0, 1, 2], all in sync, 0 leading."""
    harness.start_brokers([0, 1, 2, 3])
    harness.create_topic("t", partitions=-1, rf=-1, assignments=[[0, 1, 2]])
    return harness


def alter(
    h: CoreHarness, new_isr: Sequence[int], joining: Sequence[tuple[int, int]] = (), **overrides: int | str
) -> pb.AlterPartitionResponse:
    reg = h.partition("t")
    fields: dict[str, Any] = {
        "broker_id": reg.leader,
        "broker_epoch": h.epoch(reg.leader) if reg.leader >= 0 else 0,
        "topic_id": h.topic_id("t"),
        "partition": 0,
        "leader_epoch": reg.leader_epoch,
        "partition_epoch": reg.partition_epoch,
    }
    fields.update(overrides)
    joiners = [pb.JoiningReplica(broker_id=b, broker_epoch=e) for b, e in joining]
    request = pb.AlterPartitionRequest(new_isr=new_isr, joining=joiners, **fields)
    response: pb.AlterPartitionResponse = h.call("AlterPartition", request)
    return response


# --- AlterPartition -------------------------------------------------------------------------------


def test_leader_shrinks_and_expands_the_isr(topic: CoreHarness) -> None:
    """A8: the answer is the new state; every change bumps the partition epoch, not the leader epoch."""
    shrunk = alter(topic, [0, 1])
    assert (shrunk.error.code, list(shrunk.isr), shrunk.leader, shrunk.leader_epoch, shrunk.partition_epoch) == (
        "", [0, 1], 0, 0, 1,
    )  # fmt: skip
    reg = topic.partition("t")
    assert (reg.isr, reg.partition_epoch, reg.leader_epoch) == ((0, 1), 1, 0)
    expanded = alter(topic, [0, 1, 2])
    assert (list(expanded.isr), expanded.partition_epoch) == ([0, 1, 2], 2)
    assert topic.partition("t").isr == (0, 1, 2)


def test_unchanged_isr_writes_nothing(topic: CoreHarness) -> None:
    """A8: the same ISR answers the current state without a record."""
    response = alter(topic, [0, 1, 2])
    assert not response.error.code
    assert response.partition_epoch == 0
    assert topic.results[-1].commands == ()


def test_stale_broker_epoch(topic: CoreHarness) -> None:
    """A1."""
    assert alter(topic, [0, 1], broker_epoch=topic.epoch(0) + 1).error.code == "STALE_BROKER_EPOCH"
    assert alter(topic, [0, 1], broker_id=9).error.code == "STALE_BROKER_EPOCH"


def test_unknown_topic_or_partition(topic: CoreHarness) -> None:
    """A2."""
    assert alter(topic, [0, 1], partition=1).error.code == "UNKNOWN_TOPIC_OR_PARTITION"
    other = "00000000-0000-4000-8000-000000000009"
    assert alter(topic, [0, 1], topic_id=other).error.code == "UNKNOWN_TOPIC_OR_PARTITION"


def test_not_the_leader(topic: CoreHarness) -> None:
    """A3: a follower may not change the ISR."""
    assert alter(topic, [0, 1], broker_id=1, broker_epoch=topic.epoch(1)).error.code == "NOT_LEADER_OR_FOLLOWER"


def test_fenced_leader_epoch(topic: CoreHarness) -> None:
    """A4: a stale or future leader epoch."""
    assert alter(topic, [0, 1], leader_epoch=1).error.code == "FENCED_LEADER_EPOCH"
    topic.heartbeat(0, want_fence=True)
    topic.heartbeat(0)  # back: 1 leads now, with leader epoch 1
    assert topic.partition("t").leader == 1
    stale = alter(topic, [1, 2], leader_epoch=0)
    assert stale.error.code == "FENCED_LEADER_EPOCH"


def test_invalid_update_version(topic: CoreHarness) -> None:
    """A5: the leader acted on a stale partition epoch (e.g. after the controller shrank the ISR)."""
    alter(topic, [0, 1])
    assert alter(topic, [0, 1, 2], partition_epoch=0).error.code == "INVALID_UPDATE_VERSION"


@pytest.mark.parametrize("new_isr", [[0, 3], [0, 0, 1], [1, 2], []])
def test_new_isr_must_be_replicas_once_with_the_leader(topic: CoreHarness, new_isr: list[int]) -> None:
    """A6: non-replica, duplicate, leader missing, empty -> INVALID_REQUEST."""
    offset = topic.image.offset
    assert alter(topic, new_isr).error.code == "INVALID_REQUEST"
    assert topic.image.offset == offset


def test_ineligible_replicas_may_not_join(topic: CoreHarness) -> None:
    """A7: fenced, in controlled shutdown or unregistered members are INELIGIBLE_REPLICA."""
    topic.heartbeat(2, want_fence=True)
    assert topic.partition("t").isr == (0, 1)
    assert alter(topic, [0, 1, 2]).error.code == "INELIGIBLE_REPLICA"
    topic.heartbeat(2)
    assert not alter(topic, [0, 1, 2]).error.code
    topic.heartbeat(1, want_shut_down=True)  # leads nothing: fenced at once
    assert alter(topic, [0, 1]).error.code == "INELIGIBLE_REPLICA"


def test_a_joiner_from_a_previous_life_is_ineligible(topic: CoreHarness) -> None:
    """A7 (KIP-903): a joining member named with a broker epoch that is not its registration's is refused."""
    assert not alter(topic, [0, 1]).error.code
    current = topic.epoch(2)
    assert alter(topic, [0, 1, 2], joining=[(2, current - 1)]).error.code == "INELIGIBLE_REPLICA"
    assert topic.partition("t").isr == (0, 1)
    assert not alter(topic, [0, 1, 2], joining=[(2, current)]).error.code
    assert topic.partition("t").isr == (0, 1, 2)


def test_isr_member_in_controlled_shutdown_is_ineligible(harness: CoreHarness) -> None:
    """A7: a broker in controlled shutdown (still unfenced) may not be readmitted."""
    harness.start_brokers([0, 1, 2])
    harness.create_topic("t", partitions=-1, rf=-1, assignments=[[0, 1, 2]])
    harness.create_topic("led", partitions=-1, rf=-1, assignments=[[2]])
    harness.heartbeat(2, want_shut_down=True)
    broker = harness.image.broker(2)
    assert broker is not None
    assert broker.in_controlled_shutdown
    assert not broker.fenced
    assert harness.partition("t").isr == (0, 1)
    assert alter(harness, [0, 1, 2]).error.code == "INELIGIBLE_REPLICA"


# --- ElectLeaders ------------------------------------------------------------------------------------


def elect(h: CoreHarness, unclean: bool, topics: dict[str, list[int]] | None = None) -> pb.ElectLeadersResponse:
    request = pb.ElectLeadersRequest(unclean=unclean)
    for name, numbers in (topics or {}).items():
        request.topics.add(topic=name, partitions=numbers)
    response: pb.ElectLeadersResponse = h.call("ElectLeaders", request)
    return response


def results(response: pb.ElectLeadersResponse) -> list[tuple[str, int, int, str]]:
    return [(r.topic, r.partition, r.leader, r.error.code) for r in response.partitions]


def test_preferred_election_moves_leadership_back_to_the_first_replica(topic: CoreHarness) -> None:
    """L1, E5: after 0 returns to the ISR, ElectLeaders makes it lead again."""
    topic.heartbeat(0, want_fence=True)
    topic.heartbeat(0)
    alter(topic, [1, 2, 0])  # 1 leads and readmits 0
    assert results(elect(topic, False, {"t": [0]})) == [("t", 0, 0, "")]
    reg = topic.partition("t")
    assert (reg.leader, reg.leader_epoch) == (0, 2)


def test_preferred_election_not_needed_or_not_available(topic: CoreHarness) -> None:
    """L1: ELECTION_NOT_NEEDED when it leads; PREFERRED_LEADER_NOT_AVAILABLE when it is out of the ISR."""
    assert results(elect(topic, False, {"t": [0]})) == [("t", 0, 0, "ELECTION_NOT_NEEDED")]
    topic.heartbeat(0, want_fence=True)
    topic.heartbeat(0)  # unfenced, but not back in the ISR
    assert results(elect(topic, False, {"t": []})) == [("t", 0, 1, "PREFERRED_LEADER_NOT_AVAILABLE")]


def test_election_for_unknown_partitions(topic: CoreHarness) -> None:
    """L3: unknown topics and partitions get UNKNOWN_TOPIC_OR_PARTITION."""
    codes = [r[3] for r in results(elect(topic, False, {"t": [5], "nope": []}))]
    assert codes == ["UNKNOWN_TOPIC_OR_PARTITION", "UNKNOWN_TOPIC_OR_PARTITION"]


def test_all_partitions_election_leaves_out_not_needed(topic: CoreHarness) -> None:
    """L3: no topics named -> every partition; ELECTION_NOT_NEEDED results are omitted."""
    topic.create_topic("u", partitions=-1, rf=-1, assignments=[[1, 0]])
    assert results(elect(topic, False)) == []


def test_unclean_election_only_for_partitions_without_leader(harness: CoreHarness) -> None:
    """L2, E3: an offline partition gets any eligible replica, and the ISR becomes just it."""
    harness.start_brokers([0, 1])
    harness.create_topic("t", partitions=-1, rf=-1, assignments=[[0, 1]])
    assert results(elect(harness, True, {"t": [0]})) == [("t", 0, 0, "ELECTION_NOT_NEEDED")]
    harness.heartbeat(1, want_fence=True)
    harness.heartbeat(0, want_fence=True)
    assert results(elect(harness, True, {"t": [0]})) == [("t", 0, NO_LEADER, "ELIGIBLE_LEADERS_NOT_AVAILABLE")]
    harness.heartbeat(1)
    assert harness.partition("t").leader == NO_LEADER  # clean rules: 1 is not in the ISR
    assert results(elect(harness, True, {"t": [0]})) == [("t", 0, 1, "")]
    assert (harness.partition("t").leader, harness.partition("t").isr) == (1, (1,))


# --- automatic rebalancing ---------------------------------------------------------------------------


def _imbalanced(h: CoreHarness) -> None:
    """Partition t-0 led by 1 though its preferred replica 0 is back in the ISR."""
    h.heartbeat(0, want_fence=True)
    h.heartbeat(0)
    alter(h, [1, 2, 0])
    assert h.partition("t").leader == 1


def test_auto_rebalance_every_check_interval(topic: CoreHarness) -> None:
    """E5: auto.leader.rebalance.enable (default true), every leader.imbalance.check.interval.seconds."""
    _imbalanced(topic)
    assert all(t.commands == () for t in topic.keep_alive(REBALANCE_S * 1000 - 100))
    (result,) = topic.keep_alive(100)
    assert result.records == (PartitionChange(topic.topic_id("t"), 0, leader=0),)
    assert topic.partition("t").leader == 0


def test_auto_rebalance_interval_is_configurable_and_can_be_disabled() -> None:
    """E5: the interval takes fractions (tests); false disables it."""
    fast = make_harness({"leader.imbalance.check.interval.seconds": "0.5"})
    fast.start_brokers([0, 1, 2])
    fast.create_topic("t", partitions=-1, rf=-1, assignments=[[0, 1, 2]])
    _imbalanced(fast)
    fast.tick(501)
    assert fast.partition("t").leader == 0
    off = make_harness({"leader.imbalance.check.interval.seconds": "0.5", "auto.leader.rebalance.enable": "false",
                        "broker.session.timeout.ms": "60000"})  # no heartbeats here: nobody is fenced in 5 s
    off.start_brokers([0, 1, 2])
    off.create_topic("t", partitions=-1, rf=-1, assignments=[[0, 1, 2]])
    _imbalanced(off)
    off.tick(5000)
    assert off.partition("t").leader == 1


def test_auto_rebalance_skips_a_preferred_replica_that_cannot_lead(topic: CoreHarness) -> None:
    """E5: the preferred replica must be an eligible ISR member."""
    topic.heartbeat(0, want_fence=True)
    topic.heartbeat(0)  # unfenced but not in the ISR
    topic.keep_alive(REBALANCE_S * 1000 + 1000)
    assert topic.partition("t").leader == 1


def test_tick_elects_offline_partitions_and_tidies_isrs(topic: CoreHarness) -> None:
    """E1-E4 at the tick: offline partitions whose ISR has an eligible member get a leader (a safety net
    for failovers; in steady state the unfencing command does it)."""
    assert topic.tick().commands == ()
    reg = topic.partition("t")
    assert (reg.leader, reg.isr) == (0, (0, 1, 2))
