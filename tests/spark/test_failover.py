"""A streaming query goes on without loss when the leader of a partition it reads is killed (kill -9)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from odradek import Producer
from tests.broker.cluster import Cluster
from tests.spark.helpers import topic_name

pytestmark = pytest.mark.spark

CONTROLLER_CONFIG = {"broker.session.timeout.ms": "3000"}


def test_streaming_query_survives_the_leader_being_killed(spark: Any, tmp_path: Path) -> None:
    topic = topic_name("failover")
    (tmp_path / "cluster").mkdir()
    with Cluster(tmp_path / "cluster", brokers=3, controller_config=CONTROLLER_CONFIG) as cluster:
        cluster.create_topic(topic, partitions=2, replication_factor=3)
        config = {"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", "linger.ms": 1}
        query = (
            spark.readStream.format("odradek")
            .option("bootstrap.servers", cluster.bootstrap_servers)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("kafkaConsumer.pollTimeoutMs", "60000")
            .load()
            .selectExpr("partition", "offset", "CAST(value AS STRING) AS value")
            .writeStream.format("memory")
            .queryName("failover")
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(processingTime="300 milliseconds")
            .start()
        )
        try:

            def rows() -> list[Any]:
                assert query.exception() is None, query.exception()
                return spark.sql("SELECT partition, offset, value FROM failover").collect()

            with Producer(config) as producer:
                before = [f"before-{i}" for i in range(200)]
                for f in [producer.send(topic, value=v.encode()) for v in before]:
                    f.result(timeout=30)
                cluster.wait_for(lambda: len(rows()) >= len(before), 90, "the records produced before the kill")

                victim = cluster.leader(topic, 0)
                cluster.kill_broker(victim)
                survivor = next(i for i in range(3) if i != victim)
                cluster.wait_for(
                    lambda: cluster.leader(topic, 0, via=survivor) not in (-1, victim),
                    30,
                    "a new leader of partition 0",
                )
                after = [f"after-{i}" for i in range(200)]
                for f in [producer.send(topic, value=v.encode()) for v in after]:
                    f.result(timeout=60)

            def all_seen() -> bool:
                return {r["value"] for r in rows()} >= set(before + after)

            cluster.wait_for(all_seen, 120, "every acknowledged record in the query's output")
            positions = [(r["partition"], r["offset"]) for r in rows()]
            assert len(positions) == len(set(positions)), "an offset was read twice"
            assert query.isActive
        finally:
            query.stop()
