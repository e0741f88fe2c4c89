"""The comparison's workloads against NATS JetStream, Redis Streams, and Odradek's Kafka listener through a
stock Kafka client (librdkafka, as confluent-kafka), one workload per process.

    python -m tests.bench.peers nats|redis|kafka produce|consume|e2e --servers ... --stream S --num-records N
        --record-size B [--rate R] [--replicas 3]

Each run prints, as its last stdout line, one JSON object with the keys of ``odradek perf ... --json``
(``records``, ``seconds``, ``records_per_sec``, ``mb_per_sec``, and ``latency_ms`` for produce and e2e),
so that ``tests/bench/compare.py`` reads every system alike. What each workload does, per system:

- ``produce``: ``num_records`` records of ``record_size`` bytes as fast as the client goes (or at ``rate``);
  ``latency_ms`` is each record's ack latency (send to acknowledgement). NATS: ``publish_async`` (at most
  4,000 unacknowledged, the client's default window); the stream is created first (file storage,
  ``replicas``). Redis: ``XADD`` pipelined by ``PIPELINE`` records (one round trip per pipeline). Kafka:
  ``produce`` then ``poll(0)`` per record to partition 0, librdkafka's defaults (``linger.ms`` 5, batches up
  to 10,000 records / 1 MB) but ``acks=all`` and ``enable.idempotence=true``, which is what
  ``odradek perf produce`` runs with (the Odradek producer's defaults); the ack latency is taken in the
  delivery callback, from the send time the record carries. One untimed warm-up record first (see
  ``_kafka_warm_up``; ``odradek perf produce`` has none: its own start-up is in its timing; a Kafka consume
  then counts the 7-byte warm-up record as the first of its ``num_records``).
- ``consume``: read ``num_records`` records from the start of the stream. NATS: an ordered push consumer
  (no acks, flow control: JetStream's fastest way to read a stream). Redis: ``XREAD COUNT 1000``. Kafka:
  partition 0 assigned at its first offset (no group joined, as ``odradek perf consume`` assigns), ``consume`` of
  up to 1,000 records a call, librdkafka's consumer defaults.
- ``e2e``: a consumer waits at the end of the stream, then ``num_records`` records are sent at ``rate`` a
  second, one at a time as an application would (NATS: ``publish_async``; Redis: one ``XADD`` each; Kafka:
  ``produce``), each carrying its send time (``perf_counter_ns``); ``latency_ms`` is send to receipt by the
  consumer, and ``ack_latency_ms`` send to acknowledgement, as ``odradek perf e2e`` measures them. Kafka: as
  ``odradek perf e2e``, producer and consumer in one process, the consumer on its own thread (``poll`` of one
  record, so none waits behind a batch), partition 0 assigned at its end offset, one untimed warm-up record
  first (seen by the consumer before the timing starts). The producer: ``acks=all``,
  ``enable.idempotence=true`` (as Odradek's producer) and ``linger.ms=0`` (what ``odradek perf e2e`` sets,
  and what a Kafka user picks for latency: each record is sent at once instead of waiting up to 5 ms for
  company); the pacing waits in ``poll`` so acknowledgements are timed when they come. The consumer:
  librdkafka's defaults ``fetch.wait.max.ms=500`` and ``fetch.min.bytes=1`` (Odradek's consumer has the
  same), so a fetch waiting at the end is answered as soon as a record is committed.

The Kafka peer does not create its topic (``--replicas`` is for NATS): the harness creates it with
``odradek topics create`` first, 1 partition, replication factor 3 or 1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import struct
import sys
import threading
import time
from array import array
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from odradek.perf.stats import Throttle, latency_summary, result_document

STAMP = struct.Struct(">Qq")  # sequence number, send time (perf_counter_ns)
PIPELINE = 100  # Redis produce: records per pipelined round trip
NATS_PENDING = 4000  # NATS produce: unacknowledged publishes at most (nats-py's default)
IDLE_TIMEOUT_S = 10.0  # a consumer that sees nothing new this long gives up


def payload(seq: int, size: int) -> bytes:
    return STAMP.pack(seq, time.perf_counter_ns()) + b"x" * max(0, size - STAMP.size)


def document(records: int, nbytes: int, seconds: float, latencies: array[float] | None, **extra: Any) -> dict[str, Any]:
    latency = None if latencies is None else latency_summary(latencies)
    return result_document(records, nbytes, seconds, latency, **extra)


# ------------------------------------------------------------------------------------------------ NATS


async def _nats_connect(servers: str) -> Any:
    import nats

    return await nats.connect(servers.split(","), connect_timeout=5, max_reconnect_attempts=3)


async def nats_ensure_stream(js: Any, stream: str, replicas: int) -> None:
    from nats.js.api import StorageType, StreamConfig

    config = StreamConfig(name=stream, subjects=[stream], storage=StorageType.FILE, num_replicas=replicas)
    deadline = time.monotonic() + 30
    while True:  # the meta leader of a fresh cluster may still be being elected
        try:
            await js.add_stream(config)
            return
        except Exception:
            if time.monotonic() >= deadline:
                raise
            await asyncio.sleep(0.2)


async def nats_subscribe(js: Any, stream: str, on_message: Callable[[Any], Awaitable[None]], **options: Any) -> Any:
    """An ordered push consumer of ``stream`` (whose subject is its name), named, not looked up by subject: in
    a 3-node cluster the look-up right after the stream was made could go to a server that did not know it
    yet (``NotFoundError``, a CI run's failure). Waits, bounded, while the stream is not known yet."""
    from nats.js.errors import NotFoundError

    deadline = time.monotonic() + 30
    while True:
        try:
            return await js.subscribe(stream, stream=stream, cb=on_message, ordered_consumer=True, **options)
        except NotFoundError:
            if time.monotonic() >= deadline:
                raise
            await asyncio.sleep(0.2)


async def nats_produce(args: argparse.Namespace) -> dict[str, Any]:
    nc = await _nats_connect(args.servers)
    js = nc.jetstream(publish_async_max_pending=NATS_PENDING)
    await nats_ensure_stream(js, args.stream, args.replicas)
    acks = array("d")
    errors = 0

    def done(sent_ns: int, future: asyncio.Future[Any]) -> None:
        nonlocal errors
        if future.cancelled() or future.exception() is not None:
            errors += 1
        else:
            acks.append((time.perf_counter_ns() - sent_ns) / 1e6)

    start = time.perf_counter()
    throttle = Throttle(args.rate, start)
    for seq in range(args.num_records):
        sent_ns = time.perf_counter_ns()
        future = await js.publish_async(args.stream, payload(seq, args.record_size))
        future.add_done_callback(lambda f, s=sent_ns: done(s, f))
        if throttle.active:
            await _pace(throttle, seq + 1)
    await asyncio.wait_for(js.publish_async_completed(), 60)
    seconds = time.perf_counter() - start
    await nc.close()
    return document(len(acks), len(acks) * args.record_size, seconds, acks, errors=errors)


async def _pace(throttle: Throttle, done: int) -> None:
    ahead = throttle.start + done / throttle.rate - time.perf_counter()
    if ahead > throttle.min_sleep_s:
        await asyncio.sleep(ahead)


async def nats_consume(args: argparse.Namespace) -> dict[str, Any]:
    nc = await _nats_connect(args.servers)
    js = nc.jetstream()
    records = nbytes = 0
    finished = asyncio.Event()
    start = last = time.perf_counter()

    async def on_message(msg: Any) -> None:
        nonlocal records, nbytes, last
        records += 1
        nbytes += len(msg.data)
        last = time.perf_counter()
        if records >= args.num_records:
            finished.set()

    sub = await nats_subscribe(js, args.stream, on_message)
    await _wait_progress(finished, lambda: records)
    await sub.unsubscribe()
    await nc.close()
    return document(records, nbytes, last - start, None)


async def _wait_progress(finished: asyncio.Event, count: Any) -> None:
    """Until ``finished``, or ``IDLE_TIMEOUT_S`` without a new record."""
    seen, since = count(), time.monotonic()
    while not finished.is_set():
        try:
            await asyncio.wait_for(finished.wait(), 0.2)
        except TimeoutError:
            if count() != seen:
                seen, since = count(), time.monotonic()
            elif time.monotonic() - since > IDLE_TIMEOUT_S:
                return


async def nats_e2e(args: argparse.Namespace) -> dict[str, Any]:
    from nats.js.api import DeliverPolicy

    nc = await _nats_connect(args.servers)
    js = nc.jetstream(publish_async_max_pending=NATS_PENDING)
    await nats_ensure_stream(js, args.stream, args.replicas)
    e2e, acks = array("d"), array("d")
    seen: set[int] = set()
    finished = asyncio.Event()
    first = last = 0.0

    async def on_message(msg: Any) -> None:
        nonlocal last
        now_ns = time.perf_counter_ns()
        seq, sent_ns = STAMP.unpack_from(msg.data)
        if seq not in seen:
            seen.add(seq)
            e2e.append((now_ns - sent_ns) / 1e6)
            last = now_ns / 1e9
        if len(seen) >= args.num_records:
            finished.set()

    sub = await nats_subscribe(js, args.stream, on_message, deliver_policy=DeliverPolicy.NEW)
    await nc.flush()

    def acked(sent_ns: int, future: asyncio.Future[Any]) -> None:
        if not future.cancelled() and future.exception() is None:
            acks.append((time.perf_counter_ns() - sent_ns) / 1e6)

    first = time.perf_counter()
    throttle = Throttle(args.rate, first)
    for seq in range(args.num_records):
        data = payload(seq, args.record_size)
        sent_ns = STAMP.unpack_from(data)[1]
        future = await js.publish_async(args.stream, data)
        future.add_done_callback(lambda f, s=sent_ns: acked(s, f))
        await _pace(throttle, seq + 1)
    await asyncio.wait_for(js.publish_async_completed(), 60)
    await _wait_progress(finished, lambda: len(seen))
    await sub.unsubscribe()
    await nc.close()
    return document(len(e2e), len(e2e) * args.record_size, max(0.0, last - first), e2e,
                    sent=args.num_records, ack_latency_ms=latency_summary(acks))  # fmt: skip


# ----------------------------------------------------------------------------------------------- Redis


def _redis(servers: str) -> Any:
    import redis

    host, port = servers.split(",")[0].rsplit(":", 1)
    return redis.Redis(host=host, port=int(port), socket_timeout=30)


def redis_produce(args: argparse.Namespace) -> dict[str, Any]:
    client = _redis(args.servers)
    acks = array("d")
    start = time.perf_counter()
    throttle = Throttle(args.rate, start)
    seq = 0
    while seq < args.num_records:
        pipe = client.pipeline(transaction=False)
        sent = []
        for _ in range(min(PIPELINE, args.num_records - seq)):
            data = payload(seq, args.record_size)
            sent.append(STAMP.unpack_from(data)[1])
            pipe.xadd(args.stream, {"v": data})
            seq += 1
        pipe.execute()
        now_ns = time.perf_counter_ns()
        acks.extend((now_ns - s) / 1e6 for s in sent)
        throttle.pace(seq, now_ns / 1e9)
    seconds = time.perf_counter() - start
    return document(len(acks), len(acks) * args.record_size, seconds, acks)


def redis_consume(args: argparse.Namespace) -> dict[str, Any]:
    client = _redis(args.servers)
    records = nbytes = 0
    last_id = "0"
    start = last = time.perf_counter()
    while records < args.num_records:
        answer = client.xread({args.stream: last_id}, count=1000, block=int(IDLE_TIMEOUT_S * 1000))
        if not answer:
            break
        for entry_id, fields in answer[0][1]:
            last_id = entry_id
            records += 1
            nbytes += len(fields[b"v"])
        last = time.perf_counter()
    return document(records, nbytes, last - start, None)


def redis_e2e(args: argparse.Namespace) -> dict[str, Any]:
    producer, reader = _redis(args.servers), _redis(args.servers)
    e2e, acks = array("d"), array("d")
    seen: set[int] = set()
    last = [0.0]
    ready = threading.Event()
    stop = threading.Event()

    # The reader starts after the entry written here, by its id: "$" would be taken afresh by every XREAD, so
    # a record written between one XREAD's timeout and the next was skipped (a 49-of-50 run in CI).
    start_id = producer.xadd(args.stream, {"v": b"start"})

    def consume() -> None:
        last_id = start_id
        ready.set()
        idle_since = time.monotonic()
        while len(seen) < args.num_records and not stop.is_set():
            answer = reader.xread({args.stream: last_id}, count=1000, block=200)
            now_ns = time.perf_counter_ns()
            if not answer:
                if time.monotonic() - idle_since > IDLE_TIMEOUT_S:
                    return
                continue
            idle_since = time.monotonic()
            for entry_id, fields in answer[0][1]:
                last_id = entry_id
                seq, sent_ns = STAMP.unpack_from(fields[b"v"])
                if seq not in seen:
                    seen.add(seq)
                    e2e.append((now_ns - sent_ns) / 1e6)
            last[0] = now_ns / 1e9

    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    ready.wait(5)
    first = time.perf_counter()
    throttle = Throttle(args.rate, first)
    for seq in range(args.num_records):
        data = payload(seq, args.record_size)
        sent_ns = STAMP.unpack_from(data)[1]
        producer.xadd(args.stream, {"v": data})
        now_ns = time.perf_counter_ns()
        acks.append((now_ns - sent_ns) / 1e6)
        throttle.pace(seq + 1, now_ns / 1e9)
    thread.join(IDLE_TIMEOUT_S + 5)
    stop.set()
    return document(len(e2e), len(e2e) * args.record_size, max(0.0, last[0] - first), e2e,
                    sent=args.num_records, ack_latency_ms=latency_summary(acks))  # fmt: skip


# ----------------------------------------------------------------------------------------------- Kafka


def _kafka_producer(servers: str, **settings: Any) -> Any:
    from confluent_kafka import Producer

    return Producer({"bootstrap.servers": servers, "acks": "all", "enable.idempotence": True, **settings})


def _kafka_consumer(servers: str) -> Any:
    from confluent_kafka import Consumer

    # confluent-kafka requires a group.id; the partition is assigned (never subscribed), so no group is joined
    return Consumer({"bootstrap.servers": servers, "group.id": "bench-peer", "enable.auto.commit": False})


def _kafka_ack_recorder(acks: array[float], failures: list[str]) -> Any:
    """A delivery callback: each record's ack latency from the send time it carries (as in the e2e stamp)."""

    def delivered(error: Any, message: Any) -> None:
        now_ns = time.perf_counter_ns()
        if error is not None:
            failures.append(str(error))
        else:
            acks.append((now_ns - STAMP.unpack_from(message.value())[1]) / 1e6)

    return delivered


def _kafka_send(producer: Any, topic: str, data: bytes, on_delivery: Any) -> None:
    """``produce``, serving callbacks while librdkafka's queue is full (as an application must)."""
    while True:
        try:
            producer.produce(topic, data, partition=0, on_delivery=on_delivery)
            break
        except BufferError:
            producer.poll(0.01)
    producer.poll(0)


def _kafka_warm_up(producer: Any, topic: str) -> None:
    """One untimed record (shorter than ``STAMP``: the e2e consumer skips it), as ``odradek perf e2e`` sends:
    the metadata, the connection to the leader and the producer id come before the timing. librdkafka's
    idempotent producer asks for its id on a 500 ms retry timer when no connection is up at that moment
    (``debug=eos``: "Coordinator not up", then InitProducerId, answered in ~20 ms, half a second later):
    a start-up stall that says nothing of the data path, taken out of produce's timing too."""
    producer.produce(topic, b"warm-up", partition=0)
    _kafka_flush(producer, 1)


def _kafka_flush(producer: Any, records: int) -> None:
    left = producer.flush(60)
    if left:
        raise RuntimeError(f"{left} of {records} records still unacknowledged 60 s after the last send")


def kafka_produce(args: argparse.Namespace) -> dict[str, Any]:
    producer = _kafka_producer(args.servers)
    _kafka_warm_up(producer, args.stream)
    acks = array("d")
    failures: list[str] = []
    delivered = _kafka_ack_recorder(acks, failures)
    start = time.perf_counter()
    throttle = Throttle(args.rate, start, sleep=lambda s: _kafka_wait(producer, s))
    for seq in range(args.num_records):
        _kafka_send(producer, args.stream, payload(seq, args.record_size), delivered)
        if throttle.active:
            throttle.pace(seq + 1, time.perf_counter())
    _kafka_flush(producer, args.num_records)
    seconds = time.perf_counter() - start
    return document(len(acks), len(acks) * args.record_size, seconds, acks, errors=len(failures))


def _kafka_wait(producer: Any, seconds: float) -> None:
    """Pacing's wait spent in ``poll``, so that acknowledgements are taken (and timed) as they come."""
    end = time.perf_counter() + seconds
    while (left := end - time.perf_counter()) > 0:
        producer.poll(left)


def _kafka_assign(consumer: Any, topic: str, at_end: bool) -> None:
    """Partition 0 assigned (no group: as ``odradek perf`` assigns), at its start or at its current end."""
    from confluent_kafka import OFFSET_BEGINNING, TopicPartition

    offset = OFFSET_BEGINNING
    if at_end:
        offset = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    consumer.assign([TopicPartition(topic, 0, offset)])


def kafka_consume(args: argparse.Namespace) -> dict[str, Any]:
    consumer = _kafka_consumer(args.servers)
    _kafka_assign(consumer, args.stream, at_end=False)
    records = nbytes = 0
    start = last = time.perf_counter()
    idle_since = time.monotonic()
    while records < args.num_records and time.monotonic() - idle_since < IDLE_TIMEOUT_S:
        batch = consumer.consume(min(1000, args.num_records - records), 0.2)
        values = [m.value() for m in batch if m.error() is None]
        if values:
            records += len(values)
            nbytes += sum(map(len, values))
            last, idle_since = time.perf_counter(), time.monotonic()
    consumer.close()
    return document(records, nbytes, last - start, None)


def kafka_e2e(args: argparse.Namespace) -> dict[str, Any]:
    producer = _kafka_producer(args.servers, **{"linger.ms": 0})
    consumer = _kafka_consumer(args.servers)
    _kafka_assign(consumer, args.stream, at_end=True)
    e2e, acks = array("d"), array("d")
    failures: list[str] = []
    seen: set[int] = set()
    last = [0.0]
    stop = threading.Event()
    warmed = threading.Event()

    def consume() -> None:
        idle_since = time.monotonic()
        while len(seen) < args.num_records and not stop.is_set():
            message = consumer.poll(0.1)
            now_ns = time.perf_counter_ns()
            if message is None or message.error() is not None:
                if warmed.is_set() and time.monotonic() - idle_since > IDLE_TIMEOUT_S:
                    return
                continue
            idle_since = time.monotonic()
            value = message.value()
            if len(value) < STAMP.size:  # the warm-up record
                warmed.set()
                continue
            seq, sent_ns = STAMP.unpack_from(value)
            if seq not in seen:
                seen.add(seq)
                e2e.append((now_ns - sent_ns) / 1e6)
            last[0] = now_ns / 1e9

    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    _kafka_warm_up(producer, args.stream)  # and the consumer's first fetches, which wait for it
    if not warmed.wait(IDLE_TIMEOUT_S):
        stop.set()
        raise RuntimeError(f"the consumer did not see the warm-up record within {IDLE_TIMEOUT_S} s")
    delivered = _kafka_ack_recorder(acks, failures)
    first = time.perf_counter()
    throttle = Throttle(args.rate, first, sleep=lambda s: _kafka_wait(producer, s))
    for seq in range(args.num_records):
        _kafka_send(producer, args.stream, payload(seq, args.record_size), delivered)
        throttle.pace(seq + 1, time.perf_counter())
    _kafka_flush(producer, args.num_records)
    thread.join(IDLE_TIMEOUT_S + 5)
    stop.set()
    thread.join(5)
    consumer.close()
    return document(len(e2e), len(e2e) * args.record_size, max(0.0, last[0] - first), e2e,
                    sent=args.num_records, errors=len(failures), ack_latency_ms=latency_summary(acks))  # fmt: skip


# ------------------------------------------------------------------------------------------------ main

Document = dict[str, Any]
WORKLOADS: dict[tuple[str, str], Callable[[argparse.Namespace], Document | Coroutine[Any, Any, Document]]] = {
    ("nats", "produce"): nats_produce,
    ("nats", "consume"): nats_consume,
    ("nats", "e2e"): nats_e2e,
    ("redis", "produce"): redis_produce,
    ("redis", "consume"): redis_consume,
    ("redis", "e2e"): redis_e2e,
    ("kafka", "produce"): kafka_produce,
    ("kafka", "consume"): kafka_consume,
    ("kafka", "e2e"): kafka_e2e,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.peers", description=__doc__.split("\n")[0])
    parser.add_argument("system", choices=("nats", "redis", "kafka"))
    parser.add_argument("workload", choices=("produce", "consume", "e2e"))
    parser.add_argument("--servers", required=True, help="HOST:PORT[,HOST:PORT...]")
    parser.add_argument("--stream", required=True, help="the stream (NATS: also its subject; Redis: its key)")
    parser.add_argument("--num-records", type=int, required=True)
    parser.add_argument("--record-size", type=int, default=100)
    parser.add_argument("--rate", type=float, default=-1, help="records/s, -1: unthrottled")
    parser.add_argument("--replicas", type=int, default=3, help="NATS: the stream's replicas")
    args = parser.parse_args(argv)
    sys.setswitchinterval(0.0005)  # as odradek perf e2e: thread hand-offs without Python's 5 ms wait
    run = WORKLOADS[(args.system, args.workload)]
    result = run(args)
    doc = asyncio.run(result) if asyncio.iscoroutine(result) else result
    print(json.dumps(doc), flush=True)
    received: int = doc["records"]
    if args.workload != "produce" and received < args.num_records:  # as odradek perf: a loss fails the run
        print(f"{args.num_records - received} of {args.num_records} records never reached the consumer",
              file=sys.stderr)  # fmt: skip
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
