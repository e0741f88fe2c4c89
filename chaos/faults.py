"""Faults: the seeded schedule (pure) and the nemesis that carries it out against a backend.

Fault kinds (``--faults``):

``kill-leader``      kill -9 the leader of a partition, hold, start it again
``kill-follower``    kill -9 a follower (a replica that is not the leader) of a partition, hold, start it again
``kill-controller``  kill -9 the active controller, hold, start it again
``pause``            SIGSTOP the leader of a partition for longer than the broker session timeout, then SIGCONT
``kill-two``         kill -9 two brokers at once (with RF=3 and min.insync.replicas=2, writes must stall), hold
                     as long as ``pause`` (past the session timeout, so that the controller fences them and
                     the ISRs shrink to the survivor: writes then fail with NOT_ENOUGH_REPLICAS), start both
``isolate``          cut the leader of a partition off from the other nodes, both ways, hold, heal (backends
                     with ``Capability.ISOLATE`` only; elsewhere each such episode is recorded as skipped)
``isolate-one-way``  the leader of a partition can send nothing to the other nodes (connections they open to it
                     still work), hold, heal (``Capability.PARTITION``, as the kinds below)
``partition-controllers``  every broker cut off from every controller, both ways, hold, heal
``partition-leader-minority``  the leader of a partition and the active controller on one side, every other
                     node on the other, both ways (the majority elects a new leader and controller), hold, heal
``partition-leader-majority``  a follower of a partition and a controller that is not the active one on one
                     side, every other node (the leader among them) on the other, both ways, hold, heal
``kill-txn-coordinator``  kill -9 the transaction coordinator of the first transactional producer's id
                     (``chaos-txn-0``), hold, start it again; only with transactional producers, so not in
                     ``all`` (``TXN_FAULT_KINDS``)

:func:`plan_schedule` turns ``random.Random(seed)`` into episodes: the kinds in shuffled rounds (every kind
once per round, so a short run still sees each kind), a quiet time before each, a hold time, and the
picks that choose the partition and brokers. Which broker leads that partition is asked of the cluster
(``Admin.describe_topics``) when the episode starts. Episodes run one after the other; after each one the
nemesis waits (bounded) until every broker sees every partition with a leader and its full ISR again, all
of them the same (:meth:`Nemesis.healthy`), so that faults do not pile up and each episode's unavailability
can be measured on its own.
"""

from __future__ import annotations

import itertools
import random
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import partial

import grpc

from chaos.backends import Backend, BackendError, Capability, NodeState
from chaos.history import FAILED, OK, History, Op
from chaos.workload import transactional_id
from odradek import Admin
from odradek.errors import OdradekError
from proto import broker_pb2, broker_pb2_grpc

PARTITION_KINDS = ("isolate-one-way", "partition-controllers", "partition-leader-minority", "partition-leader-majority")
FAULT_KINDS = ("kill-leader", "kill-follower", "kill-controller", "pause", "kill-two", "isolate", *PARTITION_KINDS)
TXN_FAULT_KINDS = ("kill-txn-coordinator",)  # need a transactional producer: named, never in "all"
KNOWN_KINDS = (*FAULT_KINDS, *TXN_FAULT_KINDS)
NEMESIS = "nemesis"


@dataclass(frozen=True, slots=True)
class Timing:
    quiet_s: tuple[float, float] = (4.0, 8.0)  # before each episode
    hold_s: tuple[float, float] = (4.0, 10.0)  # kill and isolate
    pause_s: float = 9.0  # pause and kill-two: longer than broker.session.timeout.ms (set by the runner)
    recover_timeout_s: float = 60.0  # waiting for full ISRs after an episode


@dataclass(frozen=True, slots=True)
class Episode:
    index: int
    kind: str
    quiet_s: float
    hold_s: float
    pick: float  # chooses the partition
    pick2: float  # chooses among brokers (kill-follower, kill-two)


