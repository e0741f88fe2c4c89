"""Registration, heartbeats, sessions, fencing, unfencing and controlled shutdown of the pure core.

Each test names the rule it checks: R*/H* from controller/core/brokers.py, E* from controller/core/elections.py
(Kafka's ClusterControlManager, BrokerHeartbeatManager and PartitionChangeBuilder).
"""

from __future__ import annotations

import pytest

from metadata.records import (
    NO_LEADER,
    BrokerControlledShutdown,
    Config,
    ConfigResourceType,
    FenceBroker,
    PartitionChange,
    RegisterBroker,
    UnfenceBroker,
)
from proto import controller_pb2 as pb
from tests.controller.conftest import CoreHarness, incarnation, make_harness

SESSION_MS = 2000  # broker.session.timeout.ms default (Kafka's is 9000)
ELR_OFF = {"eligible.leader.replicas.enable": "false"}


# --- registration ---------------------------------------------------------------------------------


def test_broker_epoch_is_the_offset_of_its_register_record(harness: CoreHarness) -> None:
    """R1: the epoch is the RegisterBroker record's offset; the broker starts fenced."""
    expected = harness.image.offset + 1
    response = harness.register(0)
    assert not response.error.code
    assert response.broker_epoch == expected
    broker = harness.image.broker(0)
    assert broker is not None
    assert broker.broker_epoch == expected
    assert broker.fenced
    assert harness.results[-1].records == (
        RegisterBroker(0, incarnation(0), expected, broker.endpoints, None, fenced=True),
    )


def test_same_incarnation_registering_again_is_idempotent(harness: CoreHarness) -> None:
    """R2: same incarnation -> the current epoch, no record."""
    first = harness.register(0).broker_epoch
    offset = harness.image.offset
    again = harness.register(0)
    assert again.broker_epoch == first
    assert not again.error.code
    assert harness.image.offset == offset
    assert harness.results[-1].commands == ()


def test_new_incarnation_gets_a_new_higher_epoch_and_starts_fenced(harness: CoreHarness) -> None:
    """R1, R3: a restarted broker (new incarnation) gets a new registration with a higher epoch (once the old
    incarnation's session expired: R5)."""
    harness.start_brokers([0])
    first = harness.epoch(0)
    harness.advance(SESSION_MS + 1)
    second = harness.register(0, generation=1).broker_epoch
    assert second > first
    broker = harness.image.broker(0)
    assert broker is not None
    assert broker.fenced
    assert broker.incarnation_id == incarnation(0, 1)
    assert harness.heartbeat(0, epoch=first).error.code == "STALE_BROKER_EPOCH"


def test_reregistration_moves_the_old_incarnations_leaderships(harness: CoreHarness) -> None:
    """R3, E2: the old incarnation's leaderships and ISR seats go in the registering command."""
    harness.start_brokers([0, 1])
    harness.create_topic("t", assignments=[[0, 1]], partitions=-1, rf=-1)
    harness.advance(SESSION_MS + 1)  # broker 0 crashed: no heartbeat, and no tick yet to fence it
    harness.heartbeat(1)
    harness.register(0, generation=1)
    reg = harness.partition("t")
    assert (reg.leader, reg.isr) == (1, (1,))
    assert isinstance(harness.results[-1].commands[0][0], RegisterBroker)
    assert len(harness.results[-1].commands) == 1  # one atomic command


def test_another_incarnation_of_a_live_broker_is_refused(harness: CoreHarness) -> None:
    """R5: DUPLICATE_BROKER_REGISTRATION while the registered incarnation's session is alive; nothing written,
    the live broker's session untouched (it still expires on its own); accepted once it expired or is fenced."""
    harness.start_brokers([0])
    epoch, offset = harness.epoch(0), harness.image.offset
    refused = harness.register(0, generation=1)
    assert refused.error.code == "DUPLICATE_BROKER_REGISTRATION"
    assert "broker id 0" in refused.error.message
    assert "session is alive" in refused.error.message
    assert (harness.image.offset, harness.epoch(0)) == (offset, epoch)
    harness.advance(SESSION_MS - 1)
    assert harness.register(0, generation=1).error.code == "DUPLICATE_BROKER_REGISTRATION"  # no contact made
    harness.tick(2)  # the live broker's session expires: it is fenced
    broker = harness.image.broker(0)
    assert broker is not None
    assert broker.fenced
    accepted = harness.register(0, generation=1)
    assert not accepted.error.code
    assert accepted.broker_epoch > epoch


