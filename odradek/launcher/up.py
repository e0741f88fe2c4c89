"""``odradek up``: a local cluster of controllers and brokers as child processes on 127.0.0.1.

    odradek up [--controllers 3] [--brokers 3] [--data-dir ./odradek-data] [--base-port 9092] [--no-metrics]

Starts the children (``plan`` has the port plan and the directory layout), each with its ``/metrics``
endpoint unless ``--no-metrics``, waits until the cluster answers (an active controller, every broker
registered and unfenced, every node SERVING in its gRPC health service; bounded by ``--start-timeout``,
with progress lines on stderr), prints the bootstrap servers and a short status on stdout, writes
``DIR/cluster.json`` and records the address for the client commands (``odradek.bootstrap``). Then it
watches: a child that exits is reported on stderr. Ctrl-C, SIGTERM or SIGHUP stop every child (brokers
first, then controllers; SIGTERM, bounded wait, SIGKILL; a second signal during the stop kills them at
once) and ``up`` exits 0; it exits 1 when the cluster cannot start or when every child has exited. SIGQUIT
(Ctrl-\\) asks every process for its threads' stacks (each node's in its log, up's on stderr); all go on. When
``up`` itself is killed, its children get SIGTERM from the kernel (``children``: PR_SET_PDEATHSIG).

Re-running ``up`` on the same DIR restarts the same cluster with its data: same node ids, ports, data
dirs and cluster secret (``DIR/cluster.secret``, mode 0600, made on the first run). One ``up`` at a time
per DIR (``DIR/.up.lock``).
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import fcntl
import os
import secrets
import signal
import sys
import time
from collections.abc import Iterator, Sized
from pathlib import Path
from types import FrameType
from typing import IO, Any

from odradek.bootstrap import ENV_VAR, record_last_up
from odradek.errors import CliError, OdradekError
from odradek.launcher.children import Child, exit_description, pid_alive, ports_in_use, stop_all
from odradek.launcher.plan import (
    DEFAULT_BASE_PORT,
    SECRET_FILE,
    ClusterPlan,
    NodePlan,
    layout_counts,
    plan_cluster,
    plan_from_document,
    read_cluster_json,
    write_cluster_json,
)
from odradek.launcher.secure import ADMIN as ADMIN_NAME
from odradek.launcher.secure import MODES, Secured, prepare

DEFAULT_DATA_DIR = "odradek-data"
DEFAULT_COUNT = 3
PROGRESS_INTERVAL_S = 3.0
BROKER_STOP_TIMEOUT_S = 30.0
CONTROLLER_STOP_TIMEOUT_S = 15.0
READY_MARKERS = {"controller": "listening on", "broker": "ready on"}


def add_up_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "up",
        help="start a local cluster (controllers and brokers) on 127.0.0.1",
        description="Start a local cluster as child processes on 127.0.0.1, wait until it is ready, print the "
        "bootstrap servers, write DIR/cluster.json, and stop every child on Ctrl-C or SIGTERM. Re-running it on "
        "the same DIR restarts the same cluster with its data. Ports: brokers from --base-port, controllers "
        "from --base-port + 100, their Raft ports from --base-port + 200, the nodes' /metrics endpoints at their "
        "gRPC port + 500.",
    )
    parser.add_argument("--controllers", type=int, metavar="N", help=f"controller nodes (default {DEFAULT_COUNT})")
    parser.add_argument("--brokers", type=int, metavar="N", help=f"brokers (default {DEFAULT_COUNT})")
    parser.add_argument("--data-dir", default=DEFAULT_DATA_DIR, metavar="DIR",
                        help=f"where the nodes keep their data and logs (default ./{DEFAULT_DATA_DIR})")  # fmt: skip
    parser.add_argument("--base-port", type=int, metavar="PORT",
                        help=f"first broker port (default {DEFAULT_BASE_PORT})")  # fmt: skip
    parser.add_argument("--start-timeout", type=float, default=120.0, metavar="SECONDS",
                        help="how long to wait for the cluster to be ready (default 120)")  # fmt: skip
    parser.add_argument("--broker-config", action="append", metavar="KEY=VALUE", help="for every broker (repeatable)")
    parser.add_argument("--controller-config", action="append", metavar="KEY=VALUE",
                        help="for every controller (repeatable)")  # fmt: skip
    parser.add_argument("--no-metrics", dest="metrics", action="store_false",
                        help="start the nodes without /metrics endpoints (no metrics work at all)")  # fmt: skip
    parser.add_argument("--security", choices=MODES, type=str.lower,
                        help="plaintext (default), ssl (TLS, client certificates) or sasl_ssl (TLS, SCRAM users): "
                        "makes a local CA, node certificates, an admin and DIR/client.properties, and turns the "
                        "authorizer on (docs/SECURITY.md)")  # fmt: skip
    parser.set_defaults(handler=run)


# ------------------------------------------------------------------------------------------ planning


def choose_plan(args: argparse.Namespace, root: str) -> tuple[ClusterPlan, bool]:
    """The layout to start and whether it is a restart (``DIR/cluster.json`` exists)."""
    doc = read_cluster_json(root)
    security = getattr(args, "security", None)
    if doc is None:
        plan = plan_cluster(root, _or(args.controllers, DEFAULT_COUNT), _or(args.brokers, DEFAULT_COUNT),
                            _or(args.base_port, DEFAULT_BASE_PORT), security=security or "plaintext")  # fmt: skip
        return plan, False
    plan = plan_from_document(root, doc)
    if security is not None and security != plan.security:
        raise CliError(f"{root} holds a cluster started with --security {plan.security}, which --security {security} "
                       "contradicts; drop the option to restart that cluster, or use another --data-dir")  # fmt: skip
    controllers, brokers, base_port = layout_counts(plan)
    for given, recorded, option in (
        (args.controllers, controllers, "--controllers"),
        (args.brokers, brokers, "--brokers"),
        (args.base_port, base_port, "--base-port"),
    ):
        if given is not None and given != recorded:
            raise CliError(
                f"{root} holds a cluster of {controllers} controllers and {brokers} brokers from port {base_port} "
                f"(see its cluster.json), which {option} {given} contradicts; drop the option to restart that "
                "cluster, or use another --data-dir"
            )
    return plan, True


def _or(value: int | None, default: int) -> int:
    return default if value is None else value


def check_ports(plan: ClusterPlan, doc_pids: list[int], *, metrics: bool = True) -> None:
    busy = ports_in_use(plan.ports(metrics=metrics))
    if not busy:
        return
    listing = ", ".join(f"{port} ({what})" for port, what in busy[:4]) + (" ..." if len(busy) > 4 else "")
    alive = [pid for pid in doc_pids if pid_alive(pid)]
    hint = (
        f"processes {alive} recorded in {plan.root}/cluster.json are still running"
        if alive
        else "stop what listens there or choose another --base-port"
    )
    raise CliError(f"port{'s' if len(busy) > 1 else ''} already in use: {listing}; {hint}")


def recorded_pids(root: str) -> list[int]:
    """The pids a ``cluster.json`` records (of a run that may have left processes behind)."""
    with contextlib.suppress(CliError):
        doc = read_cluster_json(root) or {}
        entries = [e for key in ("controllers", "brokers") for e in doc.get(key, []) if isinstance(e, dict)]
        return [e["pid"] for e in entries if type(e.get("pid")) is int]
    return []


def ensure_secret(root: str) -> Path:
    """``DIR/cluster.secret`` (mode 0600), created with a random secret when missing."""
    path = Path(root) / SECRET_FILE
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        if path.stat().st_mode & 0o077:
            os.chmod(path, 0o600)
        return path
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_urlsafe(32) + "\n")
    return path


@contextlib.contextmanager
def locked(root: str) -> Iterator[None]:
    """Hold ``DIR/.up.lock``: one ``up`` per data dir."""
    lock: IO[str] = open(os.path.join(root, ".up.lock"), "a+")  # noqa: SIM115
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise CliError(f"another 'odradek up' is running on {root}") from None
        yield
    finally:
        lock.close()


# ------------------------------------------------------------------------------------------ children


def child_argv(plan: ClusterPlan, node: NodePlan, secret: Path, config: list[str], metrics: bool = True) -> list[str]:
    listen = f"PLAINTEXT://{node.listen},KAFKA://{node.kafka_listen}" if node.kafka_listen else node.listen
    if node.internal_listen:  # --security sasl_ssl: clients on CLIENT, the brokers among themselves on PLAINTEXT
        listen = f"PLAINTEXT://{node.internal_listen},CLIENT://{node.listen}"
        if node.kafka_listen:
            listen += f",KAFKA://{node.kafka_listen}"
    if node.replication_listen:
        listen += f",REPLICATION://{node.replication_listen}"
    if node.data_listen:
        listen += f",DATA://{node.data_listen}"
    argv = [sys.executable, "-m", "odradek.cli", node.role, "--node-id", str(node.node_id), "--listen", listen]
    if metrics and node.metrics:
        argv += ["--metrics-listen", node.metrics]
    if node.role == "controller":
        argv += ["--raft-listen", node.raft_listen, "--quorum", plan.quorum, "--controller-addresses",
                 plan.controller_addresses, "--cluster-secret-file", str(secret)]  # fmt: skip
    else:
        argv += ["--controllers", plan.controller_listeners]
    argv += ["--data-dir", node.data_dir]
    for item in config:
        argv += ["--config", item]
    return argv


def make_children(
    plan: ClusterPlan, secret: Path, args: argparse.Namespace, secured: Secured | None = None
) -> tuple[list[Child], list[Child]]:
    env = {k: v for k, v in os.environ.items() if k != "ODRADEK_CLUSTER_SECRET"}
    env["PYTHONUNBUFFERED"] = "1"
    broker_env = {**env, "MALLOC_MMAP_THRESHOLD_": "67108864"}  # measured: doubles 1 MiB RPC throughput
    metrics = getattr(args, "metrics", True)
    def extra(node: NodePlan) -> list[str]:
        return secured.node_config(node) if secured is not None else []

    controllers = [
        Child(c.name, c.role, child_argv(plan, c, secret, [*extra(c), *(args.controller_config or [])], metrics),
              env, plan.log_path(c))
        for c in plan.controllers
    ]  # fmt: skip
    broker_config = list(args.broker_config or [])
    if not any(item.startswith("offsets.topic.replication.factor=") for item in broker_config):
        # Kafka's quickstart habit: a cluster smaller than the default factor (3) sets it to its size, since
        # __consumer_offsets is not created with fewer live brokers than the factor.
        broker_config.insert(0, f"offsets.topic.replication.factor={min(3, len(plan.brokers))}")
    if not any(item.startswith("transaction.state.log.replication.factor=") for item in broker_config):
        # likewise __transaction_state, and its min.isr (Kafka's 2) with a single broker
        broker_config.insert(0, f"transaction.state.log.replication.factor={min(3, len(plan.brokers))}")
        if len(plan.brokers) < 2 and not any(i.startswith("transaction.state.log.min.isr=") for i in broker_config):
            broker_config.insert(0, "transaction.state.log.min.isr=1")
    brokers = [
        Child(b.name, b.role, child_argv(plan, b, secret, [*extra(b), *broker_config], metrics), broker_env,
              plan.log_path(b))
        for b in plan.brokers
    ]  # fmt: skip
    return controllers, brokers


class Up:
    """One run of ``odradek up``: its children, the stop flag its signal handlers set, and its waits."""

    def __init__(
        self, plan: ClusterPlan, controllers: list[Child], brokers: list[Child], timeout_s: float,
        *, metrics: bool = True, secured: Secured | None = None,
    ) -> None:  # fmt: skip
        self.plan = plan
        self.secured = secured
        self.metrics = metrics
        self.controllers = controllers
        self.brokers = brokers
        self.children = controllers + brokers
        self.timeout_s = timeout_s
        # Set by the signal handlers: a plain flag, as an Event's lock could deadlock a handler that
        # interrupts the main thread inside Event.wait.
        self.stop_requested = False
        self.stopping = False
        self.started = time.monotonic()

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        """The first signal asks for an orderly stop; another one during the stop kills every child."""
        if self.stopping:
            for child in self.children:
                child.signal(signal.SIGKILL)
        self.stop_requested = True

    def on_quit(self, signum: int, frame: FrameType | None) -> None:
        """SIGQUIT (Ctrl-\\): every node prints its threads' stacks to its log and goes on (each runs in a
        process group of its own, so up passes it on), and up prints its own to stderr."""
        for child in self.children:
            child.signal(signal.SIGQUIT)
        faulthandler.dump_traceback(sys.stderr, all_threads=True)

    def start(self) -> None:
        for child in self.children:
            child.start()

    def dead_child(self) -> Child | None:
        for child in self.children:
            if not child.alive():
                return child
        return None

    def fail_with(self, child: Child) -> CliError:
        status = exit_description(child.returncode or 0)
        tail = child.tail()
        shown = f"; its last output:\n{tail}" if tail else ""
        return CliError(f"{child.name} {status} while the cluster was starting (log: {child.log_path}){shown}")

    def wait_ready(self) -> int:
        """Wait until every child printed its ready line, then until the cluster answers as a whole;
        returns the active controller's id. :class:`CliError` when a child exits or the time runs out."""
        deadline = self.started + self.timeout_s
        next_progress = time.monotonic() + PROGRESS_INTERVAL_S
        ready: list[Child] = []
        while True:
            ready += [c for c in self.children if c not in ready and READY_MARKERS[c.role] in c.output()]
            if len(ready) == len(self.children):
                break
            self._check_waiting(deadline, "every node to start")
            if time.monotonic() >= next_progress:
                next_progress += PROGRESS_INTERVAL_S
                self.progress(ready)
            time.sleep(0.1)
        active = self.wait_answers(deadline)
        self.wait_serving(deadline)
        return active

    def wait_serving(self, deadline: float) -> None:
        """Wait until every node's gRPC health service answers SERVING."""
        from odradek.health import SERVING, check_all

        credentials = None
        if self.secured is not None:
            from odradek.security.channels import channel_credentials
            from odradek.security.config import SecurityConfig

            credentials = channel_credentials(SecurityConfig.from_mapping(self.secured.admin_certificate_config()))
        while True:
            statuses = check_all([node.listen for node in self.plan.nodes], timeout_s=2.0, credentials=credentials)
            waiting = [f"{node.name} {statuses[node.listen]}" for node in self.plan.nodes
                       if statuses[node.listen] != SERVING]  # fmt: skip
            if not waiting:
                return
            self._check_waiting(deadline, "every node to be SERVING (" + ", ".join(waiting) + ")")
            time.sleep(0.2)

    def _check_waiting(self, deadline: float, what: str) -> None:
        dead = self.dead_child()
        if dead is not None:
            raise self.fail_with(dead)
        if self.stop_requested:
            raise CliError("interrupted while the cluster was starting", status=130)
        if time.monotonic() >= deadline:
            raise CliError(
                f"the cluster did not become ready within {self.timeout_s:.0f} s (waiting for {what}); "
                f"see the logs in {self.plan.root}/logs/"
            )

    def progress(self, ready: list[Child]) -> None:
        up_c = sum(1 for c in ready if c in self.controllers)
        up_b = sum(1 for c in ready if c in self.brokers)
        print(
            f"odradek up: waiting for the cluster ({time.monotonic() - self.started:.0f} s): controllers "
            f"{up_c}/{len(self.controllers)} listening, brokers {up_b}/{len(self.brokers)} ready",
            file=sys.stderr,
            flush=True,
        )

    def wait_answers(self, deadline: float) -> int:
        """Ask the cluster (Admin.describe_cluster) until an active controller and every broker unfenced."""
        from odradek import Admin

        expected = {b.node_id for b in self.plan.brokers}
        config: dict[str, object] = {"bootstrap.servers": self.plan.bootstrap_servers, "request.timeout.ms": 2000,
                                     "default.api.timeout.ms": 3000}  # fmt: skip
        if self.secured is not None:  # up itself is the admin, by certificate, on listeners that take it
            internal = ",".join(b.internal_listen for b in self.plan.brokers if b.internal_listen)
            config.update(self.secured.admin_certificate_config())
            if internal:
                config["bootstrap.servers"] = internal
        admin = Admin(config)
        try:
            while True:
                with contextlib.suppress(OdradekError):  # not answering yet: ask again until the deadline
                    cluster = admin.describe_cluster()
                    unfenced = {b.node_id for b in cluster.brokers if not b.fenced}
                    if cluster.controller_id >= 0 and expected <= unfenced:
                        active = int(cluster.controller_id)
                        break
                self._check_waiting(deadline, "an active controller and every broker unfenced")
                time.sleep(0.2)
            if self.secured is not None and self.secured.mode == "sasl_ssl":
                self._make_admin_user(admin, deadline)
            return active
        finally:
            admin.close()

    def _make_admin_user(self, admin: Any, deadline: float) -> None:
        """sasl_ssl: the admin's SCRAM credential, then a check that client.properties signs in on every broker."""
        from odradek import Admin
        from odradek.launcher.secure import ADMIN, ADMIN_MECHANISM

        assert self.secured is not None
        while True:
            try:
                admin.upsert_scram_credential(ADMIN, ADMIN_MECHANISM, self.secured.admin_password)
                break
            except OdradekError:
                self._check_waiting(deadline, "the admin's SCRAM credential")
                time.sleep(0.2)
        for broker in self.plan.brokers:
            client = Admin({**self.secured.client_config(), "bootstrap.servers": broker.listen,
                            "request.timeout.ms": 2000, "default.api.timeout.ms": 3000})  # fmt: skip
            try:
                while True:
                    with contextlib.suppress(OdradekError):  # the credential reaches each broker's image
                        client.describe_cluster()
                        break
                    self._check_waiting(deadline, f"the admin to sign in on {broker.name}")
                    time.sleep(0.2)
            finally:
                client.close()

    def status_lines(self, active: int) -> list[str]:
        took = time.monotonic() - self.started
        lines = [
            f"Odradek cluster ready in {took:.1f} s: {_count(self.controllers, 'controller')}, "
            f"{_count(self.brokers, 'broker')}, "
            f"data in {self.plan.root}",
            f"Bootstrap servers: {self.plan.bootstrap_servers}",
        ]
        if self.plan.kafka_bootstrap_servers:
            lines.append(f"Kafka bootstrap servers (Kafka's protocol, any Kafka client): "
                         f"{self.plan.kafka_bootstrap_servers}")  # fmt: skip
        for node, child in zip(self.plan.nodes, self.children, strict=True):
            role = ("  active" if node.node_id == active else "") if node.role == "controller" else ""
            raft = f"  raft {node.raft_listen}" if node.raft_listen else ""
            kafka = f"  kafka {node.kafka_listen}" if node.kafka_listen else ""
            metrics = f"  metrics {node.metrics}" if self.metrics and node.metrics else ""
            lines.append(f"  {node.name:<14} {node.listen}{raft}{kafka}{metrics}  pid {child.pid}{role}")
        if self.secured is not None:
            how = "client certificates" if self.secured.mode == "ssl" else f"SCRAM user {ADMIN_NAME} over TLS"
            lines += [
                f"Security: {self.secured.mode} ({how}); authorizer on, super users: {self.secured.super_users()}",
                f"Client settings (Kafka's keys): {self.secured.client_properties}",
                f"  e.g. odradek topics list --command-config {self.secured.client_properties}",
            ]
        lines += [
            f"Logs in {self.plan.root}/logs/, layout in {self.plan.root}/cluster.json.",
            f"Client commands find this cluster by themselves (or: export {ENV_VAR}={self.plan.bootstrap_servers}).",
            "Press Ctrl-C to stop the cluster.",
        ]
        return lines

    def watch(self) -> int:
        """Until a stop is requested: report children that exit. 1 when every child has exited."""
        while not self.stop_requested:
            time.sleep(0.2)
            for child in self.children:
                if not child.alive() and not child.reported:
                    child.reported = True
                    print(f"odradek up: {child.name} {exit_description(child.returncode or 0)} (log: "
                          f"{child.log_path})", file=sys.stderr, flush=True)  # fmt: skip
            if all(c.reported for c in self.children):
                print("odradek up: every node has exited; stopping", file=sys.stderr, flush=True)
                return 1
        return 0

    def stop(self) -> None:
        self.stopping = True
        if any(c.alive() for c in self.children):
            print("odradek up: stopping the cluster (signal again to kill it) ...", file=sys.stderr, flush=True)
        killed = stop_all(self.brokers, BROKER_STOP_TIMEOUT_S) + stop_all(self.controllers, CONTROLLER_STOP_TIMEOUT_S)
        for child in killed:
            print(f"odradek up: {child.name} did not stop in time and was killed", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    root = os.path.abspath(args.data_dir)
    try:
        os.makedirs(root, exist_ok=True)
    except OSError as exc:
        raise CliError(f"cannot create the data dir {root}: {exc.strerror}") from None
    with locked(root):
        plan, restart = choose_plan(args, root)
        check_ports(plan, recorded_pids(root) if restart else [], metrics=args.metrics)
        secured = prepare(plan, plan.security) if plan.security != "plaintext" else None
        controllers, brokers = make_children(plan, ensure_secret(root), args, secured)
        up = Up(plan, controllers, brokers, args.start_timeout, metrics=args.metrics, secured=secured)
        return _run_cluster(up, restart)


def _run_cluster(up: Up, restart: bool) -> int:
    what = "restarting the cluster in" if restart else "starting a new cluster in"
    print(f"odradek up: {what} {up.plan.root} ({_count(up.controllers, 'controller')}, "
          f"{_count(up.brokers, 'broker')})",
          file=sys.stderr, flush=True)  # fmt: skip
    previous = {s: signal.signal(s, up.on_signal) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    previous[signal.SIGQUIT] = signal.signal(signal.SIGQUIT, up.on_quit)
    try:
        up.start()
        active = up.wait_ready()
        write_cluster_json(up.plan, {c.name: c.pid for c in up.children}, metrics=up.metrics)
        record_last_up(up.plan.bootstrap_servers, up.plan.root)
        print("\n".join(up.status_lines(active)), flush=True)
        status = up.watch()
    finally:
        up.stop()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    print("odradek up: stopped", file=sys.stderr, flush=True)
    return status


def _count(items: Sized, noun: str) -> str:
    """``1 broker``, ``3 brokers``."""
    return f"{len(items)} {noun}{'' if len(items) == 1 else 's'}"
