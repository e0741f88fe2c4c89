"""A seeded simulation of one partition's three replicas and the controller's decisions (docs/CONVENTIONS.md §9).

The replicas run the pure cores of ``replication`` -- :class:`HighWatermark` (HW1-HW8), :class:`IsrState` and
the ISR rules (ISR1-ISR6), :class:`LeaderEpochCache` (EC1-EC5) and the truncation decision (TR1-TR7) -- over
in-memory logs, a :class:`ManualClock` and a fake network that drops, delays and cuts messages. A log is a
list of :class:`Entry` (offset = index). Durability is modelled as on a broker: the leader-epoch checkpoint is
written when the cache changes (before the batch that starts an epoch, EC4), the log reaches the disk up to
``flushed``; a *kill* keeps the page cache (the whole log), a *power loss* keeps only the flushed prefix.

The controller decides with the real election rules of ``controller/core/elections.py`` (E1-E7, ELR1-ELR3,
eligible leader replicas on, min.insync.replicas 2) over a one-partition model: it fences a broker whose
heartbeats stop for ``SESSION_MS`` or that registers again (KRaft's new incarnation, with or without a clean
shutdown), bumps the leader epoch on every leader change, and applies AlterPartition by rules A3-A7, A9.

Fault model: messages are dropped, delayed and reordered; links are cut and healed; replicas are killed or
lose power (losing what they did not flush), and come back as a new life (a new broker epoch, fenced, acting
on no metadata older than their registration). The run is a sequence of episodes, each with one scenario of
``tests/replication/sim_run.py`` (random faults, two failures in a row, a lost tail, a crash between an
append and its epoch checkpoint, an unclean election), then healing and a check that the replicas converged.

Not thread-safe: one test thread drives everything.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field

from common.clock import ManualClock
from controller.core.elections import reconcile, with_elr
from metadata.image import PartitionRegistration
from replication.epoch_cache import EpochEndOffset
from replication.isr import AlterPartitionRequest

CONTROLLER = 0
REPLICAS = (1, 2, 3)
MIN_ISR = 2
LAG_MAX_MS = 300.0
SESSION_MS = 400.0
FETCH_MAX_ENTRIES = 5
REQUEST_RETRY_MS = 60.0
PRODUCE_TIMEOUT_MS = 1_000.0
NO_LEADER = -1


class Violation(AssertionError):
    """An invariant broke; the message names it."""


@dataclass(frozen=True, slots=True)
class Entry:
    epoch: int
    value: int


# ----------------------------------------------------------------------------------------- messages


@dataclass(frozen=True, slots=True)
class FetchReq:
    replica_id: int
    broker_epoch: int
    leader_epoch: int
    fetch_offset: int


@dataclass(frozen=True, slots=True)
class FetchResp:
    leader_epoch: int
    fetch_offset: int
    entries: tuple[Entry, ...]
    high_watermark: int
    error: str = ""


@dataclass(frozen=True, slots=True)
class EpochReq:
    replica_id: int
    leader_epoch: int
    asked_epoch: int


@dataclass(frozen=True, slots=True)
class EpochResp:
    leader_epoch: int
    asked_epoch: int
    answer: EpochEndOffset
    error: str = ""


@dataclass(frozen=True, slots=True)
class AlterResp:
    request: AlterPartitionRequest
    accepted: bool
    isr: tuple[int, ...]
    partition_epoch: int
    error: str = ""


@dataclass(frozen=True, slots=True)
class Heartbeat:
    broker_id: int


@dataclass(frozen=True, slots=True)
class Metadata:
    leader: int
    leader_epoch: int
    partition_epoch: int
    isr: tuple[int, ...]


Body = FetchReq | FetchResp | EpochReq | EpochResp | AlterPartitionRequest | AlterResp | Heartbeat | Metadata


@dataclass(order=True, slots=True)
class Message:
    deliver_ms: float
    seq: int
    src: int = field(compare=False)
    dst: int = field(compare=False)
    body: Body = field(compare=False)


class Network:
    """Drops, delays (and so reorders) and cuts messages between nodes."""

    def __init__(self, rng: random.Random, clock: ManualClock) -> None:
        self._rng = rng
        self._clock = clock
        self._queue: list[Message] = []
        self._seq = 0
        self.cut: set[frozenset[int]] = set()
        self.drop_rate = 0.05
        self.max_delay_ms = 30.0

    def send(self, src: int, dst: int, body: Body) -> None:
        if frozenset((src, dst)) in self.cut or self._rng.random() < self.drop_rate:
            return
        self._seq += 1
        delay = self._rng.uniform(0.5, self.max_delay_ms)
        heapq.heappush(self._queue, Message(self._clock.monotonic_ms() + delay, self._seq, src, dst, body))

    def due(self) -> list[Message]:
        now, out = self._clock.monotonic_ms(), []
        while self._queue and self._queue[0].deliver_ms <= now:
            message = heapq.heappop(self._queue)
            if frozenset((message.src, message.dst)) not in self.cut:
                out.append(message)
        return out


# --------------------------------------------------------------------------------------- controller


class SimController:
    """The controller's decisions for one partition (see the module docstring)."""

    def __init__(self, now_ms: float, *, unclean: bool = False, elr: bool = True) -> None:
        self.leader = REPLICAS[0]
        self.leader_epoch = 0
        self.partition_epoch = 0
        self.isr = frozenset(REPLICAS)
        self.elr: tuple[int, ...] = ()
        self.last_known_elr: tuple[int, ...] = ()
        self.fenced: set[int] = set()
        self.broker_epochs = dict.fromkeys(REPLICAS, 0)  # bumped by every registration of a new life
        self.last_heartbeat_ms = dict.fromkeys(REPLICAS, now_ms)
        self.leaders: dict[int, int] = {0: self.leader}  # leader epoch -> leader
        self.unclean = unclean  # unclean.leader.election.enable
        self.min_isr = MIN_ISR if elr else 0  # eligible leader replicas (0: off)
        self.lossy_epochs: set[int] = set()  # epochs whose leader came from outside the ISR and ELR

    def metadata(self) -> Metadata:
        return Metadata(self.leader, self.leader_epoch, self.partition_epoch, tuple(sorted(self.isr)))

    def on_heartbeat(self, broker_id: int, now_ms: float) -> None:
        self.last_heartbeat_ms[broker_id] = now_ms
        if broker_id in self.fenced:
            self.fenced.discard(broker_id)
            if self.leader == NO_LEADER:
                self._reconcile()

    def tick(self, now_ms: float) -> None:
        for broker_id in REPLICAS:
            if broker_id not in self.fenced and now_ms - self.last_heartbeat_ms[broker_id] > SESSION_MS:
                self.fence(broker_id)

    def register(self, broker_id: int, *, clean: bool) -> int:
        """A new life registers: a new broker epoch, fenced until it heartbeats (R3); ``clean`` False: it may
        have lost its unflushed tail and leaves the ELR (ELR2)."""
        self.broker_epochs[broker_id] += 1
        self.fence(broker_id, unclean_shutdown=not clean)
        return self.broker_epochs[broker_id]

    def fence(self, broker_id: int, *, unclean_shutdown: bool = False) -> None:
        """Fenced: out of the ISR (into the ELR below min ISR, ELR1), no longer leader (E1-E7)."""
        self.fenced.add(broker_id)
        if broker_id in self.isr or broker_id == self.leader or (unclean_shutdown and broker_id in self.elr):
            self._reconcile((broker_id,) if unclean_shutdown else ())

    def registration(self) -> PartitionRegistration:
        return PartitionRegistration(REPLICAS, tuple(sorted(self.isr)), self.leader, self.leader_epoch,
                                     self.partition_epoch, self.elr, self.last_known_elr)  # fmt: skip

    def _reconcile(self, unclean_shutdown: tuple[int, ...] = ()) -> None:
        """The real rules (``controller.core.elections.reconcile``) over the fenced set."""
        reg = self.registration()
        target = reconcile(reg, lambda b: b not in self.fenced, unclean=self.unclean,  # type: ignore[arg-type]
                           min_isr=self.min_isr, unclean_shutdown=unclean_shutdown)  # fmt: skip
        changed = (target.leader, target.isr, target.elr, target.last_known_elr) != (
            reg.leader, reg.isr, reg.elr, reg.last_known_elr
        )
        if not changed:
            return
        new_leader = target.leader != self.leader
        safe = target.leader == NO_LEADER or target.leader in reg.isr or target.leader in reg.elr
        self.isr, self.elr, self.last_known_elr = frozenset(target.isr), target.elr, target.last_known_elr
        self.partition_epoch += 1
        if new_leader:
            self.leader = target.leader
            self.leader_epoch += 1
            self.leaders[self.leader_epoch] = self.leader
            if not safe:
                self.lossy_epochs.add(self.leader_epoch)

    def alter_partition(self, request: AlterPartitionRequest) -> AlterResp:
        """Rules A3-A7 of ``controller/core/partitions.py``, and ISR7 (KIP-903)."""
        if request.leader_id != self.leader or request.leader_epoch != self.leader_epoch:
            return self._refuse(request, "FENCED_LEADER_EPOCH")
        if request.partition_epoch != self.partition_epoch:
            return self._refuse(request, "INVALID_UPDATE_VERSION")
        stale = any(self.broker_epochs[b] != epoch for b, epoch in request.joining_broker_epochs)
        if stale or set(request.new_isr) & self.fenced or self.leader not in request.new_isr:
            return self._refuse(request, "INELIGIBLE_REPLICA")
        if frozenset(request.new_isr) != self.isr:
            if self.min_isr:  # A9
                self.elr = with_elr(self.registration(), tuple(sorted(request.new_isr)), self.min_isr)
                self.last_known_elr = ()
            self.isr = frozenset(request.new_isr)
            self.partition_epoch += 1
        return AlterResp(request, True, tuple(sorted(self.isr)), self.partition_epoch)

    def _refuse(self, request: AlterPartitionRequest, error: str) -> AlterResp:
        return AlterResp(request, False, tuple(sorted(self.isr)), self.partition_epoch, error)