@pytest.mark.parametrize(
    ("broker_id", "incarnation_id", "endpoints"),
    [
        (-1, incarnation(0), {"PLAINTEXT": "h:1"}),
        (0, "not-a-uuid", {"PLAINTEXT": "h:1"}),
        (0, "0000000a-0000-4000-8000-00000000000A", {"PLAINTEXT": "h:1"}),
        (0, incarnation(0), {"PLAINTEXT": "no-port"}),
        (0, incarnation(0), {"PLAINTEXT": "h:99999"}),
    ],
)
def test_malformed_registration_is_invalid_request(
    harness: CoreHarness, broker_id: int, incarnation_id: str, endpoints: dict[str, str]
) -> None:
    """R4: a request no record can be built from is INVALID_REQUEST and writes nothing."""
    offset = harness.image.offset
    request = pb.RegisterBrokerRequest(broker_id=broker_id, incarnation_id=incarnation_id, endpoints=endpoints)
    assert harness.call("RegisterBroker", request).error.code == "INVALID_REQUEST"
    assert harness.image.offset == offset


# --- heartbeats and sessions ------------------------------------------------------------------------


def test_unknown_broker_or_stale_epoch_heartbeat_is_refused(harness: CoreHarness) -> None:
    """H1: another epoch than the registration's is STALE_BROKER_EPOCH."""
    harness.register(0)
    assert harness.heartbeat(0, epoch=harness.epoch(0) + 1).error.code == "STALE_BROKER_EPOCH"
    request = pb.BrokerHeartbeatRequest(broker_id=7, broker_epoch=1, current_metadata_offset=100)
    assert harness.call("BrokerHeartbeat", request).error.code == "STALE_BROKER_EPOCH"


def test_stale_heartbeat_does_not_extend_the_session(harness: CoreHarness) -> None:
    """H1, H2: a refused heartbeat is no contact; the broker is fenced when its real session ends."""
    harness.start_brokers([0])
    harness.advance(SESSION_MS / 2)
    harness.heartbeat(0, epoch=harness.epoch(0) + 5)
    harness.tick(SESSION_MS / 2 + 1)
    broker = harness.image.broker(0)
    assert broker is not None
    assert broker.fenced


def test_fenced_broker_is_unfenced_once_caught_up(harness: CoreHarness) -> None:
    """H3: unfenced only when current_metadata_offset >= its broker epoch."""
    epoch = harness.register(0).broker_epoch
    behind = harness.heartbeat(0, offset=epoch - 1)
    assert (behind.is_caught_up, behind.is_fenced) == (False, True)
    assert harness.results[-1].commands == ()
    caught_up = harness.heartbeat(0, offset=epoch)
    assert (caught_up.is_caught_up, caught_up.is_fenced) == (True, False)
    assert harness.results[-1].records == (UnfenceBroker(0, epoch),)


def test_want_fence_keeps_a_broker_fenced_and_fences_an_unfenced_one(harness: CoreHarness) -> None:
    """H3, H4: a broker asking to be fenced is not unfenced, and an unfenced one is fenced."""
    epoch = harness.register(0).broker_epoch
    assert harness.heartbeat(0, want_fence=True).is_fenced
    assert harness.heartbeat(0).is_fenced is False
    response = harness.heartbeat(0, want_fence=True)
    assert response.is_fenced
    assert not response.should_shut_down
    assert harness.results[-1].records == (FenceBroker(0, epoch),)


def test_broker_is_fenced_only_after_the_session_timeout(harness: CoreHarness) -> None:
    """H2: valid while now - last contact <= broker.session.timeout.ms (2000 by default), fenced after."""
    harness.start_brokers([0])
    epoch = harness.epoch(0)
    assert harness.tick(SESSION_MS).commands == ()
    assert harness.tick(1).records[:1] == (FenceBroker(0, epoch),)
    assert harness.heartbeat(0, want_fence=True).is_fenced  # still registered, merely fenced


