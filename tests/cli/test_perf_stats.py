"""``odradek perf``'s bookkeeping: nearest-rank percentiles on known inputs, Kafka's summary line, the
JSON document's keys (docs/INTERFACE.md), progress windows and the throttle, on a fake clock."""

from __future__ import annotations

import io
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from odradek.perf.stats import (
    Recorder,
    Throttle,
    latency_summary,
    percentile,
    rates,
    result_document,
    summary_line,
)


def test_percentiles_of_one_to_a_hundred() -> None:
    values = [float(v) for v in range(1, 101)]
    random.Random(7).shuffle(values)
    assert latency_summary(values) == {"avg": 50.5, "p50": 50.0, "p95": 95.0, "p99": 99.0, "p999": 100.0,
                                       "max": 100.0}  # fmt: skip


def test_percentiles_of_one_to_a_thousand() -> None:
    summary = latency_summary([float(v) for v in range(1000, 0, -1)])
    assert (summary["p50"], summary["p95"], summary["p99"], summary["p999"]) == (500.0, 950.0, 990.0, 999.0)


def test_percentiles_of_few_samples() -> None:
    assert percentile([], 0.5) == 0.0
    assert percentile([4.0], 0.999) == 4.0
    assert percentile([1.0, 2.0], 0.5) == 1.0
    assert percentile([1.0, 2.0], 0.51) == 2.0
    assert latency_summary([]) == {"avg": 0.0, "p50": 0.0, "p95": 0.0, "p99": 0.0, "p999": 0.0, "max": 0.0}


@given(st.lists(st.floats(min_value=0, max_value=1e6), min_size=1, max_size=300),
       st.floats(min_value=0.001, max_value=1.0))  # fmt: skip
def test_nearest_rank_definition(values: list[float], fraction: float) -> None:
    """The p-th percentile is the smallest sample with at least p of the samples at or below it."""
    ordered = sorted(values)
    p = percentile(ordered, fraction)
    at_or_below = sum(1 for v in ordered if v <= p)
    assert at_or_below >= fraction * len(ordered) - 1e-6
    smaller = [v for v in ordered if v < p]
    assert len(smaller) < fraction * len(ordered) + 1e-6


def test_summary_line_is_kafkas() -> None:
    latency = latency_summary([1.0, 2.0, 3.0, 4.0])
    line = summary_line("sent", 1000, 1000 * 100, 2.0, latency)
    assert line == ("1000 records sent, 500.0 records/sec (0.05 MB/sec), 2.50 ms avg latency, 4.00 ms max latency, "
                    "2.00 ms 50th, 4.00 ms 95th, 4.00 ms 99th, 4.00 ms 99.9th.")  # fmt: skip
    assert summary_line("received", 10, 0, 0.0, None) == "10 records received, 0.0 records/sec (0.00 MB/sec)."


def test_json_document_keys() -> None:
    doc = result_document(2048, 2048 * 1024, 2.0, latency_summary([1.0]), record_size=1024)
    assert doc["records"] == 2048
    assert doc["seconds"] == 2.0
    assert doc["records_per_sec"] == 1024.0
    assert doc["mb_per_sec"] == 1.0
    assert set(doc["latency_ms"]) == {"avg", "p50", "p95", "p99", "p999", "max"}
    assert doc["record_size"] == 1024
    assert "latency_ms" not in result_document(1, 1, 1.0, None)
    assert rates(5, 5, 0.0) == (0.0, 0.0)


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_recorder_reports_windows() -> None:
    clock, out = FakeClock(), io.StringIO()
    recorder = Recorder("sent", interval_s=5.0, out=out, clock=clock)
    for i in range(10):
        clock.now += 0.4
        recorder.record(float(i), 100, clock.now)
    assert out.getvalue() == ""
    clock.now += 1.5
    recorder.record(20.0, 100, clock.now)  # 5.5 s after the start: the window is reported
    assert out.getvalue() == ("11 records sent, 2.0 records/sec (0.00 MB/sec), 5.9 ms avg latency, "
                              "20.0 ms max latency.\n")  # fmt: skip
    assert recorder.records == 11
    assert recorder.bytes == 1100
    assert list(recorder.latencies_ms)[-1] == 20.0
    recorder.record_batch(5, 50, clock.now + 1)
    assert recorder.records == 16
    assert recorder.bytes == 1150


def test_recorder_keeps_the_first_error() -> None:
    recorder = Recorder("sent", out=io.StringIO())
    first, second = RuntimeError("a"), RuntimeError("b")
    recorder.record_error(first)
    recorder.record_error(second)
    assert recorder.errors == 2
    assert recorder.first_error is first


def test_throttle_sleeps_only_when_ahead() -> None:
    slept: list[float] = []
    throttle = Throttle(1000.0, start=10.0, sleep=slept.append)
    assert throttle.pace(1, 10.0) == pytest.approx(0.001)  # the 2nd record is due at 10.001
    assert throttle.pace(10, 10.0098) == 0.0  # 0.2 ms ahead: not worth a sleep
    assert throttle.pace(100, 10.05) == pytest.approx(0.05)
    assert slept == pytest.approx([0.001, 0.05])


def test_an_unthrottled_throttle_never_sleeps() -> None:
    slept: list[float] = []
    for rate in (-1.0, 0.0):
        throttle = Throttle(rate, start=0.0, sleep=slept.append)
        assert not throttle.active
        assert throttle.pace(1_000_000, 0.0) == 0.0
    assert slept == []
