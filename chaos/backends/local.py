"""The local backend: controllers and brokers as processes on 127.0.0.1, started the way ``odradek up`` does.

Two ways in:

* :meth:`LocalBackend.start` plans a fresh cluster under a directory (``odradek.launcher.plan``), starts
  its children with ``odradek.launcher``'s own argv, environment and no-orphan rules, waits until it
  answers (an active controller, every broker unfenced), and writes ``DIR/cluster.json``. ``close()``
  stops it (brokers first, SIGTERM, bounded, then SIGKILL).
* :meth:`LocalBackend.attach` takes the ``cluster.json`` of a running ``odradek up``. Faults signal the
  recorded pids; a node the harness restarts is the harness's own child (same id, ports, data dir and
  cluster secret) and is stopped by ``close()``, so after an attached run the nodes that were killed are
  down: restart ``odradek up`` on the same data dir to bring the cluster back whole.

Capabilities: kill / start and pause / resume; and, for a cluster it started with ``isolation`` (the
default when the machine allows it: root, iptables, cgroup v2), isolate / heal and partition /
heal_network: every node then listens on a loopback address of its own and runs in a cgroup of its own,
and :mod:`chaos.backends.netcut` cuts links with iptables rules that match only those. Without it (or
attached to an ``odradek up`` cluster, whose nodes share 127.0.0.1) :meth:`isolate` and :meth:`partition`
raise :class:`UnsupportedFault` saying why, and the harness skips those faults with that message.

Thread-safety: none; the harness's fault thread drives it.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from chaos.backends import BackendError, Capability, Node, NodeRef, NodeState, UnsupportedFault, node_name
from chaos.backends.netcut import NetworkCutter, node_hosts
from controller.ports import candidate_range, reserve
from odradek.errors import CliError
from odradek.launcher.children import Child, pid_alive, ports_in_use, stop_all
from odradek.launcher.plan import (
    ClusterPlan,
    NodePlan,
    plan_cluster,
    plan_from_document,
    read_cluster_json,
    write_cluster_json,
)
from odradek.launcher.up import (
    BROKER_STOP_TIMEOUT_S,
    CONTROLLER_STOP_TIMEOUT_S,
    READY_MARKERS,
    Up,
    ensure_secret,
    make_children,
)

KILL_WAIT_S = 10.0
PORT_SEARCH_TRIES = 200


class _Proc:
    """A node's process: a :class:`Child` we started, or a pid recorded in ``cluster.json`` (attach)."""

    def __init__(self, plan: NodePlan, child: Child | None, pid: int | None) -> None:
        self.plan = plan
        self.child = child
        self.foreign_pid = pid  # a process of another launcher, until we restart the node
        self.paused = False

    def alive(self) -> bool:
        if self.child is not None:
            return self.child.alive()
        return self.foreign_pid is not None and pid_alive(self.foreign_pid)

    def send(self, signum: int) -> None:
        if self.child is not None:
            self.child.signal(signum)
        elif self.foreign_pid is not None and pid_alive(self.foreign_pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.foreign_pid, signum)


