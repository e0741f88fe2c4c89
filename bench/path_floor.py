"""The floor under the whole path of an acks=all record at RF 3, in Python: Odradek's processes and messages with
none of a broker's work.

    python -m bench.path_floor [--rates 1000,10000] [--records 5000] [--modes at-once,held] [--repeat 2] [--json]

``bench.rpc_floor`` measures one hop; this measures the record's whole way through the same processes as an
acks=all record of a 1-partition RF 3 topic (docs/LATENCY.md, "The path of an acks=all record"): a client
process whose producer sends records to a leader process, two follower processes whose long-polling fetches
the leader answers with each append and which report their new position with their next fetch, a high
watermark that moves when both have reported, and a parked consumer fetch (on its own connection of the same
client process) answered when it moves, the producer's acknowledgement then. Every process is one
``asyncio`` loop; the servers are ``asyncio.Protocol``s (what the broker's framed listeners are); messages are
length-prefixed frames on loopback TCP; the leader and followers append each batch to a file (the page cache)
and keep it in memory. What the broker does beyond that (record batch validation, offsets in a batch, indexes,
producer state, fetch sessions, purgatories, metrics, the sender and fetcher threads of the clients) is absent.
It answers one question for the latency work: how close can *this design* (one Python process per broker,
four messages on the way from producer to consumer) come to a peer, whatever its per-request work costs?

Two producer modes:

    at-once   every record is a Produce of its own, sent when it is due (nats-py's way)
    held      a record waits while its partition's Produce is in flight and then goes with the others
              waiting (the rule of Odradek's accumulator)

Two clients, each one process with its producer and its consumer:

    asyncio   one ``asyncio`` loop (nats-py's way)
    threads   the threads of Odradek's client and ``odradek perf e2e``: the application thread hands each
              record to a sender thread, a reader thread takes the producer's answers and wakes the sender,
              the consumer's reader thread takes each fetch's answer, sends the next fetch and hands the
              records to the thread in ``poll()``

Records are 100 B, each stamped with ``time.perf_counter_ns`` (``CLOCK_MONOTONIC``, one clock for every
process of the machine) as it is handed to the producer, as ``odradek perf e2e`` stamps its ``send()``; the
consumer's receipt minus that stamp is the end-to-end latency. Records are paced by their due time (the asyncio
client's timers wake up to a millisecond late, which delays the send, not the stamp). The first
``--warmup`` records of each run are not counted. The servers' CPU per record comes from ``/proc``. The best
round by p50 of ``--repeat`` is printed, with this machine's hop (``bench.rpc_floor``'s tcp-asyncio round trip)
measured first in the same run: compare figures within one run only. With ``--json`` the last line of stdout is
one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import queue
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any

from bench import rpc_floor
from common.framing import recv_exactly
from odradek.perf.stats import percentile

HEAD = struct.Struct(">IB")  # frame length (kind byte and body), kind
OFFSET = struct.Struct(">q")
STAMP = struct.Struct(">q")
RECORD_BYTES = 100
PRODUCE, ACK, FOLLOWER_FETCH, CONSUMER_FETCH, RECORDS = b"P"[0], b"A"[0], b"f"[0], b"c"[0], b"R"[0]
MODES = ("at-once", "held")
CLIENTS = ("asyncio", "threads")


def _frame(kind: int, body: bytes) -> bytes:
    return HEAD.pack(len(body) + 1, kind) + body


class _Frames(asyncio.Protocol):
    """Length-prefixed frames parsed in ``data_received`` and handed to ``on_frame`` (no task per frame)."""

    transport: asyncio.Transport

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._inbox = bytearray()

    def data_received(self, data: bytes) -> None:
        inbox = self._inbox
        inbox += data
        start = 0
        while len(inbox) - start >= HEAD.size:
            length, kind = HEAD.unpack_from(inbox, start)
            end = start + 4 + length
            if len(inbox) < end:
                break
            self.on_frame(kind, bytes(inbox[start + HEAD.size:end]))
            start = end
        del inbox[:start]

    def on_frame(self, kind: int, body: bytes) -> None:
        raise NotImplementedError

    def send(self, kind: int, body: bytes) -> None:
        self.transport.write(_frame(kind, body))


# ------------------------------------------------------------------------------------------ the leader


class _Leader:
    """The partition: its records (in memory and in a file), the followers' positions, the high watermark, and
    the parked fetches and waiting acknowledgements."""

    def __init__(self, path: str) -> None:
        self.records: list[bytes] = []
        self.file = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.positions: dict[_LeaderConnection, int] = {}
        self.high_watermark = 0
        self.parked_followers: dict[_LeaderConnection, int] = {}
        self.parked_consumers: dict[_LeaderConnection, int] = {}
        self.acks: list[tuple[_LeaderConnection, int]] = []

    def produce(self, conn: _LeaderConnection, body: bytes) -> None:
        os.write(self.file, body)
        self.records.extend(body[i:i + RECORD_BYTES] for i in range(0, len(body), RECORD_BYTES))
        self.acks.append((conn, len(self.records)))
        parked, self.parked_followers = self.parked_followers, {}
        for follower, offset in parked.items():
            follower.send(RECORDS, OFFSET.pack(offset) + b"".join(self.records[offset:]))

    def follower_fetch(self, conn: _LeaderConnection, offset: int) -> None:
        self.positions[conn] = offset
        if len(self.positions) == 2:
            moved = min(self.positions.values())
            if moved > self.high_watermark:
                self.high_watermark = moved
                self._high_watermark_moved()
        if offset < len(self.records):
            conn.send(RECORDS, OFFSET.pack(offset) + b"".join(self.records[offset:]))
        else:
            self.parked_followers[conn] = offset

    def _high_watermark_moved(self) -> None:
        hw = self.high_watermark
        parked, self.parked_consumers = self.parked_consumers, {}
        for consumer, offset in parked.items():  # consumers first, as the broker answers them
            consumer.send(RECORDS, OFFSET.pack(offset) + b"".join(self.records[offset:hw]))
        done = [ack for ack in self.acks if ack[1] <= hw]
        self.acks = [ack for ack in self.acks if ack[1] > hw]
        for producer, end in done:
            producer.send(ACK, OFFSET.pack(end))

    def consumer_fetch(self, conn: _LeaderConnection, offset: int) -> None:
        if offset < self.high_watermark:
            conn.send(RECORDS, OFFSET.pack(offset) + b"".join(self.records[offset:self.high_watermark]))
        else:
            self.parked_consumers[conn] = offset


class _LeaderConnection(_Frames):
    def __init__(self, leader: _Leader) -> None:
        self.leader = leader

    def on_frame(self, kind: int, body: bytes) -> None:
        if kind == PRODUCE:
            self.leader.produce(self, body)
        elif kind == FOLLOWER_FETCH:
            self.leader.follower_fetch(self, OFFSET.unpack(body)[0])
        elif kind == CONSUMER_FETCH:
            self.leader.consumer_fetch(self, OFFSET.unpack(body)[0])
        else:
            raise ValueError(f"unknown frame kind {kind}")


async def _serve_leader(port: int, path: str) -> None:
    leader = _Leader(path)
    server = await asyncio.get_running_loop().create_server(lambda: _LeaderConnection(leader), "127.0.0.1", port)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


# ------------------------------------------------------------------------------------------ a follower


class _Follower(_Frames):
    def __init__(self, path: str) -> None:
        self.file = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.records: list[bytes] = []
        self.lost = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.send(FOLLOWER_FETCH, OFFSET.pack(0))

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.lost.done():
            self.lost.set_result(None)

    def on_frame(self, kind: int, body: bytes) -> None:
        (offset,) = OFFSET.unpack_from(body)
        batch = body[OFFSET.size:]
        if offset != len(self.records):
            raise RuntimeError(f"the leader sent offset {offset}, the follower is at {len(self.records)}")
        os.write(self.file, batch)
        self.records.extend(batch[i:i + RECORD_BYTES] for i in range(0, len(batch), RECORD_BYTES))
        self.send(FOLLOWER_FETCH, OFFSET.pack(len(self.records)))


async def _serve_follower(port: int, path: str) -> None:
    loop = asyncio.get_running_loop()
    _, follower = await loop.create_connection(lambda: _Follower(path), "127.0.0.1", port)
    print("ready", flush=True)
    await follower.lost


# ------------------------------------------------------------------------------------------ the client


class _Producer(_Frames):
    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.waiting: list[bytes] = []
        self.in_flight = False

    def due(self, record: bytes) -> None:
        if self.mode == "at-once":
            self.send(PRODUCE, record)
        elif self.in_flight:
            self.waiting.append(record)
        else:
            self.in_flight = True
            self.send(PRODUCE, record)

    def on_frame(self, kind: int, body: bytes) -> None:
        if self.mode == "held":
            if self.waiting:
                batch, self.waiting = b"".join(self.waiting), []
                self.send(PRODUCE, batch)
            else:
                self.in_flight = False


class _Consumer(_Frames):
    def __init__(self, total: int) -> None:
        self.total = total
        self.offset = 0
        self.latencies_ns: list[int] = []
        self.done = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.send(CONSUMER_FETCH, OFFSET.pack(0))

    def on_frame(self, kind: int, body: bytes) -> None:
        now = time.perf_counter_ns()
        batch = body[OFFSET.size:]
        for i in range(0, len(batch), RECORD_BYTES):
            self.latencies_ns.append(now - STAMP.unpack_from(batch, i)[0])
        self.offset += len(batch) // RECORD_BYTES
        if self.offset >= self.total:
            self.done.set_result(None)
        else:
            self.send(CONSUMER_FETCH, OFFSET.pack(self.offset))


def _waits(rate: int, records: int) -> Iterator[float]:
    """Before each of ``records`` records at ``rate`` a second: the seconds until it is due (0 when late)."""
    interval_ns = 1_000_000_000 // rate
    started = time.perf_counter_ns()
    for sent in range(records):
        yield max(0, started + sent * interval_ns - time.perf_counter_ns()) / 1e9


def _stamped(padding: bytes) -> bytes:
    """A record stamped now, as it is handed to the producer (``odradek perf e2e`` stamps its ``send()``)."""
    return STAMP.pack(time.perf_counter_ns()) + padding


async def _client(port: int, mode: str, rate: int, records: int) -> list[int]:
    loop = asyncio.get_running_loop()
    consumer: _Consumer
    _, consumer = await loop.create_connection(lambda: _Consumer(records), "127.0.0.1", port)
    producer: _Producer
    _, producer = await loop.create_connection(lambda: _Producer(mode), "127.0.0.1", port)
    padding = os.urandom(RECORD_BYTES - STAMP.size)
    for wait_s in _waits(rate, records):
        if wait_s > 0:
            await asyncio.sleep(wait_s)
        producer.due(_stamped(padding))
    await asyncio.wait_for(consumer.done, 60)
    producer.transport.close()
    consumer.transport.close()
    return consumer.latencies_ns


def _read_frame(sock: socket.socket) -> tuple[int, bytes]:
    """One frame from a blocking socket; ``ConnectionError`` at its end."""
    head = recv_exactly(sock, HEAD.size, None)
    if head is None:
        raise ConnectionError("the leader closed the connection")
    length, kind = HEAD.unpack(head)
    body = recv_exactly(sock, length - 1, None) if length > 1 else bytearray()
    if body is None:
        raise ConnectionError("the leader closed the connection inside a frame")
    return kind, bytes(body)


def _connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=None)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _threaded_client(port: int, mode: str, rate: int, records: int) -> list[int]:
    """The client with the threads of Odradek's (``odradek perf e2e``): the application thread hands each record
    to a sender thread, a reader thread takes the producer's answers and wakes the sender; the consumer's reader
    thread takes each fetch's answer, sends the next fetch and hands the records to the thread in ``poll()``."""
    producing, consuming = _connect(port), _connect(port)
    ready = threading.Condition()
    waiting: list[bytes] = []
    state = {"in_flight": False, "closed": False}
    answers: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
    latencies: list[int] = []

    def sender() -> None:
        while True:
            with ready:
                while not state["closed"] and not (waiting and (mode == "at-once" or not state["in_flight"])):
                    ready.wait()
                if state["closed"]:
                    return
                if mode == "at-once":
                    frames = b"".join(_frame(PRODUCE, record) for record in waiting)
                else:
                    frames, state["in_flight"] = _frame(PRODUCE, b"".join(waiting)), True
                waiting.clear()
            producing.sendall(frames)

    def producer_reader() -> None:
        try:
            while True:
                _read_frame(producing)
                with ready:
                    state["in_flight"] = False
                    ready.notify()
        except OSError:
            return

    def consumer_reader() -> None:
        offset = 0
        try:
            consuming.sendall(_frame(CONSUMER_FETCH, OFFSET.pack(offset)))
            while offset < records:
                _, body = _read_frame(consuming)
                offset += (len(body) - OFFSET.size) // RECORD_BYTES
                if offset < records:
                    consuming.sendall(_frame(CONSUMER_FETCH, OFFSET.pack(offset)))
                answers.put(body)
        except OSError:
            answers.put(None)

    def poller() -> None:
        while len(latencies) < records:
            body = answers.get(timeout=60)
            if body is None:
                return
            now = time.perf_counter_ns()
            latencies.extend(now - STAMP.unpack_from(body, i)[0] for i in range(OFFSET.size, len(body), RECORD_BYTES))

    threads = [threading.Thread(target=t, daemon=True) for t in (sender, producer_reader, consumer_reader, poller)]
    for thread in threads:
        thread.start()
    padding = os.urandom(RECORD_BYTES - STAMP.size)
    for wait_s in _waits(rate, records):
        if wait_s > 0:
            time.sleep(wait_s)
        with ready:
            waiting.append(_stamped(padding))
            ready.notify()
    threads[3].join(60)
    with ready:
        state["closed"] = True
        ready.notify()
    for sock in (producing, consuming):
        sock.shutdown(socket.SHUT_RDWR)
        sock.close()
    for thread in threads:
        thread.join(10)
    return latencies


