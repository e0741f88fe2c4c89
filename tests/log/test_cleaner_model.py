"""A hypothesis state machine: appends, rolls, cleans, clock moves and reopens against a model.

The model is the list of every record appended. After every step, reading the log from its start
must give (Kafka's compaction guarantees, "Log Compaction Basics" in Kafka's documentation):

* offsets strictly increasing, and every record an appended one, unchanged (offset, key, value,
  timestamp): compaction removes records, never alters or moves them;
* every record at or above the end of the last cleaned range, present (nothing above the cleanable
  point is touched);
* below that end, at most one record per key;
* for every key, its latest record present, unless it is a tombstone whose delete horizon passed;
* tombstone rule (KIP-534): a latest tombstone stays until ``delete.retention.ms`` after the first pass
  that cleaned it, and is gone after a pass at or past that time.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from common.clock import ManualClock
from log.cleaner.manager import CleanerManager
from log.log import Log
from tests.log.conftest import START_MS, small_config
from tests.log.test_cleaner_support import Rec, clean, keyed_batch, read_all

RETENTION_MS = 100
CONFIG = small_config(
    cleanup_policy=frozenset({"compact"}), segment_bytes=700, index_interval_bytes=64, delete_retention_ms=RETENTION_MS
)
KEYS = [b"a", b"b", b"c", b"d", b"e"]

records_strategy = st.lists(
    st.tuples(st.sampled_from(KEYS), st.one_of(st.none(), st.binary(min_size=1, max_size=30))), min_size=1, max_size=3
)


@dataclass
class Appended:
    offset: int
    rec: Rec


class CleanerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="cleaner-model-"))
        self.clock = ManualClock(START_MS)
        self.log = Log.open(self.root / "p0", CONFIG, self.clock)
        self.manager = CleanerManager()
        self.appended: list[Appended] = []
        self.cleaned_end = 0  # end offset of the last cleaned range
        self.first_cleaned_ms: dict[int, int] = {}  # tombstone offset -> time of the first pass over it

    def teardown(self) -> None:
        self.log.close_handlers()
        shutil.rmtree(self.root, ignore_errors=True)

    @rule(records=records_strategy)
    def append(self, records: list[tuple[bytes, bytes | None]]) -> None:
        recs = [Rec(key, value, self.clock.time_ms()) for key, value in records]
        info = self.log.append(keyed_batch(recs))
        for i, rec in enumerate(recs):
            self.appended.append(Appended(info.first_offset + i, rec))

    @rule()
    def roll(self) -> None:
        self.log.roll()

    @rule(ms=st.sampled_from([1, RETENTION_MS - 1, RETENTION_MS, 2 * RETENTION_MS]))
    def advance(self, ms: int) -> None:
        self.clock.advance(ms)

    @rule()
    def reopen(self) -> None:
        self.log.close()
        self.log = Log.open(self.root / "p0", CONFIG, self.clock)
        self.manager = CleanerManager()  # the first dirty offset comes back from the checkpoint file

    @precondition(lambda self: self.appended)
    @rule(fraction=st.floats(0.0, 1.0))
    def clean(self, fraction: float) -> None:
        bound = int(self.log.log_end_offset * fraction)
        now = self.clock.time_ms()
        latest_tombstones_before = self._latest_tombstones()
        segments = self.log.segments
        result = clean(self.log, now, upper_bound=bound, manager=self.manager)
        cleaned = [
            (s.base_offset, s.next_offset)
            for s in segments[:-1]
            if s.next_offset <= bound and s.base_offset < result.end_offset
        ]
        assert result.complete
        assert result.end_offset <= max(bound, result.first_dirty_offset)
        self.cleaned_end = max(self.cleaned_end, result.end_offset)
        present = {offset for offset, _ in read_all(self.log)}
        for offset in latest_tombstones_before:
            if not any(base <= offset < end for base, end in cleaned):
                continue  # not in a segment this pass cleaned
            first = self.first_cleaned_ms.setdefault(offset, now)
            if first == now or now < first + RETENTION_MS:
                assert offset in present, f"tombstone at {offset} removed before its delete horizon"
            else:
                assert offset not in present, f"tombstone at {offset} kept past its delete horizon"

    def _latest_tombstones(self) -> list[int]:
        latest: dict[bytes | None, Appended] = {}
        for a in self.appended:
            latest[a.rec.key] = a
        return [a.offset for a in latest.values() if a.rec.value is None]

    @invariant()
    def log_matches_the_model(self) -> None:
        records = read_all(self.log)
        offsets = [offset for offset, _ in records]
        assert offsets == sorted(set(offsets)), "offsets strictly increase"
        by_offset = {a.offset: a.rec for a in self.appended}
        for offset, rec in records:
            assert by_offset.get(offset) == rec, f"record at {offset} altered"
        kept = dict(records)
        for a in self.appended:
            if a.offset >= self.cleaned_end:
                assert kept.get(a.offset) == a.rec, f"record at {a.offset}, above the cleaned range, is gone"
        below = [rec.key for offset, rec in records if offset < self.cleaned_end]
        assert len(below) == len(set(below)), "one record per key below the cleaned end"
        latest: dict[bytes | None, Appended] = {}
        for a in self.appended:
            latest[a.rec.key] = a
        for a in latest.values():
            if a.rec.value is not None:
                assert kept.get(a.offset) == a.rec, f"latest value of {a.rec.key!r} at {a.offset} is gone"


TestCleanerModel = CleanerMachine.TestCase
TestCleanerModel.settings = settings(max_examples=40, stateful_step_count=30, deadline=None)