def plan_schedule(rng: random.Random, kinds: Iterable[str], duration_s: float, timing: Timing) -> list[Episode]:
    """Episodes whose quiet and hold times fit in ``duration_s`` (the recovery time is not planned)."""
    kinds = list(kinds)
    unknown = [k for k in kinds if k not in KNOWN_KINDS]
    if unknown or not kinds:
        raise ValueError(f"unknown fault kind {unknown[0]!r}; the kinds are {', '.join(KNOWN_KINDS)}"
                         if unknown else "no fault kind given")  # fmt: skip
    episodes: list[Episode] = []
    elapsed = 0.0
    round_: list[str] = []
    while True:
        if not round_:
            round_ = sorted(set(kinds))
            rng.shuffle(round_)
        kind = round_.pop()
        quiet = rng.uniform(*timing.quiet_s)
        long_hold = kind in ("pause", "kill-two")  # past the session timeout: fenced, and the ISRs shrink
        # (the partition kinds hold like kills: longer than the session timeout already)
        hold = timing.pause_s + rng.uniform(0.0, 2.0) if long_hold else rng.uniform(*timing.hold_s)
        if elapsed + quiet + hold > duration_s:
            return episodes
        episodes.append(Episode(len(episodes), kind, round(quiet, 3), round(hold, 3), rng.random(), rng.random()))
        elapsed += quiet + hold


