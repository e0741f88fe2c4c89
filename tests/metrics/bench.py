"""What metrics cost: produce throughput with metrics on vs off, in the same run.

    .venv/bin/python -m tests.metrics.bench [--pairs 6] [--num-records 200000] [--record-size 100] [--json]

Starts two local clusters with ``odradek up`` (1 controller and 3 brokers each, on free ports): one with
every node's ``/metrics`` endpoint (the request path counts and times every request and the produce and
fetch handlers count bytes per topic), one with ``--no-metrics`` (no metrics work at all). A topic of 3
partitions with replication factor 3 on each. Then ``--pairs`` pairs of ``odradek perf produce`` runs
(acks=all), one on each cluster, alternating which goes first; while the metrics cluster is measured, its
4 endpoints are scraped every ``--scrape-interval`` seconds, as Prometheus would. Two phases: the metrics
cluster started first, then (new clusters) second, since a control run (``--control``: both without
metrics) showed the two clusters of a phase differing by a few per cent on their own. Prints each pair's
throughputs and their ratio (on / off), and the median ratio over both phases: the figure (goal >= 0.95).

It also prints what the request path's metrics work costs in isolation (``--micro-only`` skips the
clusters): a Produce request's dispatch-point work (count, time, error walk) and its per-topic byte
counters, and a consumer Fetch's (with the record count from the batch headers), in microseconds each;
and, from the metrics cluster's own counters over the measured runs (requests served, the nodes' CPU
seconds), the share of the cluster's CPU that this per-request work adds up to: a figure that other
load on the machine does not blur the way it blurs throughput.
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
                    try:
                        with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as answer:  # noqa: S310
                            self.bytes += len(answer.read())
                    except OSError:
                        continue  # the cluster is going away
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
        topics.bytes_sent("t", len(batches), for_replica=False)
        topics.records_out("t", batches)

    costs = {}
    for name, work in (("produce_us", produce_work), ("fetch_us", fetch_work)):
        work()
        started = time.perf_counter()
        for _ in range(iterations):
            work()
        costs[name] = (time.perf_counter() - started) / iterations * 1e6
    return costs


def totals(addresses: list[str]) -> dict[str, float]:
    """Requests served by kind and CPU seconds, summed over the nodes at ``addresses``."""
    from tests.metrics.scrape import scrape

    found = {"produce": 0.0, "fetch": 0.0, "other": 0.0, "cpu_s": 0.0}
    for address in addresses:
        for (name, labels), value in scrape(address).items():
            if name == "process_cpu_seconds_total":
                found["cpu_s"] += value
            elif name == "kafka_network_requestmetrics_requests_total":
                request = dict(labels)["request"]
                kind = "produce" if request == "Produce" else "fetch" if request.startswith("Fetch") else "other"
                found[kind] += value
    return found


def run_phase(args: argparse.Namespace, env: dict[str, str], root: Path, metrics_first: bool,
              served: dict[str, float]) -> list[dict[str, Any]]:  # fmt: skip
    """Start the two clusters (the one with metrics first or second), measure ``--pairs`` pairs, stop them."""
    ups: list[UpProcess] = []
    stoppers: list[Any] = []
    try:
        clusters = {}
        order = ("on", "off") if metrics_first else ("off", "on")
        for name in order:
            extra = ("--no-metrics",) if name == "off" or args.control else ()
            base = free_base_port(1, 3)
            layout = ["--controllers", "1", "--brokers", "3", "--base-port", str(base), *extra]
            up = UpProcess(root / f"{name}-{len(ups)}-{metrics_first}", env, layout).start()
            ups.append(up)
            clusters[name] = up.wait_ready()
        for doc in clusters.values():
            subprocess.run([sys.executable, "-m", "odradek.cli", "topics", "create", "bench", "--partitions", "3",
                            "--replication-factor", "3", "--bootstrap-servers", doc["bootstrap_servers"]],
                           env=env, check=True, capture_output=True, timeout=120)  # fmt: skip
        nodes = clusters["on"]["controllers"] + clusters["on"]["brokers"]
        metrics: list[str] = [] if args.control else [n["metrics"] for n in nodes]
        if not args.control and (not all(metrics) or any(n["metrics"] for n in clusters["off"]["brokers"])):
            raise SystemExit("the clusters' cluster.json do not show metrics on one and off on the other")
        scraper = Scraper(metrics, args.scrape_interval)
        scraper.start()
        stoppers.append(scraper.stop.set)
        for doc in clusters.values():  # a warm-up run on each (connections, caches), not counted
            perf(env, doc["bootstrap_servers"], "bench", args.num_records // 4, args.record_size)
        pairs = []
        for i in range(args.pairs):
            rates: dict[str, float] = {}
            for name in ("on", "off") if i % 2 == 0 else ("off", "on"):
                scraper.active.set() if name == "on" else scraper.active.clear()
                before = totals(metrics) if name == "on" and metrics else {}
                result = perf(env, clusters[name]["bootstrap_servers"], "bench", args.num_records, args.record_size)
                rates[name] = result["records_per_sec"]
                if before:
                    after = totals(metrics)
                    for key in ("produce", "fetch", "other", "cpu_s"):
                        served[key] += after[key] - before[key]
            scraper.active.clear()
            pairs.append({"on": rates["on"], "off": rates["off"], "ratio": rates["on"] / rates["off"],
                          "metrics_cluster_started": "first" if metrics_first else "second"})  # fmt: skip
            print(f"pair {len(pairs)} (metrics cluster started {pairs[-1]['metrics_cluster_started']}): on "
                  f"{rates['on']:,.0f} rec/s, off {rates['off']:,.0f} rec/s, ratio {pairs[-1]['ratio']:.3f}",
                  file=sys.stderr, flush=True)  # fmt: skip
        scraper.stop.set()
        served["scrapes"] += scraper.scrapes
        return pairs
    finally:
        for stop in stoppers:
            stop()
        for up in ups:
            up.kill_everything()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=6, help="pairs per phase (two phases)")
    parser.add_argument("--num-records", type=int, default=200_000)
    parser.add_argument("--record-size", type=int, default=100)
    parser.add_argument("--scrape-interval", type=float, default=5.0)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--micro-only", action="store_true", help="only the per-request costs, no clusters")
    parser.add_argument("--control", action="store_true",
                        help="both clusters without metrics: the ratio then shows the noise floor")  # fmt: skip
    args = parser.parse_args(argv)
    micro = micro_costs_us()
    print(f"metrics work per request: Produce {micro['produce_us']:.2f} us, consumer Fetch of 16 batches "
          f"{micro['fetch_us']:.2f} us", flush=True)  # fmt: skip
    if args.micro_only:
        return 0
    root = Path(tempfile.mkdtemp(prefix="odradek-metrics-bench-"))
    env = cli_env(root / "state")
    served = dict.fromkeys(("produce", "fetch", "other", "cpu_s", "scrapes"), 0.0)
    pairs = run_phase(args, env, root, True, served) + run_phase(args, env, root, False, served)
    ratios = [p["ratio"] for p in pairs]
    fetches = served["fetch"] + served["other"]  # others costed as a fetch: the dearer of the two
    work_s = (served["produce"] * micro["produce_us"] + fetches * micro["fetch_us"]) / 1e6
    share = work_s / served["cpu_s"] if served["cpu_s"] else float("nan")
    summary = {
        "pairs": pairs, "median_ratio": statistics.median(ratios), "mean_ratio": statistics.fmean(ratios),
        "median_on": statistics.median(p["on"] for p in pairs),
        "median_off": statistics.median(p["off"] for p in pairs), "control": args.control,
        "num_records": args.num_records, "record_size": args.record_size, **micro,
        "requests_served": {k: served[k] for k in ("produce", "fetch", "other")}, "scrapes": served["scrapes"],
        "cluster_cpu_s": served["cpu_s"], "metrics_cpu_s": work_s, "metrics_cpu_share": share,
    }  # fmt: skip
    print(f"metrics on / off{' (control: both off)' if args.control else ''}, produce throughput: median ratio "
          f"{summary['median_ratio']:.3f} (mean {summary['mean_ratio']:.3f}) over {len(pairs)} pairs; median on "
          f"{summary['median_on']:,.0f} rec/s, off {summary['median_off']:,.0f} rec/s")  # fmt: skip
    if not args.control:
        print(f"over the measured runs the metrics cluster served {served['produce']:,.0f} Produce, "
              f"{served['fetch']:,.0f} Fetch and {served['other']:,.0f} other requests in {served['cpu_s']:.1f} CPU s "
              f"({served['scrapes']:.0f} scrapes); their metrics work is ~{work_s:.3f} CPU s: {100 * share:.2f}% "
              "of the cluster's CPU")  # fmt: skip
    if args.json:
        print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
