"""Run ``odradek controller`` processes on 127.0.0.1: for integration tests, benchmarks and local clusters.

:class:`ControllerProcess` is one child process (started, waited for until it prints its "listening"
line, stopped with SIGTERM or killed with SIGKILL); :class:`LocalQuorum` is a set of them on free
ports sharing a cluster secret. Every wait is bounded; ``close()`` stops every child whatever happened.

Thread-safety: none; one thread drives these objects.
"""

from __future__ import annotations

import contextlib
import os
import queue
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import IO, TypeVar

from controller.ports import free_ports

T = TypeVar("T")

START_TIMEOUT_S = 30.0
THREAD_DUMP_S = 2.0  # a node writes its threads' stacks at once on SIGQUIT (common.signals)
STACKS_TAIL_CHARS = 20_000


class NodeHung(AssertionError):
    """A node that SIGTERM did not stop within its bound (:func:`stop_or_fail`)."""


def stop_or_fail(popen: subprocess.Popen[bytes], name: str, timeout_s: float, stderr: Callable[[], str]) -> int:
    """SIGTERM ``popen`` and wait up to ``timeout_s``; its exit status. A node still running then is a bug (a
    node stops in seconds, and a harness that kills it quietly hides the hang): it is asked for its threads'
    stacks (SIGQUIT, ``common.signals.dump_threads_on_sigquit``), killed, and :class:`NodeHung` raised with
    the end of ``stderr()``, where the stacks are."""
    if popen.poll() is None:
        popen.send_signal(signal.SIGTERM)
    try:
        return popen.wait(timeout_s)
    except subprocess.TimeoutExpired:
        popen.send_signal(signal.SIGQUIT)
        with contextlib.suppress(subprocess.TimeoutExpired):  # it does not exit on SIGQUIT: this is the dump's time
            popen.wait(THREAD_DUMP_S)
        popen.kill()
        popen.wait(10)
        tail = stderr()[-STACKS_TAIL_CHARS:]
        raise NodeHung(f"{name} did not stop within {timeout_s:g} s of SIGTERM and was killed; the end of its "
                       f"stderr (its threads' stacks last):\n{tail}") from None


def stop_every(stops: Sequence[Callable[[], object]]) -> None:
    """Call every stop in turn, even after one raised :class:`NodeHung`; then one NodeHung naming them all."""
    hung = []
    for stop in stops:
        try:
            stop()
        except NodeHung as exc:
            hung.append(str(exc))
    if hung:
        raise NodeHung("\n\n".join(hung))


class ControllerProcess:
    """One ``odradek controller`` child. Its stderr goes to ``<data_dir>/controller.stderr``.

    Not thread-safe: one thread drives it.
    """

    def __init__(
        self, node_id: int, listen: str, raft_listen: str, quorum: str, data_dir: str, *,
        controller_addresses: str = "", config: Mapping[str, str] | None = None, secret: str | None = None,
    ) -> None:  # fmt: skip
        self.node_id = node_id
        self.listen = listen
        self.data_dir = data_dir
        self.argv = [
            sys.executable, "-m", "odradek.cli", "controller", "--node-id", str(node_id), "--listen", listen,
            "--raft-listen", raft_listen, "--quorum", quorum, "--data-dir", data_dir,
        ]  # fmt: skip
        if controller_addresses:
            self.argv += ["--controller-addresses", controller_addresses]
        for key, value in (config or {}).items():
            self.argv += ["--config", f"{key}={value}"]
        self.env = dict(os.environ)
        if secret is not None:
            self.env["ODRADEK_CLUSTER_SECRET"] = secret
        self.proc: subprocess.Popen[bytes] | None = None
        self._stderr: IO[bytes] | None = None

    def start(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Start the child and wait until it prints its "listening" line."""
        os.makedirs(self.data_dir, exist_ok=True)
        self._stderr = open(os.path.join(self.data_dir, "controller.stderr"), "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=self._stderr, env=self.env)
        lines: queue.Queue[bytes] = queue.Queue()
        assert self.proc.stdout is not None
        threading.Thread(target=_pump, args=(self.proc.stdout, lines), daemon=True).start()
        try:
            line = lines.get(timeout=timeout_s)
        except queue.Empty:
            self.kill()
            raise TimeoutError(f"controller {self.node_id} did not start within {timeout_s} s") from None
        if b"listening on" not in line:
            self.kill()
            raise RuntimeError(f"controller {self.node_id} failed to start: {self.stderr_tail()}")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL: no shutdown at all, as in a crash."""
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(signal.SIGKILL)
        self._reap()

    def stop(self, timeout_s: float = 10.0) -> int | None:
        """SIGTERM and wait; returns the exit status. Still running after ``timeout_s``: killed, and
        :class:`NodeHung` raised with its threads' stacks (:func:`stop_or_fail`)."""
        if self.alive():
            assert self.proc is not None
            try:
                stop_or_fail(self.proc, f"controller {self.node_id}", timeout_s, lambda: self.stderr_tail(400))
            except NodeHung:
                self._reap()
                raise
        return self._reap()

    def _reap(self) -> int | None:
        status = None
        if self.proc is not None:
            try:
                status = self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                status = self.proc.wait(timeout=10)
            if self.proc.stdout is not None:
                self.proc.stdout.close()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
        return status

    def stderr_tail(self, lines: int = 20) -> str:
        path = os.path.join(self.data_dir, "controller.stderr")
        with contextlib.suppress(OSError), open(path, encoding="utf-8", errors="replace") as f:
            return "".join(f.readlines()[-lines:])
        return ""


def _pump(stream: IO[bytes], lines: queue.Queue[bytes]) -> None:
    for line in stream:
        lines.put(line)


class LocalQuorum:
    """``n`` controllers on 127.0.0.1 with free ports, data under ``root/controller-<id>``, node ids 1..n.

    Not thread-safe: one thread drives it.
    """

    def __init__(self, root: str, n: int = 3, config: Mapping[str, str] | None = None) -> None:
        ports = free_ports(2 * n)
        self.ids = list(range(1, n + 1))
        self.raft = {i: f"127.0.0.1:{ports[k]}" for k, i in enumerate(self.ids)}
        self.listen = {i: f"127.0.0.1:{ports[n + k]}" for k, i in enumerate(self.ids)}
        self.quorum = ",".join(f"{i}@{a}" for i, a in self.raft.items())
        self.addresses = ",".join(f"{i}@{a}" for i, a in self.listen.items())
        self.root = root
        self.config = dict(config or {})
        self.secret = secrets.token_hex(16)
        self.nodes: dict[int, ControllerProcess] = {}

    def start(self, node_id: int) -> ControllerProcess:
        node = ControllerProcess(
            node_id, self.listen[node_id], self.raft[node_id], self.quorum,
            os.path.join(self.root, f"controller-{node_id}"), controller_addresses=self.addresses,
            config=self.config, secret=self.secret,
        )  # fmt: skip
        self.nodes[node_id] = node
        node.start()
        return node

    def start_all(self) -> LocalQuorum:
        for node_id in self.ids:
            self.start(node_id)
        return self

    def close(self) -> None:
        stop_every([node.stop for node in self.nodes.values()])

    def __enter__(self) -> LocalQuorum:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def wait_until(predicate: Callable[[], T], timeout_s: float, what: str, interval_s: float = 0.02) -> T:
    """Poll ``predicate()`` until it returns something true, and return that; ``TimeoutError`` naming
    ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(interval_s)
    return value


def addresses_of(quorum: LocalQuorum, ids: Sequence[int] | None = None) -> list[str]:
    return [quorum.listen[i] for i in (ids if ids is not None else quorum.ids)]
