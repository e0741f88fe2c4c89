"""The simulation's driver: steps, fault injection and the invariants checked after every step.

Invariants (the issue's, checked after every step; the first broken one raises :class:`Violation`):

* S1. A replica's high watermark never goes back within one life (a crash may only lose the unflushed part
  of it, capped at the recovered log end, HW3), and no replica ever truncates below it.
* S2. No acknowledged record is lost: the replica the controller names leader, once it acts as leader in
  that epoch, holds every acknowledged record at its offset; an acknowledged record is what S3 recorded
  at its offset, so every replica whose high watermark covers it holds it too.
* S3. Replicas agree below the high watermark: what any replica ever held below its high watermark is the
  same record at the same offset everywhere, forever.
* S4. At most one leader accepts writes per leader epoch, and it is the one the controller elected.

At the end the network heals and dead replicas restart; the ISR must recover to all three replicas, the
high watermark must reach the leader's log end and every replica must hold every acknowledged record
(liveness, what the integration test's "restart -> the ISR recovers" asks of the processes).

Not thread-safe: one test thread drives everything.
"""

from __future__ import annotations

import random

from log.clock import ManualClock
from replication.isr import AlterPartitionRequest
from tests.replication.sim import (
    CONTROLLER,
    REPLICAS,
    AlterResp,
    Body,
    Entry,
    EpochReq,
    EpochResp,
    FetchReq,
    FetchResp,
    Heartbeat,
    Metadata,
    Network,
    SimController,
    Violation,
)
from tests.replication.sim_replica import Send, SimReplica

STEP_MS_MAX = 15.0