def test_heartbeats_keep_the_session_alive(harness: CoreHarness) -> None:
    """H2: each heartbeat is a new contact."""
    harness.start_brokers([0])
    for _ in range(10):
        harness.advance(SESSION_MS - 1)
        harness.heartbeat(0)
        assert harness.tick().commands == ()


def test_session_timeout_is_configurable() -> None:
    """H2: broker.session.timeout.ms."""
    h = make_harness({"broker.session.timeout.ms": "1500"})
    h.start_brokers([0, 1])
    h.advance(1000)
    h.heartbeat(1)
    h.tick(501)
    assert [b for b, reg in h.image.brokers.items() if reg.fenced] == [0]


def test_newly_active_controller_gives_every_broker_a_fresh_session(harness: CoreHarness) -> None:
    """H2: sessions are in memory; a new active controller starts them all afresh."""
    harness.start_brokers([0, 1])
    harness.advance(SESSION_MS * 5)
    harness.core.activate(harness.image)
    assert harness.tick(SESSION_MS).commands == ()
    assert {b for b, reg in harness.image.brokers.items() if reg.fenced} == set()
    harness.heartbeat(1)
    harness.tick(1)
    assert {b for b, reg in harness.image.brokers.items() if reg.fenced} == {0}


def test_fenced_brokers_are_not_fenced_again(harness: CoreHarness) -> None:
    """H2: only unfenced brokers time out."""
    harness.register(0)
    assert harness.tick(SESSION_MS * 3).commands == ()


# --- fencing and partitions --------------------------------------------------------------------------


def test_fencing_the_leader_elects_the_next_isr_member_in_replica_order(harness: CoreHarness) -> None:
    """H5, E2: the next live ISR member in replica order leads; the fenced broker leaves the ISR."""
    harness.start_brokers([0, 1, 2])
    harness.create_topic("t", assignments=[[1, 2, 0]], partitions=-1, rf=-1)
    harness.advance(SESSION_MS)
    harness.heartbeat_all([0, 2])
    fence = harness.tick(1)
    reg = harness.partition("t")
    assert (reg.leader, reg.isr, reg.leader_epoch) == (2, (2, 0), 1)
    assert len(fence.commands) == 1  # the FenceBroker and its partition changes are one atomic command
    assert isinstance(fence.commands[0][0], FenceBroker)


def test_fencing_a_follower_shrinks_the_isr_and_keeps_the_leader(harness: CoreHarness) -> None:
    """H5, E1, E4: a fenced follower leaves the ISR; the leader and its epoch stay."""
    harness.start_brokers([0, 1, 2])
    harness.create_topic("t", assignments=[[0, 1, 2]], partitions=-1, rf=-1)
    harness.heartbeat(2, want_fence=True)
    reg = harness.partition("t")
    assert (reg.leader, reg.isr, reg.leader_epoch, reg.partition_epoch) == (0, (0, 1), 0, 1)


def test_isr_never_becomes_empty_the_last_member_stays_without_leader() -> None:
    """E4 (eligible leader replicas off): fencing the last ISR member leaves it in the ISR with leader -1
    (offline), as Kafka 3 does."""
    harness = make_harness(ELR_OFF)
    harness.start_brokers([0, 1])
    harness.create_topic("t", assignments=[[0, 1]], partitions=-1, rf=-1)
    harness.heartbeat(1, want_fence=True)
    harness.heartbeat(0, want_fence=True)
    reg = harness.partition("t")
    assert (reg.leader, reg.isr) == (NO_LEADER, (0,))


def test_offline_partition_gets_a_leader_when_an_isr_member_is_unfenced(harness: CoreHarness) -> None:
    """H3, E2: unfencing the last ISR member elects it in the same command."""
    harness.start_brokers([0, 1])
    harness.create_topic("t", assignments=[[0, 1]], partitions=-1, rf=-1)
    harness.heartbeat(1, want_fence=True)
    harness.heartbeat(0, want_fence=True)
    harness.heartbeat(1)  # unfenced, but not in the ISR: no clean leader
    assert harness.partition("t").leader == NO_LEADER
    harness.heartbeat(0)
    assert (harness.partition("t").leader, harness.partition("t").isr) == (0, (0,))
    command = harness.results[-1].commands[0]
    assert isinstance(command[0], UnfenceBroker)
    assert isinstance(command[1], PartitionChange)


