"""What metrics cost: produce throughput with metrics on vs off, in the same run.

    .venv/bin/python -m tests.metrics.bench [--pairs 6] [--num-records 200000] [--record-size 100] [--json]

Starts two local clusters with ``odradek up`` (1 controller and 3 brokers each, on free ports): one with
every node's ``/metrics`` endpoint (the request path counts and times every request and the produce and
fetch handlers count bytes per topic), one with ``--no-metrics`` (no metrics work at all). A topic of 3
partitions with replication factor 3 on each. Then ``--pairs`` pairs of ``odradek perf produce`` runs
(acks=all), one on each cluster, alternating which goes first; while the metrics cluster is measured, its
4 endpoints are scraped every ``--scrape-interval`` seconds, as Prometheus would. Prints each pair's
throughputs and their ratio (on / off), and the median ratio: the figure (goal >= 0.95).

It also prints what the request path's metrics work costs in isolation (``--micro-only`` skips the
clusters): a Produce request's dispatch-point work (count, time, error walk) and its per-topic byte
counters, and a consumer Fetch's (with the record count from the batch headers), in microseconds each.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from tests.cli.helpers import UpProcess, cli_env, free_base_port


def perf(env: dict[str, str], servers: str, topic: str, records: int, size: int) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "odradek.cli", "perf", "produce", "--topic", topic, "--num-records", str(records),
         "--record-size", str(size), "--json", "--no-progress", "--bootstrap-servers", servers],
        capture_output=True, text=True, env=env, timeout=900, check=True,
    )  # fmt: skip
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


class Scraper(threading.Thread):
    """Scrapes ``addresses`` every ``interval_s`` while ``active`` is set; counts scrapes and their bytes."""

    def __init__(self, addresses: list[str], interval_s: float) -> None:
        super().__init__(daemon=True, name="bench-scraper")
        self.addresses = addresses
        self.interval_s = interval_s
        self.active = threading.Event()
        self.stop = threading.Event()
        self.scrapes = 0
        self.bytes = 0

    def run(self) -> None:
        while not self.stop.is_set():
            if self.active.is_set():
                for address in self.addresses:
                    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as answer:  # noqa: S310
                        self.bytes += len(answer.read())
                    self.scrapes += 1
            self.stop.wait(self.interval_s)


def micro_costs_us(iterations: int = 200_000) -> dict[str, float]:
    """Microseconds per request of the metrics work a Produce and a Fetch do (one partition each)."""
    from prometheus_client import CollectorRegistry

    from broker.handlers import fetch, produce
    from broker.metrics.requests import RequestMetrics, TopicMetrics
    from log.record import build_batch
    from proto import broker_pb2 as pb

    registry = CollectorRegistry()
    requests, topics = RequestMetrics(registry), TopicMetrics(registry)
    answer = pb.ProduceResponse()
    answer.topics.add(name="t").partitions.add(partition=0, base_offset=1)
    fetched = pb.FetchResponse()
    fetched.topics.add(name="t").partitions.add(partition=0)
    request = pb.FetchRequest(replica_id=-1)
    batches = b"".join(build_batch([b"x" * 100] * 100, timestamp_ms=1, base_offset=i * 100) for i in range(16))
    def produce_work() -> None:
        requests.record(produce.handle, request, answer, 0.0)
        topics.produced("t", 16384, 150)

    def fetch_work() -> None:
        requests.record(fetch.handle, request, fetched, 0.0)
        topics.fetched("t", batches, for_replica=False)

    costs = {}
    for name, work in (("produce_us", produce_work), ("fetch_us", fetch_work)):
        work()
        started = time.perf_counter()
        for _ in range(iterations):
            work()
        costs[name] = (time.perf_counter() - started) / iterations * 1e6
    return costs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--num-records", type=int, default=200_000)
    parser.add_argument("--record-size", type=int, default=100)
    parser.add_argument("--scrape-interval", type=float, default=5.0)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--micro-only", action="store_true", help="only the per-request costs, no clusters")
    args = parser.parse_args(argv)
    micro = micro_costs_us()
    print(f"metrics work per request: Produce {micro['produce_us']:.2f} us, consumer Fetch of 16 batches "
          f"{micro['fetch_us']:.2f} us", flush=True)  # fmt: skip
    if args.micro_only:
        return 0
    root = Path(tempfile.mkdtemp(prefix="odradek-metrics-bench-"))
    env = cli_env(root / "state")
    ups: list[UpProcess] = []
    try:
        clusters = {}
        for name, extra in (("on", ()), ("off", ("--no-metrics",))):
            base = free_base_port(1, 3)
            up = UpProcess(root / name, env, ["--controllers", "1", "--brokers", "3", "--base-port", str(base),
                                              *extra]).start()  # fmt: skip
            ups.append(up)
            clusters[name] = up.wait_ready()
        for doc in clusters.values():
            subprocess.run([sys.executable, "-m", "odradek.cli", "topics", "create", "bench", "--partitions", "3",
                            "--replication-factor", "3", "--bootstrap-servers", doc["bootstrap_servers"]],
                           env=env, check=True, capture_output=True, timeout=120)  # fmt: skip
        metrics = [n["metrics"] for n in clusters["on"]["controllers"] + clusters["on"]["brokers"]]
        if not all(metrics) or any(n["metrics"] for n in clusters["off"]["brokers"]):
            raise SystemExit("the clusters' cluster.json do not show metrics on one and off on the other")
        scraper = Scraper(metrics, args.scrape_interval)
        scraper.start()
        # a warm-up run on each (connections, JIT-less Python's caches, page cache), not counted
        for doc in clusters.values():
            perf(env, doc["bootstrap_servers"], "bench", args.num_records // 4, args.record_size)
        pairs = []
        for i in range(args.pairs):
            order = ("on", "off") if i % 2 == 0 else ("off", "on")
            rates: dict[str, float] = {}
            for name in order:
                scraper.active.set() if name == "on" else scraper.active.clear()
                result = perf(env, clusters[name]["bootstrap_servers"], "bench", args.num_records, args.record_size)
                rates[name] = result["records_per_sec"]
            scraper.active.clear()
            pairs.append({"on": rates["on"], "off": rates["off"], "ratio": rates["on"] / rates["off"]})
            print(f"pair {i + 1}: on {rates['on']:,.0f} rec/s, off {rates['off']:,.0f} rec/s, "
                  f"ratio {rates['on'] / rates['off']:.3f}", file=sys.stderr, flush=True)  # fmt: skip
        scraper.stop.set()
        ratios = [p["ratio"] for p in pairs]
        summary = {
            "pairs": pairs, "median_ratio": statistics.median(ratios), "mean_ratio": statistics.fmean(ratios),
            "median_on": statistics.median(p["on"] for p in pairs),
            "median_off": statistics.median(p["off"] for p in pairs),
            "scrapes": scraper.scrapes, "mean_scrape_bytes": scraper.bytes // max(1, scraper.scrapes),
            "num_records": args.num_records, "record_size": args.record_size, **micro,
        }  # fmt: skip
        print(f"metrics on / off, produce throughput: median ratio {summary['median_ratio']:.3f} "
              f"(mean {summary['mean_ratio']:.3f}) over {args.pairs} pairs; median on "
              f"{summary['median_on']:,.0f} rec/s, off {summary['median_off']:,.0f} rec/s; "
              f"{scraper.scrapes} scrapes of {summary['mean_scrape_bytes']:,} bytes")  # fmt: skip
        if args.json:
            print(json.dumps(summary))
        return 0
    finally:
        for up in ups:
            up.kill_everything()
        time.sleep(0.5)


if __name__ == "__main__":
    sys.exit(main())
