"""The comparison's workloads against NATS JetStream and Redis Streams, one workload per process.

    python -m tests.bench.peers nats|redis produce|consume|e2e --servers ... --stream S --num-records N
        --record-size B [--rate R] [--replicas 3]

Each run prints, as its last stdout line, one JSON object with the keys of ``odradek perf ... --json``
(``records``, ``seconds``, ``records_per_sec``, ``mb_per_sec``, and ``latency_ms`` for produce and e2e),
so that ``tests/bench/compare.py`` reads every system alike. What each workload does, per system:

- ``produce``: ``num_records`` records of ``record_size`` bytes as fast as the client goes (or at ``rate``);
  ``latency_ms`` is each record's ack latency (send to acknowledgement). NATS: ``publish_async`` (at most
  4,000 unacknowledged, the client's default window); the stream is created first (file storage,
  ``replicas``). Redis: ``XADD`` pipelined by ``PIPELINE`` records (one round trip per pipeline).
- ``consume``: read ``num_records`` records from the start of the stream. NATS: an ordered push consumer
  (no acks, flow control: JetStream's fastest way to read a stream). Redis: ``XREAD COUNT 1000``.
- ``e2e``: a consumer waits at the end of the stream, then ``num_records`` records are sent at ``rate`` a
  second, one at a time as an application would (NATS: ``publish_async``; Redis: one ``XADD`` each), each
  carrying its send time (``perf_counter_ns``); ``latency_ms`` is send to receipt by the consumer, and
  ``ack_latency_ms`` send to acknowledgement, as ``odradek perf e2e`` measures them.
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

    sub = await js.subscribe(args.stream, cb=on_message, ordered_consumer=True)
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

    sub = await js.subscribe(args.stream, cb=on_message, ordered_consumer=True, deliver_policy=DeliverPolicy.NEW)
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

    def consume() -> None:
        last_id = "$"
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
    producer.xadd(args.stream, {"v": b"start"})  # the stream exists before the reader asks for "$"
    thread.start()
    ready.wait(5)
    time.sleep(0.3)  # the reader's first XREAD BLOCK is in place
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


# ------------------------------------------------------------------------------------------------ main

WORKLOADS = {
    ("nats", "produce"): nats_produce,
    ("nats", "consume"): nats_consume,
    ("nats", "e2e"): nats_e2e,
    ("redis", "produce"): redis_produce,
    ("redis", "consume"): redis_consume,
    ("redis", "e2e"): redis_e2e,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.peers", description=__doc__.split("\n")[0])
    parser.add_argument("system", choices=("nats", "redis"))
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