def test_unclean_election_by_topic_config_picks_a_live_replica_outside_the_isr(harness: CoreHarness) -> None:
    """E3: with unclean.leader.election.enable=true on the topic, the first eligible replica leads alone."""
    harness.start_brokers([0, 1])
    harness.create_topic(
        "t", assignments=[[0, 1]], partitions=-1, rf=-1, configs={"unclean.leader.election.enable": "true"}
    )
    harness.heartbeat(1, want_fence=True)
    harness.heartbeat(0, want_fence=True)
    assert harness.partition("t").leader == NO_LEADER
    harness.heartbeat(1)
    reg = harness.partition("t")
    assert (reg.leader, reg.isr) == (1, (1,))


def test_unclean_election_falls_back_to_the_cluster_config(harness: CoreHarness) -> None:
    """E3: no topic value -> the cluster config (dynamic), which the tick applies to offline partitions."""
    harness.start_brokers([0, 1])
    harness.create_topic("t", assignments=[[0, 1]], partitions=-1, rf=-1)
    harness.heartbeat(1, want_fence=True)
    harness.heartbeat(0, want_fence=True)
    harness.heartbeat(1)
    assert harness.partition("t").leader == NO_LEADER
    alter = pb.AlterConfigsRequest()
    alter.resources.add(resource_type="cluster", resource_name="").entries.add(
        key="unclean.leader.election.enable", value="true"
    )
    harness.call("AlterConfigs", alter)
    assert harness.image.config(ConfigResourceType.CLUSTER, "") == {"unclean.leader.election.enable": "true"}
    harness.heartbeat_all([1])
    harness.tick(100)
    assert (harness.partition("t").leader, harness.partition("t").isr) == (1, (1,))


def test_static_unclean_config_applies_when_the_cluster_sets_none() -> None:
    """E3: the controller's own unclean.leader.election.enable is the last fallback."""
    h = make_harness({"unclean.leader.election.enable": "true"})
    h.start_brokers([0, 1])
    h.create_topic("t", assignments=[[0, 1]], partitions=-1, rf=-1)
    h.heartbeat(1, want_fence=True)
    h.heartbeat(0, want_fence=True)
    h.heartbeat(1)
    assert (h.partition("t").leader, h.partition("t").isr) == (1, (1,))


def test_topic_config_false_overrides_cluster_true() -> None:
    """E3: the topic's own value wins over the cluster's."""
    h = make_harness({"unclean.leader.election.enable": "true"})
    h.start_brokers([0, 1])
    h.create_topic("t", assignments=[[0, 1]], partitions=-1, rf=-1, configs={"unclean.leader.election.enable": "false"})
    h.heartbeat(1, want_fence=True)
    h.heartbeat(0, want_fence=True)
    h.heartbeat(1)
    assert h.partition("t").leader == NO_LEADER


# --- controlled shutdown -------------------------------------------------------------------------------


def test_controlled_shutdown_moves_leaderships_then_lets_the_broker_go(harness: CoreHarness) -> None:
    """H4, H5: want_shut_down -> BrokerControlledShutdown with the leaderships moved and the broker out of
    ISRs; should_shut_down once it leads nothing and the others caught up; then it is fenced."""
    harness.start_brokers([0, 1, 2])
    harness.create_topic("t", 6, 3)
    assert harness.image.partitions_led_by(0)
    first = harness.heartbeat(0, want_shut_down=True)
    assert not first.should_shut_down
    assert not first.is_fenced
    command = harness.results[-1].commands[0]
    assert command[0] == BrokerControlledShutdown(0, harness.epoch(0))
    assert harness.image.partitions_led_by(0) == ()
    assert all(0 not in reg.isr for _, reg in harness.image.all_partitions())
    not_yet = harness.heartbeat(0, want_shut_down=True, offset=harness.image.offset)
    assert not not_yet.should_shut_down  # brokers 1 and 2 have not yet seen the new leaderships
    harness.heartbeat_all([1, 2])
    done = harness.heartbeat(0, want_shut_down=True)
    assert done.should_shut_down
    assert done.is_fenced
    broker = harness.image.broker(0)
    assert broker is not None
    assert broker.fenced
    assert broker.in_controlled_shutdown


