"""Replication figures on 127.0.0.1 (3 brokers, 1 controller, processes): ``python -m tests.replication.bench``.

* produce throughput of one odradek Producer process, ``RECORDS`` x ``RECORD_BYTES``-byte records to 3
  partitions: RF=3 acks=all (idempotent) over RF=1 acks=1 (ratio; target >= 0.5, Kafka's 2014 benchmark 0.51);
* end-to-end latency at RF=3 of single-record acks=all produce RPCs, one at a time (sent -> a long-polling
  consumer on the leader has it), p50/p99 (the rate-driven figure is ``odradek perf e2e``);
* failover: kill -9 of the leader -> first acknowledged acks=all produce on the new leader, median of
  ``FAILOVERS`` runs (target <= 3 s) with the default settings (``broker.session.timeout.ms``,
  ``broker.heartbeat.interval.ms``).

It lives with the tests because it drives the test process fixture (``tests/broker/cluster.py``).
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from controller.configs import ControllerConfig
from log.record import build_batch, iter_batches
from log.record.reader import read_batch
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


def failover_s(root: Path) -> float:
    root.mkdir(parents=True)
    with Cluster(root, brokers=3) as cluster:  # the default broker.session.timeout.ms and heartbeat interval
        cluster.create_topic("f", replication_factor=3, configs=TOPIC_CONFIG)
        records = build_batch([b"f"], timestamp_ms=int(time.time() * 1000))
        old = cluster.leader("f")
        assert not produce(cluster.broker_stub(old), "f", 0, records, acks=-1).error.code
        survivor = (old + 1) % 3
        start = time.monotonic()
        cluster.kill_broker(old)

        def acknowledged() -> bool:
            leader = cluster.leader("f", via=survivor)
            if leader < 0 or leader == old:
                return False
            try:
                return not produce(cluster.broker_stub(leader), "f", 0, records, acks=-1).error.code
            except Exception:
                return False

        cluster.wait_for(acknowledged, 60, "the first acknowledged produce on the new leader")
        return time.monotonic() - start


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
        runs = [failover_s(Path(tmp) / f"failover-{i}") for i in range(FAILOVERS)]
        figures["failover_runs_s"] = [round(r, 2) for r in runs]
        figures["failover_median_s"] = round(statistics.median(runs), 2)
        figures["session_timeout_ms"] = ControllerConfig().broker_session_timeout_ms
    figures["targets_met"] = figures["rf3_over_rf1"] >= 0.5 and figures["failover_median_s"] <= 3.0
    json.dump(figures, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
