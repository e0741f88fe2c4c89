"""Figures for transactions (issue 18's closing note): ``python -m tests.transactions.bench [--seconds 10] [--json]``.

Starts a cluster (1 controller, ``--brokers`` brokers, replication factor ``--brokers``) on 127.0.0.1 and, in
the same run, measures:

* the idempotent producer's throughput (100-byte records, ``acks=all``, as fast as ``send`` goes), the
  baseline;
* the transactional producer's throughput, committing every ``--commit-ms`` (100 ms): records sent in the
  transaction for that long, then ``commit_transaction``; the ratio to the baseline is the figure (the
  issue's goal: >= 0.8);
* the commit latency (``commit_transaction``, flush included) p50 / p99.

Figures depend on the machine: compare them only within one run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from odradek import Producer
from tests.broker.cluster import Cluster

VALUE = b"x" * 100


def idempotent(servers: str, topic: str, seconds: float) -> float:
    p = Producer({"bootstrap.servers": servers, "linger.ms": 5, "acks": "all"})
    sent = 0
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        for _ in range(1000):
            p.send(topic, value=VALUE)
        sent += 1000
    p.flush()
    elapsed = time.monotonic() - started
    p.close()
    return sent / elapsed


def transactional(servers: str, topic: str, seconds: float, commit_ms: float) -> tuple[float, list[float]]:
    p = Producer({"bootstrap.servers": servers, "linger.ms": 5, "transactional.id": "bench-txn"})
    p.init_transactions()
    sent = 0
    commits: list[float] = []
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        p.begin_transaction()
        opened = time.monotonic()
        while (time.monotonic() - opened) * 1000 < commit_ms:
            for _ in range(200):
                p.send(topic, value=VALUE)
            sent += 200
        before = time.monotonic()
        p.commit_transaction()
        commits.append((time.monotonic() - before) * 1000)
    elapsed = time.monotonic() - started
    p.close()
    return sent / elapsed, commits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--commit-ms", type=float, default=100.0)
    parser.add_argument("--brokers", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    n = args.brokers
    config = {
        "transaction.state.log.num.partitions": "3", "transaction.state.log.replication.factor": str(n),
        "transaction.state.log.min.isr": str(min(2, n)),
    }  # fmt: skip
    with tempfile.TemporaryDirectory() as root, Cluster(Path(root), brokers=n, broker_config=config) as cluster:
        cluster.create_topic("bench", partitions=3, replication_factor=n)
        servers = cluster.bootstrap_servers
        base = idempotent(servers, "bench", args.seconds)
        txn, commits = transactional(servers, "bench", args.seconds, args.commit_ms)
        base_again = idempotent(servers, "bench", args.seconds)  # the machine's speed drifts: bracket it
    baseline = (base + base_again) / 2
    cuts = statistics.quantiles(commits, n=100, method="inclusive") if len(commits) >= 2 else [commits[0]] * 99
    figures = {
        "idempotent_records_per_sec": round(baseline),
        "transactional_records_per_sec": round(txn),
        "ratio": round(txn / baseline, 3),
        "commit_every_ms": args.commit_ms,
        "commits": len(commits),
        "commit_latency_ms": {"p50": round(cuts[49], 1), "p99": round(cuts[98], 1), "max": round(max(commits), 1)},
        "brokers": n,
    }
    if args.json:
        print(json.dumps(figures))
    else:
        for key, value in figures.items():
            print(f"{key}: {value}")


if __name__ == "__main__":
    main()
