"""Free TCP ports on 127.0.0.1 for test clusters and local launchers, reserved across processes.

Picking port 0 (the kernel's choice) and closing the probe socket hands out a port of the ephemeral range,
where any process's next outgoing connection may take it as its local port before our server binds it,
and two processes probing at once may both be told the same port. :func:`free_ports` avoids both:

* Candidates come from **below the ephemeral range** (``/proc/sys/net/ipv4/ip_local_port_range``; the
  kernel never picks an outgoing connection's local port there): :func:`candidate_range`, from
  :data:`LOWEST_PORT` up to the range's start (above its end when there is no room below).
* Each port handed out is **reserved** by a file named after it in a directory shared by every process of
  the machine (:func:`reservation_dir`: ``$ODRADEK_PORT_DIR``, else ``<tmp>/odradek-ports``). The file says
  ``"<pid> <unix time>"``; it is read and written under an exclusive ``flock``, so two processes never
  both take a port. A reservation holds while its process lives, at most :data:`LEASE_S` (then, or once
  the process is gone, the port may be handed out again); nothing needs releasing.
* The port must also bind on 127.0.0.1 now (nothing listens on it).

So two pytest runs, or two helpers' runs, at the same time never get the same ports, and no port of
theirs is taken by an outgoing connection. A process that binds the ports without asking here (``odradek
up`` with a fixed ``--base-port``) is only caught by the bind check.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import random
import socket
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

EPHEMERAL_RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"
DEFAULT_EPHEMERAL_RANGE = (32768, 60999)  # Linux's default
LOWEST_PORT = 10000  # below: well-known and registered services' ports
MIN_CANDIDATES = 2000
LEASE_S = 3600.0  # longer than any test keeps a cluster; a live process's ports are not handed out again before
ATTEMPTS_PER_PORT = 200


def ephemeral_range(path: str = EPHEMERAL_RANGE_FILE) -> tuple[int, int]:
    """The kernel's ephemeral port range ``(first, last)``; Linux's default when the file is unreadable."""
    try:
        with open(path) as f:
            first, last = (int(v) for v in f.read().split()[:2])
    except (OSError, ValueError):
        return DEFAULT_EPHEMERAL_RANGE
    return first, last


def candidate_range(ephemeral: tuple[int, int] | None = None) -> tuple[int, int]:
    """``(low, high)``, both included: the ports outside the ephemeral range that :func:`free_ports` picks from."""
    first, last = ephemeral or ephemeral_range()
    if first - LOWEST_PORT >= MIN_CANDIDATES:
        return LOWEST_PORT, first - 1
    if 65535 - last >= MIN_CANDIDATES:
        return max(last + 1, LOWEST_PORT), 65535
    raise RuntimeError(f"the ephemeral port range {first}-{last} leaves fewer than {MIN_CANDIDATES} ports for servers")


def reservation_dir() -> Path:
    return Path(os.environ.get("ODRADEK_PORT_DIR") or Path(tempfile.gettempdir()) / "odradek-ports")


def free_ports(
    count: int,
    *,
    directory: Path | None = None,
    port_range: tuple[int, int] | None = None,
    rng: random.Random | None = None,
) -> list[int]:
    """``count`` distinct ports, each reserved for this process (see the module docstring) and bindable now.

    Raises ``RuntimeError`` when not enough are found within a bounded number of attempts."""
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    low, high = port_range or candidate_range()
    folder = _ensure_dir(directory or reservation_dir())
    pick = rng or random.SystemRandom()
    found: list[int] = []
    for _ in range(ATTEMPTS_PER_PORT * count):
        if len(found) == count:
            break
        port = pick.randint(low, high)
        if port not in found and _reserve(folder, port):
            found.append(port)
    if len(found) < count:
        raise RuntimeError(f"found only {len(found)} of {count} free ports in {low}-{high} (reservations in {folder})")
    return found


def reserve(ports: Iterable[int], *, directory: Path | None = None) -> bool:
    """Reserve every port of ``ports`` for this process, or none (False: one is reserved or busy)."""
    folder = _ensure_dir(directory or reservation_dir())
    taken: list[int] = []
    for port in ports:
        if port in taken or not _reserve(folder, port):
            for p in taken:
                _unreserve(folder, p)
            return False
        taken.append(port)
    return True


def _ensure_dir(folder: Path) -> Path:
    if not folder.is_dir():
        folder.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(OSError):
            folder.chmod(0o1777)  # every user's pickers share it (sticky, like /tmp)
    return folder


def _reserve(folder: Path, port: int) -> bool:
    try:
        fd = os.open(folder / str(port), os.O_RDWR | os.O_CREAT, 0o666)
    except OSError:
        return False  # another user's file we may not write: theirs
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False  # another process is deciding about this port right now
        now = time.time()
        if _held(os.pread(fd, 64, 0), now) or not _bindable(port):
            return False
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()} {now:.3f}\n".encode(), 0)
        return True
    finally:
        os.close(fd)  # releases the flock


def _unreserve(folder: Path, port: int) -> None:
    """Give back a reservation of this process (the file stays; emptied, it reserves nothing)."""
    try:
        fd = os.open(folder / str(port), os.O_RDWR)
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        fields = os.pread(fd, 64, 0).split()
        if fields and fields[0] == str(os.getpid()).encode():
            os.ftruncate(fd, 0)
    finally:
        os.close(fd)


def _held(content: bytes, now: float) -> bool:
    """Whether a reservation file's content still reserves its port."""
    fields = content.split()
    try:
        pid, since = int(fields[0]), float(fields[1])
    except (IndexError, ValueError):
        return False  # empty (given back) or garbled: free
    if abs(now - since) >= LEASE_S:  # not "since <= now": the time is written rounded (up, too) to 1 ms
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's live process
    return True


def _bindable(port: int) -> bool:
    """Nothing listens on 127.0.0.1:``port`` (SO_REUSEADDR, as servers bind: a TIME_WAIT left over is fine)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError as exc:
            if exc.errno not in (errno.EADDRINUSE, errno.EACCES, errno.EADDRNOTAVAIL):
                raise
            return False
    return True
