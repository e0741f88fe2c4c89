"""The sink against a real cluster: batch and streaming writes, with keys, headers and partitions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.broker.cluster import Cluster
from tests.spark.helpers import consume_all, finish, produce, reader, stream_reader, topic_name

pytestmark = pytest.mark.spark


def test_batch_write_round_trip_with_keys_headers_and_partitions(spark: Any, cluster: Cluster) -> None:
    topic = topic_name("write")
    cluster.create_topic(topic, partitions=3)
    rows = [(f"k{i}", f"v{i}".encode(), i % 3, [("source", b"spark"), ("n", str(i).encode())]) for i in range(60)]
    df = spark.createDataFrame(
        rows, "key STRING, value BINARY, partition INT, headers ARRAY<STRUCT<key: STRING, value: BINARY>>"
    )
    df.write.format("odradek").option("bootstrap.servers", cluster.bootstrap_servers).option("topic", topic).mode(
        "append"
    ).save()

    records = consume_all(cluster, topic, 3, expected=60)
    got = sorted((r.key, r.value, r.partition, r.headers) for r in records)
    expected = sorted((k.encode(), v, p, tuple(h)) for k, v, p, h in rows)
    assert got == expected

    back = reader(spark, cluster, subscribe=topic, includeHeaders="true").load().collect()
    assert sorted((r["key"], r["value"], [(h["key"], h["value"]) for h in r["headers"]]) for r in back) == sorted(
        (k.encode(), v, h) for k, v, _, h in rows
    )


def test_topic_column_routes_rows_and_overwrite_is_refused(spark: Any, cluster: Cluster) -> None:
    left, right = topic_name("left"), topic_name("right")
    cluster.create_topic(left, partitions=1)
    cluster.create_topic(right, partitions=1)
    df = spark.createDataFrame([(left, "a"), (right, "b"), (left, "c")], "topic STRING, value STRING")
    df.write.format("odradek").option("bootstrap.servers", cluster.bootstrap_servers).mode("append").save()
    assert sorted(r.value for r in consume_all(cluster, left, 1, expected=2)) == [b"a", b"c"]
    assert [r.value for r in consume_all(cluster, right, 1, expected=1)] == [b"b"]
    with pytest.raises(Exception, match="cannot overwrite"):
        df.write.format("odradek").option("bootstrap.servers", cluster.bootstrap_servers).mode("overwrite").save()
    with pytest.raises(Exception, match="needs a 'value' column"):
        df.selectExpr("topic").write.format("odradek").option("bootstrap.servers", cluster.bootstrap_servers).mode(
            "append"
        ).save()


def test_streaming_write_round_trip(spark: Any, cluster: Cluster, tmp_path: Path) -> None:
    source, sink = topic_name("stream-in"), topic_name("stream-out")
    cluster.create_topic(source, partitions=2)
    cluster.create_topic(sink, partitions=2)
    produce(cluster, source, [b"%d" % i for i in range(100)], key=b"same", headers=[("h", b"1")])
    query = (
        stream_reader(spark, cluster, subscribe=source, startingOffsets="earliest", includeHeaders="true")
        .load()
        .selectExpr("key", "upper(CAST(value AS STRING)) || '!' AS value", "headers")
        .writeStream.format("odradek")
        .option("bootstrap.servers", cluster.bootstrap_servers)
        .option("topic", sink)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    finish(query)
    records = consume_all(cluster, sink, 2, expected=100)
    assert sorted(r.value for r in records) == sorted(b"%d!" % i for i in range(100))
    assert {r.key for r in records} == {b"same"}
    assert {r.headers for r in records} == {(("h", b"1"),)}
    assert len({r.partition for r in records}) == 1  # one key, one partition (murmur2 of the key)


def test_exactly_once_streaming_write_survives_a_rerun_of_a_committed_micro_batch(
    spark: Any, cluster: Cluster, tmp_path: Path
) -> None:
    """exactlyOnce=true: each micro-batch's rows are read once by a read_committed reader, even when Spark
    re-runs a micro-batch whose transactions the driver committed (its commit log entry lost: the driver
    died between the sink's commit and the log), which the at-least-once sink writes twice."""
    source, sink = topic_name("eos-in"), topic_name("eos-out")
    cluster.create_topic(source, partitions=2)
    cluster.create_topic(sink, partitions=2)
    produce(cluster, source, [b"%d" % i for i in range(60)])
    checkpoint = tmp_path / "checkpoint"

    def run() -> None:
        query = (
            stream_reader(spark, cluster, subscribe=source, startingOffsets="earliest")
            .load()
            .selectExpr("key", "value")
            .writeStream.format("odradek")
            .option("bootstrap.servers", cluster.bootstrap_servers)
            .option("topic", sink)
            .option("exactlyOnce", "true")
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        finish(query)

    run()
    commits = sorted(checkpoint.joinpath("commits").iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else -1)
    last = [p for p in commits if p.name.isdigit()][-1]
    last.unlink()  # the driver "died" after the sink committed, before Spark wrote its commit log
    for crc in checkpoint.joinpath("commits").glob(f".{last.name}.crc"):
        crc.unlink()
    run()  # Spark re-runs that micro-batch: its tasks find it committed and write nothing
    assert last.exists()  # the micro-batch did run again (Spark wrote its commit log entry this time)
    committed = consume_read_committed(cluster, sink, 2, expected=60)
    assert sorted(committed) == sorted(b"%d" % i for i in range(60))
    back = reader(spark, cluster, subscribe=sink, **{"kafka.isolation.level": "read_committed"}).load().collect()
    assert sorted(r["value"] for r in back) == sorted(b"%d" % i for i in range(60))  # the source, read_committed


def consume_read_committed(cluster: Cluster, topic: str, partitions: int, expected: int) -> list[bytes]:
    from odradek import Consumer, TopicPartition

    config = {"bootstrap.servers": cluster.bootstrap_servers, "auto.offset.reset": "earliest",
              "isolation.level": "read_committed"}  # fmt: skip
    values: list[bytes] = []
    with Consumer(config) as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])

        def enough() -> bool:
            values.extend(r.value or b"" for r in consumer.poll(timeout_ms=200))
            return len(values) >= expected

        cluster.wait_for(enough, 30, f"{expected} committed records in {topic}")
        for _ in range(5):  # anything beyond shows up too
            values.extend(r.value or b"" for r in consumer.poll(timeout_ms=200))
    return values
