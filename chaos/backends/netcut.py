"""Cutting links between the processes of a local cluster: per-node cgroups and iptables rules.

Every node of a cluster the local backend starts listens on a loopback address of its own (``127.A.B.n``,
chosen per run; Linux answers on all of 127.0.0.0/8) and runs in a cgroup v2 of its own
(``<cgroup2 mount>/odradek-chaos-<run>/<node name>``), entered by the process itself before it opens a socket
(:meth:`NetworkCutter.wrap`). A link from node X to node Y is cut by one rule in the ``OUTPUT`` chain::

    iptables -A OUTPUT -m cgroup --path odradek-chaos-<run>/X -d <Y's address> \\
             -m comment --comment odradek-chaos:<run> -j DROP

X's packets to Y's address are dropped: X can neither open a connection to Y nor send on one it has. A
two-way cut is that rule both ways; a connection Y opened to X is then dead too (Y's packets to X drop).
A one-way cut (X to Y only) keeps the connections Y opens to X working: X's answers go to Y's source
address, 127.0.0.1, which no rule names. The harness's own clients are in no node cgroup: they reach every
node throughout.

Rules match only this run's cgroups and addresses and carry the run's comment; they are removed by
:meth:`heal` / :meth:`close` (the backend's ``close()``, which the tests call on failure too), and a later
run removes the rules of a run whose process is gone (:func:`purge_stale_rules`).

Needs root, ``iptables`` (the tests install it with apt-get when missing) and a writable cgroup v2
hierarchy; :meth:`NetworkCutter.create` raises :class:`~chaos.backends.BackendError` saying which is
missing, and the backend then lacks ``Capability.ISOLATE``.

Thread-safety: none; the backend's caller drives it.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path

from chaos.backends import BackendError
from odradek.launcher.children import pid_alive

COMMENT_PREFIX = "odradek-chaos:"
CGROUP_PREFIX = "odradek-chaos-"
IPTABLES_TIMEOUT_S = 10.0


def cgroup2_mount() -> Path | None:
    """Where the cgroup v2 hierarchy is mounted (``/sys/fs/cgroup`` or ``/sys/fs/cgroup/unified``), if any."""
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return None
    for line in mounts:
        fields = line.split()
        if len(fields) >= 3 and fields[2] == "cgroup2":
            return Path(fields[1])
    return None


def node_hosts(names: Sequence[str], rng: random.Random | None = None) -> dict[str, str]:
    """A loopback address of its own for each node: ``127.A.B.n`` with ``A.B`` picked at random (never 0.0),
    ``n`` from 1 in the order given."""
    rng = rng or random.Random(os.getpid() ^ int.from_bytes(os.urandom(4), "big"))
    a, b = rng.randrange(1, 255), rng.randrange(0, 255)
    return {name: f"127.{a}.{b}.{i + 1}" for i, name in enumerate(names)}


def _iptables(*args: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(["iptables", "-w", *args], capture_output=True, text=True, timeout=IPTABLES_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BackendError(f"iptables {' '.join(args)}: {exc}") from None


def purge_stale_rules() -> int:
    """Remove the rules of runs whose process is gone (a run killed before its cleanup); how many."""
    listed = _iptables("-S", "OUTPUT")
    removed = 0
    for line in listed.stdout.splitlines():
        if COMMENT_PREFIX not in line or not line.startswith("-A OUTPUT "):
            continue
        run = line.split(COMMENT_PREFIX, 1)[1].split()[0].strip('"')
        owner = run.split("-", 1)[0]
        if owner.isdigit() and pid_alive(int(owner)):
            continue
        if _iptables("-D", *line.split()[1:]).returncode == 0:
            removed += 1
    return removed


class NetworkCutter:
    """The cgroups and rules of one run (see the module docstring). Create with :meth:`create`."""

    def __init__(self, run: str, root: Path, hosts: dict[str, str]) -> None:
        self.run = run
        self.root = root  # this run's cgroup directory
        self.hosts = dict(hosts)  # node name -> its loopback address
        self._rules: dict[tuple[str, str], list[str]] = {}  # (from node, to node) -> the rule's arguments

    @classmethod
    def create(cls, hosts: dict[str, str]) -> NetworkCutter:
        """Check what cutting links needs and make this run's cgroups; BackendError saying what is missing."""
        if os.geteuid() != 0:
            raise BackendError("cutting links needs root (iptables and cgroups)")
        if shutil.which("iptables") is None:
            raise BackendError("cutting links needs iptables (apt-get install iptables)")
        probe = _iptables("-S", "OUTPUT")
        if probe.returncode != 0:
            raise BackendError(f"iptables does not work here: {probe.stderr.strip()}")
        mount = cgroup2_mount()
        if mount is None:
            raise BackendError("cutting links needs a cgroup v2 hierarchy (none is mounted)")
        purge_stale_rules()
        run = f"{os.getpid()}-{os.urandom(3).hex()}"
        root = mount / f"{CGROUP_PREFIX}{run}"
        try:
            root.mkdir()
            for name in hosts:
                (root / name).mkdir()
        except OSError as exc:
            _remove_cgroups(root)
            raise BackendError(f"cannot make cgroups under {mount}: {exc}") from None
        return cls(run, root, hosts)

    # ----------------------------------------------------------------------------------- processes

    def wrap(self, name: str, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside node ``name``'s cgroup: the shell moves itself there, then execs it (same pid)."""
        procs = str(self.root / name / "cgroup.procs")
        return ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', procs, *argv]

    # ------------------------------------------------------------------------------------- links

    def cut(self, from_nodes: Iterable[str], to_nodes: Iterable[str], *, both_ways: bool = True) -> None:
        """Drop what ``from_nodes`` send to ``to_nodes`` (and back, with ``both_ways``)."""
        to_nodes = list(to_nodes)
        for a in from_nodes:
            for b in to_nodes:
                if a == b:
                    continue
                self._add(a, b)
                if both_ways:
                    self._add(b, a)

    def heal(self, nodes: Iterable[str] | None = None) -> None:
        """Remove the rules that involve ``nodes`` (every rule of this run when None)."""
        wanted = None if nodes is None else set(nodes)
        problems = []
        for key in list(self._rules):
            if wanted is not None and not wanted & set(key):
                continue
            result = _iptables("-D", "OUTPUT", *self._rules[key])
            if result.returncode != 0 and "does a matching rule exist" not in result.stderr:
                problems.append(result.stderr.strip())
            del self._rules[key]
        if problems:
            raise BackendError(f"removing iptables rules failed: {'; '.join(problems)}")

    def cut_from(self, node: str) -> set[str]:
        """The nodes ``node`` cannot send to now."""
        return {b for a, b in self._rules if a == node}

    def _add(self, a: str, b: str) -> None:
        if (a, b) in self._rules:
            return
        rule = ["-m", "cgroup", "--path", f"{self.root.name}/{a}", "-d", self.hosts[b],
                "-m", "comment", "--comment", f"{COMMENT_PREFIX}{self.run}", "-j", "DROP"]  # fmt: skip
        result = _iptables("-I", "OUTPUT", *rule)
        if result.returncode != 0:
            raise BackendError(f"iptables refused to cut {a} -> {b}: {result.stderr.strip()}")
        self._rules[(a, b)] = rule

    # --------------------------------------------------------------------------------------- end

    def close(self) -> None:
        """Every rule of this run removed, then its cgroups (those still holding a process stay)."""
        try:
            self.heal()
        finally:
            _remove_cgroups(self.root)


def _remove_cgroups(root: Path) -> None:
    if not root.exists():
        return
    for child in root.iterdir():
        if child.is_dir():
            with contextlib.suppress(OSError):  # a process is still in it (the backend stops them first)
                child.rmdir()
    with contextlib.suppress(OSError):
        root.rmdir()