# ------------------------------------------------------------------------------------------ the run


def _start(args: list[str]) -> subprocess.Popen[str]:
    process = subprocess.Popen([sys.executable, "-m", "bench.path_floor", *args], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    if process.stdout.readline().strip() != "ready":
        process.kill()
        process.wait(10)
        raise RuntimeError(f"bench.path_floor {' '.join(args)} did not start")
    return process


def measure(mode: str, rate: int, records: int, warmup: int, client: str = "asyncio") -> dict[str, float]:
    """One run: fresh leader and followers, ``warmup + records`` records at ``rate`` from one of ``CLIENTS``; the
    measured records' end-to-end p50/p99 and the three servers' CPU per record."""
    port = rpc_floor.free_port()
    with tempfile.TemporaryDirectory(prefix="path-floor-") as data:
        servers: list[subprocess.Popen[str]] = []
        try:
            servers.append(_start(["--serve", "leader", "--port", str(port), "--data", f"{data}/leader"]))
            for n in (1, 2):
                servers.append(_start(["--serve", "follower", "--port", str(port), "--data", f"{data}/follower{n}"]))
            before = sum(rpc_floor.cpu_s(s.pid) for s in servers)
            if client == "threads":
                latencies = _threaded_client(port, mode, rate, warmup + records)[warmup:]
            else:
                latencies = asyncio.run(_client(port, mode, rate, warmup + records))[warmup:]
            spent_s = sum(rpc_floor.cpu_s(s.pid) for s in servers) - before
        finally:
            for server in servers:
                rpc_floor.stop(server)
    if len(latencies) != records:
        raise RuntimeError(f"{len(latencies)} records measured of {records}")
    times = sorted(n / 1e6 for n in latencies)
    return {"p50_ms": percentile(times, 0.50), "p99_ms": percentile(times, 0.99),
            "server_cpu_us": spent_s / (warmup + records) * 1e6}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.path_floor", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", default="1000,10000", help="records a second, comma-separated")
    parser.add_argument("--records", type=int, default=5000, help="measured records per run (default 5000)")
    parser.add_argument("--warmup", type=int, default=500, help="records sent first and not counted (default 500)")
    parser.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of {', '.join(MODES)}")
    parser.add_argument("--clients", default=",".join(CLIENTS), help=f"comma-separated, of {', '.join(CLIENTS)}")
    parser.add_argument("--repeat", type=int, default=2, help="rounds; the best p50 of each is kept")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--serve", choices=("leader", "follower"), help=argparse.SUPPRESS)  # the children
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        serve = _serve_leader if args.serve == "leader" else _serve_follower
        asyncio.run(serve(args.port, args.data))
        return 0
    modes = [m for m in args.modes.split(",") if m]
    if not modes or any(m not in MODES for m in modes):
        parser.error(f"--modes: choose from {', '.join(MODES)}")
    clients = [c for c in args.clients.split(",") if c]
    if not clients or any(c not in CLIENTS for c in clients):
        parser.error(f"--clients: choose from {', '.join(CLIENTS)}")
    try:
        rates = [int(r) for r in args.rates.split(",") if r]
    except ValueError:
        parser.error(f"--rates: whole numbers of records a second, not {args.rates!r}")
    if not rates or min(rates) <= 0 or args.records <= 0 or args.warmup < 0:
        parser.error("--rates and --records must be positive, --warmup not negative")
    hop = rpc_floor.measure("tcp-asyncio", 1000, 200, 0.001)
    print(f"this machine's hop (bench.rpc_floor tcp-asyncio): p50 {hop['p50_ms']:.3f} ms", file=sys.stderr)
    def one(key: str) -> dict[str, float]:
        client, mode, rate = key.split()
        return measure(mode, int(rate), args.records, args.warmup, client)

    keys = [f"{client} {mode} {rate}" for rate in rates for client in clients for mode in modes]
    best = rpc_floor.best_of_rounds(args.repeat, keys, one)
    load = os.getloadavg()
    print(f"{args.records} records of {RECORD_BYTES} B a run (after {args.warmup} not counted); best of "
          f"{args.repeat} rounds by p50; this machine's hop p50 {hop['p50_ms']:.3f} ms; load average "
          f"{load[0]:.2f} at the end")  # fmt: skip
    header = f"{'client':<8} {'mode':<8} {'rec/s':>7} {'e2e p50 ms':>11} {'e2e p99 ms':>11} {'servers µs/rec':>15}"
    print(header)
    print("-" * len(header))
    for key, f in best.items():
        client, mode, rate_text = key.split()
        print(f"{client:<8} {mode:<8} {int(rate_text):>7} {f['p50_ms']:>11.3f} {f['p99_ms']:>11.3f} "
              f"{f['server_cpu_us']:>15.0f}")  # fmt: skip
    if args.json:
        doc: dict[str, Any] = {"records": args.records, "load": load[0], "hop": hop, "runs": best}
        print(json.dumps(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
