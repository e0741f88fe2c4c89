"""Figures of the Spark data source against a running cluster: write and read throughput, micro-batch latency.

    odradek up --brokers 1 --controllers 1 --data-dir /tmp/od-bench       # in another terminal
    python -m spark.bench --bootstrap-servers 127.0.0.1:9092 [--records 1000000] [--json]

1. **write**: ``spark.range(N)`` as ``--record-size``-byte values, ``df.write.format("odradek")`` into a
   new topic of ``--partitions`` partitions (acks=all): records/s over the whole job.
2. **streaming write, at-least-once vs exactly-once**: a streaming query (availableNow) copies that topic
   to a new one with the sink's default and with ``exactlyOnce=true`` (transactions committed by the
   driver), alternated twice: the best records/s of each and their ratio.
3. **batch read**: ``spark.read.format("odradek")`` of that topic, every value's length summed (so every
   record crosses from the reader to the JVM): records/s over the whole job, best of ``--read-runs``.
4. **micro-batch latency**: a streaming query (default trigger: as fast as it can) over a second topic
   while a producer sends ``--stream-rate`` records/s for ``--stream-seconds``; per micro-batch, the
   trigger's duration (Spark's ``triggerExecution``) and the age of its oldest and newest record when
   the batch's rows reached the driver (``foreachBatch`` collecting them). Percentiles over the batches.

Prints one line per figure, and with ``--json`` one JSON object as the last line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from typing import Any

from odradek import Admin, NewTopic, Producer


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def wait_for_leaders(admin: Admin, topics: list[str], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        described = admin.describe_topics(topics)
        if all(p.leader >= 0 for d in described.values() for p in d.partitions):
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"the topics {topics} have no leaders after {timeout_s:.0f} s")
        time.sleep(0.1)


def session(master: str) -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from spark import register

    spark = (
        SparkSession.builder.master(master)
        .appName("odradek-spark-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def bench_stream_write(
    spark: Any, servers: str, source: str, topic: str, records: int, exactly_once: bool
) -> dict[str, float]:
    """A streaming query (availableNow) copying ``records`` of ``source`` to ``topic``, at-least-once or
    exactly-once (the sink's ``exactlyOnce``): the figure is the ratio of the two, same run."""
    query = (
        spark.readStream.format("odradek").option("bootstrap.servers", servers).option("subscribe", source)
        .option("startingOffsets", "earliest").load().selectExpr("key", "value")
        .writeStream.format("odradek").option("bootstrap.servers", servers).option("topic", topic)
        .option("exactlyOnce", str(exactly_once).lower())
        .option("checkpointLocation", tempfile.mkdtemp(prefix="odradek-bench-"))
        .trigger(availableNow=True)
    )  # fmt: skip
    start = time.perf_counter()
    running = query.start()
    running.awaitTermination(600)
    seconds = time.perf_counter() - start
    running.stop()
    return {"records": records, "seconds": seconds, "records_per_sec": records / seconds}


def bench_write(spark: Any, servers: str, topic: str, records: int, size: int) -> dict[str, float]:
    from pyspark.sql import functions as F

    pad = "x" * max(0, size - 12)
    df = spark.range(records, numPartitions=2).select(
        F.concat(F.lpad(F.col("id").cast("string"), 12, "0"), F.lit(pad)).alias("value")
    )
    start = time.perf_counter()
    df.write.format("odradek").option("bootstrap.servers", servers).option("topic", topic).mode("append").save()
    seconds = time.perf_counter() - start
    return {"records": records, "seconds": seconds, "records_per_sec": records / seconds}


def bench_read(spark: Any, servers: str, topic: str, records: int, runs: int) -> dict[str, Any]:
    from pyspark.sql import functions as F

    timings = []
    for _ in range(runs):
        df = spark.read.format("odradek").option("bootstrap.servers", servers).option("subscribe", topic).load()
        start = time.perf_counter()
        row = df.agg(F.count(F.lit(1)).alias("n"), F.sum(F.length("value")).alias("bytes")).first()
        timings.append(time.perf_counter() - start)
        if row["n"] != records:
            raise SystemExit(f"batch read returned {row['n']} records, expected {records}")
    best = min(timings)
    return {"records": records, "seconds": best, "records_per_sec": records / best,
            "runs_records_per_sec": [records / t for t in timings]}  # fmt: skip


def bench_latency(spark: Any, servers: str, topic: str, rate: int, seconds: float) -> dict[str, Any]:
    ages_oldest: list[float] = []
    ages_newest: list[float] = []

    def on_batch(batch: Any, batch_id: int) -> None:
        # A plain collect (no aggregation, so no shuffle stage of its own): the batch's record times.
        stamps = [row[0].timestamp() for row in batch.select("timestamp").collect()]
        if stamps:
            now = time.time()
            ages_oldest.append((now - min(stamps)) * 1000)
            ages_newest.append((now - max(stamps)) * 1000)

    query = (
        spark.readStream.format("odradek").option("bootstrap.servers", servers).option("subscribe", topic)
        .option("startingOffsets", "latest").load()
        .writeStream.foreachBatch(on_batch)
        .option("checkpointLocation", tempfile.mkdtemp(prefix="odradek-bench-"))
        .start()
    )  # fmt: skip
    stop = threading.Event()

    def produce() -> None:
        with Producer({"bootstrap.servers": servers, "linger.ms": 1}) as producer:
            interval = 1.0 / rate
            next_at = time.perf_counter()
            while not stop.is_set():
                producer.send(topic, value=b"x" * 100)
                next_at += interval
                delay = next_at - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)

    time.sleep(5)  # the first triggers (planning, worker start) are not steady state
    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
    time.sleep(seconds)
    stop.set()
    thread.join(30)
    time.sleep(3)
    progress = [p for p in query.recentProgress if p["numInputRows"]]
    query.stop()
    triggers = [float(p["durationMs"]["triggerExecution"]) for p in progress]
    return {
        "batches": len(ages_oldest),
        "rate": rate,
        "trigger_ms": {"p50": percentile(triggers, 0.5), "p95": percentile(triggers, 0.95),
                       "avg": statistics.fmean(triggers) if triggers else float("nan")},
        "oldest_record_age_ms": {"p50": percentile(ages_oldest, 0.5), "p95": percentile(ages_oldest, 0.95)},
        "newest_record_age_ms": {"p50": percentile(ages_newest, 0.5), "p95": percentile(ages_newest, 0.95)},
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m spark.bench", description=__doc__.split("\n")[0])
    parser.add_argument("--bootstrap-servers", default=os.environ.get("ODRADEK_BOOTSTRAP_SERVERS", "127.0.0.1:9092"))
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--record-size", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--read-runs", type=int, default=2)
    parser.add_argument("--stream-rate", type=int, default=2000, help="records/s produced during the latency run")
    parser.add_argument("--stream-seconds", type=float, default=30.0)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    servers = args.bootstrap_servers
    suffix = uuid.uuid4().hex[:8]
    bulk, live = f"spark-bench-{suffix}", f"spark-bench-live-{suffix}"
    alo, eos = f"spark-bench-alo-{suffix}", f"spark-bench-eos-{suffix}"
    with Admin({"bootstrap.servers": servers}) as admin:
        admin.create_topics([NewTopic(t, args.partitions, 1) for t in (bulk, live, alo, eos)])
        wait_for_leaders(admin, [bulk, live, alo, eos])
    spark = session(args.master)
    results: dict[str, Any] = {"records": args.records, "record_size": args.record_size, "partitions": args.partitions}
    try:
        results["write"] = w = bench_write(spark, servers, bulk, args.records, args.record_size)
        print(f"spark write: {w['records']} records in {w['seconds']:.1f} s = {w['records_per_sec']:,.0f} records/s")
        n = args.records  # the streaming writes copy the whole bulk topic
        streams = [bench_stream_write(spark, servers, bulk, topic, n, once)  # alternated, best of two each: the
                   for _ in range(2) for topic, once in ((alo, False), (eos, True))]  # first query pays warm-up
        results["stream_write_at_least_once"] = a = max(streams[0::2], key=lambda r: r["records_per_sec"])
        results["stream_write_exactly_once"] = e = max(streams[1::2], key=lambda r: r["records_per_sec"])
        results["exactly_once_ratio"] = e["records_per_sec"] / a["records_per_sec"]
        print(f"streaming write of {n} records: at-least-once {a['records_per_sec']:,.0f} records/s, exactly-once "
              f"{e['records_per_sec']:,.0f} records/s (ratio {results['exactly_once_ratio']:.2f})")  # fmt: skip
        results["batch_read"] = r = bench_read(spark, servers, bulk, args.records, args.read_runs)
        runs = ", ".join(f"{x:,.0f}" for x in r["runs_records_per_sec"])
        print(f"spark batch read: {r['records']} records in {r['seconds']:.2f} s = {r['records_per_sec']:,.0f} "
              f"records/s (runs: {runs})")  # fmt: skip
        results["micro_batch"] = m = bench_latency(spark, servers, live, args.stream_rate, args.stream_seconds)
        print(f"micro-batches at {m['rate']} records/s: {m['batches']} batches, trigger p50 "
              f"{m['trigger_ms']['p50']:.0f} ms p95 {m['trigger_ms']['p95']:.0f} ms; age of the oldest record "
              f"p50 {m['oldest_record_age_ms']['p50']:.0f} ms p95 {m['oldest_record_age_ms']['p95']:.0f} ms, "
              f"newest p50 {m['newest_record_age_ms']['p50']:.0f} ms")  # fmt: skip
    finally:
        spark.stop()
        with Admin({"bootstrap.servers": servers}) as admin:
            admin.delete_topics([bulk, live, alo, eos])
    if args.json:
        print(json.dumps(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