def test_controlled_shutdown_of_a_broker_leading_nothing_is_immediate(harness: CoreHarness) -> None:
    """H4: UNFENCED with want_shut_down and no leadership -> SHUTDOWN_NOW (fenced, out of the ISRs)."""
    harness.start_brokers([0, 1])
    harness.create_topic("t", assignments=[[0, 1]], partitions=-1, rf=-1)
    response = harness.heartbeat(1, want_shut_down=True)
    assert response.should_shut_down
    assert response.is_fenced
    assert harness.partition("t").isr == (0,)


def test_controlled_shutdown_of_the_sole_isr_member_takes_the_partition_offline() -> None:
    """H5, E4 (eligible leader replicas off): with no other eligible ISR member the partition goes offline
    (leader -1), ISR kept."""
    harness = make_harness(ELR_OFF)
    harness.start_brokers([0, 1])
    harness.create_topic("t", assignments=[[0]], partitions=-1, rf=-1)
    harness.heartbeat(0, want_shut_down=True)
    assert (harness.partition("t").leader, harness.partition("t").isr) == (NO_LEADER, (0,))
    harness.heartbeat(1)
    assert harness.heartbeat(0, want_shut_down=True).should_shut_down


def test_fenced_broker_asking_to_shut_down_may_go_at_once(harness: CoreHarness) -> None:
    """H4: FENCED + want_shut_down -> SHUTDOWN_NOW, no record."""
    harness.register(0)
    response = harness.heartbeat(0, want_shut_down=True, offset=0)
    assert response.should_shut_down
    assert harness.results[-1].commands == ()


def test_broker_in_controlled_shutdown_is_not_unfenced_or_readmitted(harness: CoreHarness) -> None:
    """H4: a broker in controlled shutdown stays so (and ineligible) until it registers anew."""
    harness.start_brokers([0, 1])
    harness.create_topic("t", assignments=[[0, 1]], partitions=-1, rf=-1)
    harness.heartbeat(0, want_shut_down=True)
    assert not harness.heartbeat(0).should_shut_down
    assert harness.partition("t").leader == 1
    harness.advance(SESSION_MS + 1)  # it stopped without a word; a new incarnation may register (R5)
    harness.register(0, generation=1)
    assert not harness.heartbeat(0).is_fenced
    broker = harness.image.broker(0)
    assert broker is not None
    assert not broker.in_controlled_shutdown


def test_controlled_shutdown_broker_whose_heartbeats_stop_is_fenced(harness: CoreHarness) -> None:
    """H2: a broker in controlled shutdown still has a session."""
    harness.start_brokers([0, 1])
    harness.create_topic("t", assignments=[[0, 1]], partitions=-1, rf=-1)
    harness.heartbeat(0, want_shut_down=True)
    harness.advance(SESSION_MS + 1)
    harness.heartbeat(1)
    harness.tick()
    broker = harness.image.broker(0)
    assert broker is not None
    assert broker.fenced


# --- producer ids ------------------------------------------------------------------------------------


def test_producer_id_blocks_are_consecutive_and_never_reused(harness: CoreHarness) -> None:
    """I1, I2: each block starts where the last ended; the image records it."""
    harness.start_brokers([0, 1])
    starts = []
    for b in (0, 1, 0):
        response = harness.call(
            "AllocateProducerIds", pb.AllocateProducerIdsRequest(broker_id=b, broker_epoch=harness.epoch(b))
        )
        assert not response.error.code
        assert response.producer_id_len == 1000
        starts.append(response.producer_id_start)
    assert starts == [0, 1000, 2000]
    assert harness.image.next_producer_id == 3000


def test_producer_ids_for_a_stale_epoch_are_refused(harness: CoreHarness) -> None:
    """I1."""
    harness.start_brokers([0])
    request = pb.AllocateProducerIdsRequest(broker_id=0, broker_epoch=harness.epoch(0) - 1)
    assert harness.call("AllocateProducerIds", request).error.code == "STALE_BROKER_EPOCH"
    assert harness.image.next_producer_id == 0


def test_configs_of_a_topic_go_in_its_creating_command(harness: CoreHarness) -> None:
    """T6 (cross-check with brokers): Topic, Partitions and Configs are one command."""
    harness.start_brokers([0])
    harness.create_topic("t", 2, 1, configs={"retention.ms": "1000"})
    (command,) = harness.results[-1].commands
    assert isinstance(command[-1], Config)
    assert len(command) == 4
