"""Replication figures on 127.0.0.1 (3 brokers, 1 controller, processes): ``python -m tests.replication.bench``.

* produce throughput of one odradek Producer process, ``RECORDS`` x ``RECORD_BYTES``-byte records to 3
  partitions: RF=3 acks=all (idempotent) over RF=1 acks=1 (ratio; target >= 0.5, Kafka's 2014 benchmark 0.51);
* end-to-end latency at RF=3 of single-record acks=all produce RPCs, one at a time (sent -> a long-polling
  consumer on the leader has it), p50/p99 (the rate-driven figure is ``odradek perf e2e``);
* failover as a user sees it (issue 16): one odradek Producer with the default settings (acks=all,
  idempotent) sends a record every ``SEND_INTERVAL_S`` to a one-partition RF=3 topic; the partition's leader
  is killed (kill -9); the figure is the time from the kill to the first acknowledgement of a record that
  was *sent after* the kill. ``FAILOVERS`` kills in a row on one cluster (the killed broker is restarted and
  the ISR refilled between them); each figure and the median (target <= 2.5 s) with the default settings
  (``broker.session.timeout.ms`` 2000, ``broker.heartbeat.interval.ms`` 500).

``python -m tests.replication.bench`` prints every figure as JSON; ``--failover`` only the failover ones.
It lives with the tests because it drives the test process fixture (``tests/broker/cluster.py``).
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import threading
import time
from functools import partial
from pathlib import Path
from typing import Any

from log.record import build_batch, iter_batches
from log.record.reader import read_batch
from metadata.configs import ControllerConfig
from tests.broker.cluster import Cluster
from tests.broker.test_broker_processes import fetch, produce

RECORDS = 300_000
RECORD_BYTES = 100
LATENCY_SAMPLES = 300
FAILOVERS = 5
TOPIC_CONFIG = {"min.insync.replicas": "2"}


def throughput(cluster: Cluster, topic: str, acks: str) -> float:
    """Records/s of ``RECORDS`` 100-byte records from one odradek Producer (as ``odradek perf produce``)."""
    from odradek import Producer

    payload = b"x" * RECORD_BYTES
    with Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": acks,
                   "enable.idempotence": acks == "all"}) as producer:  # fmt: skip
        producer.send(topic, payload).result(30)  # metadata, connections and producer id first
        start = time.monotonic()
        futures = [producer.send(topic, payload) for _ in range(RECORDS)]
        producer.flush()
        seconds = time.monotonic() - start
    failed = sum(1 for f in futures if f.exception() is not None)
    assert not failed, f"{failed} of {RECORDS} records failed"
    return RECORDS / seconds


def e2e_latency_ms(cluster: Cluster, topic: str) -> tuple[float, float]:
    leader = cluster.leader(topic)
    stub = cluster.broker_stub(leader)
    seen: dict[bytes, float] = {}
    done = threading.Event()

    def consume() -> None:
        offset = fetch(stub, topic, 0, 0).high_watermark
        while not done.is_set():
            got = fetch(stub, topic, 0, offset, max_wait_ms=500)
            for pos, header in iter_batches(got.records):
                for record in read_batch(got.records, pos)[1]:
                    seen[record.value or b""] = time.monotonic()
                offset = header.next_offset

    consumer = threading.Thread(target=consume)
    consumer.start()
    time.sleep(0.5)
    sent: dict[bytes, float] = {}
    for i in range(LATENCY_SAMPLES):
        value = f"lat-{i}".encode()
        sent[value] = time.monotonic()
        produce(stub, topic, 0, build_batch([value], timestamp_ms=int(time.time() * 1000)), acks=-1)
    cluster.wait_for(lambda: len(seen) >= LATENCY_SAMPLES, 30, "every latency sample consumed")
    done.set()
    consumer.join()
    latencies = sorted((seen[v] - t) * 1000 for v, t in sent.items() if v in seen)
    return statistics.median(latencies), latencies[int(len(latencies) * 0.99) - 1]


SEND_INTERVAL_S = 0.005
FAILOVER_TARGET_S = 2.5


class Timeline:
    """Send and acknowledgement times (monotonic) of a producer's records, by record number."""

    def __init__(self) -> None:
        self.sent: dict[int, float] = {}
        self.acked: dict[int, float] = {}
        self.lock = threading.Lock()

    def first_ack_of_a_send_after(self, t0: float) -> float | None:
        with self.lock:
            after = [self.acked[i] for i, sent in self.sent.items() if sent > t0 and i in self.acked]
        return min(after) if after else None


