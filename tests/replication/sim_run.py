"""The simulation's driver: episodes, their fault scenarios, and the invariants checked after every step.

Invariants after every step (the first broken one raises :class:`Violation`):

* S1. A replica's high watermark never goes back within one life (a crash may only lose the unflushed part
  of it, capped at the recovered log end, HW3), and no replica truncates below it.
* S2. No acknowledged record is lost: the replica the controller names leader, once it acts as leader in
  that epoch, holds every acknowledged record at its offset; an acknowledged record is what S3 recorded
  at its offset, so every replica whose high watermark covers it holds it too.
* S3. Replicas agree below the high watermark: what any replica ever held below its high watermark is the
  same record at the same offset everywhere.
* S4. At most one leader accepts writes per leader epoch, and it is the one the controller elected.
* S5. After a restart, the leader-epoch cache covers every epoch the recovered log holds (EC3-EC5).

S1-S3 hold while every leader came from the ISR or the ELR. An election from outside them (an unclean one,
or the last known leader after every replica failed, E7) may lose records: from then until the end of the
episode S1-S3 are not checked; TR7 lets the followers truncate below their high watermark.

After every episode the faults stop, the network heals and dead replicas restart. Then (liveness and
convergence) the ISR must be all three replicas, the leader's high watermark its log end, every replica's
log equal to the leader's (entry for entry, up to the high watermark, which is the log end by then), every
cache must cover its log, and, unless the episode had an election from outside the ISR and the ELR, every
acknowledged record must be in the leader's log at its offset. After a lossy episode the records no
replica has any more are counted (``lost``) and the leader's log becomes the truth S2 and S3 check from.

Scenarios (one per episode, chosen by the seed):

* ``random``: drops, delays, cuts, and one crash at a time (a kill or a power loss).
* ``two-in-a-row``: a follower is cut off until fenced (the ISR falls below min.insync.replicas: it joins
  the ELR), then the last ISR member loses power, losing its unflushed tail. The ELR member must lead
  (E6); nothing acknowledged may be lost.
* ``lost-tail``: one replica loses power with unflushed records.
* ``mid-append-crash``: a follower dies between the epoch checkpoint and the first entry of a new epoch
  (after a leader change); S5 when it comes back.
* ``unclean`` (seeds with ``unclean.leader.election.enable``): a follower is cut from the leader until it
  leaves the ISR, then the other two lose power; the out-of-sync follower is elected uncleanly and the
  others, back, truncate to its log below their high watermarks (TR7).

Not thread-safe: one test thread drives everything.
"""

from __future__ import annotations

import random

