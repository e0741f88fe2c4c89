"""Throughput and latency bookkeeping for ``odradek perf``, worded like Kafka's perf tools.

:class:`Recorder` takes one call per completed record (per timed record, standing for its run of records,
in ``perf produce``; per batch in ``perf consume``) from ONE thread (the producer's sender thread for
``perf produce``, the consumer thread for ``perf e2e``, the main thread for ``perf consume``), keeps
every latency it is given (an ``array('d')``: 8 bytes a sample), and prints a progress line for the last
window every ``interval_s`` from that same thread. The main thread reads the totals only after the
recording thread is done (after ``flush``/``join``), so no lock is needed.

Percentiles are nearest-rank on all samples: ``p`` is the smallest sample with at least ``p`` of the
samples at or below it (1..100 gives p50=50, p99=99, p999=100).
"""

from __future__ import annotations

import math
import sys
import time
from array import array
from collections.abc import Callable, Sequence
from typing import IO, Any

from odradek.progress import Progress

MB = 1024 * 1024  # Kafka's perf tools divide by 2^20
PERCENTILES = (("p50", 0.50), ("p95", 0.95), ("p99", 0.99), ("p999", 0.999))
REPORT_INTERVAL_S = 5.0


def percentile(sorted_values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile of ascending ``sorted_values`` (0.0 for no values)."""
    n = len(sorted_values)
    if n == 0:
        return 0.0
    rank = max(1, math.ceil(fraction * n - 1e-9))
    return float(sorted_values[min(n, rank) - 1])


def latency_summary(latencies_ms: Sequence[float]) -> dict[str, float]:
    """``{"avg", "p50", "p95", "p99", "p999", "max"}`` in ms, rounded to the microsecond."""
    ordered = sorted(latencies_ms)
    summary = {"avg": sum(ordered) / len(ordered) if ordered else 0.0}
    for name, fraction in PERCENTILES:
        summary[name] = percentile(ordered, fraction)
    summary["max"] = ordered[-1] if ordered else 0.0
    return {k: round(v, 3) for k, v in summary.items()}


def rates(records: int, nbytes: int, seconds: float) -> tuple[float, float]:
    """``(records_per_sec, mb_per_sec)``."""
    if seconds <= 0:
        return 0.0, 0.0
    return records / seconds, nbytes / MB / seconds


class Recorder:
    """Counts, bytes and latencies of completed records; progress lines every ``interval_s``.

    ``verb`` names what happened to the records in the lines ("sent", "received").
    """

    def __init__(
        self, verb: str, *, interval_s: float = REPORT_INTERVAL_S, out: IO[str] | None = None,
        clock: Callable[[], float] = time.perf_counter, keep_latencies: bool = True, progress: Progress | None = None,
    ) -> None:  # fmt: skip
        self.verb = verb
        self.progress = progress  # a live line on stderr (odradek.progress), redrawn from the recording thread
        self.interval_s = interval_s
        self.out = out or sys.stderr
        self.clock = clock
        self.latencies_ms = array("d")
        self.keep_latencies = keep_latencies
        self.records = 0
        self.bytes = 0
        self.errors = 0
        self.first_error: BaseException | None = None
        self.first_at = 0.0
        self.last_at = 0.0
        now = clock()
        self._window_start = now
        self._next_report = now + interval_s
        # The window's counts are differences from these marks: recording a record touches no window state.
        self._window_first_records = 0
        self._window_first_bytes = 0
        self._window_first_sample = 0  # index in latencies_ms of the window's first latency

    def record(self, latency_ms: float, nbytes: int, now: float, records: int = 1) -> None:
        """One record completed ``latency_ms`` after it was sent; with sampled latencies (``perf produce``)
        it stands for ``records`` records (``nbytes`` in all), which the counts and progress lines take."""
        if self.records == 0:
            self.first_at = now
        self.records += records
        self.bytes += nbytes
        self.last_at = now
        if self.keep_latencies:
            self.latencies_ms.append(latency_ms)
        if now >= self._next_report:
            self.report_window(now)
        progress = self.progress
        if progress is not None and now >= progress.next_at:
            progress.update(self.records, now)

    def record_batch(self, records: int, nbytes: int, now: float) -> None:
        """``records`` records completed at once, latencies not measured (``perf consume``)."""
        if self.records == 0:
            self.first_at = now
        self.records += records
        self.bytes += nbytes
        self.last_at = now
        if now >= self._next_report:
            self.report_window(now)
        progress = self.progress
        if progress is not None and now >= progress.next_at:
            progress.update(self.records, now)

    def record_error(self, error: BaseException, records: int = 1) -> None:
        self.errors += records
        if self.first_error is None:
            self.first_error = error

    def report_window(self, now: float) -> None:
        """Print the line of the window since the last one (its latencies: those recorded since then)."""
        records = self.records - self._window_first_records
        per_sec, mb = rates(records, self.bytes - self._window_first_bytes, now - self._window_start)
        line = f"{records} records {self.verb}, {per_sec:.1f} records/sec ({mb:.2f} MB/sec)"
        window = self.latencies_ms[self._window_first_sample :]
        if self.keep_latencies and window:
            avg = sum(window) / len(window)
            line += f", {avg:.1f} ms avg latency, {max(window):.1f} ms max latency"
        if self.progress is not None:
            self.progress.clear()  # the window line goes above the live line, which the next update redraws
        print(line + ".", file=self.out, flush=True)
        self._window_start = now
        self._next_report = now + self.interval_s
        self._window_first_records = self.records
        self._window_first_bytes = self.bytes
        self._window_first_sample = len(self.latencies_ms)


def summary_line(verb: str, records: int, nbytes: int, seconds: float, latency: dict[str, float] | None,
                 latency_sample_every: int = 1) -> str:  # fmt: skip
    """Kafka's final line: ``N records sent, X records/sec (Y MB/sec), A ms avg latency, M ms max latency,
    P ms 50th, ...``; with sampled latencies it says so: ``... ms 99.9th (latency of every 10th record).``"""
    per_sec, mb = rates(records, nbytes, seconds)
    line = f"{records} records {verb}, {per_sec:.1f} records/sec ({mb:.2f} MB/sec)"
    if latency is not None:
        line += (
            f", {latency['avg']:.2f} ms avg latency, {latency['max']:.2f} ms max latency, "
            f"{latency['p50']:.2f} ms 50th, {latency['p95']:.2f} ms 95th, {latency['p99']:.2f} ms 99th, "
            f"{latency['p999']:.2f} ms 99.9th"
        )
        if latency_sample_every > 1:
            line += f" (latency of every {ordinal(latency_sample_every)} record)"
    return line + "."


def ordinal(n: int) -> str:
    """``1st``, ``2nd``, ``3rd``, ``10th``, ``11th``, ``22nd``."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def result_document(records: int, nbytes: int, seconds: float, latency: dict[str, float] | None,
                    **extra: Any) -> dict[str, Any]:  # fmt: skip
    """The ``--json`` object: records, seconds, records_per_sec, mb_per_sec (and latency_ms, extras)."""
    per_sec, mb = rates(records, nbytes, seconds)
    doc: dict[str, Any] = {"records": records, "seconds": round(seconds, 6),
                           "records_per_sec": round(per_sec, 3), "mb_per_sec": round(mb, 6)}  # fmt: skip
    if latency is not None:
        doc["latency_ms"] = latency
    doc.update(extra)
    return doc


class Throttle:
    """Paces a sender to ``rate`` operations a second (Kafka's ThroughputThrottler); ``rate <= 0``: never
    waits. It sleeps when more than ``min_sleep_s`` ahead of schedule, so a high rate sends in short bursts
    rather than sleeping for microseconds after every record."""

    def __init__(self, rate: float, start: float, *, min_sleep_s: float = 0.0005,
                 sleep: Callable[[float], None] = time.sleep) -> None:  # fmt: skip
        self.rate = rate
        self.start = start
        self.min_sleep_s = min_sleep_s
        self.sleep = sleep

    @property
    def active(self) -> bool:
        return self.rate > 0

    def pace(self, done: int, now: float) -> float:
        """After ``done`` operations at ``now``: sleep until the next one is due; the seconds slept."""
        if self.rate <= 0:
            return 0.0
        ahead = self.start + done / self.rate - now
        if ahead > self.min_sleep_s:
            self.sleep(ahead)
            return ahead
        return 0.0
