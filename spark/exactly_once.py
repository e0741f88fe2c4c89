"""The sink's exactly-once mode (``exactlyOnce=true``, streaming writes; docs/TRANSACTIONS.md): a two-phase
commit through Kafka's transactions, going beyond Spark's own Kafka sink, which is at-least-once.

Per micro-batch ``b`` and task ``p`` (the partition of the micro-batch's data):

1. The task's transactional id is ``<prefix>-<p>``, where ``prefix`` is the ``transactionalIdPrefix`` option,
   else ``odradek-spark-<query id>``: the same for every micro-batch and every attempt of the task, so
   ``init_transactions`` fences an earlier attempt (a retried or speculative task) and aborts its open
   transaction.
2. The task asks whether ``b`` was already committed for ``p``: the group named like the transactional id
   holds, on partition 0 of the ``topic`` option's topic, the offset ``b' + 1`` of the last micro-batch
   ``b'`` whose transaction committed (it is committed with the transaction: ``send_offsets_to_transaction``).
   If ``b' >= b``, the micro-batch is a re-run after the driver committed (the driver died before Spark
   wrote its commit log): the task writes nothing.
3. Otherwise it writes its rows in a transaction, adds that offset to it, flushes (every record acknowledged
   by all in-sync replicas) and returns the transaction's id, producer id and epoch, leaving it open.
4. The driver's ``commit(messages, b)`` ends every task's transaction with EndTxn(commit): the transaction
   coordinator only needs the transactional id, producer id and epoch, so the driver can finish what a task
   began (phase two). ``abort`` ends them with EndTxn(abort).

What a read_committed reader sees: each micro-batch's rows once, whatever tasks, attempts and drivers failed.
The ``topic`` option is required (step 2's offsets live on its partition 0). The time between a task's end
and the driver's commit must stay below ``kafka.transaction.timeout.ms`` (default 60 s), else the coordinator
aborts the transaction and the commit fails (the query fails and re-runs the micro-batch).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import WriterCommitMessage

from odradek import Consumer, Producer, TopicPartition
from odradek.txn_handle import TransactionHandle, end_transaction
from spark.clients import PRODUCER_DEFAULTS
from spark.options import OptionError, SinkOptions

_CONSUMER_KEYS = ("bootstrap.servers", "client.id", "request.timeout.ms", "retry.backoff.ms",
                  "security.protocol")  # fmt: skip


@dataclass
class TransactionalMessage(WriterCommitMessage):
    """What one task wrote in its open transaction (``handle`` None: nothing, the micro-batch was committed)."""

    records: int
    handle: TransactionHandle | None


def transactional_id(options: SinkOptions, query_id: str, partition: int) -> str:
    prefix = options.transactional_id_prefix or f"odradek-spark-{query_id}"
    return f"{prefix}-{partition}"


def write_transaction(
    options: SinkOptions, batches: Iterator[pa.RecordBatch], *, query_id: str, partition: int, batch_id: int,
    send_rows: object,
) -> TransactionalMessage:  # fmt: skip
    """Steps 1-3 of the module docstring, in a task. ``send_rows(producer, batches) -> (count, first error)``."""
    if not options.topic:
        raise OptionError("exactlyOnce=true needs the topic option (the micro-batch bookkeeping lives there)")
    txn_id = transactional_id(options, query_id, partition)
    marker = TopicPartition(options.topic, 0)
    producer = Producer({**PRODUCER_DEFAULTS, **options.client, "transactional.id": txn_id})
    try:
        producer.init_transactions()  # fences an earlier attempt of this task, aborts its transaction
        done = _committed(options, txn_id, marker)
        if done is not None and done > batch_id:
            return TransactionalMessage(0, None)  # step 2: a re-run of a committed micro-batch
        producer.begin_transaction()
        sent, error = send_rows(producer, batches)  # type: ignore[operator]
        producer.send_offsets_to_transaction({marker: batch_id + 1}, txn_id)
        producer.flush()
        if error is not None:
            producer.abort_transaction()
            raise RuntimeError(f"a record of the transaction could not be written: {error!r}") from error
        return TransactionalMessage(sent, producer.transaction_handle())
    finally:
        producer.close()  # leaves the transaction open for the driver (step 4)


def _committed(options: SinkOptions, group: str, tp: TopicPartition) -> int | None:
    config = {k: v for k, v in options.client.items() if k in _CONSUMER_KEYS or k.startswith(("ssl.", "sasl."))}
    consumer = Consumer({**config, "group.id": group, "enable.auto.commit": False})
    try:
        return consumer.committed(tp)
    finally:
        consumer.close()


def finish(options: SinkOptions, messages: Sequence[WriterCommitMessage | None], commit: bool) -> None:
    """Step 4, on the driver: EndTxn(commit) or EndTxn(abort) for every task's open transaction."""
    for message in messages:
        if isinstance(message, TransactionalMessage) and message.handle is not None:
            end_transaction(options.client, message.handle, commit)
