"""The example pipeline: page views per page and minute, from a topic of click events to another topic.

Input: JSON click events, one per record value::

    {"user": "user-7", "page": "/home", "ts": "2026-11-26T10:15:03.120Z"}

Output: one record per (1-minute event-time window, page), keyed by the page, written once the window is
closed by the watermark (append mode)::

    {"window_start": "2026-11-26T10:15:00.000Z", "window_end": "2026-11-26T10:16:00.000Z",
     "page": "/home", "views": 42}

Events more than ``--watermark`` behind the latest event time seen are late and dropped. Malformed
events (not JSON, or without a page or time) are dropped too.

Run it against ``odradek up`` (see ``spark/README.md``)::

    python -m spark.example --bootstrap-servers 127.0.0.1:9092 --source clicks --sink page-views \\
        --checkpoint /tmp/page-views-checkpoint
"""

from __future__ import annotations

import argparse
from typing import Any

SOURCE_TOPIC = "clicks"
SINK_TOPIC = "page-views"
WINDOW = "1 minute"
WATERMARK = "1 minute"
TIME_FORMAT = "yyyy-MM-dd'T'HH:mm:ss.SSSX"
EVENT_SCHEMA = "user STRING, page STRING, ts TIMESTAMP"


def page_views(events: Any, *, window: str = WINDOW, watermark: str = WATERMARK) -> Any:
    """Counts per page and event-time window from a DataFrame of the odradek source (``value`` column)."""
    from pyspark.sql import functions as F

    parsed = events.select(
        F.from_json(F.col("value").cast("string"), EVENT_SCHEMA, {"timestampFormat": TIME_FORMAT}).alias("e")
    ).select("e.*")
    valid = parsed.where(F.col("page").isNotNull() & F.col("ts").isNotNull())
    return (
        valid.withWatermark("ts", watermark)
        .groupBy(F.window("ts", window).alias("w"), F.col("page"))
        .agg(F.count(F.lit(1)).alias("views"))
    )


def as_records(counts: Any) -> Any:
    """The sink's columns: ``key`` = page, ``value`` = the JSON document of the module docstring."""
    from pyspark.sql import functions as F

    value = F.to_json(
        F.struct(
            F.date_format(F.col("w.start"), TIME_FORMAT).alias("window_start"),
            F.date_format(F.col("w.end"), TIME_FORMAT).alias("window_end"),
            F.col("page"),
            F.col("views"),
        )
    )
    return counts.select(F.col("page").alias("key"), value.alias("value"))


def start(
    spark: Any,
    *,
    bootstrap_servers: str,
    checkpoint: str,
    source: str = SOURCE_TOPIC,
    sink: str = SINK_TOPIC,
    starting_offsets: str = "earliest",
    available_now: bool = False,
    trigger_interval: str = "5 seconds",
) -> Any:
    """Start the streaming query (returns the StreamingQuery); the odradek format must be registered."""
    events = (
        spark.readStream.format("odradek")
        .option("bootstrap.servers", bootstrap_servers)
        .option("subscribe", source)
        .option("startingOffsets", starting_offsets)
        .load()
    )
    writer = (
        as_records(page_views(events))
        .writeStream.format("odradek")
        .outputMode("append")
        .option("bootstrap.servers", bootstrap_servers)
        .option("topic", sink)
        .option("checkpointLocation", checkpoint)
        .queryName(f"page-views-{source}-to-{sink}")
    )
    writer = writer.trigger(availableNow=True) if available_now else writer.trigger(processingTime=trigger_interval)
    return writer.start()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m spark.example", description=__doc__.split("\n")[0])
    parser.add_argument("--bootstrap-servers", default="127.0.0.1:9092")
    parser.add_argument("--source", default=SOURCE_TOPIC, help="topic of JSON click events")
    parser.add_argument("--sink", default=SINK_TOPIC, help="topic for the counts per page and minute")
    parser.add_argument("--checkpoint", required=True, help="Spark checkpoint directory (offsets and state)")
    parser.add_argument("--starting-offsets", default="earliest", choices=["earliest", "latest"])
    parser.add_argument("--available-now", action="store_true", help="process what is there, then stop")
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args(argv)

    from pyspark.sql import SparkSession

    from spark import register

    spark = (
        SparkSession.builder.master(args.master)
        .appName("odradek-page-views")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    register(spark)
    query = start(
        spark,
        bootstrap_servers=args.bootstrap_servers,
        checkpoint=args.checkpoint,
        source=args.source,
        sink=args.sink,
        starting_offsets=args.starting_offsets,
        available_now=args.available_now,
    )
    try:
        query.awaitTermination()
    except KeyboardInterrupt:
        query.stop()
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
