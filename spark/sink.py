"""The ``odradek`` sink: batch (``df.write``) and streaming (``df.writeStream``) writes to topics.

Columns, as Spark's Kafka sink takes them: ``value`` (required, binary or string), ``key`` (binary or
string), ``topic`` (string; the ``topic`` option, when given, overrides it), ``partition`` (int; null
or absent: the producer's partitioner, murmur2 of the key), ``headers``
(array<struct<key:string,value:binary>>). Strings are written as UTF-8. Other columns are ignored.

Guarantee: at-least-once by default; ``exactlyOnce=true`` (streaming writes, with the ``topic`` option) makes
each micro-batch's rows visible exactly once to read_committed readers (``spark.exactly_once``: one transaction
per task, committed by the driver). At-least-once: a Spark task succeeds only after every one of its records
was acknowledged by all in-sync replicas (``acks=all``); a record that cannot be written fails the task, and Spark
retries the task, or (streaming) the query fails and re-runs the micro-batch from its checkpoint
on restart. A retried task or re-run micro-batch writes its records again, so a failure can leave
duplicates in the topic, never gaps. The producer underneath is idempotent
(``enable.idempotence=true``): its own retries of a request do not duplicate records (once the
cluster supports idempotence; see ``spark/README.md``), but retries of a Spark task or micro-batch do.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from itertools import repeat
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from odradek.errors import ConfigError
from odradek.record_future import FOLD_EVERY, OutcomeTally
from spark import clients
from spark.options import OptionError, SinkOptions
from spark.schema import check_sink_schema

FLUSH_TIMEOUT_S = 600.0


@dataclass
class WrittenMessage(WriterCommitMessage):
    """What one task wrote: its record count (summed by ``commit`` on the driver)."""

    records: int


def _check(options: SinkOptions, schema: StructType, overwrite: bool) -> None:
    """The checks of a write, on the driver (``overwrite``: a batch write in mode overwrite)."""
    if overwrite:
        raise OptionError("the odradek sink cannot overwrite (a topic is an append-only log); use mode append")
    check_sink_schema(schema, options.topic)
    try:
        clients.validate_producer_config(options.client)
    except ConfigError as exc:
        raise OptionError(f"a kafka.* option of the odradek sink is invalid: {exc}") from None


def write_batches(options: SinkOptions, batches: Iterator[pa.RecordBatch]) -> WrittenMessage:
    """Send every row of ``batches``; return once all are acknowledged, or raise the first failure."""
    producer = clients.producer(options.client)
    sent, outcomes = _send_rows(producer, options, batches)
    producer.flush(timeout=FLUSH_TIMEOUT_S)
    error = _first_error(outcomes, sent)
    if error is not None:
        raise RuntimeError(
            f"{outcomes.failed} of {sent} records could not be written to Odradek; the first error: {error!r}"
        ) from error
    return WrittenMessage(sent)


def write_exactly_once(options: SinkOptions, batches: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
    """A task of an exactly-once micro-batch (``spark.exactly_once``): its rows in one open transaction."""
    from pyspark import TaskContext

    from spark import exactly_once

    context = TaskContext.get()
    if context is None:
        raise RuntimeError("exactlyOnce writes run in Spark tasks")
    query_id = context.getLocalProperty("sql.streaming.queryId") or ""
    batch_id = context.getLocalProperty("streaming.sql.batchId")
    if not query_id or batch_id is None:
        raise RuntimeError("exactlyOnce=true is for streaming queries (no query id or micro-batch id here)")

    def send(producer: Any, rows: Iterator[pa.RecordBatch]) -> tuple[int, BaseException | None]:
        sent, outcomes = _send_rows(producer, options, rows)
        producer.flush(timeout=FLUSH_TIMEOUT_S)
        return sent, _first_error(outcomes, sent)

    return exactly_once.write_transaction(options, batches, query_id=query_id, partition=context.partitionId(),
                                          batch_id=int(batch_id), send_rows=send)  # fmt: skip


def _send_rows(producer: Any, options: SinkOptions, batches: Iterator[pa.RecordBatch]) -> tuple[int, OutcomeTally]:
    """Send every row; the outcomes are counted per producer batch (the records' ``batch_outcome``, as
    ``odradek perf produce`` counts them): no callback per record, which cost more than the send itself."""
    tally = OutcomeTally()
    keep = tally.outcomes.append
    send = producer.send
    sent = 0
    for batch in batches:
        columns = {name.lower(): batch.column(i) for i, name in enumerate(batch.schema.names)}
        n = batch.num_rows
        values = _bytes_column(columns["value"])
        keys = _bytes_column(columns["key"]) if "key" in columns else None
        topic = options.topic
        if topic and keys is None and "partition" not in columns and "headers" not in columns:
            for value in values:  # the common case: values only, one topic (no per-row arguments to build)
                keep(send(topic, value).batch_outcome)
        else:
            topics: Any = repeat(topic, n) if topic else columns["topic"].to_pylist()
            partitions: Any = columns["partition"].to_pylist() if "partition" in columns else repeat(None, n)
            headers: Any = _headers_column(columns["headers"]) if "headers" in columns else repeat(None, n)
            rows = zip(values, keys if keys is not None else repeat(None, n), topics, partitions, headers, strict=False)
            for value, key, row_topic, partition, header in rows:
                if row_topic is None:
                    raise ValueError("a row has a null topic; set the topic option to give rows a default topic")
                keep(send(row_topic, value=value, key=key, headers=header, partition=partition).batch_outcome)
        sent += n
        if len(tally.outcomes) >= FOLD_EVERY:
            tally.fold()
    return sent, tally


def _first_error(outcomes: OutcomeTally, sent: int) -> BaseException | None:
    """After the producer's flush: the first failure of the records sent (every one is answered by then)."""
    outcomes.fold()
    if outcomes.pending:
        return RuntimeError(f"{sum(outcomes.pending.values())} of {sent} records were unanswered after the flush")
    return outcomes.first_error


