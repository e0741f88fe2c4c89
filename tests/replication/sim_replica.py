"""One simulated replica: the driver of the pure cores over an in-memory log (see ``tests/replication/sim.py``).

Durability as on a broker (``replication/unified_log.py``): the epoch cache is saved (``durable_cache``)
whenever it changes, before the entries that start a new epoch are appended (EC4, ``EPOCH_SAVE_FIRST``);
``flushed`` is the log's durable prefix. A kill keeps the whole log, a power loss only the flushed prefix;
recovery cuts the saved cache to the log (EC3) and reads the epochs of the entries from the flushed point
on (EC5, ``RECOVER_EPOCHS``). A follower truncates where the leader's epochs say, below its high watermark
too (TR7, ``TRUNCATE_BELOW_HW``). The three switches exist so that the tests can show the simulation
catches the old behaviour.

Not thread-safe: the simulation's one thread drives it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from common.clock import ManualClock
from replication.epoch_cache import EpochEndOffset, LeaderEpochCache
from replication.high_watermark import HighWatermark
from replication.isr import IsrState, may_join, out_of_sync
from replication.truncation import decide, leader_answer
from tests.replication.sim import (
    CONTROLLER,
    FETCH_MAX_ENTRIES,
    LAG_MAX_MS,
    MIN_ISR,
    NO_LEADER,
    PRODUCE_TIMEOUT_MS,
    REPLICAS,
    REQUEST_RETRY_MS,
    AlterResp,
    Body,
    Entry,
    EpochReq,
    EpochResp,
    FetchReq,
    FetchResp,
    Metadata,
    Violation,
)

Send = Callable[[int, Body], None]
EPOCH_SAVE_FIRST = True  # EC4
RECOVER_EPOCHS = True  # EC5
TRUNCATE_BELOW_HW = True  # TR7


class CrashNow(Exception):  # noqa: N818 (not an error: the replica dies at this point)
    """Raised inside an append that was told to crash between its two durable steps."""


@dataclass(slots=True)
class PendingProduce:
    offset: int
    value: int
    leader_epoch: int
    deadline_ms: float


class SimReplica:
    """A broker's replica of the partition: leader or follower by the metadata it receives."""

    def __init__(self, broker_id: int, clock: ManualClock, send: Send, min_isr: int = MIN_ISR) -> None:
        self.id = broker_id
        self.min_isr = min_isr  # HW8 (0: eligible leader replicas off)
        self._clock = clock
        self._send = send
        self.alive = True
        self.log: list[Entry] = []
        self.flushed = 0
        self.cache = LeaderEpochCache()
        self.durable_cache = LeaderEpochCache()
        self.high_watermark = 0
        self.hw_checkpoint = 0
        self.acked: dict[int, Entry] = {}  # filled by produce completions, read by the simulation
        self.registered_at = (-1, -1)  # (leader epoch, partition epoch) when this life registered
        self.broker_epoch = 0
        self.crash_in_next_epoch_append = False  # the fault "crash between append and epoch checkpoint"
        self.truncated_below_hw = 0  # TR7 truncations seen (lossy episodes only)
        self._reset_volatile()

    def _reset_volatile(self) -> None:
        self.role = "none"
        self.leader_id = NO_LEADER
        self.leader_epoch = -1
        self.partition_epoch = -1
        self.hw_state: HighWatermark | None = None
        self.isr_state: IsrState | None = None
        self.leader_since_ms = 0.0
        self.epoch_start_offset = 0
        self.alter_sent_ms = 0.0
        self.produces: list[PendingProduce] = []
        self.phase = "idle"  # follower: "truncating", "fetching"
        self.asked_epoch = -1
        self.request_sent_ms = -1e18

    # ------------------------------------------------------------------------------------ faults

    def flush(self) -> None:
        self.flushed = len(self.log)
        self.hw_checkpoint = self.high_watermark

    def _save_cache(self) -> None:
        self.durable_cache = LeaderEpochCache(list(self.cache.entries))

    def crash(self, *, power: bool) -> int:
        """Die: a power loss loses the unflushed log, a kill keeps it. The cache comes back from its file, cut
        to the log (EC3) and completed from the entries recovery re-read (EC5); the high watermark from its
        checkpoint, capped (HW3). Returns how many entries were lost."""
        self.alive = False
        lost = len(self.log) - self.flushed if power else 0
        del self.log[len(self.log) - lost :]
        self.cache = LeaderEpochCache(list(self.durable_cache.entries))
        self.cache.truncate_from_end(len(self.log))
        if RECOVER_EPOCHS:
            for offset in range(min(self.flushed, len(self.log)), len(self.log)):
                if self.log[offset].epoch > self.cache.latest_epoch:
                    self.cache.assign(self.log[offset].epoch, offset)
        self._save_cache()
        self.flushed = len(self.log)  # recovery scanned it: what is there now is what the disk has
        self.high_watermark = min(self.hw_checkpoint, len(self.log))
        self._reset_volatile()
        return lost

    def epochs_cover_log(self) -> bool:
        """Every epoch the log holds is in the cache, starting at or before its first entry (EC1-EC5)."""
        seen: dict[int, int] = {}
        for offset, entry in enumerate(self.log):
            seen.setdefault(entry.epoch, offset)
        for epoch, first in seen.items():
            found = self.cache.end_offset_for(epoch, len(self.log))
            start = next((e.start_offset for e in self.cache.entries if e.leader_epoch == epoch), None)
            if found.leader_epoch != epoch or start is None or start > first:
                return False
        return True

    def restart(self, broker_epoch: int, registered_at: tuple[int, int]) -> None:
        """Back, registered when the partition was at ``registered_at``: older metadata (still in flight, or
        replayed from the metadata log) describes the previous life and is not acted on (KRaft brokers stay
        fenced until their metadata has caught up with their registration)."""
        self.alive = True
        self.broker_epoch = broker_epoch
        self.registered_at = registered_at

    # ---------------------------------------------------------------------------------- metadata

    def on_metadata(self, md: Metadata) -> None:
        if (md.leader_epoch, md.partition_epoch) <= (self.leader_epoch, self.partition_epoch):
            return
        if (md.leader_epoch, md.partition_epoch) < self.registered_at:
            return
        new_epoch = md.leader_epoch != self.leader_epoch
        if md.leader == self.id:
            if new_epoch or self.role != "leader":
                self._become_leader(md)
            else:
                self._update_isr(md)
        elif new_epoch or self.role != "follower":
            self._become_follower(md)
        self.partition_epoch = md.partition_epoch

    def _become_leader(self, md: Metadata) -> None:
        self._fail_produces()
        self.role, self.leader_id, self.leader_epoch = "leader", self.id, md.leader_epoch
        if self.cache.assign(md.leader_epoch, len(self.log)):
            self._save_cache()  # before the epoch's first entry (EC4)
        self.epoch_start_offset = len(self.log)
        self.hw_state = HighWatermark.start(
            self.id, REPLICAS, md.isr, self.high_watermark, len(self.log), min_isr=self.min_isr
        )
        self.isr_state = IsrState(self.id, md.leader_epoch, md.partition_epoch, frozenset(md.isr))
        self.leader_since_ms = self._clock.monotonic_ms()
        self._sync_high_watermark()

    def _update_isr(self, md: Metadata) -> None:
        assert self.isr_state is not None
        assert self.hw_state is not None
        self.isr_state.on_metadata(md.isr, md.partition_epoch)
        self.hw_state.update_isr(self.isr_state.maximal_isr, REPLICAS)
        self._sync_high_watermark()

    def _become_follower(self, md: Metadata) -> None:
        self._fail_produces()
        self.role, self.leader_id, self.leader_epoch = "follower", md.leader, md.leader_epoch
        self.hw_state = self.isr_state = None
        self.phase = "idle" if md.leader == NO_LEADER else "truncating"
        self.asked_epoch = self.cache.latest_epoch
        self.request_sent_ms = -1e18

    # ------------------------------------------------------------------------------------ leader

    def produce(self, value: int) -> str:
        """acks=all: append, to be acknowledged once the high watermark passes it (or fail)."""
        if self.role != "leader" or self.isr_state is None or self.hw_state is None:
            return "NOT_LEADER_OR_FOLLOWER"
        if len(self.isr_state.isr) < MIN_ISR:
            return "NOT_ENOUGH_REPLICAS"
        offset = len(self.log)
        self.log.append(Entry(self.leader_epoch, value))
        self.produces.append(
            PendingProduce(offset, value, self.leader_epoch, self._clock.monotonic_ms() + PRODUCE_TIMEOUT_MS)
        )
        self.hw_state.on_leader_append(len(self.log))
        self._sync_high_watermark()
        return ""

    def _sync_high_watermark(self) -> None:
        if self.hw_state is None:
            return
        moved_to = max(self.high_watermark, self.hw_state.high_watermark)
        if moved_to < self.high_watermark:
            raise Violation(f"replica {self.id}: high watermark went back {self.high_watermark} -> {moved_to}")
        self.high_watermark = moved_to
        self._complete_produces()

    def _complete_produces(self) -> None:
        assert self.isr_state is not None
        now, waiting = self._clock.monotonic_ms(), []
        for p in self.produces:
            if self.high_watermark > p.offset and len(self.isr_state.isr) >= MIN_ISR:
                self.acked[p.offset] = Entry(p.leader_epoch, p.value)
            elif self.high_watermark <= p.offset and now < p.deadline_ms:
                waiting.append(p)  # else NOT_ENOUGH_REPLICAS_AFTER_APPEND or REQUEST_TIMED_OUT
        self.produces = waiting

    def _fail_produces(self) -> None:
        self.produces = []  # NOT_LEADER_OR_FOLLOWER: the producer retries on the new leader

    def on_fetch(self, src: int, req: FetchReq) -> None:
        error = self._leader_error(req.leader_epoch)
        if error or self.hw_state is None:
            self._send(src, FetchResp(req.leader_epoch, req.fetch_offset, (), 0, error or "NOT_LEADER"))
            return
        if req.fetch_offset > len(self.log):
            raise Violation(f"leader {self.id}: follower {src} fetches at {req.fetch_offset} > {len(self.log)}")
        self.hw_state.on_follower_fetch(src, req.fetch_offset, self._clock.monotonic_ms(), req.broker_epoch)
        self._sync_high_watermark()
        entries = tuple(self.log[req.fetch_offset : req.fetch_offset + FETCH_MAX_ENTRIES])
        self._send(src, FetchResp(self.leader_epoch, req.fetch_offset, entries, self.high_watermark))

    def on_epoch_request(self, src: int, req: EpochReq) -> None:
        error = self._leader_error(req.leader_epoch)
        answer = EpochEndOffset(-1, -1) if error else leader_answer(self.cache, req.asked_epoch, len(self.log))
        self._send(src, EpochResp(req.leader_epoch, req.asked_epoch, answer, error))

    def _leader_error(self, leader_epoch: int) -> str:
        if leader_epoch < self.leader_epoch:
            return "FENCED_LEADER_EPOCH"
        if leader_epoch > self.leader_epoch:
            return "UNKNOWN_LEADER_EPOCH"
        return "" if self.role == "leader" else "NOT_LEADER_OR_FOLLOWER"

    def on_alter_response(self, resp: AlterResp) -> None:
        if self.isr_state is None or self.hw_state is None:
            return
        settled = resp.error == "INELIGIBLE_REPLICA"  # ISR6: a stale view leaves the change pending
        self.isr_state.on_response(resp.request, resp.accepted, resp.isr, resp.partition_epoch, settled=settled)
        self.hw_state.update_isr(self.isr_state.maximal_isr, REPLICAS)
        self._sync_high_watermark()

    def _leader_tick(self) -> None:
        isr, hw = self.isr_state, self.hw_state
        assert isr is not None
        assert hw is not None
        now = self._clock.monotonic_ms()
        lagging = out_of_sync(isr.isr, self.id, hw.followers, len(self.log), now, LAG_MAX_MS, self.leader_since_ms)
        request = isr.propose_shrink(lagging)
        for replica_id, progress in hw.followers.items():
            if request is None and may_join(progress, self.high_watermark, self.epoch_start_offset):
                request = isr.propose_expand(replica_id, progress.broker_epoch)
        if request is None and isr.pending is not None and now - self.alter_sent_ms > REQUEST_RETRY_MS:
            request = isr.pending  # lost on the way, or its answer was: ask again
        if request is not None:
            self.alter_sent_ms = now
            self._send(CONTROLLER, request)
            hw.update_isr(isr.maximal_isr, REPLICAS)
            self._sync_high_watermark()
        self._complete_produces()

    # ---------------------------------------------------------------------------------- follower

    def _follower_tick(self) -> None:
        now = self._clock.monotonic_ms()
        if self.phase == "idle" or now - self.request_sent_ms < REQUEST_RETRY_MS:
            return
        self.request_sent_ms = now
        if self.phase == "truncating":
            self._send(self.leader_id, EpochReq(self.id, self.leader_epoch, self.asked_epoch))
        else:
            self._send(self.leader_id, FetchReq(self.id, self.broker_epoch, self.leader_epoch, len(self.log)))

    def on_epoch_response(self, resp: EpochResp) -> None:
        if self.phase != "truncating" or resp.leader_epoch != self.leader_epoch or resp.error:
            return
        if resp.asked_epoch != self.asked_epoch:
            return
        decision = decide(self.cache, self.asked_epoch, resp.answer, 0, len(self.log))
        self._truncate(decision.truncate_to)
        if decision.ask_epoch is None:
            self.phase = "fetching"
        else:
            self.asked_epoch = decision.ask_epoch
        self.request_sent_ms = -1e18

    def _truncate(self, offset: int) -> None:
        if offset < self.high_watermark:
            if not TRUNCATE_BELOW_HW:
                offset = self.high_watermark  # the old rule: capped at the high watermark
            else:
                self.truncated_below_hw += 1  # TR7: the leader's log is the truth (the simulation judges it)
        del self.log[offset:]
        self.flushed = min(self.flushed, offset)
        self.high_watermark = min(self.high_watermark, len(self.log))
        self.hw_checkpoint = min(self.hw_checkpoint, len(self.log))
        if self.cache.truncate_from_end(len(self.log)):
            self._save_cache()

    def on_fetch_response(self, resp: FetchResp) -> None:
        if self.phase != "fetching" or resp.leader_epoch != self.leader_epoch or resp.error:
            return
        if resp.fetch_offset != len(self.log):
            return  # an answer to an older request
        for entry in resp.entries:
            if entry.epoch <= self.cache.latest_epoch:
                self.log.append(entry)
                continue
            self.cache.assign(entry.epoch, len(self.log))  # a new epoch starts here: EC4
            if EPOCH_SAVE_FIRST:
                self._save_cache()
                self._crash_point()
                self.log.append(entry)
            else:
                self.log.append(entry)
                self._crash_point()
                self._save_cache()
        self.high_watermark = max(self.high_watermark, min(resp.high_watermark, len(self.log)))
        self.request_sent_ms = -1e18 if resp.entries else self.request_sent_ms

    def _crash_point(self) -> None:
        """Between the two durable steps of a new epoch's first append (checkpoint, entry)."""
        if self.crash_in_next_epoch_append:
            self.crash_in_next_epoch_append = False
            raise CrashNow

    # -------------------------------------------------------------------------------------- tick

    def tick(self) -> None:
        if self.role == "leader":
            self._leader_tick()
        elif self.role == "follower":
            self._follower_tick()
