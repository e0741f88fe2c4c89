"""The floor under every hop of a record: one message round trip between two Python processes on this machine.

    python -m bench.rpc_floor [--round-trips 3000] [--bytes 200] [--pace-ms 1] [--repeat 2] [--json]

An acks=all record at RF 3 crosses processes at least six times before its producer has its answer and a
consumer has the record (producer -> leader, leader -> each follower, follower -> leader with its position,
leader -> producer, leader -> consumer), and each of those messages is received and sent by Python code. This
benchmark measures what one such hop costs with nothing else in the way: an echo server in a child process and
a client in this one, ``--round-trips`` round trips of ``--bytes`` bytes, one at a time, ``--pace-ms`` apart
(a fixed-rate load, as ``odradek perf e2e``, not a saturating one). For each transport it prints the round
trip's p50/p99 and the CPU time each side spends per round trip (the server's from ``/proc``, the client's
from ``time.process_time``):

    grpc-sync-stream   Odradek's clients and followers: grpcio's synchronous stub, one bidirectional stream
                       fed from a queue (``common.streams``), against a ``grpc.aio`` server (the broker's)
    grpc-aio-stream    the same stream driven from an ``asyncio`` loop (``grpc.aio`` on both sides)
    grpc-sync-unary    one unary call per round trip (the fallback path)
    tcp-asyncio        length-prefixed frames on a plain TCP connection, ``asyncio`` streams on both sides
                       (what the Kafka wire-protocol listener, ``broker/kafka``, is built on)
    tcp-asyncio-protocol  the same client; the server an ``asyncio.Protocol`` that parses the frames in
                       ``data_received`` and writes the answer there (no stream reader, task or future per frame)

The ratio columns divide by the first transport's figures. Compare figures within one run only (the
machine's speed changes between sessions). With ``--json`` the last line of stdout is one JSON object.
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
import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc

from odradek.perf.stats import percentile

SERVICE, METHOD, UNARY = "bench.Echo", "Stream", "Call"
FRAME = struct.Struct(">I")
TRANSPORTS = ("grpc-sync-stream", "grpc-aio-stream", "grpc-sync-unary", "tcp-asyncio", "tcp-asyncio-protocol")
SERVERS = {"tcp-asyncio": "tcp", "tcp-asyncio-protocol": "tcp-protocol"}  # the others: "grpc"


def _same(data: bytes) -> bytes:
    return data


# ------------------------------------------------------------------------------------------ servers


async def _grpc_server(port: int) -> None:
    server = grpc.aio.server()

    async def stream(requests: Any, context: Any) -> Any:
        async for request in requests:
            yield request

    async def call(request: bytes, context: Any) -> bytes:
        return request

    handlers = {
        METHOD: grpc.stream_stream_rpc_method_handler(stream, request_deserializer=_same, response_serializer=_same),
        UNARY: grpc.unary_unary_rpc_method_handler(call, request_deserializer=_same, response_serializer=_same),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    print("ready", flush=True)
    await server.wait_for_termination()


async def _tcp_server(port: int) -> None:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readexactly(FRAME.size)
                writer.write(head + await reader.readexactly(FRAME.unpack(head)[0]))
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", port)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


class _EchoProtocol(asyncio.Protocol):
    """The frames echoed from ``data_received``: no stream reader, no task, no future per frame."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        self._inbox = bytearray()

    def data_received(self, data: bytes) -> None:
        inbox = self._inbox
        inbox += data
        while len(inbox) >= FRAME.size:
            end = FRAME.size + FRAME.unpack_from(inbox)[0]
            if len(inbox) < end:
                return
            self._transport.write(bytes(inbox[:end]))
            del inbox[:end]


async def _tcp_protocol_server(port: int) -> None:
    server = await asyncio.get_running_loop().create_server(_EchoProtocol, "127.0.0.1", port)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


# ------------------------------------------------------------------------------------------ clients


def _paced(round_trips: int, pace_s: float, one: Callable[[], None]) -> list[float]:
    """Wall time of each round trip (ms), one at a time, ``pace_s`` apart."""
    times = []
    for _ in range(round_trips):
        started = time.perf_counter()
        one()
        times.append((time.perf_counter() - started) * 1000)
        time.sleep(pace_s)
    return times


def _grpc_sync_stream(port: int, payload: bytes, round_trips: int, pace_s: float) -> list[float]:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        requests: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()

        def drain() -> Iterator[bytes]:
            while (item := requests.get()) is not None:
                yield item

        method = channel.stream_stream(f"/{SERVICE}/{METHOD}", request_serializer=_same, response_deserializer=_same)
        responses = method(drain())

        def one() -> None:
            requests.put(payload)
            next(responses)

        try:
            return _paced(round_trips, pace_s, one)
        finally:
            requests.put(None)
            responses.cancel()


def _grpc_sync_unary(port: int, payload: bytes, round_trips: int, pace_s: float) -> list[float]:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = channel.unary_unary(f"/{SERVICE}/{UNARY}", request_serializer=_same, response_deserializer=_same)
        return _paced(round_trips, pace_s, lambda: call(payload, timeout=10))


def _grpc_aio_stream(port: int, payload: bytes, round_trips: int, pace_s: float) -> list[float]:
    async def run() -> list[float]:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            method = channel.stream_stream(f"/{SERVICE}/{METHOD}", request_serializer=_same,
                                           response_deserializer=_same)  # fmt: skip
            call = method()
            times = []
            for _ in range(round_trips):
                started = time.perf_counter()
                await call.write(payload)
                await call.read()
                times.append((time.perf_counter() - started) * 1000)
                await asyncio.sleep(pace_s)
            await call.done_writing()
            return times

    return asyncio.run(run())


