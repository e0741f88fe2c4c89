"""``odradek perf produce``: kafka-producer-perf-test.

One payload of ``record_size`` random capital letters (as Kafka's tool makes it) is sent ``num_records``
times with a null key (sticky partitioning).

Every record's outcome is counted, and the throughput is that of all the records: the time runs from the
first ``send`` to the completion of the last record. Outcomes are counted per producer batch
(``odradek.record_future.OutcomeTally``, which the Spark sink uses too): the futures of one batch share one
``BatchOutcome`` (their ``batch_outcome``), so the send loop notes it per record, and each batch's outcome
(delivered, or failed with its error) counts once for each of its records.

Latency is timed on a deterministic sample, as Kafka's ProducerPerformance samples the latencies of its
percentiles: the records are sent in runs of ``latency_sample_every``, and the first record of each run
gets a done-callback (on the producer's sender thread) that records the time from just before its
``send`` to its completion. With ``latency_sample_every=1`` every record is timed. The default
(:func:`default_sample_every`) times every record up to :data:`LATENCY_SAMPLES` records and about that
many samples beyond: a callback per record costs more than the producer's own work for a small record.
"""

from __future__ import annotations

import math
import random
import threading
from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from itertools import chain, repeat
from typing import TYPE_CHECKING, Any

from odradek.perf.stats import Recorder, Throttle
from odradek.record_future import FOLD_EVERY, OutcomeTally

if TYPE_CHECKING:
    from odradek.types import RecordMetadata

CALLBACKS_TIMEOUT_S = 30.0
LATENCY_SAMPLES = 50_000  # the default sampling times about this many records


def make_payload(size: int, seed: int = 0) -> bytes:
    """``size`` random letters A-Z (compressible like Kafka's perf payload)."""
    rng = random.Random(seed)
    return bytes(rng.randrange(65, 91) for _ in range(size))


def default_sample_every(num_records: int) -> int:
    """Time every record of a run of up to LATENCY_SAMPLES records, else every n-th so that about
    LATENCY_SAMPLES are timed (Kafka's tool likewise bounds its latency samples)."""
    return max(1, math.ceil(num_records / LATENCY_SAMPLES))


@dataclass(frozen=True, slots=True)
class ProduceRun:
    topic: str
    num_records: int
    record_size: int
    throughput: float  # records/s; <= 0: unthrottled
    latency_sample_every: int = 1  # time the latency of every n-th record (the first of each run of n)


@dataclass(frozen=True, slots=True)
class ProduceResult:
    delivered: int  # records acknowledged (sent, with acks=0)
    failed: int
    first_error: BaseException | None
    seconds: float  # from the first send to the last completion
    latency_samples: int  # records whose latency was timed (delivered ones)


class Completions:
    """The done-callback target of the timed records: records each one's latency into ``recorder``
    (sender thread only). A timed record stands for the run of records it starts (``run_records``, or
    fewer for the last run), which the progress lines count. ``all_done`` is set once runs totalling
    ``expected`` records have completed, delivered or failed (the producer's flush waits for the callbacks
    of the records it waits for; ``produce`` checks that none is missing).

    The send times wait in a dict keyed by future, so that a timed record costs no object beyond its
    future (a ``partial`` per record would be two more for the garbage collector to track)."""

    __slots__ = ("recorder", "record_size", "clock", "expected", "run_records", "sent_at", "short_runs",
                 "completed", "all_done")  # fmt: skip

    def __init__(self, recorder: Recorder, record_size: int, expected: int, run_records: int = 1) -> None:
        self.recorder = recorder
        self.record_size = record_size
        self.clock = recorder.clock
        self.expected = expected
        self.run_records = run_records
        self.sent_at: dict[Future[RecordMetadata], float] = {}  # timed futures not completed yet
        self.short_runs: dict[Future[RecordMetadata], int] = {}  # the records of runs not of run_records
        self.completed = 0
        self.all_done = threading.Event()
        if expected == 0:
            self.all_done.set()

    def timed(self, future: Future[RecordMetadata], sent_at: float, records: int) -> None:
        """Time ``future``, sent at ``sent_at``, which starts a run of ``records`` (main thread)."""
        self.sent_at[future] = sent_at
        if records != self.run_records:
            self.short_runs[future] = records
        future.add_done_callback(self.done)

    def done(self, future: Future[RecordMetadata]) -> None:
        now = self.clock()
        sent_at = self.sent_at.pop(future)
        records = self.short_runs.pop(future, self.run_records) if self.short_runs else self.run_records
        recorder = self.recorder
        error = future.exception(0)  # done: a RecordFuture answers without its lock
        if error is None:
            recorder.record((now - sent_at) * 1000.0, self.record_size * records, now, records)
        else:
            recorder.record_error(error, records)
        self.completed += records
        if self.completed >= self.expected:
            self.all_done.set()


