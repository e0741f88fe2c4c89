"""``odradek perf consume`` (kafka-consumer-perf-test) and ``odradek perf e2e`` (EndToEndLatency).

``consume`` reads ``num_records`` records of a topic from its earliest offsets, every partition assigned
(no group), counting keys and values as bytes; it stops early when ``timeout_s`` pass without a record.

``e2e`` runs a producer (``linger.ms=0``, like Kafka's tool) and a consumer in the same process (with
``--consumer-process``, the consumer in a child process: ``odradek.perf.e2e_process``): the
consumer is positioned at the end of every partition first, then the producer sends ``num_records``
records at ``rate`` a second, each carrying a run id, its sequence number and its send time (the
``perf_counter`` in ns), after one untimed warm-up record (connections and producer id ready). The consumer
thread records, per record of this run, the time from its send to the ``poll`` that returned it; the
producer's callbacks, the time from its send to its acknowledgement (``ack_latency_ms`` in the JSON).
"""

from __future__ import annotations

import os
import struct
import threading
import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

from log import trace
from odradek.perf.stats import Recorder, Throttle

POLL_MS = 200
E2E_SWITCH_INTERVAL_S = 0.0005  # the tool's threads (sender, fetcher, poller) hand records on without waiting 5 ms

# e2e payload header, then padding up to --record-size:
E2E_HEADER = struct.Struct(
    ">"
    "8s"  # run id: random bytes, so that records of other runs on the topic are ignored
    "Q"  # sequence number of the record in the run
    "q"  # send time: time.perf_counter_ns() of the sending process
)


@dataclass(frozen=True, slots=True)
class ConsumeResult:
    records: int
    bytes: int
    seconds: float
    timed_out: bool


def consume(consumer: Any, num_records: int, timeout_s: float, recorder: Recorder) -> ConsumeResult:
    """Poll until ``num_records`` records (or ``timeout_s`` without one); from the first poll on."""
    clock = recorder.clock
    start = last = clock()
    records = nbytes = 0
    poll = consumer.poll
    timed_out = False
    while records < num_records:
        batch = poll(timeout_ms=POLL_MS)
        now = clock()
        if not batch:
            if now - last >= timeout_s:
                timed_out = True
                break
            continue
        last = now
        if len(batch) > num_records - records:  # count exactly num_records, as Kafka's tool does
            batch = batch[: num_records - records]
        batch_bytes = 0
        for r in batch:
            value, key = r.value, r.key
            batch_bytes += (len(value) if value is not None else 0) + (len(key) if key is not None else 0)
        records += len(batch)
        nbytes += batch_bytes
        recorder.record_batch(len(batch), batch_bytes, now)
    return ConsumeResult(records, nbytes, (last if records else clock()) - start, timed_out)


def position_at_end(consumer: Any, partitions: list[Any]) -> None:
    """Assign ``partitions`` at their end, the end offsets resolved before the first record is sent."""
    consumer.assign(partitions)
    consumer.seek_to_end()
    for tp in partitions:
        consumer.position(tp)


class RecordSink(Protocol):
    """Where :class:`E2EConsumer` puts each record's latency (a :class:`~odradek.perf.stats.Recorder`, or the
    samples a consumer process sends back: ``odradek.perf.e2e_process``)."""

    def record(self, latency_ms: float, nbytes: int, now: float, records: int = 1) -> None: ...


class E2EConsumer(threading.Thread):
    """Polls the consumer (which only this thread touches once started) and records each of the run's
    records as it arrives; stops at ``num_records`` or when ``stop`` is set."""

    def __init__(self, consumer: Any, run_id: bytes, num_records: int, recorder: RecordSink,
                 clock_ns: Callable[[], int]) -> None:  # fmt: skip
        super().__init__(name="odradek-perf-e2e-consumer", daemon=True)
        self.consumer = consumer
        self.run_id = run_id
        self.num_records = num_records
        self.recorder = recorder
        self.clock_ns = clock_ns
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.seen: set[int] = set()
        self.duplicates = 0

    def run(self) -> None:
        try:
            while len(self.seen) < self.num_records and not self.stop.is_set():
                batch = self.consumer.poll(timeout_ms=POLL_MS)
                if batch:
                    self._record(batch)
        except BaseException as exc:  # reported by the main thread
            self.error = exc

    def _record(self, batch: list[Any]) -> None:
        now_ns = self.clock_ns()
        now = now_ns / 1e9
        header = E2E_HEADER
        for r in batch:
            value = r.value
            if value is None or len(value) < header.size:
                continue
            run_id, seq, sent_ns = header.unpack_from(value)
            if run_id != self.run_id:
                continue
            if seq in self.seen:
                self.duplicates += 1
                continue
            self.seen.add(seq)
            self.recorder.record((now_ns - sent_ns) / 1e6, len(value), now)
            if trace.ON:
                trace.record(now_ns, "e2e", r.topic, r.partition, r.offset, sent_ns)


def e2e_payload(run_id: bytes, seq: int, sent_ns: int, padding: bytes) -> bytes:
    return E2E_HEADER.pack(run_id, seq, sent_ns) + padding


class SendErrors:
    """Delivery failures, counted on the producer's sender thread (read after ``flush``), and the ack
    latency of every delivered record: from its ``send`` to its future's completion (``acks_ms``)."""

    def __init__(self, clock_ns: Callable[[], int] = time.perf_counter_ns) -> None:
        self.count = 0
        self.first: BaseException | None = None
        self.clock_ns = clock_ns
        self.acks_ms = array("d")

    def done(self, sent_ns: int, future: Any) -> None:
        now_ns = self.clock_ns()
        error = future.exception()
        if error is not None:
            self.count += 1
            if self.first is None:
                self.first = error
            return
        self.acks_ms.append((now_ns - sent_ns) / 1e6)
        if trace.ON:
            md = future.result()
            trace.record(now_ns, "ack", md.topic, md.partition, md.offset, sent_ns)


def e2e_produce(producer: Any, topic: str, run_id: bytes, num_records: int, record_size: int, rate: float,
                clock_ns: Callable[[], int], errors: SendErrors) -> float:  # fmt: skip
    """Send the run's records at ``rate`` a second and flush; returns the time of the first send (s)."""
    padding = b"x" * max(0, record_size - E2E_HEADER.size)
    first = clock_ns() / 1e9
    throttle = Throttle(rate, first)
    for seq in range(num_records):
        sent_ns = clock_ns()
        future = producer.send(topic, e2e_payload(run_id, seq, sent_ns, padding))
        future.add_done_callback(partial(errors.done, sent_ns))
        throttle.pace(seq + 1, sent_ns / 1e9)
    producer.flush()
    return first


def new_run_id() -> bytes:
    return os.urandom(8)
