"""Where the CPU of a record goes: each process's CPU time per record of ``odradek perf e2e``.

    python -m tests.bench.cpu [--brokers 3] [--controllers 3] [--replication-factor 3] [--num-records 10000]
        [--rate 1000] [--repeat 3] [--tree NAME:PATH ...] [--burn SITE:US ...] [--broker-config KEY=VALUE ...]
        [--json-out FILE]

Starts an ``odradek up`` cluster (``--no-metrics``, as ``tests.bench.compare``), and each round makes a fresh
1-partition topic and runs ``odradek perf e2e`` on it (one producer and one consumer in one client process,
records sent one at a time at ``--rate``). Around the run it reads each node's CPU time
(each process's CPU clock, ``systems.cpu_seconds``) and the client's (``getrusage`` of the finished child), and prints
the CPU microseconds each process spent per record, by role: the partition's leader, its followers, the
other brokers, the controllers (the active one is not told apart), the client. A latency figure means
little without the CPU behind it: on a machine of two cores shared by ten processes, the CPU a record
costs is what its tail waits for.

``--tree NAME:PATH`` adds a cluster running the checkout at PATH (its ``.venv`` when it has one), measured
in the same rounds, alternating with this checkout's (which runs first is rotated each round): a change's
CPU against the code without it.

``--burn SITE:US`` adds a cluster of this checkout whose processes spend US microseconds more CPU at one place
of a record's path (``leader``: each request a broker's listeners take; ``follower``: each answer a follower
gets; ``client``: each answer the client gets; ``tests/bench/burn/sitecustomize.py``), measured in the same
rounds: what a microsecond of CPU at that place costs the end-to-end latency. Its row adds the CPU per record
it changed over all processes (less than the burn: the requests get fewer and fuller) and the p50 it added per
microsecond burned at each call, the return to expect from CPU removed there (docs/LATENCY.md). Figures only;
nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.bench.burn.sitecustomize import parse as parse_burn
from tests.bench.systems import OdradekCluster, children_cpu_seconds, cpu_seconds
from tests.cli.helpers import odradek

ROLES = ("leader", "follower", "broker", "controller", "client")
BURN_DIR = Path(__file__).resolve().parent / "burn"  # its sitecustomize.py: tests.bench.cpu --burn


@dataclass(slots=True)
class Cluster:
    name: str
    cluster: OdradekCluster
    nodes: dict[str, int] = field(default_factory=dict)  # "broker-0" / "controller-1" -> pid
    burn_us: int = 0  # --burn SITE:US of this cluster: its US
    rounds: list[dict[str, Any]] = field(default_factory=list)

    def start(self) -> None:
        self.cluster.start()
        doc = self.cluster.up.cluster_json()
        for kind in ("controllers", "brokers"):
            for entry in doc[kind]:
                self.nodes[f"{kind[:-1]}-{entry['node_id']}"] = int(entry["pid"])


def leader_and_replicas(cluster: OdradekCluster, topic: str) -> tuple[int, list[int]]:
    done = odradek(["topics", "describe", topic], cluster.env, python=cluster.python, cwd=cluster.cwd)
    text = done.stdout.decode()
    found = re.search(r"Partition: 0\s+Leader: (-?\d+)\s+Replicas: ([\d,]+)", text)
    if done.returncode != 0 or found is None:
        raise RuntimeError(f"describing {topic} failed: {done.stderr.decode().strip() or text}")
    return int(found.group(1)), [int(r) for r in found.group(2).split(",")]


def measure(c: Cluster, round_no: int, args: argparse.Namespace) -> dict[str, Any]:
    topic = f"bench-cpu-{round_no}"
    c.cluster.create_topic(topic, 1, args.replication_factor)
    leader, replicas = leader_and_replicas(c.cluster, topic)
    before = {name: cpu_seconds(pid) for name, pid in c.nodes.items()}
    client_before = children_cpu_seconds()
    started = time.monotonic()
    done = c.cluster.perf(["e2e", "--topic", topic, "--num-records", str(args.num_records), "--rate",
                           str(args.rate), "--record-size", str(args.record_size), "--acks", "all"],
                          timeout_s=args.num_records / args.rate * 4 + 120)  # fmt: skip
    wall = time.monotonic() - started
    client = children_cpu_seconds() - client_before
    spent = {name: cpu_seconds(pid) - before[name] for name, pid in c.nodes.items()}
    if done.returncode != 0:
        raise RuntimeError(f"odradek perf e2e failed on {c.name}: {done.stderr.decode().strip()[-500:]}")
    perf = json.loads(done.stdout.decode().strip().splitlines()[-1])
    n = args.num_records
    per_role: dict[str, list[float]] = {role: [] for role in ROLES}
    for name, seconds in spent.items():
        kind, node = name.split("-")
        if kind == "controller":
            role = "controller"
        elif int(node) == leader:
            role = "leader"
        else:
            role = "follower" if int(node) in replicas else "broker"
        per_role[role].append(seconds * 1e6 / n)
    per_role["client"].append(client * 1e6 / n)
    return {"cluster": c.name, "round": round_no, "wall_s": wall, "leader": leader, "cpu_us_per_record": per_role,
            "total_us_per_record": sum(sum(v) for v in per_role.values()), "e2e_ms": perf["latency_ms"], "perf": perf}


def role_figure(rounds: Sequence[dict[str, Any]], role: str) -> str:
    """Median over rounds of the role's mean per process (``leader 612``, ``follower 130``)."""
    values = [statistics.fmean(r["cpu_us_per_record"][role]) for r in rounds if r["cpu_us_per_record"][role]]
    return f"{statistics.median(values):8.0f}" if values else f"{'-':>8}"


