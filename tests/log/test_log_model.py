"""The Log against an in-memory model: random appends, reads, rolls, retention, truncation, restarts.

The model is a list of the batches physically in the log (base offset, bytes as stored) plus the log
start and end offsets. Every read must return exactly the batches the model says, byte for byte:
the batches from the one holding the offset, within one segment, up to max_bytes (at least one when
min_one_batch), stopping before max_offset. Crashes either keep everything (a process crash: the page
cache survives) or tear the unflushed tail of the active segment (a power cut), after which the log
must be the model's batches that were complete before the tear.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from common.clock import ManualClock
from log.config import LogConfig
from log.errors import OffsetOutOfRangeError, RecordTooLargeError
from log.log import Log
from log.record.header import parse_header
from tests.log.conftest import START_MS, make_batch, small_config, split_batches

CONFIGS = [
    small_config(segment_bytes=600, index_interval_bytes=100, retention_ms=5000),
    small_config(segment_bytes=900, index_interval_bytes=0, retention_bytes=700, segment_ms=3000),
    small_config(segment_bytes=400, index_interval_bytes=4096, segment_index_bytes=40, retention_ms=0),
]


@dataclass(frozen=True)
class Stored:
    base_offset: int
    data: bytes

    @property
    def last_offset(self) -> int:
        return parse_header(self.data).last_offset

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def max_timestamp(self) -> int:
        return parse_header(self.data).max_timestamp


def as_stored(batch: bytes, base_offset: int, epoch: int) -> bytes:
    """What the leader must write: the producer's bytes with baseOffset and partitionLeaderEpoch set."""
    out = bytearray(batch)
    out[0:8] = base_offset.to_bytes(8, "big", signed=True)
    out[12:16] = epoch.to_bytes(4, "big", signed=True)
    return bytes(out)


class LogMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="log-model-"))
        self.clock = ManualClock(START_MS)
        self.config: LogConfig = CONFIGS[0]
        self.log: Log | None = None
        self.batches: list[Stored] = []
        self.start = 0
        self.end = 0

    @initialize(config=st.sampled_from(CONFIGS))
    def open_log(self, config: LogConfig) -> None:
        self.config = config
        self.log = Log.open(self.dir, config, self.clock)

    @property
    def the_log(self) -> Log:
        assert self.log is not None
        return self.log

    def teardown(self) -> None:
        if self.log is not None:
            self.log.close_handlers()
        shutil.rmtree(self.dir, ignore_errors=True)

    # ------------------------------------------------------------------------------------ helpers

    def segment_of(self, offset: int) -> int:
        bases = [s.base_offset for s in self.the_log.segments]
        return max(i for i, base in enumerate(bases) if base <= offset)

    def expected_read(
        self, offset: int, max_bytes: int, max_offset: int | None, min_one: bool
    ) -> list[bytes]:
        candidates = [b for b in self.batches if b.last_offset >= offset]
        if offset >= self.end or not candidates:
            return []
        segment = self.segment_of(candidates[0].base_offset)
        out: list[bytes] = []
        size = 0
        for batch in candidates:
            if self.segment_of(batch.base_offset) != segment:
                break
            if max_offset is not None and batch.base_offset >= max_offset:
                break
            if size + len(batch.data) > max_bytes and not (min_one and not out):
                break
            out.append(batch.data)
            size += len(batch.data)
        return out

    # -------------------------------------------------------------------------------------- rules

    @rule(
        sizes=st.lists(st.tuples(st.integers(1, 3), st.integers(0, 50)), min_size=1, max_size=3),
        epoch=st.integers(0, 5),
        skew_ms=st.integers(-1000, 0),
    )
    def append(self, sizes: list[tuple[int, int]], epoch: int, skew_ms: int) -> None:
        producer = [
            make_batch([b"v" * length] * records, base_timestamp=self.clock.time_ms() + skew_ms)
            for records, length in sizes
        ]
        data = b"".join(producer)
        if max(len(batch) for batch in producer) > self.config.segment_bytes:  # no segment can hold that batch
            with pytest.raises(RecordTooLargeError, match="segment.bytes"):
                self.the_log.append(data, leader_epoch=epoch)
            return
        info = self.the_log.append(data, leader_epoch=epoch)  # larger than a segment together: rolls between
        assert all(segment.size_bytes <= self.config.segment_bytes for segment in self.the_log.segments)
        assert info.first_offset == self.end
        for batch in producer:
            stored = as_stored(batch, self.end, epoch)
            self.batches.append(Stored(self.end, stored))
            self.end = parse_header(stored).next_offset
        assert info.last_offset == self.end - 1

    @rule(count=st.integers(2, 8))
    def append_burst(self, count: int) -> None:
        """Many small single-batch appends: fills segments so that rolls and retention happen."""
        for i in range(count):
            self.append([(1, 10 * i)], epoch=5, skew_ms=-i)

    @rule(data=st.data(), max_bytes=st.integers(1, 1500), min_one=st.booleans())
    def read(self, data: st.DataObject, max_bytes: int, min_one: bool) -> None:
        offset = data.draw(st.integers(self.start - 1, self.end + 1), label="offset")
        max_offset = data.draw(st.none() | st.integers(self.start, self.end + 1), label="max_offset")
        if not self.start <= offset <= self.end:
            with pytest.raises(OffsetOutOfRangeError):
                self.the_log.read(offset, max_bytes, max_offset=max_offset, min_one_batch=min_one)
            return
        got = self.the_log.read(offset, max_bytes, max_offset=max_offset, min_one_batch=min_one)
        expected = self.expected_read(offset, max_bytes, max_offset, min_one)
        assert split_batches(got.records) == expected
        event(f"read {min(len(expected), 3)} batches")
        assert (got.log_start_offset, got.log_end_offset) == (self.start, self.end)

    @rule(ms=st.integers(0, 6000))
    def advance_clock(self, ms: int) -> None:
        self.clock.advance(ms)

    @rule()
    def roll(self) -> None:
        self.the_log.roll()
        assert self.the_log.segments[-1].base_offset == self.end or self.the_log.segments[-1].is_empty

    @rule(ms=st.integers(0, 8000))
    def retention(self, ms: int) -> None:
        self.clock.advance(ms)
        before = self.the_log.segments
        expected = self.expected_retention()
        deleted = self.the_log.delete_retention()
        assert deleted == expected
        event(f"retention deleted {min(deleted, 2)} segments")
        if deleted:
            assert self.the_log.segments == before[deleted:]
            first = before[deleted].base_offset
            self.batches = [b for b in self.batches if b.base_offset >= first]
            self.start = max(self.start, first)

    def expected_retention(self) -> int:
        """Kafka's three rules, computed from the model's batches, not from the log's bookkeeping."""
        segments = self.the_log.segments
        bases = [s.base_offset for s in segments]
        now = self.clock.time_ms()
        per_segment: list[list[Stored]] = [[] for _ in bases]
        for batch in self.batches:
            per_segment[self.segment_of(batch.base_offset)].append(batch)
        sizes = [sum(len(b.data) for b in batches) for batches in per_segment]
        count = 0
        excess = sum(sizes) - self.config.retention_bytes
        for i in range(len(bases) - 1):
            too_old = self.config.retention_ms >= 0 and now - max(b.max_timestamp for b in per_segment[i]) > (
                self.config.retention_ms
            )
            too_big = self.config.retention_bytes >= 0 and excess - sizes[i] >= 0
            below_start = bases[i + 1] <= self.start
            if not (too_old or too_big or below_start):
                break
            excess -= sizes[i]
            count += 1
        return count

    @rule(data=st.data())
    def delete_records(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(self.start, self.end), label="offset")
        assert self.the_log.delete_records(offset) == offset
        self.start = offset
        first = self.the_log.segments[0].base_offset
        self.batches = [b for b in self.batches if b.base_offset >= first]

    @rule(data=st.data())
    def truncate_to(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(max(self.start - 3, 0), self.end + 1), label="offset")
        first_base = self.the_log.segments[0].base_offset
        changed = self.the_log.truncate_to(offset)
        assert changed == (offset < self.end)
        event(f"truncate_to changed: {changed}")
        if not changed:
            return
        if offset < first_base:
            self.batches, self.start, self.end = [], offset, offset
            return
        dropped = [b for b in self.batches if b.last_offset >= offset]
        self.end = min(offset, dropped[0].base_offset) if dropped else offset
        self.batches = [b for b in self.batches if b.last_offset < offset]
        self.start = min(self.start, self.end)

    @rule()
    def flush(self) -> None:
        self.the_log.flush()
        assert self.the_log.recovery_point == self.end

    @rule()
    def close_and_reopen(self) -> None:
        self.the_log.close()
        self.log = Log.open(self.dir, self.config, self.clock)
        assert self.the_log.recovery_point == self.end

    @rule()
    def crash_and_reopen(self) -> None:
        self.the_log.close_handlers()
        self.log = Log.open(self.dir, self.config, self.clock)

    @precondition(lambda self: self.log is not None and self.unflushed_in_active())
    @rule(data=st.data())
    def power_cut(self, data: st.DataObject) -> None:
        """Lose an arbitrary part of the active segment's unflushed tail, then recover."""
        active = self.the_log.segments[-1]
        in_active = [b for b in self.batches if b.base_offset >= active.base_offset]
        positions = [0]
        for batch in in_active:
            positions.append(positions[-1] + len(batch.data))
        point = self.the_log.recovery_point
        first_unflushed = next(i for i, b in enumerate(in_active) if b.base_offset >= point)
        cut = data.draw(st.integers(positions[first_unflushed], positions[-1] - 1), label="cut")
        self.the_log.close_handlers()
        with (self.dir / f"{active.base_offset:020d}.log").open("r+b") as f:
            f.truncate(cut)
        self.log = Log.open(self.dir, self.config, self.clock)
        kept = [b for i, b in enumerate(in_active) if positions[i + 1] <= cut]
        event(f"power cut lost {min(len(in_active) - len(kept), 2)} batches")
        self.batches = self.batches[: len(self.batches) - len(in_active)] + kept
        self.end = kept[-1].next_offset if kept else active.base_offset
        self.start = min(self.start, self.end)

    def unflushed_in_active(self) -> bool:
        active = self.the_log.segments[-1]
        lowest = max(active.base_offset, self.the_log.recovery_point)
        return any(b.base_offset >= lowest for b in self.batches)

    # --------------------------------------------------------------------------------- invariants

    @invariant()
    def offsets_match(self) -> None:
        if self.log is None:
            return
        assert (self.the_log.log_start_offset, self.the_log.log_end_offset) == (self.start, self.end)
        assert self.the_log.size_bytes == sum(len(b.data) for b in self.batches)
        assert self.the_log.recovery_point <= self.end
        bases = [s.base_offset for s in self.the_log.segments]
        assert bases == sorted(set(bases))


LogMachine.TestCase.settings = settings(
    max_examples=60,
    derandomize=True,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
test_log_matches_the_model = LogMachine.TestCase
