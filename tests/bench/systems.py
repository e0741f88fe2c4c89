"""The servers of the comparison, started and stopped by the harness: an ``odradek up`` cluster, a NATS
JetStream cluster, a Redis server. Every one runs on 127.0.0.1 on free ports, under a directory of the
run, and is stopped (its processes waited for, killed when they do not stop) when the run ends.

NATS and Redis come from Debian's packages (``nats-server``, ``redis-server``). :func:`find_binary` says
why a system cannot run when its binary is missing; ``install_packages`` installs them with ``apt-get``
when asked (``--install-peers``; needs root and the machine's configured apt sources).
"""

from __future__ import annotations

import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tests.cli.helpers import UpProcess, cli_env, free_base_port, odradek
from tests.support.apt import apt_install

PACKAGES = {"nats-server": "nats-server", "redis-server": "redis-server"}
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 20.0
CPUCLOCK_SCHED = 2  # the scheduler's runtime, of linux/posix-timers.h (process clocks: pid, not tid)


def cpu_seconds(pid: int) -> float:
    """CPU seconds of the live process ``pid`` (its threads included, those that ended too), to the nanosecond:
    its process CPU clock (Linux's ``clock_getcpuclockid``: the clock id of process ``pid`` is ``~pid << 3 | 2``,
    CPUCLOCK_SCHED). ``/proc/<pid>/stat`` counts in clock ticks (10 ms): a short run of an idle-ish server read
    there as 0. OSError when the process is gone."""
    return time.clock_gettime(((~pid) << 3) | CPUCLOCK_SCHED)


def children_cpu_seconds() -> float:
    """User + system CPU seconds of this process's finished (waited-for) children."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports free right now (bound to port 0, then released)."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def find_binary(name: str) -> tuple[str | None, str]:
    """``(path, "")`` or ``(None, why it is missing)``."""
    path = shutil.which(name) or next((p for p in (f"/usr/sbin/{name}", f"/usr/bin/{name}") if os.path.exists(p)), None)
    if path is not None:
        return path, ""
    return None, f"{name} is not installed (Debian package {PACKAGES[name]}; --install-peers installs it)"


def install_packages(names: Sequence[str]) -> str:
    """``apt-get install`` the Debian packages of the missing ``names``; "" or why it failed."""
    missing = [PACKAGES[n] for n in names if find_binary(n)[0] is None]
    if not missing:
        return ""
    return apt_install(missing) or ""


def wait_until(condition: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() >= deadline:
            raise RuntimeError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.1)


def stop_processes(processes: Sequence[subprocess.Popen[bytes]]) -> None:
    for p in processes:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in processes:
        try:
            p.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(10)


def tree_python(tree: Path) -> str:
    """The interpreter that runs the checkout at ``tree``: its own ``.venv``'s when it has one, else this one."""
    own = tree / ".venv" / "bin" / "python"
    return str(own) if own.exists() else sys.executable


class OdradekCluster:
    """``odradek up`` with ``controllers`` + ``brokers``; topics made with :meth:`create_topic`. ``bootstrap``
    is its gRPC bootstrap servers (Odradek's clients), ``kafka_bootstrap`` its brokers' Kafka listeners (any
    Kafka client), both from the ``cluster.json`` of ``odradek up``."""

    def __init__(self, root: Path, controllers: int = 3, brokers: int = 3, extra_env: dict[str, str] | None = None,
                 broker_config: Sequence[str] = (), tree: Path | None = None,
                 security: str = "plaintext") -> None:  # fmt: skip
        """``tree``: run the cluster and its clients from that checkout (its ``.venv`` when it has one) instead
        of this one's code; ``security``: ``odradek up --security`` (ssl, sasl_ssl: the clients then use the
        ``client.properties`` it writes)."""
        root.mkdir(parents=True, exist_ok=True)
        self.env = cli_env(root / "state", **(extra_env or {}))
        self.python, self.cwd = sys.executable, tree
        if tree is not None:
            self.python = tree_python(tree)
            self.env["PYTHONPATH"] = os.pathsep.join([str(tree), *filter(None, [self.env.get("PYTHONPATH")])])
        args = ["--controllers", str(controllers), "--brokers", str(brokers),
                "--base-port", str(free_base_port(controllers, brokers)), "--no-metrics"]  # fmt: skip
        for item in broker_config:
            args += ["--broker-config", item]
        if security != "plaintext":
            args += ["--security", security]
        self.up = UpProcess(root / "odradek", self.env, args, python=self.python, cwd=self.cwd)
        self.bootstrap = self.kafka_bootstrap = ""
        self.client_args: list[str] = []  # --command-config of a secured cluster

    def start(self) -> OdradekCluster:
        self.up.start()
        doc = self.up.wait_ready(START_TIMEOUT_S * 2)
        self.bootstrap = doc["bootstrap_servers"]
        self.kafka_bootstrap = doc["kafka_bootstrap_servers"]
        self.env["ODRADEK_BOOTSTRAP_SERVERS"] = self.bootstrap
        if doc.get("client_properties"):
            self.client_args = ["--command-config", doc["client_properties"]]
        return self

    def create_topic(self, name: str, partitions: int, replication_factor: int) -> None:
        done = odradek(["topics", "create", name, "--partitions", str(partitions),
                        "--replication-factor", str(replication_factor), *self.client_args], self.env,
                       python=self.python, cwd=self.cwd)  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"creating topic {name} failed: {done.stderr.decode().strip()}")

    def perf(self, args: Sequence[str], timeout_s: float) -> subprocess.CompletedProcess[bytes]:
        return odradek(["perf", *args, "--json", *self.client_args], self.env, timeout_s=timeout_s,
                       python=self.python, cwd=self.cwd)  # fmt: skip

    def pids(self) -> list[int]:
        """The cluster's controllers and brokers (from the ``cluster.json`` of ``odradek up``)."""
        doc = self.up.cluster_json()
        return [int(entry["pid"]) for kind in ("controllers", "brokers") for entry in doc[kind]]

    def stop(self) -> None:
        try:
            self.up.stop(timeout_s=STOP_TIMEOUT_S * 3)
        finally:
            self.up.kill_everything()


