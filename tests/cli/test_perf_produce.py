"""``odradek perf produce``'s send loop on the producer's own futures (a real RecordAccumulator, batches
completed by hand): every record's outcome is counted, latencies are timed on a deterministic sample."""

from __future__ import annotations

import io
import math

import pytest

from common.clock import ManualClock
from odradek.accumulator import RecordAccumulator, record_size_upper_bound
from odradek.errors import KafkaTimeoutError
from odradek.perf import produce as produce_module
from odradek.perf.produce import LATENCY_SAMPLES, ProduceResult, ProduceRun, default_sample_every, produce
from odradek.perf.stats import Recorder, ordinal, summary_line
from odradek.record_future import RecordFuture
from odradek.types import TopicPartition

T0 = TopicPartition("perf", 0)


class BatchingProducer:
    """``send`` queues into a real accumulator (batch.size 1000: 8 records of 100 bytes a batch); the
    batches complete in order, every ``fail_every``-th one failing: at ``flush``, or, ``eager``, each one
    as soon as the next one opens (as in a run, where batches complete while records are sent)."""

    def __init__(self, fail_every: int = 0, eager: bool = False) -> None:
        self.accumulator = RecordAccumulator(
            batch_size=1000, linger_ms=0, buffer_memory=1 << 30, compression=0, delivery_timeout_ms=60_000,
            clock=ManualClock(),
        )  # fmt: skip
        self.fail_every = fail_every
        self.eager = eager
        self.answered = 0  # batches completed so far
        self.offset = 0  # the next batch's base offset
        self.failed: set[int] = set()  # indexes (in send order) of the records of failed batches
        self.first_error: BaseException | None = None

    def send(self, topic: str, value: bytes) -> RecordFuture:
        size = record_size_upper_bound(None, value, ())
        future = self.accumulator.append(TopicPartition(topic, 0), 1_700_000_000_000, None, value, (), size, 0)
        assert future is not None
        if self.eager:
            self._answer(len(self.accumulator.queued_batches(T0)) - 1)
        return future

    def flush(self) -> None:
        self._answer(len(self.accumulator.queued_batches(T0)))

    def _answer(self, batches: int) -> None:
        for batch in self.accumulator.queued_batches(T0)[self.answered : batches]:
            self.answered += 1
            if self.fail_every and self.answered % self.fail_every == 0:
                error = KafkaTimeoutError(f"batch {self.answered} expired")
                self.first_error = self.first_error or error
                self.failed.update(range(self.offset, self.offset + batch.record_count))
                batch.fail(error)
            else:
                batch.complete(self.offset)
            self.offset += batch.record_count


def run(producer: BatchingProducer, num_records: int, every: int) -> tuple[Recorder, ProduceResult]:
    recorder = Recorder("sent", out=io.StringIO())
    return recorder, produce(producer, ProduceRun("perf", num_records, 100, -1, every), recorder)


@pytest.mark.parametrize("every", [1, 3, 8, 10, 1000])
def test_every_record_is_counted_whatever_the_sample(every: int) -> None:
    producer = BatchingProducer(fail_every=4)
    recorder, result = run(producer, 1003, every)
    assert result.failed == len(producer.failed) > 0
    assert result.delivered == 1003 - result.failed
    assert result.first_error is producer.first_error
    timed = range(0, 1003, every)  # the first record of each run of `every`
    assert result.latency_samples == len(recorder.latencies_ms) == len(set(timed) - producer.failed)


@pytest.mark.parametrize("every", [1, 7])
def test_outcomes_are_folded_while_batches_complete(monkeypatch: pytest.MonkeyPatch, every: int) -> None:
    monkeypatch.setattr(produce_module, "FOLD_EVERY", 20)  # fold often, mostly done batches, some open
    producer = BatchingProducer(fail_every=3, eager=True)
    recorder, result = run(producer, 1001, every)
    assert result.failed == len(producer.failed) > 0
    assert result.delivered == 1001 - result.failed
    assert result.first_error is producer.first_error
    assert result.latency_samples == len(set(range(0, 1001, every)) - producer.failed)


def test_sample_every_one_times_every_delivered_record() -> None:
    recorder, result = run(BatchingProducer(), 500, 1)
    assert (result.delivered, result.failed, result.latency_samples) == (500, 0, 500)
    assert recorder.records == 500


def test_the_sample_is_the_first_record_of_each_run() -> None:
    producer = BatchingProducer()
    recorder, result = run(producer, 25, 10)
    assert result.latency_samples == 3  # records 1, 11 and 21
    assert recorder.records == 25  # the runs of 10, 10 and 5 records they stand for


def test_default_sample_bounds_the_samples() -> None:
    assert default_sample_every(1) == 1
    assert default_sample_every(LATENCY_SAMPLES) == 1
    assert default_sample_every(LATENCY_SAMPLES + 1) == 2
    assert default_sample_every(500_000) == 10
    for n in (1, 999, 50_001, 500_000, 1_234_567):
        assert math.ceil(n / default_sample_every(n)) <= LATENCY_SAMPLES


def test_summary_line_names_the_sample() -> None:
    latency = {"avg": 1.0, "p50": 1.0, "p95": 2.0, "p99": 3.0, "p999": 4.0, "max": 5.0}
    assert summary_line("sent", 10, 1000, 1.0, latency).endswith(" 4.00 ms 99.9th.")
    assert summary_line("sent", 10, 1000, 1.0, latency, 10).endswith(" 4.00 ms 99.9th (latency of every 10th record).")
    assert [ordinal(n) for n in (2, 3, 4, 11, 12, 13, 21, 22, 101, 111)] == [
        "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "101st", "111th"
    ]  # fmt: skip