class Nemesis:
    """Runs episodes against ``backend``, records every action, prints one line per action.

    Thread-safety: one thread (the runner's) drives it.
    """

    def __init__(
        self, backend: Backend, history: History, admin: Admin, topic: str, partitions: int,
        out: Callable[[str], None] = print,
    ) -> None:  # fmt: skip
        self.backend = backend
        self.history = history
        self.admin = admin
        self.topic = topic
        self.partitions = partitions
        self.out = out
        self.skipped: list[str] = []

    # ------------------------------------------------------------------------------------ episodes

    def run(self, episodes: list[Episode], deadline_s: float, timing: Timing, should_stop: Callable[[], bool]) -> None:
        """Run ``episodes`` in order; none starts after ``deadline_s`` (run time) or once ``should_stop()``."""
        for episode in episodes:
            if self._sleep_until(self.history.now() + episode.quiet_s, should_stop):
                return
            if self.history.now() + episode.hold_s > deadline_s:
                return
            self.run_episode(episode, should_stop)
            self.wait_recovered(episode, timing.recover_timeout_s)

    def _sleep_until(self, t: float, should_stop: Callable[[], bool]) -> bool:
        while self.history.now() < t:
            if should_stop():
                return True
            time.sleep(min(0.1, max(0.0, t - self.history.now())))
        return should_stop()

    def run_episode(self, episode: Episode, should_stop: Callable[[], bool]) -> None:
        try:
            targets, undo = self._inject(episode)
        except _Skip as skip:
            self._record(episode, "skip", None, lambda: None, error=str(skip))
            self.skipped.append(f"episode {episode.index} {episode.kind}: {skip}")
            return
        if not targets:
            return
        self._sleep_until(self.history.now() + episode.hold_s, should_stop)
        for node in targets:
            self._record(episode, undo, node, partial(self._undo, undo, node))

    def _inject(self, episode: Episode) -> tuple[list[str], str]:
        kind = episode.kind
        if kind in PARTITION_KINDS:
            return self._partition_fault(episode)
        if kind == "isolate":
            if Capability.ISOLATE not in self.backend.capabilities:
                raise _Skip(f"the {type(self.backend).__name__} cannot isolate nodes; isolate NOT tested")
            node = f"broker-{self._leader(episode)}"
            return self._do_all(episode, "isolate", [node], self.backend.isolate), "heal"
        if kind == "pause":
            node = f"broker-{self._leader(episode)}"
            return self._do_all(episode, "pause", [node], self.backend.pause), "resume"
        if kind == "kill-leader":
            nodes = [f"broker-{self._leader(episode)}"]
        elif kind == "kill-follower":
            nodes = [f"broker-{self._follower(episode)}"]
        elif kind == "kill-controller":
            nodes = [f"controller-{self._active_controller()}"]
        elif kind == "kill-txn-coordinator":
            nodes = [f"broker-{self._txn_coordinator()}"]
        else:  # kill-two
            running = sorted(n.node_id for n in self.backend.nodes() if n.role == "broker"
                             and n.state is NodeState.RUNNING)  # fmt: skip
            if len(running) < 2:
                raise _Skip(f"only {len(running)} broker(s) running")
            first = running.pop(int(episode.pick * len(running)) % len(running))
            second = running[int(episode.pick2 * len(running)) % len(running)]
            nodes = [f"broker-{first}", f"broker-{second}"]
        return self._do_all(episode, "kill", nodes, self.backend.kill), "start"

    def _do_all(self, episode: Episode, action: str, nodes: list[str], do: Callable[[str], None]) -> list[str]:
        done = []
        for node in nodes:
            if self._record(episode, action, node, partial(do, node)):
                done.append(node)
        return done

    def _partition_fault(self, episode: Episode) -> tuple[list[str], str]:
        """The partition kinds (module docstring): one ``partition`` action named ``side|others``."""
        if Capability.PARTITION not in self.backend.capabilities:
            raise _Skip(f"the {type(self.backend).__name__} cannot cut links between nodes; {episode.kind} NOT tested")
        nodes = [n.name for n in self.backend.nodes() if n.state is NodeState.RUNNING]
        controllers = [n for n in nodes if n.startswith("controller-")]
        both_ways = episode.kind != "isolate-one-way"
        if episode.kind == "isolate-one-way":
            side = [f"broker-{self._leader(episode)}"]
        elif episode.kind == "partition-controllers":
            side = [n for n in nodes if n.startswith("broker-")]
        elif episode.kind == "partition-leader-minority":
            side = [f"broker-{self._leader(episode)}", f"controller-{self._active_controller()}"]
        else:  # partition-leader-majority
            active = f"controller-{self._active_controller()}"
            passive = [c for c in controllers if c != active]
            if not passive:
                raise _Skip("no controller besides the active one")
            side = [f"broker-{self._follower(episode)}", passive[int(episode.pick2 * len(passive)) % len(passive)]]
        others = [n for n in nodes if n not in side]
        description = f"{','.join(side)}|{','.join(others)}" + ("" if both_ways else " (one-way)")
        do = partial(self.backend.partition, list(side), others, both_ways=both_ways)
        return (([description], "heal-network") if self._record(episode, "partition", description, do)
                else ([], "heal-network"))  # fmt: skip

    def _undo(self, action: str, node: str) -> None:
        if action == "heal-network":
            self.backend.heal_network()
            return
        {"start": self.backend.start_node, "resume": self.backend.resume, "heal": self.backend.heal}[action](node)

    def _record(self, episode: Episode, action: str, node: str | None, do: Callable[[], None],
                error: str | None = None) -> bool:  # fmt: skip
        t0 = self.history.now()
        outcome = OK
        try:
            do()
        except BackendError as exc:
            outcome, error = FAILED, str(exc)
        op = Op("fault", NEMESIS, self.history.next_seq(NEMESIS), t0, self.history.now(), outcome, action=action,
                node=node, fault=episode.kind, episode=episode.index, error=error)  # fmt: skip
        self.history.record(op)
        where = f" {node}" if node else ""
        status = f" (SKIPPED: {error})" if action == "skip" else "" if outcome == OK else f" (FAILED: {error})"
        self.out(f"[{op.t1:8.2f}s] episode {episode.index} {episode.kind}: {action}{where}{status}")
        return outcome == OK

    # ------------------------------------------------------------------------------------ targets

    def _partition(self, episode: Episode) -> int:
        return int(episode.pick * self.partitions) % self.partitions

    def _describe(self, partition: int) -> tuple[int, list[int]]:
        try:
            description = self.admin.describe_topics([self.topic])[self.topic].partitions[partition]
        except (OdradekError, IndexError) as exc:
            raise _Skip(f"could not describe {self.topic}-{partition}: {exc}") from None
        return description.leader, list(description.replicas)

    def _leader(self, episode: Episode) -> int:
        partition = self._partition(episode)
        leader, _ = self._describe(partition)
        if leader < 0:
            raise _Skip(f"{self.topic}-{partition} has no leader")
        return leader

    def _follower(self, episode: Episode) -> int:
        partition = self._partition(episode)
        leader, replicas = self._describe(partition)
        followers = [r for r in replicas if r != leader]
        if not followers:
            raise _Skip(f"{self.topic}-{partition} has no follower")
        return followers[int(episode.pick2 * len(followers)) % len(followers)]

    def _txn_coordinator(self) -> int:
        txn_id = transactional_id(0)
        try:
            coordinator = self.admin.describe_transactions([txn_id])[txn_id].coordinator_id
        except (OdradekError, KeyError) as exc:
            raise _Skip(f"could not describe transactional id {txn_id}: {exc}") from None
        if coordinator < 0:
            raise _Skip(f"transactional id {txn_id} has no coordinator")
        return coordinator

    def _active_controller(self) -> int:
        try:
            controller_id = self.admin.describe_cluster().controller_id
        except OdradekError as exc:
            raise _Skip(f"could not describe the cluster: {exc}") from None
        if controller_id < 0:
            raise _Skip("no active controller")
        return int(controller_id)

    # ----------------------------------------------------------------------------------- recovery

    def heal_all(self, episode_index: int) -> None:
        """Bring every node back: resume the paused, start the killed (the end of the run)."""
        episode = Episode(episode_index, "heal-all", 0.0, 0.0, 0.0, 0.0)
        if Capability.PARTITION in self.backend.capabilities:
            self._record(episode, "heal-network", None, self.backend.heal_network)
        for node in self.backend.nodes():
            if node.state is NodeState.PAUSED:
                self._record(episode, "resume", node.name, partial(self.backend.resume, node.name))
            elif node.state is NodeState.ISOLATED:
                self._record(episode, "heal", node.name, partial(self.backend.heal, node.name))
            elif node.state is NodeState.KILLED:
                self._record(episode, "start", node.name, partial(self.backend.start_node, node.name))

    def healthy(self) -> str | None:
        """None when every broker, asked on its own address, sees an active controller, no fenced broker, and
        every partition of the topic with a leader and its full ISR, and all of them see the same leaders,
        leader epochs and ISRs; else what is missing (:func:`assess`).

        One broker's answer is not enough: a broker cut off from the controllers answers from the metadata
        image it had before the cut until it catches up after the heal, and that image shows the cluster as it
        was (itself unfenced and leading, full ISRs). As a deposed leader it also still answers ListOffsets
        with its old end offset, so a recovery judged on its word would have the drain stop short of writes
        the new leader acknowledged."""
        brokers = sorted((n for n in self.backend.nodes() if n.role == "broker"), key=lambda n: n.node_id)
        views = {n.name: broker_view(n.address, self.topic) for n in brokers}
        return assess(views, self.topic, self.partitions, [n.node_id for n in brokers])

    def wait_recovered(self, episode: Episode, timeout_s: float) -> bool:
        """Wait until :meth:`healthy`; record a ``recovered`` action (failed when the time runs out)."""
        t0 = self.history.now()
        deadline = time.monotonic() + timeout_s
        missing = self.healthy()
        while missing is not None and time.monotonic() < deadline:
            time.sleep(0.25)
            missing = self.healthy()
        op = Op("fault", NEMESIS, self.history.next_seq(NEMESIS), t0, self.history.now(),
                OK if missing is None else FAILED, action="recovered", fault=episode.kind, episode=episode.index,
                error=None if missing is None else f"not recovered within {timeout_s:.0f} s: {missing}")  # fmt: skip
        self.history.record(op)
        status = "" if missing is None else f" NOT within {timeout_s:.0f} s ({missing})"
        self.out(f"[{op.t1:8.2f}s] episode {episode.index} {episode.kind}: recovered{status}")
        return missing is None