class Simulation:
    """Three replicas, a controller and a network, all driven by one seeded ``random.Random``."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.clock = ManualClock()
        self.net = Network(self.rng, self.clock)
        self.controller = SimController(self.clock.monotonic_ms())
        self.replicas = {b: SimReplica(b, self.clock, self._sender(b)) for b in REPLICAS}
        self.acked: dict[int, Entry] = {}
        self.committed: dict[int, Entry] = {}
        self.writers: dict[int, int] = {}  # leader epoch -> the broker that appended in it
        self.recovering: set[int] = set()  # crashed, not yet back in the ISR
        self.new_acks: list[int] = []
        self.checked_leader = (-1, -1)  # (broker, leader epoch) whose log was last checked whole (S2)
        self.checked_to = dict.fromkeys(REPLICAS, 0)
        self.last_hw = dict.fromkeys(REPLICAS, 0)
        self.next_value = 0
        self.produced = self.rejected = self.crashes = 0
        self.faults = True

    def _sender(self, src: int) -> Send:
        def send(dst: int, body: Body) -> None:
            self.net.send(src, dst, body)

        return send

    # ---------------------------------------------------------------------------------------- run

    def run(self, steps: int, settle_steps: int) -> None:
        for _ in range(steps):
            self.step()
        self.faults = False
        self.net.cut.clear()
        self.net.drop_rate = 0.0
        for replica in self.replicas.values():
            if not replica.alive:
                self._restart(replica)
        for _ in range(settle_steps):
            self.step()
        self.check_settled()

    def step(self) -> None:
        self.clock.advance(self.rng.uniform(1.0, STEP_MS_MAX))
        now = self.clock.monotonic_ms()
        if self.faults:
            self._inject_faults()
        for message in self.net.due():
            self._deliver(message.src, message.dst, message.body)
        self.controller.tick(now)
        for replica in self.replicas.values():
            if replica.alive:
                self._background(replica)
        if self.faults and self.rng.random() < 0.5:
            self._produce()
        self._collect_acks()
        self.check()

    def _background(self, replica: SimReplica) -> None:
        if self.rng.random() < 0.5:
            self.net.send(replica.id, CONTROLLER, Heartbeat(replica.id))
        if self.rng.random() < 0.3:
            self.net.send(CONTROLLER, replica.id, self.controller.metadata())
        if self.rng.random() < 0.1:
            replica.flush()
        replica.tick()

    def _deliver(self, src: int, dst: int, body: Body) -> None:
        if dst == CONTROLLER:
            if isinstance(body, Heartbeat):
                self.controller.on_heartbeat(body.broker_id, self.clock.monotonic_ms())
            elif isinstance(body, AlterPartitionRequest):
                self.net.send(CONTROLLER, src, self.controller.alter_partition(body))
            return
        replica = self.replicas[dst]
        if not replica.alive:
            return
        if isinstance(body, Metadata):
            replica.on_metadata(body)
        elif isinstance(body, FetchReq):
            replica.on_fetch(src, body)
        elif isinstance(body, FetchResp):
            replica.on_fetch_response(body)
        elif isinstance(body, EpochReq):
            replica.on_epoch_request(src, body)
        elif isinstance(body, EpochResp):
            replica.on_epoch_response(body)
        elif isinstance(body, AlterResp):
            replica.on_alter_response(body)

    # ------------------------------------------------------------------------------------- faults

    def _inject_faults(self) -> None:
        self.recovering = {b for b in self.recovering if not (self.replicas[b].alive and b in self.controller.isr)}
        roll = self.rng.random()
        if roll < 0.03:
            self._crash_one()
        elif roll < 0.06:
            dead = [r for r in self.replicas.values() if not r.alive]
            if dead:
                self._restart(self.rng.choice(dead))
        elif roll < 0.08:
            a, b = self.rng.sample((CONTROLLER, *REPLICAS), 2)
            if CONTROLLER not in (a, b) or not self.recovering:
                self.net.cut.add(frozenset((a, b)))
        elif roll < 0.10:
            self.net.cut.clear()

    def _crash_one(self) -> None:
        """One failure at a time (module docstring of ``sim``): no crash while another replica is dead, fenced,
        out of the ISR or cut off from the controller, and no cut to the controller until it is back."""
        victim = self.replicas[self.rng.choice(REPLICAS)]
        others = [r.id for r in self.replicas.values() if r is not victim]
        ok = all(self.replicas[b].alive and b in self.controller.isr for b in others)
        ok = ok and not self.controller.fenced and not any(CONTROLLER in link for link in self.net.cut)
        if victim.alive and ok and not self.recovering:
            victim.crash()
            self.recovering.add(victim.id)
            self.checked_to[victim.id] = min(self.checked_to[victim.id], victim.high_watermark)
            self.last_hw[victim.id] = victim.high_watermark
            self.crashes += 1

    def _restart(self, replica: SimReplica) -> None:
        broker_epoch = self.controller.register(replica.id)  # a new life comes back fenced (R3)
        replica.restart(broker_epoch, (self.controller.leader_epoch, self.controller.partition_epoch))

    # ------------------------------------------------------------------------------------ produce

    def _produce(self) -> None:
        leaders = [r for r in self.replicas.values() if r.alive and r.role == "leader"]
        if not leaders:
            return
        leader = self.rng.choice(leaders)  # a stale leader may still be asked: it must not win (S4)
        error = leader.produce(self.next_value)
        if error:
            self.rejected += 1
            return
        self.next_value += 1
        self.produced += 1
        writer = self.writers.setdefault(leader.leader_epoch, leader.id)
        if writer != leader.id or self.controller.leaders.get(leader.leader_epoch) != leader.id:
            raise Violation(f"S4: broker {leader.id} wrote in epoch {leader.leader_epoch} (writer {writer})")

    def _collect_acks(self) -> None:
        for replica in self.replicas.values():
            for offset, entry in replica.acked.items():
                if self.acked.setdefault(offset, entry) != entry:
                    raise Violation(f"S2: offset {offset} acknowledged as {self.acked[offset]} and as {entry}")
                self.new_acks.append(offset)
            replica.acked.clear()

    # --------------------------------------------------------------------------------- invariants

    def check(self) -> None:
        for replica in self.replicas.values():
            if replica.alive:
                self._check_replica(replica)
        for offset in self.new_acks:  # acknowledged below the leader's HW: S3 saw it there, the same
            if self.committed.get(offset) != self.acked[offset]:
                raise Violation(
                    f"S2: acknowledged {self.acked[offset]} at {offset}, committed {self.committed[offset]}"
                )
        self.new_acks.clear()
        leader = self.replicas.get(self.controller.leader)
        if leader is not None and leader.alive and leader.role == "leader":
            # A leader only appends while it leads: checking its whole log once per term is checking it always.
            term = (leader.id, leader.leader_epoch)
            if leader.leader_epoch == self.controller.leader_epoch and term != self.checked_leader:
                self._check_holds_acked(leader, len(leader.log))
                self.checked_leader = term

    def _check_replica(self, replica: SimReplica) -> None:
        hw = replica.high_watermark
        if hw < self.last_hw[replica.id]:
            raise Violation(f"S1: replica {replica.id} high watermark went back {self.last_hw[replica.id]} -> {hw}")
        if hw > len(replica.log):
            raise Violation(f"HW3: replica {replica.id} high watermark {hw} > log end {len(replica.log)}")
        self.last_hw[replica.id] = hw
        for offset in range(self.checked_to[replica.id], hw):
            entry = replica.log[offset]
            if self.committed.setdefault(offset, entry) != entry:
                raise Violation(f"S3: replica {replica.id} has {entry} at {offset}, committed {self.committed[offset]}")
        self.checked_to[replica.id] = max(self.checked_to[replica.id], hw)

    def _check_holds_acked(self, replica: SimReplica, upto: int) -> None:
        for offset, entry in self.acked.items():
            if offset < upto and (offset >= len(replica.log) or replica.log[offset] != entry):
                raise Violation(f"S2: replica {replica.id} lost acknowledged {entry} at offset {offset}")

    def check_settled(self) -> None:
        leader = self.replicas.get(self.controller.leader)
        if leader is None or leader.role != "leader":
            raise Violation(f"liveness: no acting leader after healing (controller says {self.controller.leader})")
        if self.controller.isr != frozenset(REPLICAS):
            raise Violation(f"liveness: the ISR did not recover: {sorted(self.controller.isr)}")
        if leader.high_watermark != len(leader.log):
            raise Violation(f"liveness: leader HW {leader.high_watermark} behind its log end {len(leader.log)}")
        for replica in self.replicas.values():
            self._check_holds_acked(replica, max(self.acked, default=-1) + 1)

    def summary(self) -> str:
        return (
            f"seed {self.seed}: produced {self.produced}, acked {len(self.acked)}, rejected {self.rejected}, "
            f"crashes {self.crashes}, leader epoch {self.controller.leader_epoch}, "
            f"log ends {[len(r.log) for r in self.replicas.values()]}"
        )
