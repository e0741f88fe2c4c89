"""Spark settings for streaming queries that want short micro-batches (``docs/LATENCY.md``, "The Spark path").

    from spark import low_latency, register
    register(spark)
    low_latency(spark)        # before starting the query; or SparkSession.builder.config(map=LOW_LATENCY_CONF)

Every trigger of a micro-batch query writes two checkpoint files (the batch's offsets before it runs, its
commit after). Spark's default checkpoint file manager goes through Hadoop's ``FileContext``; on a local
file system without Hadoop's native library (a pip-installed PySpark has none) it starts a process for each
``readlink`` and ``chmod`` it needs, about five per file: 55-75 ms of each write on a quiet 2-core machine,
more under load, on every trigger. The ``FileSystem``-based manager Spark ships writes the same files with
two (a ``chmod`` of the file and of its ``.crc``): a third to a quarter of the time.

The trade-off, from Spark's own choice of default: ``FileContext`` renames the new file into place
atomically and fails if it exists, so a second instance of the same query started elsewhere on the same
checkpoint fails instead of overwriting a batch file; the ``FileSystem`` manager checks and then renames.
Spark refuses two active instances of one query in a session; two drivers on one checkpoint directory are
the case it no longer stops. These are runtime SQL settings: they apply to queries started after they are
set, in that session only.
"""

from __future__ import annotations

from typing import Any

CHECKPOINT_FILE_MANAGER_KEY = "spark.sql.streaming.checkpointFileManagerClass"
# PySpark 4.x's name (3.x had it one package up)
FILE_SYSTEM_CHECKPOINT_MANAGER = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
)

LOW_LATENCY_CONF: dict[str, str] = {CHECKPOINT_FILE_MANAGER_KEY: FILE_SYSTEM_CHECKPOINT_MANAGER}


def low_latency(session: Any) -> None:
    """Set :data:`LOW_LATENCY_CONF` on ``session`` (a ``pyspark.sql.SparkSession``) for the queries it starts next."""
    for key, value in LOW_LATENCY_CONF.items():
        session.conf.set(key, value)