class LocalBackend:
    """See the module docstring. Implements :class:`chaos.backends.Backend`."""

    def __init__(
        self, plan: ClusterPlan, procs: list[_Proc], up: Up | None, children: Mapping[str, Child],
        cutter: NetworkCutter | None = None, no_isolation: str = "",
    ) -> None:  # fmt: skip
        self._plan = plan
        self._procs = {p.plan.name: p for p in procs}
        self._up = up  # the launcher of a cluster we started (None when attached)
        self._spares = dict(children)  # ready-made Child objects (argv, env, log) for restarting each node
        self._cutter = cutter  # cuts links between nodes (None: this backend cannot)
        self._no_isolation = no_isolation or "the local backend cannot cut links here"
        self._isolated: set[str] = set()
        self._closed = False

    # ------------------------------------------------------------------------------------ creation

    @classmethod
    def start(
        cls, root: str | Path, *, controllers: int = 3, brokers: int = 3, base_port: int | None = None,
        broker_config: Mapping[str, str] | None = None, controller_config: Mapping[str, str] | None = None,
        timeout_s: float = 120.0, isolation: bool | None = None,
    ) -> LocalBackend:  # fmt: skip
        """Start a fresh cluster under ``root`` (which must not hold a cluster.json yet) and wait until it is ready.

        ``base_port`` None: the first base port whose every planned port is free. ``isolation``: give every
        node its own loopback address and cgroup so that links can be cut (True: required, BackendError when
        the machine does not allow it; None: when it allows it; False: never)."""
        root = os.path.abspath(root)
        os.makedirs(root, exist_ok=True)
        if read_cluster_json(root) is not None:
            raise BackendError(f"{root} already holds a cluster.json; attach to it or choose another directory")
        names = [f"controller-{i}" for i in range(controllers)] + [f"broker-{i}" for i in range(brokers)]
        cutter, why_not = None, "isolation was not asked for"
        if isolation is not False:
            try:
                cutter = NetworkCutter.create(node_hosts(names))
            except BackendError as exc:
                if isolation:
                    raise
                why_not = f"the local backend cannot cut links here: {exc}"
        try:
            plan = plan_on_free_ports(root, controllers, brokers, base_port, cutter.hosts if cutter else None)
            args = _launcher_args(broker_config, controller_config)
            controller_children, broker_children = make_children(plan, ensure_secret(root), args)
        except BaseException:
            if cutter is not None:
                cutter.close()
            raise
        if cutter is not None:
            for child in controller_children + broker_children:
                child.argv = cutter.wrap(child.name, child.argv)
        up = Up(plan, controller_children, broker_children, timeout_s)
        children = {c.name: c for c in up.children}
        procs = [_Proc(node, children[node.name], None) for node in plan.nodes]
        backend = cls(plan, procs, up, {}, cutter, why_not)
        try:
            up.start()
            up.wait_ready()
        except CliError as exc:
            backend.close()
            raise BackendError(f"the cluster did not start: {exc}") from None
        except BaseException:
            backend.close()
            raise
        write_cluster_json(plan, {c.name: c.pid for c in up.children})
        return backend

    @classmethod
    def attach(
        cls, cluster_json: str | Path, *, broker_config: Mapping[str, str] | None = None,
        controller_config: Mapping[str, str] | None = None,
    ) -> LocalBackend:  # fmt: skip
        """The cluster a running ``odradek up`` recorded in ``cluster_json``. ``*_config``: what to pass to a
        node the harness restarts (``odradek up``'s ``--broker-config`` / ``--controller-config``)."""
        root = os.path.dirname(os.path.abspath(cluster_json))
        try:
            doc = read_cluster_json(root)
            if doc is None:
                raise BackendError(f"{cluster_json} does not exist (start the cluster with 'odradek up' first)")
            plan = plan_from_document(root, doc)
        except CliError as exc:
            raise BackendError(str(exc)) from None
        pids = {f"{role}-{e['node_id']}": e.get("pid") for role in ("controller", "broker") for e in doc[role + "s"]}
        procs = []
        for node in plan.nodes:
            pid = pids.get(node.name)
            procs.append(_Proc(node, None, pid if type(pid) is int else None))
        dead = [p.plan.name for p in procs if not p.alive()]
        if dead:
            raise BackendError(f"{', '.join(dead)} of {cluster_json} not running; restart 'odradek up' on {root}")
        secret = Path(root) / "cluster.secret"
        if not secret.exists():
            raise BackendError(f"{secret} is missing: cannot restart nodes of this cluster")
        controller_children, broker_children = make_children(
            plan, secret, _launcher_args(broker_config, controller_config)
        )
        why = "an attached 'odradek up' cluster shares 127.0.0.1: the local backend cannot cut its links"
        return cls(plan, procs, None, {c.name: c for c in controller_children + broker_children}, None, why)

    # ------------------------------------------------------------------------------------- queries

    @property
    def bootstrap_servers(self) -> str:
        return self._plan.bootstrap_servers

    @property
    def capabilities(self) -> frozenset[Capability]:
        if self._cutter is None:
            return frozenset({Capability.KILL, Capability.PAUSE})
        return frozenset({Capability.KILL, Capability.PAUSE, Capability.ISOLATE, Capability.PARTITION})

    @property
    def root(self) -> str:
        return self._plan.root

    def nodes(self) -> list[Node]:
        return [Node(p.plan.role, p.plan.node_id, p.plan.listen, self._state(p)) for p in self._procs.values()]

    def _state(self, proc: _Proc) -> NodeState:
        if not proc.alive():
            return NodeState.KILLED
        if proc.paused:
            return NodeState.PAUSED
        return NodeState.ISOLATED if proc.plan.name in self._isolated else NodeState.RUNNING

    def _proc(self, ref: NodeRef) -> _Proc:
        name = node_name(ref)
        proc = self._procs.get(name)
        if proc is None:
            raise BackendError(f"no node named {name!r} (the cluster has {', '.join(self._procs)})")
        return proc

    def log_path(self, ref: NodeRef) -> Path:
        return self._plan.log_path(self._proc(ref).plan)

    # -------------------------------------------------------------------------------------- faults

    def kill(self, node: NodeRef) -> None:
        proc = self._proc(node)
        proc.send(signal.SIGKILL)
        proc.paused = False
        if proc.child is not None and proc.child.popen is not None:
            try:
                proc.child.popen.wait(KILL_WAIT_S)
            except subprocess.TimeoutExpired:
                raise BackendError(f"{proc.plan.name} did not die within {KILL_WAIT_S:.0f} s of SIGKILL") from None
            return
        deadline = time.monotonic() + KILL_WAIT_S
        while proc.alive():  # another launcher's child: gone once that launcher reaps it
            if time.monotonic() >= deadline:
                raise BackendError(f"{proc.plan.name} (pid {proc.foreign_pid}) still exists {KILL_WAIT_S:.0f} s "
                                   "after SIGKILL (is its 'odradek up' reaping its children?)")  # fmt: skip
            time.sleep(0.05)

    def start_node(self, node: NodeRef, timeout_s: float = 60.0) -> None:
        proc = self._proc(node)
        if proc.alive():
            raise BackendError(f"{proc.plan.name} is running already")
        if proc.child is None:
            proc.child = self._spares.pop(proc.plan.name)
            proc.foreign_pid = None
        child = proc.child
        child.start()
        marker = READY_MARKERS[proc.plan.role]
        deadline = time.monotonic() + timeout_s
        while marker not in child.output():
            if not child.alive():
                raise BackendError(f"{child.name} exited while restarting (log: {child.log_path}):\n{child.tail()}")
            if time.monotonic() >= deadline:
                raise BackendError(f"{child.name} was not ready within {timeout_s:.0f} s (log: {child.log_path})")
            time.sleep(0.05)

    def pause(self, node: NodeRef) -> None:
        proc = self._proc(node)
        if not proc.alive():
            raise BackendError(f"cannot pause {proc.plan.name}: it is not running")
        proc.send(signal.SIGSTOP)
        proc.paused = True

    def resume(self, node: NodeRef) -> None:
        proc = self._proc(node)
        if proc.paused:
            proc.send(signal.SIGCONT)
            proc.paused = False

    def isolate(self, node: NodeRef) -> None:
        name = self._proc(node).plan.name
        self._require_cutter().cut([name], [n for n in self._procs if n != name])
        self._isolated.add(name)

    def heal(self, node: NodeRef) -> None:
        name = self._proc(node).plan.name
        if name in self._isolated:
            self._require_cutter().heal([name])
            self._isolated.discard(name)

    def partition(self, side: Sequence[NodeRef], others: Sequence[NodeRef], *, both_ways: bool = True) -> None:
        cutter = self._require_cutter()
        names = [self._proc(n).plan.name for n in side]
        cutter.cut(names, [self._proc(n).plan.name for n in others], both_ways=both_ways)

    def heal_network(self) -> None:
        if self._cutter is not None:
            self._cutter.heal()
        self._isolated.clear()

    def _require_cutter(self) -> NetworkCutter:
        if self._cutter is None:
            raise UnsupportedFault(self._no_isolation)
        return self._cutter

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self.heal_network()  # first: the controlled shutdowns need the links
        finally:
            for proc in self._procs.values():
                self.resume(proc.plan.name)
            ours = [p.child for p in self._procs.values() if p.child is not None]
            brokers = [c for c in ours if c.role == "broker"]
            controllers = [c for c in ours if c.role == "controller"]
            stop_all(brokers, BROKER_STOP_TIMEOUT_S)
            stop_all(controllers, CONTROLLER_STOP_TIMEOUT_S)
            if self._cutter is not None:
                self._cutter.close()

    def __enter__(self) -> LocalBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _launcher_args(
    broker_config: Mapping[str, str] | None, controller_config: Mapping[str, str] | None
) -> argparse.Namespace:
    """What :func:`odradek.launcher.up.make_children` reads of ``odradek up``'s options."""
    return argparse.Namespace(
        broker_config=[f"{k}={v}" for k, v in (broker_config or {}).items()],
        controller_config=[f"{k}={v}" for k, v in (controller_config or {}).items()],
    )


def plan_on_free_ports(
    root: str, controllers: int, brokers: int, base_port: int | None, hosts: Mapping[str, str] | None = None
) -> ClusterPlan:
    if base_port is not None:
        plan = plan_cluster(root, controllers, brokers, base_port, hosts)
        busy = ports_in_use(plan.ports())
        if busy:
            raise BackendError(f"ports in use: {', '.join(f'{p} ({what})' for p, what in busy[:4])}")
        return plan
    # below the ephemeral range, every port reserved across processes (controller.ports: no other test run
    # or free_ports() caller gets them)
    rng = random.Random(os.getpid() ^ time.monotonic_ns())  # ports only: the fault schedule has its own seed
    low, high = candidate_range()
    span = max(p for p, _ in plan_cluster(root, controllers, brokers, low, hosts).ports()) - low
    for _ in range(PORT_SEARCH_TRIES):
        plan = plan_cluster(root, controllers, brokers, rng.randrange(low, high - span), hosts)
        if not ports_in_use(plan.ports()) and reserve(p for p, _ in plan.ports()):
            return plan
    raise BackendError(f"found no free port range for the cluster in {low}..{high}")
