"""Run ``odradek`` commands, and ``odradek up`` clusters, as real processes on 127.0.0.1.

Every command gets an environment of its own: ``XDG_STATE_HOME`` under the test's tmp dir (so the
"address ``odradek up`` wrote last" is the test's own) and no ``ODRADEK_BOOTSTRAP_SERVERS``. Every wait
is bounded. :class:`UpProcess` stops ``up`` with SIGTERM and then checks that each pid ``cluster.json``
recorded is gone; whatever happens, :meth:`UpProcess.kill_everything` leaves no process behind.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from odradek.launcher.children import pid_alive, ports_in_use
from odradek.launcher.plan import plan_cluster
from tests.support.launcher import wait_until as wait_for

COMMAND_TIMEOUT_S = 120.0
READY_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 60.0
FAST_BROKER_CONFIG = ("broker.heartbeat.interval.ms=500",)


def cli_env(state_home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("ODRADEK_BOOTSTRAP_SERVERS", "ODRADEK_CLUSTER_SECRET")}
    env["XDG_STATE_HOME"] = str(state_home)
    env.update(extra)
    return env


def free_base_port(controllers: int, brokers: int, attempts: int = 200) -> int:
    """A base port whose whole plan (brokers, controllers, Raft) is free right now."""
    rng = random.Random()
    for _ in range(attempts):
        base = rng.randrange(20000, 40000)
        plan = plan_cluster("/nonexistent", controllers, brokers, base)
        if not ports_in_use(plan.ports()):
            return base
    raise AssertionError("no free base port found")


def odradek(
    args: Sequence[str], env: Mapping[str, str], *, input: bytes | None = None, timeout_s: float = COMMAND_TIMEOUT_S,
    python: str = sys.executable, cwd: Path | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """Run ``odradek ARGS`` to completion (bounded); ``python`` and ``cwd``: another checkout's code."""
    return subprocess.run(
        [python, "-m", "odradek.cli", *args], input=input, capture_output=True, env=dict(env),
        timeout=timeout_s, check=False, cwd=cwd,
    )  # fmt: skip


class UpProcess:
    """One ``odradek up`` child; stdout and stderr go to files next to the data dir."""

    def __init__(
        self, data_dir: Path, env: Mapping[str, str], args: Sequence[str] = (), *, python: str = sys.executable,
        cwd: Path | None = None,
    ) -> None:  # fmt: skip
        self.data_dir = data_dir
        self.env = dict(env)
        self.args = list(args)
        self.python, self.cwd = python, cwd  # another checkout's code (tests.bench.compare --tree)
        self.popen: subprocess.Popen[bytes] | None = None
        self.out_path = data_dir.parent / f"{data_dir.name}-up.out"
        self.err_path = data_dir.parent / f"{data_dir.name}-up.err"
        self.seen_pids: set[int] = set()

    def start(self) -> UpProcess:
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.popen = subprocess.Popen(
                [self.python, "-m", "odradek.cli", "up", "--data-dir", str(self.data_dir), *self.args],
                stdout=out, stderr=err, env=self.env, start_new_session=True, cwd=self.cwd,
            )  # fmt: skip
        return self

    def stdout(self) -> str:
        return self.out_path.read_text(errors="replace") if self.out_path.exists() else ""

    def stderr(self) -> str:
        return self.err_path.read_text(errors="replace") if self.err_path.exists() else ""

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> dict[str, Any]:
        """Wait for the "Press Ctrl-C" line; returns cluster.json (and remembers its pids)."""

        def ready() -> bool:
            if "Press Ctrl-C" in self.stdout():
                return True
            if not self.alive():
                raise AssertionError(f"odradek up exited ({self.returncode}):\n{self.stderr()[-3000:]}")
            return False

        wait_for(ready, timeout_s, "odradek up to report a ready cluster", interval_s=0.1)
        doc = self.cluster_json()
        self.seen_pids.update(self.child_pids(doc))
        return doc

    def cluster_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = json.loads((self.data_dir / "cluster.json").read_text())
        return doc

    @staticmethod
    def child_pids(doc: Mapping[str, Any]) -> list[int]:
        return [entry["pid"] for key in ("controllers", "brokers") for entry in doc[key]]

    @property
    def returncode(self) -> int | None:
        return None if self.popen is None else self.popen.poll()

    def send(self, signum: int) -> None:
        assert self.popen is not None
        if self.alive():
            self.popen.send_signal(signum)

    def stop(self, signum: int = signal.SIGTERM, timeout_s: float = STOP_TIMEOUT_S) -> int:
        """Signal ``up``, wait for it (bounded) and for every child it started to be gone."""
        assert self.popen is not None
        self.send(signum)
        code = self.popen.wait(timeout_s)
        self.assert_no_orphans()
        return code

    def assert_no_orphans(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        wait_for(lambda: not [p for p in self.seen_pids if pid_alive(p) and not _zombie(p)], timeout_s,
                 f"the children {sorted(self.seen_pids)} of odradek up to exit")  # fmt: skip

    def kill_everything(self) -> None:
        """Cleanup whatever state the test left: SIGTERM ``up`` (bounded), then SIGKILL it and its children."""
        if self.popen is not None and self.alive():
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(10)
        if (self.data_dir / "cluster.json").exists():
            self.seen_pids.update(self.child_pids(self.cluster_json()))
        for pid in self.seen_pids:
            if pid_alive(pid) and not _zombie(pid):
                os.kill(pid, signal.SIGKILL)


def _zombie(pid: int) -> bool:
    """A process that has exited but was not reaped yet (its parent, ``up``, was SIGKILLed) is gone for us."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True