from common.clock import ManualClock
from replication.isr import AlterPartitionRequest
from tests.replication.sim import (
    CONTROLLER,
    MIN_ISR,
    NO_LEADER,
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
from tests.replication.sim_replica import CrashNow, Send, SimReplica

STEP_MS_MAX = 15.0
SCENARIOS = ("random", "two-in-a-row", "lost-tail", "mid-append-crash")


class Simulation:
    """Three replicas, a controller and a network, all driven by one seeded ``random.Random``."""

    def __init__(self, seed: int, *, elr: bool = True, unclean: bool | None = None) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.clock = ManualClock()
        self.net = Network(self.rng, self.clock)
        self.unclean = seed % 4 == 3 if unclean is None else unclean
        self.controller = SimController(self.clock.monotonic_ms(), unclean=self.unclean, elr=elr)
        min_isr = MIN_ISR if elr else 0
        self.replicas = {b: SimReplica(b, self.clock, self._sender(b), min_isr) for b in REPLICAS}
        self.acked: dict[int, Entry] = {}
        self.committed: dict[int, Entry] = {}
        self.writers: dict[int, int] = {}  # leader epoch -> the broker that appended in it
        self.recovering: set[int] = set()  # crashed, not yet back in the ISR
        self.new_acks: list[int] = []
        self.checked_leader = (-1, -1)  # (broker, leader epoch) whose log was last checked whole (S2)
        self.checked_to = dict.fromkeys(REPLICAS, 0)
        self.last_hw = dict.fromkeys(REPLICAS, 0)
        self.next_value = 0
        self.produced = self.rejected = self.crashes = self.lost = 0
        self.scenario = ""
        self.faults = True
        self.lossy = False  # this episode elected from outside the ISR and the ELR
        self.completed: dict[str, int] = {}  # scenario -> episodes in which its faults all happened
        self._script_state: dict[str, int] = {}
        self._lossy_before = 0

    def _sender(self, src: int) -> Send:
        def send(dst: int, body: Body) -> None:
            self.net.send(src, dst, body)

        return send

    # ---------------------------------------------------------------------------------------- run

    def run(self, episodes: int, steps: int, settle_steps: int) -> None:
        scenarios = [*SCENARIOS, "unclean"] if self.unclean else list(SCENARIOS)
        for _ in range(episodes):
            self.episode(self.rng.choice(scenarios), steps, settle_steps)

    def episode(self, scenario: str, steps: int, settle_steps: int) -> None:
        self.scenario, self.faults, self._script_state = scenario, True, {}
        self._lossy_before = len(self.controller.lossy_epochs)
        self.net.drop_rate = 0.05
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
        self.lossy = False
        for replica in self.replicas.values():
            replica.crash_in_next_epoch_append = False

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
        self.lossy = len(self.controller.lossy_epochs) > self._lossy_before
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
        try:
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
        except CrashNow:
            self._crash(replica, power=False)
            self._done("mid-append-crash")

    # ------------------------------------------------------------------------------------- faults

    def _inject_faults(self) -> None:
        self.recovering = {b for b in self.recovering if not (self.replicas[b].alive and b in self.controller.isr)}
        script = getattr(self, "_script_" + self.scenario.replace("-", "_"), None)
        if script is not None and script():
            return  # the scenario acted this step
        roll = self.rng.random()
        if roll < 0.03 and self.scenario in ("random", "lost-tail"):
            self._crash_one(power=self.scenario == "lost-tail" or self.rng.random() < 0.5)
        elif roll < 0.06:
            dead = [r for r in self.replicas.values() if not r.alive]
            if dead and self.scenario in ("random", "lost-tail"):
                self._restart(self.rng.choice(dead))
        elif roll < 0.08 and self.scenario == "random":
            a, b = self.rng.sample((CONTROLLER, *REPLICAS), 2)
            if CONTROLLER not in (a, b) or not self.recovering:
                self.net.cut.add(frozenset((a, b)))
        elif roll < 0.10 and self.scenario == "random":
            self.net.cut.clear()

    def _phase(self) -> int:
        return self._script_state.get("phase", 0)

    def _next_phase(self, **values: int) -> bool:
        self._script_state.update(values, phase=self._phase() + 1)
        return True

    def _leader(self) -> SimReplica | None:
        leader = self.replicas.get(self.controller.leader)
        return leader if leader is not None and leader.alive and leader.role == "leader" else None

    def _script_two_in_a_row(self) -> bool:
        phase, c = self._phase(), self.controller
        if phase == 0 and self.clock.monotonic_ms() > 50 and c.isr == frozenset(REPLICAS) and self._leader():
            victim = self.rng.choice([b for b in REPLICAS if b != c.leader])
            self._isolate(victim)  # alive, fenced, out of the ISR (still at min.insync.replicas: no ELR)
            return self._next_phase(first=victim)
        if phase == 1 and self._script_state["first"] in c.fenced and len(c.isr) == 2 and self._leader():
            second = next(b for b in c.isr if b != c.leader)
            self._isolate(second)  # the ISR falls below min.insync.replicas: it joins the ELR (ELR1)
            return self._next_phase(second=second)
        if phase == 2 and self._script_state["second"] in c.fenced and len(c.isr) == 1:
            last = self.replicas[next(iter(c.isr))]
            if last.alive:
                self._crash(last, power=True)  # the last ISR member loses its unflushed tail
                self._done("two-in-a-row")
                return self._next_phase()
        return False

    def _isolate(self, broker: int) -> None:
        for other in (CONTROLLER, *REPLICAS):
            if other != broker:
                self.net.cut.add(frozenset((broker, other)))

    def _script_lost_tail(self) -> bool:
        return False  # power losses come from _inject_faults; _crash counts a lost tail as done

    def _script_mid_append_crash(self) -> bool:
        phase, c = self._phase(), self.controller
        if phase == 0 and self.clock.monotonic_ms() > 50 and c.isr == frozenset(REPLICAS) and self._leader():
            for b in REPLICAS:
                self.replicas[b].crash_in_next_epoch_append = b != c.leader  # whichever follows the new leader
            self._crash(self.replicas[c.leader], power=False)  # a leader change: a new epoch reaches them
            return self._next_phase()
        if phase == 1 and self.rng.random() < 0.01:
            dead = [r for r in self.replicas.values() if not r.alive]
            if dead:
                self._restart(self.rng.choice(dead))
        return False

    def _script_unclean(self) -> bool:
        phase, c = self._phase(), self.controller
        if phase == 0 and self.clock.monotonic_ms() > 50 and c.isr == frozenset(REPLICAS) and self._leader():
            lagger = self.rng.choice([b for b in REPLICAS if b != c.leader])
            self.net.cut.add(frozenset((lagger, c.leader)))  # keeps heartbeating: out of the ISR, not fenced
            return self._next_phase(lagger=lagger)
        lagger = self._script_state.get("lagger", -1)
        if phase == 1 and lagger not in c.isr and len(c.isr) == 2:
            for b in c.isr:
                self._crash(self.replicas[b], power=True)
            self.net.cut.clear()
            self._done("unclean")
            return self._next_phase()
        return False

    def _done(self, scenario: str) -> None:
        if scenario == self.scenario and not self._script_state.get("done"):
            self._script_state["done"] = 1
            self.completed[scenario] = self.completed.get(scenario, 0) + 1

    def _crash_one(self, *, power: bool) -> None:
        """One failure at a time: no crash while another replica is dead, fenced, out of the ISR or cut off
        from the controller, and no cut to the controller until it is back."""
        victim = self.replicas[self.rng.choice(REPLICAS)]
        others = [r.id for r in self.replicas.values() if r is not victim]
        ok = all(self.replicas[b].alive and b in self.controller.isr for b in others)
        ok = ok and not self.controller.fenced and not any(CONTROLLER in link for link in self.net.cut)
        if victim.alive and ok and not self.recovering and self._crash(victim, power=power):
            self._done("lost-tail")  # a power loss that lost records (only in the lost-tail episodes: _done)

    def _crash(self, replica: SimReplica, *, power: bool) -> int:
        lost = replica.crash(power=power)
        self.recovering.add(replica.id)
        self.checked_to[replica.id] = min(self.checked_to[replica.id], replica.high_watermark)
        self.last_hw[replica.id] = replica.high_watermark
        self.crashes += 1
        return lost

    def _restart(self, replica: SimReplica) -> None:
        if not replica.epochs_cover_log():
            raise Violation(f"S5: replica {replica.id} restarts with a cache {replica.cache.entries} that misses "
                            f"an epoch of its log")  # fmt: skip
        broker_epoch = self.controller.register(replica.id, clean=False)  # a kill or a power loss is unclean
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
                if self.lossy:
                    self.acked[offset] = entry  # rebased at the end of the episode
                elif self.acked.setdefault(offset, entry) != entry:
                    raise Violation(f"S2: offset {offset} acknowledged as {self.acked[offset]} and as {entry}")
                self.new_acks.append(offset)
            replica.acked.clear()

    # --------------------------------------------------------------------------------- invariants

    def check(self) -> None:
        if self.lossy:
            self.new_acks.clear()
            return  # an election from outside the ISR and the ELR: checked at the end of the episode
        for replica in self.replicas.values():
            if replica.alive:
                self._check_replica(replica)
        for offset in self.new_acks:  # acknowledged below the leader's HW: S3 saw it there, the same
            if self.committed.get(offset) != self.acked[offset]:
                raise Violation(
                    f"S2: acknowledged {self.acked[offset]} at {offset}, committed {self.committed.get(offset)}"
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
        """Liveness and convergence at the end of an episode (module docstring)."""
        where = f"after a {self.scenario!r} episode"
        leader = self._leader()
        if leader is None or self.controller.leader == NO_LEADER:
            raise Violation(f"liveness: no acting leader {where} (controller says {self.controller.leader})")
        if self.controller.isr != frozenset(REPLICAS):
            raise Violation(f"liveness: the ISR did not recover {where}: {sorted(self.controller.isr)}")
        if leader.high_watermark != len(leader.log):
            raise Violation(f"liveness: leader HW {leader.high_watermark} behind its log end {len(leader.log)} {where}")
        for replica in self.replicas.values():
            if replica.log != leader.log:
                pairs = enumerate(zip(replica.log, leader.log, strict=False))
                diverged = next((o for o, (a, b) in pairs if a != b), None)
                raise Violation(f"convergence: replica {replica.id} log (end {len(replica.log)}) differs from the "
                                f"leader's (end {len(leader.log)}) at {diverged} {where}")  # fmt: skip
            if not replica.epochs_cover_log():
                raise Violation(f"S5: replica {replica.id} cache {replica.cache.entries} misses an epoch {where}")
        if not self.lossy:
            self._check_holds_acked(leader, max(self.acked, default=-1) + 1)
            return
        truth = leader.log
        self.lost += sum(1 for o, e in self.acked.items() if o >= len(truth) or truth[o] != e)
        self.acked = {o: e for o, e in self.acked.items() if o < len(truth) and truth[o] == e}
        self.committed = dict(enumerate(truth))
        for replica in self.replicas.values():
            self.checked_to[replica.id] = self.last_hw[replica.id] = replica.high_watermark
        self.checked_leader = (-1, -1)

    def summary(self) -> str:
        return (
            f"seed {self.seed}: produced {self.produced}, acked {len(self.acked)}, rejected {self.rejected}, "
            f"crashes {self.crashes}, lost in unclean episodes {self.lost}, completed {self.completed}, "
            f"leader epoch {self.controller.leader_epoch}, log ends {[len(r.log) for r in self.replicas.values()]}"
        )