class NatsCluster:
    """``nodes`` nats-server processes with JetStream (file storage), clustered when more than one."""

    def __init__(self, root: Path, binary: str, nodes: int = 3) -> None:
        self.root = root
        self.binary = binary
        self.nodes = nodes
        self.processes: list[subprocess.Popen[bytes]] = []
        self.servers = ""
        self._monitor: list[int] = []

    def start(self) -> NatsCluster:
        ports = free_ports(3 * self.nodes)
        client, route, monitor = ports[: self.nodes], ports[self.nodes : 2 * self.nodes], ports[2 * self.nodes :]
        routes = ",".join(f"nats://127.0.0.1:{p}" for p in route)
        for i in range(self.nodes):
            store = self.root / f"nats-{i}"
            store.mkdir(parents=True, exist_ok=True)
            args = [self.binary, "-a", "127.0.0.1", "-p", str(client[i]), "-m", str(monitor[i]), "-js", "-sd",
                    str(store), "-n", f"n{i}"]  # fmt: skip
            if self.nodes > 1:
                args += ["--cluster_name", "bench", "--cluster", f"nats://127.0.0.1:{route[i]}", "--routes", routes]
            with open(store / "server.log", "wb") as log:
                self.processes.append(subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT))
        self.servers = ",".join(f"nats://127.0.0.1:{p}" for p in client)
        self._monitor = monitor
        wait_until(self._healthy, START_TIMEOUT_S, "the NATS servers to report healthy")
        return self

    def _healthy(self) -> bool:
        for p in self.processes:
            if p.poll() is not None:
                raise RuntimeError(f"nats-server exited with {p.returncode} (logs under {self.root})")
        for port in self._monitor:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as answer:
                    if answer.status != 200:
                        return False
            except OSError:
                return False
        return True

    def pids(self) -> list[int]:
        return [p.pid for p in self.processes]

    def stop(self) -> None:
        stop_processes(self.processes)


class RedisServer:
    """One redis-server (no persistence: ``save ""``, no AOF; Redis Streams are not replicated here)."""

    def __init__(self, root: Path, binary: str) -> None:
        self.root = root
        self.binary = binary
        self.process: subprocess.Popen[bytes] | None = None
        self.servers = ""

    def start(self) -> RedisServer:
        port = free_ports(1)[0]
        self.root.mkdir(parents=True, exist_ok=True)
        args = [self.binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                "--dir", str(self.root)]  # fmt: skip
        with open(self.root / "redis.log", "wb") as log:
            self.process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        self.servers = f"127.0.0.1:{port}"
        wait_until(lambda: self._answers(port), START_TIMEOUT_S, "redis-server to answer")
        return self

    def _answers(self, port: int) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise RuntimeError(f"redis-server exited with {self.process.returncode} (log under {self.root})")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def pids(self) -> list[int]:
        return [] if self.process is None else [self.process.pid]

    def stop(self) -> None:
        if self.process is not None:
            stop_processes([self.process])


def peer_workload(system: str, workload: str, servers: str, stream: str, num_records: int, record_size: int,
                  rate: float, replicas: int, timeout_s: float) -> subprocess.CompletedProcess[bytes]:  # fmt: skip
    """One run of ``tests.bench.peers`` (its own process, as ``odradek perf`` runs in its own); ``system``
    nats, redis or kafka (an Odradek cluster's Kafka listener, the topic made beforehand)."""
    args = [sys.executable, "-m", "tests.bench.peers", system, workload, "--servers", servers, "--stream", stream,
            "--num-records", str(num_records), "--record-size", str(record_size), "--rate", str(rate),
            "--replicas", str(replicas)]  # fmt: skip
    return subprocess.run(args, capture_output=True, timeout=timeout_s, check=False)
