"""A PySpark data source for Odradek topics: format ``"odradek"``, batch and Structured Streaming,
read and write, with the options and columns of Spark's Kafka source and sink.

    from spark import register
    register(spark)                                   # once per SparkSession
    df = spark.readStream.format("odradek").option("bootstrap.servers", "127.0.0.1:9092") \\
        .option("subscribe", "clicks").load()

``spark/README.md`` documents the options, the columns, the delivery guarantee and the example pipeline;
:func:`low_latency` (``spark/tuning.py``) sets what short micro-batches need of Spark itself.
Importing this package does not import PySpark; :func:`register` does.
"""

from __future__ import annotations

from typing import Any

from spark.tuning import LOW_LATENCY_CONF, low_latency

FORMAT = "odradek"

__all__ = ["FORMAT", "LOW_LATENCY_CONF", "low_latency", "register"]


def register(session: Any) -> None:
    """Register the ``odradek`` format with ``session`` (a ``pyspark.sql.SparkSession``)."""
    from spark.source import OdradekDataSource

    session.dataSource.register(OdradekDataSource)