class _Skip(Exception):
    """The episode cannot run now (no such target, or the backend lacks the capability)."""


@dataclass(frozen=True, slots=True)
class PartitionView:
    partition: int
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]  # sorted
    replicas: tuple[int, ...]  # sorted


@dataclass(frozen=True, slots=True)
class BrokerView:
    """What one broker's own metadata image says (its Metadata answer for the topic)."""

    controller_id: int
    unfenced: frozenset[int]
    topic_error: str
    partitions: tuple[PartitionView, ...]
    metadata_offset: int


VIEW_TIMEOUT_S = 5.0


def broker_view(address: str, topic: str, timeout_s: float = VIEW_TIMEOUT_S) -> BrokerView | str:
    """The broker at ``address``'s own view (a Metadata call to it alone), or why there is none."""
    try:
        with grpc.insecure_channel(address) as channel:
            stub = broker_pb2_grpc.BrokerStub(channel)  # type: ignore[no-untyped-call]
            answer = stub.Metadata(broker_pb2.MetadataRequest(topics=[topic]), timeout=timeout_s)
    except grpc.RpcError as exc:
        return f"Metadata: {exc.code().name}"
    found = [t for t in answer.topics if t.name == topic]
    partitions = tuple(sorted(
        (PartitionView(p.partition, p.leader, p.leader_epoch, tuple(sorted(p.isr)), tuple(sorted(p.replicas)))
         for p in (found[0].partitions if found else ())),
        key=lambda p: p.partition,
    ))  # fmt: skip
    return BrokerView(answer.controller_id, frozenset(b.node_id for b in answer.brokers),
                      found[0].error.code if found else "UNKNOWN_TOPIC_OR_PARTITION", partitions,
                      answer.metadata_offset)  # fmt: skip