def _tcp_asyncio(port: int, payload: bytes, round_trips: int, pace_s: float) -> list[float]:
    async def run() -> list[float]:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        frame = FRAME.pack(len(payload)) + payload
        times = []
        for _ in range(round_trips):
            started = time.perf_counter()
            writer.write(frame)
            head = await reader.readexactly(FRAME.size)
            await reader.readexactly(FRAME.unpack(head)[0])
            times.append((time.perf_counter() - started) * 1000)
            await asyncio.sleep(pace_s)
        writer.close()
        await writer.wait_closed()
        return times

    return asyncio.run(run())


CLIENTS: dict[str, Callable[[int, bytes, int, float], list[float]]] = {
    "grpc-sync-stream": _grpc_sync_stream,
    "grpc-aio-stream": _grpc_aio_stream,
    "grpc-sync-unary": _grpc_sync_unary,
    "tcp-asyncio": _tcp_asyncio,
    "tcp-asyncio-protocol": _tcp_asyncio,  # the same client; the server differs
}


# ------------------------------------------------------------------------------------------ the run


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (Linux ``/proc``)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(transport: str, round_trips: int, size: int, pace_s: float) -> dict[str, float]:
    """One transport: a fresh server process, a warm-up, then the measured round trips."""
    port = free_port()
    kind = SERVERS.get(transport, "grpc")
    server = subprocess.Popen([sys.executable, "-m", "bench.rpc_floor", "--serve", kind, "--port", str(port)],
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert server.stdout is not None
        if server.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the {kind} echo server did not start")
        client = CLIENTS[transport]
        payload = os.urandom(size)
        client(port, payload, min(200, round_trips), pace_s)  # warm-up: connections, JIT-less caches, the pool
        server_before, client_before = cpu_s(server.pid), time.process_time()
        times = client(port, payload, round_trips, pace_s)
        client_cpu, server_cpu = time.process_time() - client_before, cpu_s(server.pid) - server_before
    finally:
        stop(server)
    times.sort()
    return {
        "p50_ms": percentile(times, 0.50), "p99_ms": percentile(times, 0.99),
        "client_cpu_us": client_cpu / round_trips * 1e6, "server_cpu_us": server_cpu / round_trips * 1e6,
    }  # fmt: skip


def stop(process: subprocess.Popen[str]) -> None:
    """Terminate a server process and reap it (killed when it has not ended 10 s later)."""
    process.terminate()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)


def best_of_rounds(
    repeat: int, keys: list[str], one: Callable[[str], dict[str, float]]
) -> dict[str, dict[str, float]]:
    """``one(key)`` for every key in turn, ``repeat`` rounds (each round's figures on stderr); of each key the
    figures of its round with the lowest ``p50_ms``."""
    best: dict[str, dict[str, float]] = {}
    for round_number in range(1, repeat + 1):
        for key in keys:
            figures = one(key)
            print(f"round {round_number} {key}: " + ", ".join(f"{k} {v:.3f}" for k, v in figures.items()),
                  file=sys.stderr, flush=True)  # fmt: skip
            if key not in best or figures["p50_ms"] < best[key]["p50_ms"]:
                best[key] = figures
    return best


def _ratio(value: float, base: float) -> str:
    """``value`` as a multiple of ``base``; "-" when the base is 0 (a run too short for /proc's clock ticks)."""
    return f"{value / base:.2f}×" if base > 0 else "-"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.rpc_floor", description=__doc__.split("\n\n")[0])
    parser.add_argument("--round-trips", type=int, default=3000)
    parser.add_argument("--bytes", type=int, default=200, help="message size (default 200)")
    parser.add_argument("--pace-ms", type=float, default=1.0, help="pause between round trips (default 1)")
    parser.add_argument("--repeat", type=int, default=2, help="rounds over every transport; the best p50 is kept")
    parser.add_argument("--transports", default=",".join(TRANSPORTS), help="comma-separated, in this order")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--serve", choices=("grpc", "tcp", "tcp-protocol"), help=argparse.SUPPRESS)  # the child
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        servers = {"grpc": _grpc_server, "tcp": _tcp_server, "tcp-protocol": _tcp_protocol_server}
        asyncio.run(servers[args.serve](args.port))
        return 0
    transports = [t for t in args.transports.split(",") if t]
    unknown = [t for t in transports if t not in CLIENTS]
    if unknown:
        parser.error(f"unknown transport(s) {', '.join(unknown)}: choose from {', '.join(TRANSPORTS)}")
    best = best_of_rounds(args.repeat, transports,
                          lambda t: measure(t, args.round_trips, args.bytes, args.pace_ms / 1000))  # fmt: skip
    load = os.getloadavg()
    print(f"{args.round_trips} round trips of {args.bytes} B, {args.pace_ms:g} ms apart; best of {args.repeat} "
          f"rounds by p50; load average {load[0]:.2f} at the end")  # fmt: skip
    base = best[transports[0]]
    header = (f"{'transport':<18} {'p50 ms':>8} {'p99 ms':>8} {'client µs':>10} {'server µs':>10} {'p50 ×':>7} "
              f"{'server ×':>9}")  # fmt: skip
    print(header)
    print("-" * len(header))
    for transport in transports:
        f = best[transport]
        print(f"{transport:<18} {f['p50_ms']:>8.3f} {f['p99_ms']:>8.3f} {f['client_cpu_us']:>10.0f} "
              f"{f['server_cpu_us']:>10.0f} {_ratio(f['p50_ms'], base['p50_ms']):>7} "
              f"{_ratio(f['server_cpu_us'], base['server_cpu_us']):>9}")  # fmt: skip
    if args.json:
        print(json.dumps({"round_trips": args.round_trips, "bytes": args.bytes, "load": load[0], "transports": best}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
