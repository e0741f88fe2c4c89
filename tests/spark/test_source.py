"""The source against a real cluster and Spark local[2]: streaming (availableNow, restarts, rate limits,
pattern subscriptions, data loss) and batch reads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from odradek import Admin
from tests.broker.cluster import Cluster
from tests.spark.helpers import finish, produce, reader, stream_reader, topic_name

pytestmark = pytest.mark.spark


def run_available_now(spark: Any, df: Any, out: Path, checkpoint: Path) -> Any:
    """Run ``df`` to a parquet sink with Trigger.AvailableNow until it stops; returns the query."""
    query = (
        df.selectExpr("topic", "partition", "offset", "value")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    return finish(query)


def test_streaming_restart_from_checkpoint_reads_every_record_exactly_once(
    spark: Any, cluster: Cluster, tmp_path: Path
) -> None:
    topic = topic_name("restart")
    cluster.create_topic(topic, partitions=3)
    first = [b"first-%d" % i for i in range(300)]
    produce(cluster, topic, first)
    df = stream_reader(spark, cluster, subscribe=topic, startingOffsets="earliest").load()
    run_available_now(spark, df, tmp_path / "out", tmp_path / "checkpoint")
    assert spark.read.parquet(str(tmp_path / "out")).count() == len(first)

    second = [b"second-%d" % i for i in range(200)]
    produce(cluster, topic, second)
    run_available_now(spark, df, tmp_path / "out", tmp_path / "checkpoint")

    rows = spark.read.parquet(str(tmp_path / "out")).collect()
    positions = [(r["partition"], r["offset"]) for r in rows]
    assert len(positions) == len(set(positions)), "a record was read twice"
    assert sorted(r["value"] for r in rows) == sorted(first + second)


def test_max_offsets_per_trigger_bounds_every_micro_batch(spark: Any, cluster: Cluster, tmp_path: Path) -> None:
    topic = topic_name("rate")
    cluster.create_topic(topic, partitions=2)
    produce(cluster, topic, [b"%d" % i for i in range(250)], partition=0)
    produce(cluster, topic, [b"%d" % i for i in range(50)], partition=1)
    df = stream_reader(spark, cluster, subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger="70").load()
    query = run_available_now(spark, df, tmp_path / "out", tmp_path / "checkpoint")
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sum(sizes) == 300
    assert max(sizes) <= 70
    assert len(sizes) == 5  # 300 offsets at most 70 at a time, the whole limit used each time
    ends = json.loads(query.recentProgress[0]["sources"][0]["endOffset"])
    assert ends[topic]["1"] > 0, "the small partition was starved in the first batch"


def test_batch_read_between_offsets(spark: Any, cluster: Cluster) -> None:
    topic = topic_name("between")
    cluster.create_topic(topic, partitions=2)
    produce(cluster, topic, [b"a%d" % i for i in range(40)], partition=0)
    produce(cluster, topic, [b"b%d" % i for i in range(30)], partition=1)
    df = reader(
        spark,
        cluster,
        subscribe=topic,
        startingOffsets=json.dumps({topic: {"0": 10, "1": -2}}),
        endingOffsets=json.dumps({topic: {"0": 25, "1": -1}}),
        minPartitions="5",
    ).load()
    assert df.rdd.getNumPartitions() >= 5
    rows = df.collect()
    got = sorted((r["partition"], r["offset"], r["value"]) for r in rows)
    expected = [(0, o, b"a%d" % o) for o in range(10, 25)] + [(1, o, b"b%d" % o) for o in range(30)]
    assert got == expected
    assert {r["topic"] for r in rows} == {topic}
    assert {r["timestampType"] for r in rows} == {0}
    packed = reader(spark, cluster, subscribe=topic, startingOffsets=json.dumps({topic: {"0": 10, "1": -2}}),
                    endingOffsets=json.dumps({topic: {"0": 25, "1": -1}}), maxPartitions="1").load()  # fmt: skip
    assert packed.rdd.getNumPartitions() == 1  # one task reads both ranges, one after the other
    assert sorted((r["partition"], r["offset"], r["value"]) for r in packed.collect()) == expected


def test_batch_read_by_timestamp_and_assign(spark: Any, cluster: Cluster) -> None:
    topic = topic_name("by-time")
    cluster.create_topic(topic, partitions=2)
    for p in (0, 1):
        produce(cluster, topic, [b"old-%d" % p], partition=p, timestamp_ms=1_000_000)
        produce(cluster, topic, [b"new-%d" % p], partition=p, timestamp_ms=2_000_000)
    both = reader(spark, cluster, assign=json.dumps({topic: [0, 1]}), startingTimestamp="1500000").load()
    assert sorted(r["value"] for r in both.collect()) == [b"new-0", b"new-1"]
    by_partition = json.dumps({topic: {"0": 500_000, "1": 1_500_000}})
    mixed = reader(spark, cluster, subscribe=topic, startingOffsetsByTimestamp=by_partition).load()
    assert sorted(r["value"] for r in mixed.collect()) == [b"new-0", b"new-1", b"old-0"]
    with pytest.raises(Exception, match=r"startingTimestamp: no record of .* has a timestamp at or after"):
        reader(spark, cluster, subscribe=topic, startingTimestamp="3000000").load().collect()


def test_misspelled_option_and_malformed_offsets_are_errors_that_name_them(spark: Any, cluster: Cluster) -> None:
    with pytest.raises(Exception, match=r"unknown option 'subscibe'.*did you mean subscribe\?"):
        reader(spark, cluster, subscibe="x").load().collect()
    with pytest.raises(Exception, match=r"startingOffsets: malformed JSON"):
        reader(spark, cluster, subscribe="x", startingOffsets='{"x": {"0": 1}').load().collect()


def test_pattern_subscription_picks_up_new_topics_and_partitions(spark: Any, cluster: Cluster) -> None:
    prefix = topic_name("pattern")
    first, second = f"{prefix}-a", f"{prefix}-b"
    cluster.create_topic(first, partitions=1)
    produce(cluster, first, [b"a0", b"a1"])
    df = stream_reader(spark, cluster, subscribePattern=f"{prefix}-.*", startingOffsets="earliest").load()
    name = prefix.replace("-", "_")
    query = df.writeStream.format("memory").queryName(name).trigger(processingTime="200 milliseconds").start()
    try:
        cluster.create_topic(second, partitions=1)
        produce(cluster, second, [b"b0"])
        with Admin({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
            admin.create_partitions({first: 2})
        cluster.wait_for(lambda: cluster.has_leaders(0, first, 2), 30, f"the new partition of {first}")
        produce(cluster, first, [b"a-new"], partition=1)

        def seen() -> set[tuple[str, int, bytes]]:
            assert query.exception() is None, query.exception()
            rows = spark.sql(f"SELECT topic, partition, value FROM {name}").collect()
            return {(r["topic"], r["partition"], bytes(r["value"])) for r in rows}

        expected = {(first, 0, b"a0"), (first, 0, b"a1"), (second, 0, b"b0"), (first, 1, b"a-new")}
        cluster.wait_for(lambda: seen() == expected, 120, "records of the new topic and partition")
        assert query.exception() is None
    finally:
        query.stop()


def test_recreated_topic_is_data_loss_by_fail_on_data_loss(spark: Any, cluster: Cluster, tmp_path: Path) -> None:
    topic = topic_name("lost")
    cluster.create_topic(topic, partitions=1)
    produce(cluster, topic, [b"%d" % i for i in range(10)])
    checkpoint = tmp_path / "checkpoint"
    run_available_now(
        spark,
        stream_reader(spark, cluster, subscribe=topic, startingOffsets="earliest").load(),
        tmp_path / "o",
        checkpoint,
    )
    with Admin({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
        admin.delete_topics([topic])
        cluster.wait_for(lambda: topic not in admin.list_topics(), 30, f"{topic} deleted")
    cluster.create_topic(topic, partitions=1)
    produce(cluster, topic, [b"x", b"y", b"z"])

    strict = stream_reader(spark, cluster, subscribe=topic, startingOffsets="earliest").load()
    with pytest.raises(Exception, match=rf"{topic}-0: offsets 3 to 9 were lost"):
        run_available_now(spark, strict, tmp_path / "o", checkpoint)

    lenient = stream_reader(spark, cluster, subscribe=topic, failOnDataLoss="false").load()
    run_available_now(spark, lenient, tmp_path / "o", checkpoint)  # goes on, with a warning
