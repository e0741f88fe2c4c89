"""Figures of the Spark data source against a running cluster: sink vs plain producer, reads, micro-batch latency.

    odradek up --brokers 1 --controllers 1 --data-dir /tmp/od-bench       # in another terminal
    python -m bench.spark_source --bootstrap-servers 127.0.0.1:9092 [--records 1000000] [--json]

1. **write: the sink against the plain producer**: after an untimed 1000-record write (the session's first
   job starts the Python workers and warms the JVM up), alternated ``--write-runs`` times: the plain
   producer (``odradek perf produce``'s loop, ``odradek.perf.produce``, the client's defaults with acks=all,
   in this process: what a Python application gets without Spark) sends ``--records`` values of
   ``--record-size`` bytes, then ``df.write.format("odradek")`` (the sink, its defaults, 2 tasks) writes
   ``spark.range(N)`` as values of that size into a topic of ``--partitions`` partitions. The best
   records/s of each and their ratio (sink / producer).
2. **streaming write, at-least-once vs exactly-once**: a streaming query (availableNow) copies that topic
   to a new one with the sink's default and with ``exactlyOnce=true`` (transactions committed by the
   driver), alternated twice: the best records/s of each and their ratio.
3. **batch read**: ``spark.read.format("odradek")`` of that topic, every value's length summed (so every
   record crosses from the reader to the JVM): records/s over the whole job, best of ``--read-runs``.
4. **micro-batch latency**: a streaming query (default trigger: as fast as it can; ``--trigger-interval``
   for a processing-time trigger) over a second topic, warmed up by three micro-batches of a few records (not
   counted), while a producer sends ``--stream-rate`` records/s for ``--stream-seconds``; per micro-batch,
   the trigger's duration (Spark's ``triggerExecution``) and the
   age of its oldest and newest record when the batch's rows reached the driver (``foreachBatch``
   collecting them). Percentiles (p50, p99) over the batches, and the p50 of each part of a trigger as
   Spark reports it (``latestOffset``, ``queryPlanning``, ``walCommit``, ``addBatch``, ``commitOffsets``)
   and of the collect inside ``addBatch`` (the Spark job that runs the read tasks).

The session is ``--master`` (``local[2]``) with ``spark.LOW_LATENCY_CONF`` (``spark/tuning.py``: the settings
the data source's README recommends for short micro-batches; ``--spark-defaults`` leaves Spark's own) and
any ``--spark-conf key=value`` (repeatable) on top.

``--only`` runs some of the parts (``write,stream-write,read,latency``; 2 and 3 read what 1 wrote, so they
bring it along); ``--source-option`` and ``--sink-option`` (``key=value``, repeatable) add options to the
queries of parts 1-4 (e.g. ``--source-option maxPartitions=2``). Prints one line
per figure, and with ``--json`` one JSON object as the last line.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Mapping
from typing import Any

from odradek import Admin, NewTopic, Producer

PARTS = ("write", "stream-write", "read", "latency")
WARM_UP_RECORDS = 1000  # written by the sink before the timed runs (not counted)
WARM_UP_BATCHES = 3  # micro-batches with records before the latency run's traffic (not counted)
WARM_UP_TIMEOUT_S = 600.0
TRIGGER_PARTS = ("latestOffset", "queryPlanning", "walCommit", "addBatch", "commitOffsets")


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


def session(master: str, conf: Mapping[str, str] | None = None, *, tuned: bool = True) -> Any:
    """The bench's SparkSession: ``conf`` (``--spark-conf``), and ``spark.LOW_LATENCY_CONF`` (the documented
    recipe, ``spark/tuning.py``) for the keys ``conf`` does not set, unless ``tuned`` is false."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from spark import LOW_LATENCY_CONF, register

    builder = (
        SparkSession.builder.master(master)
        .appName("odradek-spark-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
    )
    for key, value in {**(LOW_LATENCY_CONF if tuned else {}), **(conf or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def bench_plain_producer(servers: str, topic: str, records: int, size: int) -> dict[str, float]:
    """``odradek perf produce --acks all`` in this process: the producer's own loop, no Spark."""
    from odradek.perf.produce import ProduceRun, produce
    from odradek.perf.stats import Recorder

    run = ProduceRun(topic, records, size, throughput=-1, latency_sample_every=records)
    with Producer({"bootstrap.servers": servers, "acks": "all"}) as producer:
        result = produce(producer, run, Recorder("sent", out=io.StringIO(), keep_latencies=False))
    if result.failed:
        raise SystemExit(f"the plain producer failed {result.failed} records: {result.first_error!r}")
    return {"records": records, "seconds": result.seconds, "records_per_sec": records / result.seconds}


def bench_stream_write(
    spark: Any, servers: str, source: str, topic: str, records: int, exactly_once: bool, sink_options: Mapping[str, str]
) -> dict[str, float]:
    """A streaming query (availableNow) copying ``records`` of ``source`` to ``topic``, at-least-once or
    exactly-once (the sink's ``exactlyOnce``): the figure is the ratio of the two, same run."""
    query = (
        spark.readStream.format("odradek").option("bootstrap.servers", servers).option("subscribe", source)
        .option("startingOffsets", "earliest").load().selectExpr("key", "value")
        .writeStream.format("odradek").option("bootstrap.servers", servers).option("topic", topic)
        .option("exactlyOnce", str(exactly_once).lower()).options(**sink_options)
        .option("checkpointLocation", tempfile.mkdtemp(prefix="odradek-bench-"))
        .trigger(availableNow=True)
    )  # fmt: skip
    start = time.perf_counter()
    running = query.start()
    running.awaitTermination(600)
    seconds = time.perf_counter() - start
    running.stop()
    return {"records": records, "seconds": seconds, "records_per_sec": records / seconds}


def sink_write(spark: Any, servers: str, topic: str, records: int, size: int, sink_options: Mapping[str, str]) -> float:
    """Seconds of one ``df.write.format("odradek")`` of ``records`` values of ``size`` bytes (2 Spark tasks)."""
    from pyspark.sql import functions as F

    pad = "x" * max(0, size - 12)
    df = spark.range(records, numPartitions=2).select(
        F.concat(F.lpad(F.col("id").cast("string"), 12, "0"), F.lit(pad)).alias("value")
    )
    start = time.perf_counter()
    (df.write.format("odradek").option("bootstrap.servers", servers).option("topic", topic).options(**sink_options)
     .mode("append").save())  # fmt: skip
    return time.perf_counter() - start


def bench_producer_vs_sink(
    spark: Any, servers: str, topics: tuple[str, str, str], records: int, size: int, runs: int,
    sink_options: Mapping[str, str],
) -> dict[str, Any]:  # fmt: skip
    """The plain producer and the sink alternated ``runs`` times, after an untimed small write (the session's
    first job starts the Python workers and warms the JVM up): the best records/s of each, and their ratio.
    ``topics``: the plain producer's, the sink's first run's (read by the later parts), the other runs'."""
    plain, bulk, scratch = topics
    warm_up = sink_write(spark, servers, scratch, WARM_UP_RECORDS, size, sink_options)
    producer_rates, sink_rates = [], []
    for i in range(runs):
        producer_rates.append(bench_plain_producer(servers, plain, records, size)["records_per_sec"])
        sink_rates.append(
            records / sink_write(spark, servers, bulk if i == 0 else scratch, records, size, sink_options)
        )
    best_producer, best_sink = max(producer_rates), max(sink_rates)
    return {"records": records, "warm_up_seconds": warm_up, "producer_runs": producer_rates, "sink_runs": sink_rates,
            "producer_records_per_sec": best_producer, "sink_records_per_sec": best_sink,
            "sink_to_producer_ratio": best_sink / best_producer}  # fmt: skip


def bench_read(
    spark: Any, servers: str, topic: str, records: int, runs: int, source_options: Mapping[str, str]
) -> dict[str, Any]:
    from pyspark.sql import functions as F

    timings = []
    for _ in range(runs):
        df = (spark.read.format("odradek").option("bootstrap.servers", servers).option("subscribe", topic)
              .options(**source_options).load())  # fmt: skip
        start = time.perf_counter()
        row = df.agg(F.count(F.lit(1)).alias("n"), F.sum(F.length("value")).alias("bytes")).first()
        timings.append(time.perf_counter() - start)
        if row["n"] != records:
            raise SystemExit(f"batch read returned {row['n']} records, expected {records}")
    best = min(timings)
    return {"records": records, "seconds": best, "records_per_sec": records / best,
            "runs_records_per_sec": [records / t for t in timings]}  # fmt: skip


def bench_latency(
    spark: Any, servers: str, topic: str, rate: int, seconds: float, *, source_options: Mapping[str, str],
    trigger_interval: str | None, checkpoint_dir: str | None,
) -> dict[str, Any]:  # fmt: skip
    ages_oldest: list[float] = []
    ages_newest: list[float] = []
    collects: list[float] = []

    def on_batch(batch: Any, batch_id: int) -> None:
        # A plain collect (no aggregation, so no shuffle stage of its own): the batch's record times.
        started = time.time()
        stamps = [row[0].timestamp() for row in batch.select("timestamp").collect()]
        if stamps:
            now = time.time()
            ages_oldest.append((now - min(stamps)) * 1000)
            ages_newest.append((now - max(stamps)) * 1000)
            collects.append((now - started) * 1000)

    writer = (
        spark.readStream.format("odradek").option("bootstrap.servers", servers).option("subscribe", topic)
        .option("startingOffsets", "latest").options(**source_options).load()
        .writeStream.foreachBatch(on_batch)
        .option("checkpointLocation", tempfile.mkdtemp(prefix="odradek-bench-", dir=checkpoint_dir))
    )  # fmt: skip
    if trigger_interval:
        writer = writer.trigger(processingTime=trigger_interval)
    query = writer.start()
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

    # Warm-up, not measured: the first micro-batches start the Python workers (tens of seconds on a busy machine).
    # A record is sent again every second until a micro-batch brings it: the query resolves its starting
    # offsets (latest) only at its first trigger, so a record sent before that is never read.
    deadline = time.monotonic() + WARM_UP_TIMEOUT_S
    with Producer({"bootstrap.servers": servers}) as producer:
        while len(collects) < WARM_UP_BATCHES:
            seen = len(collects)
            producer.send(topic, value=b"warm-up")
            producer.flush()
            resend_at = time.monotonic() + 1
            while len(collects) == seen and time.monotonic() < resend_at:
                time.sleep(0.02)
            if time.monotonic() > deadline:
                raise SystemExit(f"the streaming query read no record within {WARM_UP_TIMEOUT_S:.0f} s")
    time.sleep(1)
    warm = query.lastProgress["batchId"] if query.lastProgress else -1
    for measured in (ages_oldest, ages_newest, collects):
        measured.clear()
    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
    time.sleep(seconds)
    stop.set()
    thread.join(30)
    time.sleep(3)
    progress = [p for p in query.recentProgress if p["numInputRows"] and p["batchId"] > warm]
    query.stop()
    triggers = [float(p["durationMs"]["triggerExecution"]) for p in progress]
    parts = {part: percentile([float(p["durationMs"].get(part, 0)) for p in progress], 0.5) for part in TRIGGER_PARTS}
    return {
        "batches": len(ages_oldest),
        "rate": rate,
        "trigger_ms": {"p50": percentile(triggers, 0.5), "p99": percentile(triggers, 0.99),
                       "avg": statistics.fmean(triggers) if triggers else float("nan")},
        "trigger_parts_p50_ms": parts,
        "collect_ms": {"p50": percentile(collects, 0.5), "p99": percentile(collects, 0.99)},
        "oldest_record_age_ms": {"p50": percentile(ages_oldest, 0.5), "p99": percentile(ages_oldest, 0.99)},
        "newest_record_age_ms": {"p50": percentile(ages_newest, 0.5), "p99": percentile(ages_newest, 0.99)},
    }  # fmt: skip


def key_values(pairs: list[str], flag: str) -> dict[str, str]:
    options = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"{flag} takes key=value, got {pair!r}")
        options[key] = value
    return options


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.spark_source", description=__doc__.split("\n")[0])
    parser.add_argument("--bootstrap-servers", default=os.environ.get("ODRADEK_BOOTSTRAP_SERVERS", "127.0.0.1:9092"))
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--record-size", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--read-runs", type=int, default=2)
    parser.add_argument("--write-runs", type=int, default=2, help="plain producer and sink runs, alternated")
    parser.add_argument("--stream-rate", type=int, default=2000, help="records/s produced during the latency run")
    parser.add_argument("--stream-seconds", type=float, default=30.0)
    parser.add_argument("--trigger-interval", help="a processing-time trigger for the latency run (e.g. '100 ms')")
    parser.add_argument("--checkpoint-dir", help="where the latency run's checkpoint goes (default: the temp dir)")
    parser.add_argument("--source-option", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--sink-option", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument(
        "--spark-conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark configuration of the bench's session (repeatable)",
    )
    parser.add_argument(
        "--spark-defaults",
        action="store_true",
        help="Spark's own defaults: without spark.LOW_LATENCY_CONF (spark/tuning.py)",
    )
    parser.add_argument("--only", default=",".join(PARTS), help=f"comma-separated, of {','.join(PARTS)}")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    only = {part.strip() for part in args.only.split(",") if part.strip()}
    if only - set(PARTS):
        parser.error(f"--only: unknown parts {sorted(only - set(PARTS))}; they are {', '.join(PARTS)}")
    source_options = key_values(args.source_option, "--source-option")
    sink_options = key_values(args.sink_option, "--sink-option")
    spark_conf = key_values(args.spark_conf, "--spark-conf")

    servers = args.bootstrap_servers
    suffix = uuid.uuid4().hex[:8]
    plain, bulk, live = f"spark-bench-plain-{suffix}", f"spark-bench-{suffix}", f"spark-bench-live-{suffix}"
    alo, eos, scratch = f"spark-bench-alo-{suffix}", f"spark-bench-eos-{suffix}", f"spark-bench-more-{suffix}"
    topics = [plain, bulk, live, alo, eos, scratch]
    with Admin({"bootstrap.servers": servers}) as admin:
        admin.create_topics([NewTopic(t, args.partitions, 1) for t in topics])
        wait_for_leaders(admin, topics)
    results: dict[str, Any] = {"records": args.records, "record_size": args.record_size, "partitions": args.partitions,
                               "source_options": source_options, "sink_options": sink_options, "spark_conf": spark_conf,
                               "low_latency_conf": not args.spark_defaults}  # fmt: skip
    spark = None
    try:
        spark = session(args.master, spark_conf, tuned=not args.spark_defaults)
        if only & {"write", "stream-write", "read"}:  # the later parts read what the write wrote
            results["write"] = w = bench_producer_vs_sink(spark, servers, (plain, bulk, scratch), args.records,
                                                          args.record_size, args.write_runs, sink_options)  # fmt: skip
            print(f"plain producer (odradek perf produce, acks=all) vs the sink (df.write, 2 tasks), {args.records} "
                  f"records, {args.write_runs} runs alternated after a {WARM_UP_RECORDS}-record write of "
                  f"{w['warm_up_seconds']:.1f} s:")  # fmt: skip
            print("  plain producer records/s: " + ", ".join(f"{x:,.0f}" for x in w["producer_runs"]))
            print("  sink records/s:           " + ", ".join(f"{x:,.0f}" for x in w["sink_runs"]))
            print(f"  best: plain producer {w['producer_records_per_sec']:,.0f}, sink {w['sink_records_per_sec']:,.0f} "
                  f"records/s: sink/producer {w['sink_to_producer_ratio']:.2f}")  # fmt: skip
        if "stream-write" in only:
            n = args.records  # the streaming writes copy the whole bulk topic
            # alternated, best of two each: the first query pays the warm-up
            streams = [bench_stream_write(spark, servers, bulk, topic, n, once, sink_options)
                       for _ in range(2) for topic, once in ((alo, False), (eos, True))]  # fmt: skip
            results["stream_write_at_least_once"] = a = max(streams[0::2], key=lambda r: r["records_per_sec"])
            results["stream_write_exactly_once"] = e = max(streams[1::2], key=lambda r: r["records_per_sec"])
            results["exactly_once_ratio"] = e["records_per_sec"] / a["records_per_sec"]
            print(f"streaming write of {n} records: at-least-once {a['records_per_sec']:,.0f} records/s, exactly-once "
                  f"{e['records_per_sec']:,.0f} records/s (ratio {results['exactly_once_ratio']:.2f})")  # fmt: skip
        if "read" in only:
            results["batch_read"] = r = bench_read(spark, servers, bulk, args.records, args.read_runs, source_options)
            runs = ", ".join(f"{x:,.0f}" for x in r["runs_records_per_sec"])
            print(f"spark batch read: {r['records']} records in {r['seconds']:.2f} s = {r['records_per_sec']:,.0f} "
                  f"records/s (runs: {runs})")  # fmt: skip
        if "latency" in only:
            results["micro_batch"] = m = bench_latency(
                spark, servers, live, args.stream_rate, args.stream_seconds, source_options=source_options,
                trigger_interval=args.trigger_interval, checkpoint_dir=args.checkpoint_dir,
            )  # fmt: skip
            t, o, y = m["trigger_ms"], m["oldest_record_age_ms"], m["newest_record_age_ms"]
            print(f"micro-batches at {m['rate']} records/s: {m['batches']} batches, trigger p50 {t['p50']:.0f} ms "
                  f"p99 {t['p99']:.0f} ms; age of the oldest record p50 {o['p50']:.0f} ms p99 {o['p99']:.0f} ms, "
                  f"newest p50 {y['p50']:.0f} ms")  # fmt: skip
            print("  trigger parts, p50 ms: " + ", ".join(f"{k} {v:.0f}" for k, v in m["trigger_parts_p50_ms"].items())
                  + f"; of addBatch, the collect in foreachBatch {m['collect_ms']['p50']:.0f}")  # fmt: skip
    finally:
        if spark is not None:
            spark.stop()
        with Admin({"bootstrap.servers": servers}) as admin:
            admin.delete_topics(topics)
    if args.json:
        print(json.dumps(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