def _bytes_column(column: pa.Array) -> list[bytes | None]:
    """The column's values as bytes (strings as UTF-8: Arrow's string and binary layouts are the same, so
    the cast copies nothing and no Python str is made)."""
    if pa.types.is_string(column.type):
        column = column.cast(pa.binary())
    elif pa.types.is_large_string(column.type):
        column = column.cast(pa.large_binary())
    return list(column.to_pylist())


def _headers_column(column: pa.Array) -> list[list[tuple[str, bytes | None]] | None]:
    out: list[list[tuple[str, bytes | None]] | None] = []
    for headers in column.to_pylist():
        if headers is None:
            out.append(None)
            continue
        pairs = []
        for h in headers:
            value = h["value"]
            pairs.append((h["key"], value.encode() if isinstance(value, str) else value))
        out.append(pairs)
    return out


class OdradekBatchWriter(DataSourceArrowWriter):
    """``df.write.format("odradek")``: each task sends its rows and waits for their acknowledgements."""

    def __init__(self, options: SinkOptions, schema: StructType, overwrite: bool) -> None:
        _check(options, schema, overwrite)
        if options.exactly_once:
            raise OptionError("exactlyOnce=true is for streaming writes (writeStream)")
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return write_batches(self.options, iterator)


class OdradekStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("odradek")``: like the batch writer, once per micro-batch and task.

    Every output mode appends: in complete mode (``overwrite``) each micro-batch writes the whole result
    again, as Spark's Kafka sink does.
    """

    def __init__(self, options: SinkOptions, schema: StructType, overwrite: bool) -> None:
        _check(options, schema, False)
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        if self.options.exactly_once:
            return write_exactly_once(self.options, iterator)
        return write_batches(self.options, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """At-least-once: nothing to do (every task's records were acknowledged before the task succeeded).
        Exactly-once: commit every task's open transaction (phase two)."""
        if self.options.exactly_once:
            from spark import exactly_once

            exactly_once.finish(self.options, messages, commit=True)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """At-least-once: nothing can be taken back (records written by the tasks that succeeded stay).
        Exactly-once: abort every task's open transaction: none of the micro-batch's rows is ever read."""
        if self.options.exactly_once:
            from spark import exactly_once

            exactly_once.finish(self.options, messages, commit=False)
