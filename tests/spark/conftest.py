"""Fixtures of the Spark suite: one SparkSession (local[2]) and one single-broker cluster per session.

Every test uses its own topics (:func:`tests.spark.helpers.topic_name`), so they share the cluster.
Tests that need more brokers start their own :class:`tests.broker.cluster.Cluster`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.broker.cluster import Cluster


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    os.environ["PYSPARK_PYTHON"] = sys.executable  # Spark's Python workers: this interpreter and venv
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from spark import register

    session = (
        SparkSession.builder.master("local[2]")
        .appName("odradek-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    for query in session.streams.active:
        query.stop()
    session.stop()


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    txn = {"transaction.state.log.num.partitions": "3", "transaction.state.log.replication.factor": "1",
           "transaction.state.log.min.isr": "1", "offsets.topic.num.partitions": "3",
           "offsets.topic.replication.factor": "1"}  # exactlyOnce writes: a single broker's internal topics
    with Cluster(tmp_path_factory.mktemp("spark-cluster"), brokers=1, broker_config=txn) as c:
        yield c
