"""The child processes of ``odradek up``: started, watched, stopped, never left behind.

No orphans, whatever happens to ``up``:

* each child runs in its own process group, so a Ctrl-C in the terminal reaches ``up`` alone, and ``up``
  stops the children in order (brokers first: their controlled shutdown needs a controller);
* on Linux each child asks the kernel for SIGTERM when ``up`` dies (``prctl(PR_SET_PDEATHSIG)``), so even
  a SIGKILLed ``up`` takes its cluster down; the child checks right after setting it that ``up`` is still
  its parent, closing the race with an ``up`` that died during the start. The child does this itself, first
  thing in ``odradek.cli.main`` (:func:`die_with_parent`, told the parent's pid by ``ODRADEK_PARENT_PID``),
  not in a ``preexec_fn``: a ``preexec_fn`` makes ``subprocess`` fork instead of vfork, and a fork runs
  gRPC's fork handlers, which crashed the child before its exec when the parent (the chaos harness, with
  producers and consumers running) had calls in flight ("Mutex::Fer with pending CondVar queueing");
* :func:`stop_all` sends SIGTERM, waits (bounded), then sends SIGKILL.

Thread-safety: none; the main thread of ``up`` drives these objects.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

PR_SET_PDEATHSIG = 1


def _load_prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl: Callable[..., int] = libc.prctl
    except (OSError, AttributeError):
        return None
    return prctl


_PRCTL = _load_prctl()  # looked up before any fork: the child only calls it


PARENT_PID_ENV = "ODRADEK_PARENT_PID"


def die_with_parent() -> None:
    """In a child of ``up`` (``ODRADEK_PARENT_PID`` set): SIGTERM this process when that parent dies (Linux),
    and exit at once when it is already gone. Does nothing in any other process."""
    value = os.environ.pop(PARENT_PID_ENV, None)
    if value is None:
        return
    if _PRCTL is not None:
        _PRCTL(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != int(value):
        os._exit(1)


class Child:
    """One server process; its stdout and stderr are appended to ``log_path``."""

    def __init__(self, name: str, role: str, argv: Sequence[str], env: Mapping[str, str], log_path: Path) -> None:
        self.name = name
        self.role = role
        self.argv = list(argv)
        self.env = dict(env)
        self.log_path = log_path
        self.popen: subprocess.Popen[bytes] | None = None
        self.log_offset = 0  # where this run's output starts in the log file
        self.reported = False  # an unexpected exit was reported already

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "ab") as log:
            log.write(f"---- odradek up: starting {self.name}: {' '.join(self.argv)}\n".encode())
            log.flush()
            self.log_offset = log.tell()
            self.popen = subprocess.Popen(
                self.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env={**self.env, PARENT_PID_ENV: str(os.getpid())}, process_group=0,
            )  # fmt: skip

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    @property
    def returncode(self) -> int | None:
        return None if self.popen is None else self.popen.poll()

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def output(self) -> str:
        """This run's output so far."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self.log_offset)
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def tail(self, lines: int = 8) -> str:
        return "\n".join(self.output().rstrip().splitlines()[-lines:])

    def signal(self, signum: int) -> None:
        if self.alive():
            assert self.popen is not None
            with contextlib.suppress(ProcessLookupError):
                self.popen.send_signal(signum)


def exit_description(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with status {returncode}"


def stop_all(children: Sequence[Child], timeout_s: float, kill_timeout_s: float = 5.0) -> list[Child]:
    """SIGTERM to every child, wait up to ``timeout_s`` for them all, then SIGKILL the rest. The children
    that had to be killed."""
    killed: list[Child] = []
    for child in children:
        child.signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    for child in children:
        if child.popen is None:
            continue
        try:
            child.popen.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.signal(signal.SIGKILL)
            killed.append(child)
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.popen.wait(kill_timeout_s)
    return killed


def ports_in_use(ports: Iterable[tuple[int, str]], host: str = "127.0.0.1") -> list[tuple[int, str]]:
    """The ports something already listens on (or that cannot be bound), with their descriptions.

    SO_REUSEADDR, as servers set it, so that a port in TIME_WAIT from the last run counts as free; a
    listening socket still makes the bind fail.
    """
    busy: list[tuple[int, str]] = []
    for port, what in ports:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((host, port))
            except OSError as exc:
                if exc.errno not in (errno.EADDRINUSE, errno.EACCES, errno.EADDRNOTAVAIL):
                    raise
                busy.append((port, what))
    return busy


def pid_alive(pid: object) -> bool:
    """Whether a process with this id exists (a zombie counts; good enough for "is it still running")."""
    if type(pid) is not int or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
