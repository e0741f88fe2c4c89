"""The sequence rules of log/producer_state.py (S2-S7) against a model, as a hypothesis state machine.

Several producers (honest ones that retry, and forged batches with any epoch and sequence) append to one
partition. The model keeps each producer's whole history; the state under test keeps five batches. After
every step:

* the verdict (append, duplicate with its original offsets, or the Kafka error) is the model's;
* safety: per producer and epoch, the written batches' sequences are contiguous from 0 with no repeat
  (exactly one copy, in order), whatever the forged batches did;
* replaying the written log from scratch (a follower, a restart) gives the state the leader has.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from log.errors import LogError
from log.producer_state import MAX_BATCHES_PER_PRODUCER, SEQUENCE_MOD, ProducerStateManager
from log.record import build_batch, parse_header
from log.record.header import BatchHeader

PIDS = (1, 2, 3)
START_MS = 1_700_000_000_000


@dataclass
class ModelProducer:
    epoch: int
    batches: list[tuple[int, int, int, int]] = field(default_factory=list)  # first/last seq, first/last offset
    runs: list[tuple[int, int, int, int]] = field(default_factory=list)  # the same, merged (S5)

    def add(self, first_seq: int, last_seq: int, first_offset: int, last_offset: int) -> None:
        self.batches.append((first_seq, last_seq, first_offset, last_offset))
        if self.runs:
            run = self.runs[-1]
            if first_seq == run[1] + 1 and first_offset == run[3] + 1 and first_seq <= last_seq:
                self.runs[-1] = (run[0], last_seq, run[2], last_offset)
                return
        self.runs.append((first_seq, last_seq, first_offset, last_offset))


def make_header(pid: int, epoch: int, seq: int, count: int) -> BatchHeader:
    data = build_batch([b"r"] * count, timestamp_ms=START_MS, producer_id=pid, producer_epoch=epoch, base_sequence=seq)
    return parse_header(data)


class SequenceMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.state = ProducerStateManager()
        self.model: dict[int, ModelProducer] = {}
        self.log: list[BatchHeader] = []  # written batches with their base offsets
        self.end = 0

    # ------------------------------------------------------------------------------------ model

    def expected(self, h: BatchHeader) -> tuple[str, tuple[int, int] | None]:
        """The model's verdict: ("append" | "duplicate" | an error code, the duplicate's offsets)."""
        p = self.model.get(h.producer_id)
        last_seq = (h.base_sequence + h.last_offset_delta) % SEQUENCE_MOD
        if p is None:
            return ("append", None) if h.base_sequence == 0 else ("UNKNOWN_PRODUCER_ID", None)
        if h.producer_epoch < p.epoch:
            return "INVALID_PRODUCER_EPOCH", None
        if h.producer_epoch > p.epoch:
            return ("append", None) if h.base_sequence == 0 else ("OUT_OF_ORDER_SEQUENCE_NUMBER", None)
        for first, last, first_offset, _ in p.runs[-MAX_BATCHES_PER_PRODUCER:]:
            if first <= h.base_sequence <= last_seq <= last:
                start = first_offset + h.base_sequence - first
                return "duplicate", (start, start + last_seq - h.base_sequence)
        following = (p.batches[-1][1] + 1) % SEQUENCE_MOD if p.batches else 0
        return ("append", None) if h.base_sequence == following else ("OUT_OF_ORDER_SEQUENCE_NUMBER", None)

    def offer(self, h: BatchHeader) -> None:
        verdict, offsets = self.expected(h)
        refused: str | None = None
        try:
            check = self.state.check_append([h])
        except LogError as e:
            refused = e.code
        if refused is not None:
            assert refused == verdict, (refused, verdict)
            return
        if check.duplicate is not None:
            assert verdict == "duplicate"
            assert (check.duplicate.first_offset, check.duplicate.last_offset) == offsets
            return
        assert verdict == "append", verdict
        first = self.end
        self.state.update(h, first)
        self.end = first + h.last_offset_delta + 1
        self.state.map_end_offset = self.end
        self.log.append(_at(h, first))
        p = self.model.get(h.producer_id)
        if p is None or h.producer_epoch > p.epoch:
            p = self.model[h.producer_id] = ModelProducer(h.producer_epoch)
        p.add(h.base_sequence, (h.base_sequence + h.last_offset_delta) % SEQUENCE_MOD, first, self.end - 1)

    # ------------------------------------------------------------------------------------ rules

    @rule(pid=st.sampled_from(PIDS), count=st.integers(1, 4))
    def honest_next_batch(self, pid: int, count: int) -> None:
        p = self.model.get(pid)
        epoch = p.epoch if p else 0
        seq = (p.batches[-1][1] + 1) % SEQUENCE_MOD if p and p.batches else 0
        self.offer(make_header(pid, epoch, seq, count))

    @rule(pid=st.sampled_from(PIDS), back=st.integers(1, 7))
    def retry_an_old_batch(self, pid: int, back: int) -> None:
        p = self.model.get(pid)
        if p is None or not p.batches:
            return
        first, last, _, _ = p.batches[-min(back, len(p.batches))]
        self.offer(make_header(pid, p.epoch, first, (last - first) % SEQUENCE_MOD + 1))

    @rule(pid=st.sampled_from(PIDS))
    def bump_epoch(self, pid: int) -> None:
        p = self.model.get(pid)
        self.offer(make_header(pid, (p.epoch + 1) if p else 0, 0, 1))

    @rule(
        pid=st.sampled_from(PIDS),
        epoch_delta=st.integers(-2, 2),
        seq=st.integers(0, 12) | st.just(SEQUENCE_MOD - 1),
        count=st.integers(1, 3),
    )
    def forged_batch(self, pid: int, epoch_delta: int, seq: int, count: int) -> None:
        p = self.model.get(pid)
        epoch = max(0, (p.epoch if p else 0) + epoch_delta)
        self.offer(make_header(pid, epoch, seq, count))

    # ------------------------------------------------------------------------------- invariants

    @invariant()
    def exactly_one_copy_in_order(self) -> None:
        runs: dict[tuple[int, int], int] = {}
        for h in self.log:
            key = (h.producer_id, h.producer_epoch)
            expected = runs.get(key, 0)
            assert h.base_sequence == expected, f"{key}: sequence {h.base_sequence} written, expected {expected}"
            runs[key] = (h.base_sequence + h.last_offset_delta + 1) % SEQUENCE_MOD

    @invariant()
    def a_replay_of_the_log_gives_the_same_state(self) -> None:
        replayed = ProducerStateManager()
        for h in self.log:
            replayed.update(h, h.base_offset)
        assert replayed.entries == self.state.entries
        assert all(len(e.batches) <= MAX_BATCHES_PER_PRODUCER for e in self.state)


def _at(h: BatchHeader, base_offset: int) -> BatchHeader:
    return replace(h, base_offset=base_offset)


SequenceMachine.TestCase.settings = settings(
    max_examples=150,
    derandomize=True,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_sequence_rules_match_the_model = SequenceMachine.TestCase