def produce(producer: Any, run: ProduceRun, recorder: Recorder) -> ProduceResult:
    """Send the records, flush, wait for the timed records' callbacks, count every record's outcome."""
    payload = make_payload(run.record_size)
    every = max(1, run.latency_sample_every)
    completions = Completions(recorder, run.record_size, run.num_records, every)
    started = completions.sent_at
    done = completions.done
    tally = OutcomeTally()
    outcomes = tally.outcomes
    keep = outcomes.append
    send = producer.send
    topic = run.topic
    clock = recorder.clock
    start = clock()
    throttle = Throttle(run.throughput, start)
    full, rest = divmod(run.num_records, every)
    if not throttle.active:
        for _ in repeat(None, full):  # the first record of each run of `every` is timed
            sent_at = clock()
            future = send(topic, payload)
            started[future] = sent_at
            future.add_done_callback(done)
            keep(future.batch_outcome)
            for _ in repeat(None, every - 1):
                keep(send(topic, payload).batch_outcome)
            if len(outcomes) >= FOLD_EVERY:
                tally.fold()
        if rest:
            sent_at = clock()
            future = send(topic, payload)
            completions.timed(future, sent_at, rest)
            keep(future.batch_outcome)
            for _ in repeat(None, rest - 1):
                keep(send(topic, payload).batch_outcome)
    else:
        pace = throttle.pace
        sent = 0
        for count in chain(repeat(every, full), (rest,) if rest else ()):
            for i in range(count):
                sent_at = clock()
                future = send(topic, payload)
                if i == 0:
                    completions.timed(future, sent_at, count)
                keep(future.batch_outcome)
                sent += 1
                pace(sent, sent_at)
            if len(outcomes) >= FOLD_EVERY:
                tally.fold()
    producer.flush()
    if not completions.all_done.wait(CALLBACKS_TIMEOUT_S):
        raise RuntimeError(f"the producer's callbacks did not all run within {CALLBACKS_TIMEOUT_S} s of its flush")
    seconds = clock() - start
    tally.fold()
    if tally.pending:
        raise RuntimeError("a record was still unanswered after the producer's flush")
    return ProduceResult(tally.delivered, tally.failed, tally.first_error, seconds, len(recorder.latencies_ms))


def producer_config(
    servers: str, options: Mapping[str, object | None], overrides: Mapping[str, str]
) -> dict[str, object]:
    """The producer config: bootstrap servers, the options that were given (``acks``, ``batch.size``,
    ``linger.ms``, ``compression.type``), then ``--producer-config`` (which wins)."""
    config: dict[str, object] = {"bootstrap.servers": servers}
    config.update({key: value for key, value in options.items() if value is not None})
    config.update(overrides)
    acks = str(config.get("acks", "all")).lower()
    if acks not in ("all", "-1") and "enable.idempotence" not in config:
        config["enable.idempotence"] = False  # Kafka would refuse acks=0/1 with idempotence on
    return config
