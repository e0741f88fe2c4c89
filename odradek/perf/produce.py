"""``odradek perf produce``: kafka-producer-perf-test.

One payload of ``record_size`` random capital letters (as Kafka's tool makes it) is sent ``num_records``
times with a null key (sticky partitioning). A record's latency is the time from just before its
``send`` to its future's completion, taken in a done-callback on the producer's sender thread, so the
send loop never waits for a record. The loop is kept lean: per record one clock read, one ``send``,
one ``functools.partial`` for the callback; the throttle check only when ``--throughput`` is set.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from odradek.perf.stats import Recorder, Throttle

if TYPE_CHECKING:
    from odradek.types import RecordMetadata

CALLBACKS_TIMEOUT_S = 30.0


def make_payload(size: int, seed: int = 0) -> bytes:
    """``size`` random letters A-Z (compressible like Kafka's perf payload)."""
    rng = random.Random(seed)
    return bytes(rng.randrange(65, 91) for _ in range(size))


@dataclass(frozen=True, slots=True)
class ProduceRun:
    topic: str
    num_records: int
    record_size: int
    throughput: float  # records/s; <= 0: unthrottled


class Completions:
    """The done-callback target: records each future's latency into ``recorder`` (sender thread only).
    ``all_done`` is set once ``expected`` records have completed, delivered or failed: a flush returns
    when the futures are resolved, possibly before the sender thread has run their callbacks."""

    __slots__ = ("recorder", "record_size", "clock", "expected", "all_done")

    def __init__(self, recorder: Recorder, record_size: int, expected: int) -> None:
        self.recorder = recorder
        self.record_size = record_size
        self.clock = recorder.clock
        self.expected = expected
        self.all_done = threading.Event()
        if expected == 0:
            self.all_done.set()

    def done(self, sent_at: float, future: Future[RecordMetadata]) -> None:
        now = self.clock()
        recorder = self.recorder
        # A done-callback only runs on a finished future, whose outcome is in CPython's Future._exception
        # (None on success). Reading it skips exception()'s lock: a third of this callback's cost.
        error = future._exception
        if error is None:
            recorder.record((now - sent_at) * 1000.0, self.record_size, now)
        else:
            recorder.record_error(error)
        if recorder.records + recorder.errors >= self.expected:
            self.all_done.set()


def produce(producer: Any, run: ProduceRun, recorder: Recorder) -> float:
    """Send the records, flush, and return the seconds from the first send to the last completion."""
    payload = make_payload(run.record_size)
    completions = Completions(recorder, run.record_size, run.num_records)
    done = completions.done
    send = producer.send
    topic = run.topic
    clock = recorder.clock
    start = clock()
    throttle = Throttle(run.throughput, start)
    if throttle.active:
        pace = throttle.pace
        for i in range(run.num_records):
            sent_at = clock()
            send(topic, payload).add_done_callback(partial(done, sent_at))
            pace(i + 1, sent_at)
    else:
        for _ in range(run.num_records):
            send(topic, payload).add_done_callback(partial(done, clock()))
    producer.flush()
    if not completions.all_done.wait(CALLBACKS_TIMEOUT_S):
        raise RuntimeError(f"the producer's callbacks did not all run within {CALLBACKS_TIMEOUT_S} s of its flush")
    return clock() - start


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