def assess(views: Mapping[str, BrokerView | str], topic: str, partitions: int, brokers: Iterable[int]) -> str | None:
    """None when every view (broker name -> its view, or why it has none) is healthy on its own (an active
    controller, every broker in ``brokers`` unfenced, ``partitions`` partitions each with a leader and its full
    ISR) and they all agree on each partition's leader, leader epoch and ISR; else the first thing missing."""
    expected = set(brokers)
    for name, view in views.items():
        if isinstance(view, str):
            return f"{name}: {view}"
        fenced = sorted(expected - view.unfenced)
        if view.controller_id < 0 or fenced:
            return f"{name} sees controller {view.controller_id}, fenced brokers {fenced}"
        if view.topic_error or len(view.partitions) != partitions:
            return f"{name} sees {topic} with {len(view.partitions)} partitions {view.topic_error}".rstrip()
        for p in view.partitions:
            if p.leader < 0 or set(p.isr) != set(p.replicas):
                return (f"{name} sees {topic}-{p.partition}: leader {p.leader}, isr {list(p.isr)}, "
                        f"replicas {list(p.replicas)}")  # fmt: skip
    seen = [(name, view) for name, view in views.items() if not isinstance(view, str)]
    for (name, view), (other, other_view) in itertools.pairwise(seen):
        for p, q in zip(view.partitions, other_view.partitions, strict=True):
            if (p.leader, p.leader_epoch, p.isr) != (q.leader, q.leader_epoch, q.isr):
                return (f"{name} sees {topic}-{p.partition} led by {p.leader} in epoch {p.leader_epoch} "
                        f"(metadata offset {view.metadata_offset}), {other} by {q.leader} in epoch "
                        f"{q.leader_epoch} (offset {other_view.metadata_offset})")  # fmt: skip
    return None
