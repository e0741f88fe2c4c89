"""Benchmark of the metadata quorum on a local 3-voter cluster (separate processes on 127.0.0.1).

    python -m bench.raft_quorum [--appends 500] [--records 1] [--trials 7] [--no-fsync]

Prints, asserts nothing:

- commit latency (p50 / p99 / max) of sequential appends on the active node, each ``--records`` records,
  measured inside the active node's process from ``append`` call to return (committed and applied);
- failover: for each trial, the time from SIGKILL of the active node to the first append committed by
  its successor (both survivors are told to append as soon as they become active), then the killed node
  is restarted and allowed to catch up before the next trial.
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import tempfile
import time
from collections.abc import Sequence
from typing import Any

from controller.ports import free_ports
from tests.support.quorum_node import NodeProcess, find_active


def _wait_all_connected(nodes: Sequence[NodeProcess], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while any(n.request("status", wait_s=5)["connected"] < len(nodes) - 1 for n in nodes):
        if time.monotonic() > deadline:
            raise TimeoutError(f"voters not all connected within {timeout_s} s")
        time.sleep(0.01)


def percentile(values: Sequence[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def run(appends: int, records: int, trials: int, fsync: bool) -> None:
    voters = {i: f"127.0.0.1:{port}" for i, port in enumerate(free_ports(3))}
    secret = secrets.token_hex(16)
    tuning = {"fsync": fsync}
    with tempfile.TemporaryDirectory(prefix="bench-quorum-") as root:
        dirs = {i: os.path.join(root, f"node-{i}") for i in voters}
        nodes = {i: NodeProcess(i, voters, dirs[i], secret, tuning=tuning) for i in voters}
        try:
            active = find_active(list(nodes.values()), 20)
            reply = active.request("bench_append", wait_s=300, count=appends, records=records)
            lat = reply["latencies_ms"]
            print(f"sequential appends: {len(lat)} x {records} record(s), fsync={'on' if fsync else 'off'}")
            print(
                f"  commit latency ms: p50 {percentile(lat, 50):.2f}  p99 {percentile(lat, 99):.2f}  "
                f"max {max(lat):.2f}  mean {statistics.fmean(lat):.2f}"
            )
            if trials < 1:
                return
            failovers = [_failover_trial(nodes, dirs, voters, secret, tuning, n) for n in range(trials)]
            print(f"failover (SIGKILL of the active node -> next committed append), {trials} trials:")
            print(
                f"  median {statistics.median(failovers):.3f} s  min {min(failovers):.3f} s  "
                f"max {max(failovers):.3f} s  all {' '.join(f'{t:.3f}' for t in failovers)}"
            )
        finally:
            for node in nodes.values():
                node.close()


def _failover_trial(
    nodes: dict[int, NodeProcess],
    dirs: dict[int, str],
    voters: dict[int, str],
    secret: str,
    tuning: dict[str, Any],
    trial: int,
) -> float:
    _wait_all_connected(list(nodes.values()), 20)  # steady state: every voter talks to every other
    active = find_active(list(nodes.values()), 20)
    others = [n for n in nodes.values() if n is not active]
    payload = f"failover-{trial}".encode().hex()
    for node in others:
        node.send("append_when_active", payloads=[payload], timeout_s=20, ignore_leader=active.node_id)
    killed_at = time.monotonic()
    active.kill()
    replies = [node.receive(30) for node in others]
    committed = [r["t_commit"] for r in replies if r.get("ok")]
    if not committed:
        raise RuntimeError(f"no survivor committed: {replies}")
    elapsed = float(min(committed)) - killed_at
    # Restart the killed node and let it catch up before the next trial.
    end = max(n.request("status")["end_offset"] for n in others)
    restarted = NodeProcess(active.node_id, voters, dirs[active.node_id], secret, tuning=tuning)
    nodes[active.node_id] = restarted
    if not restarted.request("wait_offset", wait_s=40, offset=end - 1, timeout_s=30)["ok"]:
        raise RuntimeError(f"node {active.node_id} did not catch up")
    return elapsed


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.raft_quorum", description=__doc__)
    parser.add_argument("--appends", type=int, default=500)
    parser.add_argument("--records", type=int, default=1)
    parser.add_argument("--trials", type=int, default=7)
    parser.add_argument("--no-fsync", action="store_true")
    args = parser.parse_args(argv)
    run(args.appends, args.records, args.trials, fsync=not args.no_fsync)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
