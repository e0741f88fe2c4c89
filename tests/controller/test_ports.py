"""controller.ports: free ports below the ephemeral range, reserved across processes by lock files."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from controller import ports
from controller.ports import candidate_range, ephemeral_range, free_ports, reserve


def test_candidates_lie_below_the_ephemeral_range(tmp_path: Path) -> None:
    first, last = ephemeral_range()
    assert 0 < first <= last <= 65535
    assert candidate_range((32768, 60999)) == (ports.LOWEST_PORT, 32767)
    assert candidate_range((11000, 60000)) == (60001, 65535)  # no room below: above it
    with pytest.raises(RuntimeError, match="leaves fewer than"):
        candidate_range((11000, 64000))
    (tmp_path / "range").write_text("20000\t40000\n")
    assert ephemeral_range(str(tmp_path / "range")) == (20000, 40000)
    assert ephemeral_range(str(tmp_path / "missing")) == ports.DEFAULT_EPHEMERAL_RANGE
    low, high = candidate_range()
    picked = free_ports(20, directory=tmp_path)
    assert len(set(picked)) == 20
    assert all(low <= p <= high and not first <= p <= last for p in picked)


def test_a_reserved_port_is_not_handed_out_again_until_its_owner_is_gone_or_the_lease_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ports, "_bindable", lambda port: True)  # the reservations alone, whatever listens here
    window = (20000, 20009)
    mine = free_ports(10, directory=tmp_path, port_range=window)
    assert sorted(mine) == list(range(20000, 20010))
    with pytest.raises(RuntimeError, match="found only 0 of 1"):
        free_ports(1, directory=tmp_path, port_range=window)  # this process holds them all
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (tmp_path / "20003").write_text(f"{int(dead.stdout)} {time.time():.3f}\n")  # its process has exited
    (tmp_path / "20005").write_text(f"{os.getpid()} {time.time() - ports.LEASE_S - 1:.3f}\n")  # lease over
    (tmp_path / "20007").write_text("garbage")
    assert sorted(free_ports(3, directory=tmp_path, port_range=window)) == [20003, 20005, 20007]
    assert (tmp_path / "20003").read_text().split()[0] == str(os.getpid())


def test_a_port_something_listens_on_is_skipped(tmp_path: Path) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        busy = listener.getsockname()[1]
        with pytest.raises(RuntimeError):
            free_ports(1, directory=tmp_path, port_range=(busy, busy))
        assert not reserve([busy], directory=tmp_path)
    assert free_ports(1, directory=tmp_path, port_range=(busy, busy)) == [busy]


def test_reserve_is_all_or_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ports, "_bindable", lambda port: True)
    (held,) = free_ports(1, directory=tmp_path, port_range=(21000, 21000))
    assert not reserve([21001, 21002, held], directory=tmp_path)
    assert reserve([21001, 21002], directory=tmp_path), "the failed call gave back what it had taken"
    assert not reserve([21003, 21003], directory=tmp_path)


PICKER = """
import sys, time
from pathlib import Path
from controller.ports import free_ports
start = float(sys.argv[2])
while time.time() < start:
    time.sleep(0.001)
got = [p for _ in range(10) for p in free_ports(6, directory=Path(sys.argv[1]), port_range=(22000, 22399))]
print(" ".join(map(str, got)))
time.sleep(1.0)  # alive while the others pick: their reservations must hold against ours
"""


def test_concurrent_processes_never_get_the_same_port(tmp_path: Path) -> None:
    """Four processes start picking at the same instant, 60 ports each out of 400: all 240 distinct."""
    start = f"{time.time() + 1.0:.3f}"
    root = Path(__file__).resolve().parents[2]
    procs = [
        subprocess.Popen([sys.executable, "-c", PICKER, str(tmp_path), start], stdout=subprocess.PIPE, text=True,
                         cwd=root, env={**os.environ, "PYTHONPATH": str(root)})  # fmt: skip
        for _ in range(4)
    ]
    picked: list[int] = []
    for p in procs:
        out, _ = p.communicate(timeout=60)
        assert p.returncode == 0
        picked += [int(v) for v in out.split()]
    assert len(picked) == 240
    assert len(set(picked)) == 240