def print_table(clusters: Sequence[Cluster], args: argparse.Namespace) -> None:
    print(f"\nCPU µs per record (median of {args.repeat} rounds; per process, mean over the processes of a role)"
          f"\n{args.num_records} records of {args.record_size} B at {args.rate:g}/s, RF {args.replication_factor},"
          f" acks=all; load average {os.getloadavg()[0]:.2f} at the end")  # fmt: skip
    header = f"{'cluster':<12}" + "".join(f"{r:>11}" for r in ROLES) + f"{'total':>10}{'e2e p50':>10}{'e2e p99':>10}"
    print(header)
    print("-" * len(header))
    base: tuple[float, float] | None = None
    for c in clusters:
        total = statistics.median(r["total_us_per_record"] for r in c.rounds)
        p50 = statistics.median(_pct(r, "p50") for r in c.rounds)
        p99 = statistics.median(_pct(r, "p99") for r in c.rounds)
        base = base or (total, p50)
        line = (f"{c.name:<12}" + "".join(f"{role_figure(c.rounds, r):>11}" for r in ROLES)
                + f"{total:10.0f}{p50:10.2f}{p99:10.2f}   total {total / base[0]:.2f}×")  # fmt: skip
        if c.burn_us:
            print(line + burn_figures(c.burn_us, total - base[0], (p50 - base[1]) * 1000))
        else:
            print(line)


def burn_figures(us: int, added_us: float, p50_added_us: float) -> str:
    """A ``--burn`` row's: the CPU per record it changed over all processes, and the p50 it added per microsecond
    burned at each call (the CPU per record moves less than the burn: the requests get fewer and fuller)."""
    return f", CPU {added_us:+.0f} µs/rec, p50 {p50_added_us:+.0f} µs: {p50_added_us / us:.1f} µs per µs a call"


def _pct(round_doc: dict[str, Any], key: str) -> float:
    return float(round_doc["e2e_ms"][key])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.cpu", description=__doc__.split("\n\n")[0])
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--controllers", type=int, default=3)
    parser.add_argument("--replication-factor", type=int, default=3)
    parser.add_argument("--num-records", type=int, default=10_000)
    parser.add_argument("--record-size", type=int, default=100)
    parser.add_argument("--rate", type=float, default=1_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--tree", action="append", default=[], metavar="NAME:PATH")
    parser.add_argument("--broker-config", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--burn", action="append", default=[], metavar="SITE:US")
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args(argv)
    burns: list[tuple[str, str, int]] = []  # (SITE:US, site, us)
    for item in args.burn:
        try:
            burns.append((item, *parse_burn(item)))
        except ValueError as exc:
            parser.error(str(exc))
    if args.replication_factor > args.brokers:
        parser.error("--replication-factor is above --brokers")
    with tempfile.TemporaryDirectory(prefix="odradek-cpu-") as tmp:
        root = Path(tmp)
        clusters = [Cluster("this", OdradekCluster(root / "this", args.controllers, args.brokers,
                                                   broker_config=args.broker_config))]  # fmt: skip
        for item in args.tree:
            name, _, path = item.partition(":")
            if not name or not path:
                parser.error(f"--tree takes NAME:PATH, not {item!r}")
            cluster = OdradekCluster(root / name, args.controllers, args.brokers, broker_config=args.broker_config,
                                     tree=Path(path))  # fmt: skip
            clusters.append(Cluster(name, cluster))
        for item, site, us in burns:
            name = f"{site}+{us}"
            path = os.pathsep.join([str(BURN_DIR), *filter(None, [os.environ.get("PYTHONPATH")])])
            cluster = OdradekCluster(root / name, args.controllers, args.brokers, broker_config=args.broker_config,
                                     extra_env={"ODRADEK_BENCH_BURN": item, "PYTHONPATH": path})  # fmt: skip
            clusters.append(Cluster(name, cluster, burn_us=us))
        try:
            for c in clusters:
                print(f"[{time.strftime('%H:%M:%S')}] starting {c.name}", file=sys.stderr, flush=True)
                c.start()
            for round_no in range(args.repeat):
                order = clusters[round_no % len(clusters) :] + clusters[: round_no % len(clusters)]
                for c in order:
                    doc = measure(c, round_no, args)
                    c.rounds.append(doc)
                    per_role = doc["cpu_us_per_record"].items()
                    roles = ", ".join(f"{r} {statistics.fmean(v):.0f}" for r, v in per_role if v)
                    print(f"[{time.strftime('%H:%M:%S')}] round {round_no + 1}/{args.repeat} {c.name}: {roles} µs"
                          f"/record; e2e p50 {_pct(doc, 'p50'):.2f} ms p99 {_pct(doc, 'p99'):.2f}",
                          file=sys.stderr, flush=True)  # fmt: skip
        finally:
            for c in clusters:
                c.cluster.stop()
    print_table(clusters, args)
    if args.json_out is not None:
        args.json_out.write_text(json.dumps([{"cluster": c.name, "rounds": c.rounds} for c in clusters], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