def keep_sending(bootstrap: str, topic: str, timeline: Timeline, stop: threading.Event) -> None:
    """One Producer, default settings, a record every SEND_INTERVAL_S until ``stop``."""
    from odradek import Producer

    with Producer({"bootstrap.servers": bootstrap}) as producer:
        i = 0
        while not stop.is_set():
            sent = time.monotonic()
            future = producer.send(topic, f"r{i}".encode(), partition=0)
            with timeline.lock:
                timeline.sent[i] = sent

            def done(f: Any, i: int = i) -> None:
                if f.exception() is None:
                    with timeline.lock:
                        timeline.acked[i] = time.monotonic()

            future.add_done_callback(done)
            i += 1
            time.sleep(SEND_INTERVAL_S)
        producer.flush(timeout=30)


def failovers_s(root: Path, count: int = FAILOVERS) -> list[float]:
    """``count`` kills of the partition leader under a continuous acks=all producer (module docstring)."""
    root.mkdir(parents=True)
    runs: list[float] = []
    with Cluster(root, brokers=3) as cluster:  # the default broker.session.timeout.ms and heartbeat interval
        cluster.create_topic("f", replication_factor=3, configs=TOPIC_CONFIG)
        timeline, stop = Timeline(), threading.Event()
        sender = threading.Thread(target=keep_sending, args=(cluster.bootstrap_servers, "f", timeline, stop))
        sender.start()
        try:
            for _ in range(count):
                cluster.wait_for(lambda: len(cluster.partition_metadata("f", 0, via=_alive(cluster)).isr) == 3,
                                 60, "the full ISR")  # fmt: skip
                cluster.wait_for(lambda: timeline.first_ack_of_a_send_after(time.monotonic() - 0.5) is not None,
                                 60, "records acknowledged")  # fmt: skip
                old = cluster.leader("f", via=_alive(cluster))
                t0 = time.monotonic()
                cluster.kill_broker(old)
                first = cluster.wait_for(partial(timeline.first_ack_of_a_send_after, t0), 60, "an ack after the kill")
                runs.append(first - t0)
                cluster.start_broker(old)
        finally:
            stop.set()
            sender.join(60)
    return runs


def _alive(cluster: Cluster) -> int:
    return next(i for i, b in enumerate(cluster.brokers) if b.alive())


def main() -> int:
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "throughput").mkdir()
        with Cluster(Path(tmp) / "throughput", brokers=3) as cluster:
            cluster.create_topic("rf1", partitions=3, replication_factor=1)
            cluster.create_topic("rf3", partitions=3, replication_factor=3, configs=TOPIC_CONFIG)
            figures["rf1_acks_1_records_s"] = round(throughput(cluster, "rf1", "1"))
            figures["rf3_acks_all_records_s"] = round(throughput(cluster, "rf3", "all"))
            figures["rf3_over_rf1"] = round(figures["rf3_acks_all_records_s"] / figures["rf1_acks_1_records_s"], 3)
            p50, p99 = e2e_latency_ms(cluster, "rf3")
            figures["rf3_e2e_p50_ms"], figures["rf3_e2e_p99_ms"] = round(p50, 2), round(p99, 2)
        figures.update(failover_figures(Path(tmp) / "failover"))
    figures["targets_met"] = figures["rf3_over_rf1"] >= 0.5 and figures["failover_median_s"] <= FAILOVER_TARGET_S
    json.dump(figures, sys.stdout, indent=2)
    print()
    return 0


def failover_figures(root: Path) -> dict[str, Any]:
    runs = failovers_s(root)
    return {
        "failover_runs_s": [round(r, 2) for r in runs],
        "failover_median_s": round(statistics.median(runs), 2),
        "session_timeout_ms": ControllerConfig().broker_session_timeout_ms,
    }


def main_failover() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        figures = failover_figures(Path(tmp) / "failover")
    figures["target_met"] = figures["failover_median_s"] <= FAILOVER_TARGET_S
    json.dump(figures, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main_failover() if "--failover" in sys.argv[1:] else main())
