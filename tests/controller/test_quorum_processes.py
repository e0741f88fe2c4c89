"""Crash tests with one process per voter (tests.support.quorum_node), killed with SIGKILL.

SIGKILL leaves what the page cache holds: this checks the crash paths (no close, no final flush or meta
write), not a power loss, which no test here can produce.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from controller.ports import free_ports
from tests.support.quorum_node import MARKER_PREFIX, NodeProcess, find_active

TUNING = {"log_compaction_min_entries": 40, "state_max_records_before_snapshot": 60}


class Procs:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.voters = {i: f"127.0.0.1:{port}" for i, port in enumerate(free_ports(3))}
        self.secret = secrets.token_hex(16)
        self.nodes: dict[int, NodeProcess] = {}

    def start(self, node_id: int) -> NodeProcess:
        node = NodeProcess(node_id, self.voters, str(self.root / f"node-{node_id}"), self.secret, tuning=TUNING)
        self.nodes[node_id] = node
        return node

    def live(self) -> list[NodeProcess]:
        return [n for n in self.nodes.values() if n.alive()]

    def converged(self, at_least: int = 0, timeout_s: float = 20.0) -> list[bytes]:
        """Wait (bounded) until every live node holds the same log of ``at_least`` records; return it.

        The log may still grow meanwhile (a new leader's marker), so the logs are read until they agree.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            end = max([at_least] + [n.request("status")["end_offset"] for n in self.live()])
            for node in self.live():
                reply = node.request("wait_offset", wait_s=30, offset=end - 1, timeout_s=20)
                assert reply["ok"], f"node {node.node_id} stuck at {reply['end_offset']} < {end}"
            logs = [[bytes.fromhex(p) for p in n.request("history")["payloads"]] for n in self.live()]
            shortest = min(len(log) for log in logs)
            assert all(log[:shortest] == logs[0][:shortest] for log in logs), "voters diverged"
            if all(log == logs[0] for log in logs):
                return logs[0]
            assert time.monotonic() < deadline, f"voters still differ in length: {[len(log) for log in logs]}"
            time.sleep(0.05)


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[Procs]:
    p = Procs(tmp_path)
    try:
        yield p
    finally:
        for node in p.nodes.values():
            node.kill()


def records(log: list[bytes]) -> list[bytes]:
    return [p for p in log if not p.startswith(MARKER_PREFIX)]


def append_via_active(p: Procs, payload: bytes) -> bool:
    """One append through whoever is active; True when acknowledged (committed)."""
    active = find_active(p.live(), 20)
    return bool(active.request("append", payloads=[payload.hex()], timeout_s=5)["ok"])


def test_kill_9_of_the_active_node_during_appends(procs: Procs) -> None:
    """SIGKILL of the active node mid-stream: another takes over, no acknowledged record is lost or
    doubled; the killed node catches up after a restart; then SIGKILL of all three and a restart keep
    the whole log (through journal compactions: TUNING compacts every 40 entries)."""
    for node_id in procs.voters:
        procs.start(node_id)
    acked = [f"k{i}".encode() for i in range(30) if append_via_active(procs, f"k{i}".encode())]
    assert len(acked) == 30
    victim = find_active(procs.live(), 20)
    victim.send("append", payloads=[b"in-flight".hex()], timeout_s=5)
    time.sleep(0.002)  # let the proposal leave, so the kill lands while it is in flight
    victim.kill()
    seq = 30
    while len(acked) < 60:
        payload = f"k{seq}".encode()
        if append_via_active(procs, payload):
            acked.append(payload)
        seq += 1
        assert seq < 200, "appends keep failing after the failover"
    procs.start(victim.node_id)
    log = procs.converged()
    data = records(log)
    assert len(data) == len(set(data)), "a record was committed twice"
    assert [p for p in data if p in set(acked)] == acked, "an acknowledged record is missing or out of order"
    assert set(data) - set(acked) <= {b"in-flight"} | {f"k{i}".encode() for i in range(seq)}

    for node in procs.live():
        node.kill()
    for node_id in procs.voters:
        procs.start(node_id)
    after = procs.converged(at_least=len(log))  # committed entries come back with the next leader's marker
    assert after[: len(log)] == log
    assert append_via_active(procs, b"after-crash")
    assert records(procs.converged()) == data + [b"after-crash"]
