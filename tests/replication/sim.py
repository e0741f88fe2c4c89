"""A seeded simulation of one partition's three replicas and the controller's decisions (STYLE.md §9).

The replicas run the pure cores of ``replication`` -- :class:`HighWatermark` (HW1-HW6), :class:`IsrState` and
the ISR rules (ISR1-ISR6), :class:`LeaderEpochCache` (EC1-EC3) and the truncation decision (TR1-TR6) -- over
in-memory logs, a :class:`ManualClock` and a fake network that drops, delays and cuts messages. A log is a
list of :class:`Entry` (offset = index); a crash keeps only the flushed prefix, the flushed epoch cache and
the checkpointed high watermark.

The controller is a model of the active controller's decisions (``controller/core``): it fences a broker
whose heartbeats stop for ``SESSION_MS`` or that registers again after a crash (KRaft's new incarnation),
removes fenced brokers from the ISR (never the last member), elects the first unfenced ISR member, bumps
the leader epoch on every leader change, and applies AlterPartition by rules A3-A7.

Fault model: messages are dropped, delayed and reordered; links are cut and healed; replicas crash, losing
what they did not flush, and come back as a new life (a new broker epoch, fenced, acting on no metadata
older than their registration). One failure at a time, what replication.factor=3 with
min.insync.replicas=2 is sized for: a crash is injected only while every other replica is alive, unfenced
and in the ISR, and no link to the controller is cut until the crashed replica is back in the ISR. (With a
second failure -- another replica fenced while the crashed one is the last ISR member -- the controller,
like Kafka's before KIP-966, elects the broker that lost unflushed data; the sim found that case.)

Not thread-safe: one test thread drives everything.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field

from log.clock import ManualClock
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

    def __init__(self, now_ms: float) -> None:
        self.leader = REPLICAS[0]
        self.leader_epoch = 0
        self.partition_epoch = 0
        self.isr = frozenset(REPLICAS)
        self.fenced: set[int] = set()
        self.broker_epochs = dict.fromkeys(REPLICAS, 0)  # bumped by every registration of a new life
        self.last_heartbeat_ms = dict.fromkeys(REPLICAS, now_ms)
        self.leaders: dict[int, int] = {0: self.leader}  # leader epoch -> leader

    def metadata(self) -> Metadata:
        return Metadata(self.leader, self.leader_epoch, self.partition_epoch, tuple(sorted(self.isr)))

    def on_heartbeat(self, broker_id: int, now_ms: float) -> None:
        self.last_heartbeat_ms[broker_id] = now_ms
        if broker_id in self.fenced:
            self.fenced.discard(broker_id)
            if self.leader == NO_LEADER:
                self._elect()

    def tick(self, now_ms: float) -> None:
        for broker_id in REPLICAS:
            if broker_id not in self.fenced and now_ms - self.last_heartbeat_ms[broker_id] > SESSION_MS:
                self.fence(broker_id)

    def register(self, broker_id: int) -> int:
        """A new life registers: a new broker epoch, fenced until it heartbeats (R3)."""
        self.broker_epochs[broker_id] += 1
        self.fence(broker_id)
        return self.broker_epochs[broker_id]

    def fence(self, broker_id: int) -> None:
        """Fenced: out of the ISR unless it is the last member, and no longer leader."""
        self.fenced.add(broker_id)
        if broker_id in self.isr and len(self.isr) > 1:
            self.isr -= {broker_id}
            self.partition_epoch += 1
        if self.leader == broker_id:
            self._elect()

    def _elect(self) -> None:
        eligible = sorted(self.isr - self.fenced)
        self.leader = eligible[0] if eligible else NO_LEADER
        self.leader_epoch += 1
        self.partition_epoch += 1
        self.leaders[self.leader_epoch] = self.leader

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
            self.isr = frozenset(request.new_isr)
            self.partition_epoch += 1
        return AlterResp(request, True, tuple(sorted(self.isr)), self.partition_epoch)

    def _refuse(self, request: AlterPartitionRequest, error: str) -> AlterResp:
        return AlterResp(request, False, tuple(sorted(self.isr)), self.partition_epoch, error)
