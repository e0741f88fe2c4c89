"""A seeded simulation of the pure core (docs/CONVENTIONS.md §9): random brokers, heartbeats, clock jumps, topics,
ISR changes and elections, with the invariants checked after every committed decision.

A failure prints its seed; ``SIM_SEEDS`` below replays it. Every record is also replayed by
MetadataDelta (through the harness), so a record that would not apply fails here too.
"""

from __future__ import annotations

import random

import pytest

from controller.core.common import is_eligible
from metadata.image import MetadataImage
from metadata.records import NO_LEADER
from proto import controller_pb2 as pb
from tests.controller.conftest import CoreHarness, make_harness

SIM_SEEDS = range(24)
STEPS = 250
BROKERS = 5


def check_invariants(image: MetadataImage, *, after_tick: bool, elr: bool) -> None:
    """The rules every committed image obeys (E1-E4, E6, H5, A7; with eligible leader replicas ELR1)."""
    for tp, reg in image.all_partitions():
        if not elr:
            assert reg.isr, f"{tp}: empty ISR (E4)"
            assert (reg.elr, reg.last_known_elr) == ((), ()), f"{tp}: an ELR with eligible leader replicas off"
        assert not set(reg.elr) & set(reg.isr), f"{tp}: ELR {reg.elr} and ISR {reg.isr} overlap (ELR1)"
        if reg.leader != NO_LEADER:
            assert is_eligible(image.broker(reg.leader)), f"{tp}: leader {reg.leader} is not eligible (E1, H5)"
        if len(reg.isr) > 1 or (elr and reg.isr):
            bad = [b for b in reg.isr if not is_eligible(image.broker(b))]
            assert not bad, f"{tp}: ineligible {bad} in ISR {reg.isr} (E4, A7)"
        if after_tick and reg.leader == NO_LEADER:
            live = [b for b in (*reg.isr, *reg.elr) if is_eligible(image.broker(b))]
            assert not live, f"{tp}: offline though ISR or ELR members {live} could lead (E2, E6)"


class Simulation:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.elr = seed % 2 == 0  # eligible leader replicas on for even seeds
        props = {"broker.session.timeout.ms": "3000", "leader.imbalance.check.interval.seconds": "5",
                 "eligible.leader.replicas.enable": str(self.elr).lower()}  # fmt: skip
        self.h: CoreHarness = make_harness(props, seed=seed)
        self.generation: dict[int, int] = {}
        self.topic_count = 0

    def step(self) -> bool:
        """One random action; returns True when it was a tick."""
        action = self.rng.choices(
            ["register", "heartbeat", "tick", "create", "delete", "alter", "elect", "config"],
            weights=[2, 12, 4, 3, 1, 4, 1, 1],
        )[0]
        getattr(self, action)()
        return action == "tick"

    def register(self) -> None:
        b = self.rng.randrange(BROKERS)
        if self.rng.random() < 0.5:
            self.generation[b] = self.generation.get(b, 0) + 1
        self.h.register(b, generation=self.generation.get(b, 0))

    def heartbeat(self) -> None:
        if not self.h.image.brokers:
            return
        b = self.rng.choice(sorted(self.h.image.brokers))
        epoch = self.h.epoch(b)
        offset = self.h.image.offset if self.rng.random() < 0.9 else epoch - 1
        roll = self.rng.random()
        self.h.heartbeat(b, offset=offset, want_fence=roll < 0.05, want_shut_down=0.05 <= roll < 0.1)

    def tick(self) -> None:
        self.h.tick(self.rng.choice([0, 100, 1000, 2500, 4000]))

    def create(self) -> None:
        self.topic_count += 1
        self.h.create_topic(f"t{self.topic_count}", self.rng.randint(1, 4), self.rng.randint(1, 3))

    def _pick(self) -> tuple[str, int] | None:
        partitions = [(tp.topic_name, tp.partition) for tp, _ in self.h.image.all_partitions()]
        return self.rng.choice(partitions) if partitions else None

    def delete(self) -> None:
        names = sorted(self.h.image.topics_by_name)
        if names:
            self.h.call("DeleteTopics", pb.DeleteTopicsRequest(names=[self.rng.choice(names)]))

    def alter(self) -> None:
        picked = self._pick()
        if picked is None:
            return
        name, p = picked
        reg = self.h.partition(name, p)
        if reg.leader == NO_LEADER:
            return
        others = [b for b in reg.replicas if b != reg.leader and self.rng.random() < 0.6]
        request = pb.AlterPartitionRequest(
            broker_id=reg.leader, broker_epoch=self.h.epoch(reg.leader), topic_id=self.h.topic_id(name),
            partition=p, leader_epoch=reg.leader_epoch, partition_epoch=reg.partition_epoch,
            new_isr=[reg.leader, *others],
        )  # fmt: skip
        self.h.call("AlterPartition", request)

    def elect(self) -> None:
        self.h.call("ElectLeaders", pb.ElectLeadersRequest(unclean=self.rng.random() < 0.3))

    def config(self) -> None:
        names = sorted(self.h.image.topics_by_name)
        if not names:
            return
        request = pb.AlterConfigsRequest()
        res = request.resources.add(resource_type="topic", resource_name=self.rng.choice(names))
        if self.rng.random() < 0.5:
            res.entries.add(key="unclean.leader.election.enable", value=self.rng.choice(["true", "false"]))
        else:
            res.entries.add(key="min.insync.replicas", value=self.rng.choice(["1", "2", "3"]))
        self.h.call("AlterConfigs", request)


@pytest.mark.parametrize("seed", SIM_SEEDS)
def test_random_runs_keep_the_invariants(seed: int) -> None:
    sim = Simulation(seed)
    for i in range(STEPS):
        was_tick = sim.step()
        try:
            check_invariants(sim.h.image, after_tick=was_tick, elr=sim.elr)
        except AssertionError as exc:
            raise AssertionError(f"seed {seed}, step {i}: {exc}\n{sim.h.image.describe()}") from None
    assert sim.h.image.offset > 20  # the run did something
