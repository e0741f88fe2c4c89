"""What waking another process or thread costs on this machine: the price of every message between processes.

    python -m bench.wakeup_cost [--count 3000] [--pace-ms 1] [--json]

An acks=all record at RF 3 is eight messages between processes at the least (the Produce, two follower
answers, two follower fetches, the consumer's answer and its next fetch, the producer's answer), and each send
wakes the process that waits for it. On a virtual machine whose idle CPUs halt, that wake-up is paid by the
sender inside its ``send``, as CPU time, before any of the receiver's own work. This measures it, one message
every ``--pace-ms`` (a fixed-rate load, as ``odradek perf e2e``), ``--count`` times per case:

    tcp-send-to-sleeper   a 100-byte send on a loopback TCP connection (TCP_NODELAY) to a child process
                          blocked in ``recv``: the sender's wall time and CPU time (``time.thread_time``)
                          inside ``send``
    tcp-send-to-spinner   the same to a child that polls a non-blocking socket in a loop (never asleep): the
                          send without the wake-up
    thread-wake           ``threading.Event.set`` to a thread blocked in ``wait`` (the hand-offs inside a
                          client: application thread to sender, reader to ``poll()``): the time from ``set``
                          until the woken thread runs, and the setter's CPU time inside ``set``

Figures only (µs: p50, p99 and mean); compare them within one run, or against ``python -m bench.rpc_floor``'s
round trip of the same session. With ``--json`` the last line of stdout is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import threading
import time
from collections.abc import Callable

from odradek.perf.stats import percentile

CASES = ("tcp-send-to-sleeper", "tcp-send-to-spinner", "thread-wake")
MESSAGE = b"x" * 100
END = b"!"
CHILD_TIMEOUT_S = 30.0


def _connected_pair() -> tuple[socket.socket, socket.socket]:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        sender = socket.create_connection(server.getsockname())
        receiver, _ = server.accept()
    sender.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sender, receiver


def _receive_until_end(receiver: socket.socket, spin: bool) -> None:
    """The child: read until the end marker (or the peer closes); spinning or blocked in ``recv``."""
    receiver.setblocking(not spin)
    deadline = time.monotonic() + CHILD_TIMEOUT_S * 10
    while time.monotonic() < deadline:
        try:
            data = receiver.recv(4096)
        except BlockingIOError:
            continue
        if not data or data.endswith(END):
            return


def _paced(count: int, pace_s: float, one: Callable[[], tuple[float, float]]) -> tuple[list[float], list[float]]:
    wall: list[float] = []
    cpu: list[float] = []
    for _ in range(count):
        time.sleep(pace_s)
        w, c = one()
        wall.append(w)
        cpu.append(c)
    return wall, cpu


def tcp_send(count: int, pace_s: float, spin: bool) -> tuple[list[float], list[float]]:
    """µs of wall and CPU time inside each ``send`` to a child blocked in ``recv`` (or spinning)."""
    sender, receiver = _connected_pair()
    pid = os.fork()
    if pid == 0:  # the child: only the receiving end
        status = 0
        try:
            sender.close()
            _receive_until_end(receiver, spin)
        except BaseException:
            status = 1
        finally:
            os._exit(status)
    receiver.close()

    def one() -> tuple[float, float]:
        t0, c0 = time.perf_counter_ns(), time.thread_time_ns()
        sender.send(MESSAGE)
        c1, t1 = time.thread_time_ns(), time.perf_counter_ns()
        return (t1 - t0) / 1000, (c1 - c0) / 1000

    try:
        return _paced(count, pace_s, one)
    finally:
        try:
            sender.send(END)
        finally:
            sender.close()
            _reap(pid)


def _reap(pid: int) -> None:
    deadline = time.monotonic() + CHILD_TIMEOUT_S
    while time.monotonic() < deadline:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            return
        time.sleep(0.01)
    os.kill(pid, 9)
    os.waitpid(pid, 0)


def thread_wake(count: int, pace_s: float) -> tuple[list[float], list[float]]:
    """µs from ``Event.set`` until the waiting thread runs, and the setter's CPU time inside ``set``. The setter
    then blocks (releasing the GIL, as a client's thread does) until the woken thread has taken its time."""
    go, back = threading.Event(), threading.Event()
    woke_ns: list[int] = []
    stop = threading.Event()

    def waiter() -> None:
        while not stop.is_set():
            if not go.wait(CHILD_TIMEOUT_S):
                return
            woke_ns.append(time.perf_counter_ns())
            go.clear()
            back.set()

    thread = threading.Thread(target=waiter, name="wakeup-cost-waiter", daemon=True)
    thread.start()

    def one() -> tuple[float, float]:
        back.clear()
        t0, c0 = time.perf_counter_ns(), time.thread_time_ns()
        go.set()
        c1 = time.thread_time_ns()
        if not back.wait(CHILD_TIMEOUT_S):
            raise RuntimeError("the waiting thread did not wake")
        return (woke_ns[-1] - t0) / 1000, (c1 - c0) / 1000

    try:
        return _paced(count, pace_s, one)
    finally:
        stop.set()
        go.set()
        thread.join(CHILD_TIMEOUT_S)


def summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {"p50": round(percentile(ordered, 0.50), 1), "p99": round(percentile(ordered, 0.99), 1),
            "mean": round(statistics.fmean(ordered), 1)}  # fmt: skip


def run_case(case: str, count: int, pace_s: float) -> dict[str, dict[str, float]]:
    if case == "thread-wake":
        wall, cpu = thread_wake(count, pace_s)
    else:
        wall, cpu = tcp_send(count, pace_s, spin=case == "tcp-send-to-spinner")
    return {"wall_us": summary(wall), "cpu_us": summary(cpu)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.wakeup_cost", description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=3000, help="messages (or wake-ups) per case")
    parser.add_argument("--pace-ms", type=float, default=1.0, help="time between two of them")
    parser.add_argument("--json", action="store_true", help="one JSON object as the last line")
    args = parser.parse_args(argv)
    if args.count < 1 or args.pace_ms < 0:
        parser.error("--count must be at least 1 and --pace-ms at least 0")
    results = {case: run_case(case, args.count, args.pace_ms / 1000) for case in CASES}
    print(f"{args.count} per case, {args.pace_ms:g} ms apart; µs")
    heads = ("wall p50", "wall p99", "wall mean", "cpu p50", "cpu p99", "cpu mean")
    print(f"{'case':<22}" + "".join(f"{head:>11}" for head in heads))
    for case, figures in results.items():
        wall, cpu = figures["wall_us"], figures["cpu_us"]
        cells = (wall["p50"], wall["p99"], wall["mean"], cpu["p50"], cpu["p99"], cpu["mean"])
        print(f"{case:<22}" + "".join(f"{cell:>11.1f}" for cell in cells))
    if args.json:
        print(json.dumps({"count": args.count, "pace_ms": args.pace_ms, "cases": results}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
