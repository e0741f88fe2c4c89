"""The Producer: ``send`` returns a future at once; a background sender thread batches and delivers.

    p = Producer({"bootstrap.servers": "127.0.0.1:9092", "linger.ms": 5, "compression.type": "zstd"})
    md = p.send("orders", value=b"...", key=b"user-7").result(timeout=10)
    p.close()

What ``send`` raises at once (nothing was queued): TypeError for a key, value or header of the wrong
type; ValueError for a bad partition or timestamp; MessageTooLargeError when the record exceeds
``max.request.size`` or ``buffer.memory``; KafkaTimeoutError when the topic's metadata or buffer memory
did not come within ``max.block.ms``; IllegalStateError after ``close``. Delivery failures (a
non-retriable broker error, retries or ``delivery.timeout.ms`` exhausted) fail the returned future.

Ordering and idempotence: with ``enable.idempotence`` (true by default; it needs ``acks=all``) the
producer gets a producer id and epoch from a broker, numbers each partition's batches, keeps up to
``max.in.flight.requests.per.connection`` (<= 5) requests in flight per partition, and retries in sequence
order: a record is written once and in ``send`` order through lost answers, timeouts and leader changes
(``odradek.idempotence``, rules P1-P7). Without it, a partition has at most one ProduceRequest in flight
(a request carries all of its ready batches), which keeps the order, but a retry after a lost answer may
write a batch twice.

Transactions (``transactional.id``; ``odradek.transactions``, rules C1-C6): ``init_transactions()`` once, then
``begin_transaction()``, ``send(...)``, ``send_offsets_to_transaction(offsets, consumer.group_metadata())``,
``commit_transaction()`` or ``abort_transaction()``. ``send`` outside a transaction raises
IllegalStateError; a producer fenced by a newer instance raises ProducerFencedError from then on.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from types import TracebackType

from common.clock import SYSTEM_CLOCK, Clock
from log.record import codec_from_name
from odradek.accumulator import BATCH_OVERHEAD_BYTES, RECORD_OVERHEAD_BYTES, RecordAccumulator, record_size_upper_bound
from odradek.backoff import ExponentialBackoff
from odradek.config import ProducerConfig
from odradek.errors import IllegalStateError, KafkaTimeoutError, MessageTooLargeError
from odradek.idempotence import IdempotenceState
from odradek.net import Cluster, ClusterClient, TopicInfo
from odradek.partitioner import StickyPartitioner, partition_for_key
from odradek.sender import Sender
from odradek.transactions import TransactionalGate, TransactionManager
from odradek.txn_handle import TransactionHandle
from odradek.types import ConsumerGroupMetadata, Header, RecordMetadata, TopicPartition

INT64_MAX = 2**63 - 1


class _Route:
    """Where ``send`` puts a topic's records, valid while ``cluster`` is the client's metadata snapshot.
    Immutable once made (a slotted class: ``send`` reads its fields for every record)."""

    __slots__ = ("cluster", "tps", "num_partitions", "available")

    def __init__(
        self, cluster: Cluster, tps: tuple[TopicPartition, ...], num_partitions: int, available: tuple[int, ...]
    ) -> None:
        self.cluster = cluster
        self.tps = tps
        self.num_partitions = num_partitions
        self.available = available


class Producer:
    """A Kafka-style producer.

    Thread-safe: ``send`` and ``flush`` may be called from many threads at once. ``close`` once, from
    any thread (from a send callback it does not wait, since callbacks run on the sender thread).
    Callbacks (``future.add_done_callback``) run on the sender thread: keep them short.
    """

    def __init__(
        self, config: Mapping[str, object], *, clock: Clock | None = None, rng: random.Random | None = None
    ) -> None:
        self.config = cfg = ProducerConfig.from_mapping(config)
        self._clock = clock or SYSTEM_CLOCK
        self._client = ClusterClient.for_config(
            cfg,
            max_message_bytes=cfg.max_request_size,
            clock=self._clock,
            max_concurrent_calls=64,
            name="odradek-producer",
        )
        # Idempotence needs acks=all (the config turns a defaulted enable.idempotence off otherwise).
        self._idempotence = IdempotenceState() if cfg.enable_idempotence and cfg.acks == -1 else None
        self._txn: TransactionManager | None = None
        if cfg.transactional_id:
            assert self._idempotence is not None, "the config makes a transactional producer idempotent"
            self._txn = TransactionManager(self._client, cfg.transactional_id, cfg.transaction_timeout_ms,
                                           self._idempotence, self._clock, cfg.max_block_ms,
                                           self._wakeup)  # fmt: skip
        self._accumulator = RecordAccumulator(
            batch_size=cfg.batch_size,
            linger_ms=cfg.linger_ms,
            buffer_memory=cfg.buffer_memory,
            compression=codec_from_name(cfg.compression_type),
            delivery_timeout_ms=cfg.delivery_timeout_ms,
            clock=self._clock,
            wakeup=self._wakeup,
            max_in_flight_per_partition=cfg.max_in_flight_requests_per_connection if self._idempotence else 1,
            gate=self._idempotence if self._txn is None or self._idempotence is None
            else TransactionalGate(self._idempotence, self._txn),  # fmt: skip
            transactional=self._txn is not None,
        )
        self._partitioner = StickyPartitioner(rng)
        self._sticky_partition = self._partitioner.partition
        self._append = self._accumulator.append
        self._routes: dict[str, _Route] = {}
        self._sender = Sender(
            client=self._client,
            accumulator=self._accumulator,
            config=cfg,
            clock=self._clock,
            backoff=ExponentialBackoff(cfg.retry_backoff_ms, cfg.retry_backoff_max_ms, rng=rng),
            idempotence=self._idempotence,
            on_record_error=None if self._txn is None else self._txn.on_record_error,
            refused=None if self._txn is None else self._txn.refused,
        )
        self._max_record_bytes = min(cfg.max_request_size, cfg.buffer_memory) - BATCH_OVERHEAD_BYTES
        self._max_block_ms = cfg.max_block_ms
        self._time_ms = self._clock.time_ms
        self._ignore_keys = cfg.partitioner_ignore_keys
        self._closed = False
        self._sender.start()

    def _wakeup(self) -> None:
        self._sender.wakeup()

    # ------------------------------------------------------------------------------------ send

    def send(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        headers: Sequence[Header] | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> Future[RecordMetadata]:
        """Queue one record; the future resolves to its RecordMetadata(topic, partition, offset, timestamp)."""
        if self._closed:
            raise IllegalStateError("cannot send after the producer is closed")
        size = RECORD_OVERHEAD_BYTES
        if value is not None:
            if type(value) is not bytes:
                value = _as_bytes(value, "value")
            size += len(value)
        if key is not None:
            if type(key) is not bytes:
                key = _as_bytes(key, "key")
            size += len(key)
        record_headers: tuple[Header, ...] = ()
        if headers:
            record_headers = _check_headers(headers)
            size = record_size_upper_bound(key, value, record_headers)
        if size > self._max_record_bytes:
            self._check_size(size)
        if timestamp_ms is None:
            timestamp_ms = self._time_ms()
        elif type(timestamp_ms) is not int or not 0 <= timestamp_ms <= INT64_MAX:
            raise ValueError(
                f"timestamp_ms must be a non-negative int (milliseconds since the epoch), got {timestamp_ms!r}"
            )
        max_block_ms: float = self._max_block_ms
        route = self._routes.get(topic)
        if route is None or route.cluster is not self._client.cluster:
            started = self._clock.monotonic_ms()
            route = self._route(topic)
            max_block_ms -= self._clock.monotonic_ms() - started
        tps = route.tps
        append = self._append
        txn = self._txn
        if partition is not None:
            if type(partition) is not int or not 0 <= partition < route.num_partitions:
                raise _bad_partition(topic, partition, route.num_partitions)
            tp = tps[partition]
        elif key is not None and not self._ignore_keys:
            tp = tps[partition_for_key(key, route.num_partitions)]
        else:  # sticky (KIP-480): stay while the partition's batch has room, else move on
            tp = tps[self._sticky_partition(topic, route.num_partitions, route.available)]
            if txn is not None:
                txn.before_send(tp)  # C2: the partition is in the transaction before a record goes there
            future = append(tp, timestamp_ms, key, value, record_headers, size, max_block_ms, True)
            if future is not None:
                return future
            tp = tps[self._partitioner.on_new_batch(topic, route.num_partitions, route.available, tp.partition)]
        if txn is not None:
            txn.before_send(tp)
        future = append(tp, timestamp_ms, key, value, record_headers, size, max_block_ms)
        assert future is not None
        return future

    def _check_size(self, size: int) -> None:
        cfg = self.config
        for limit, name in ((cfg.max_request_size, "max.request.size"), (cfg.buffer_memory, "buffer.memory")):
            if size + BATCH_OVERHEAD_BYTES > limit:
                raise MessageTooLargeError(
                    f"the record is {size + BATCH_OVERHEAD_BYTES} bytes when serialized, which is larger than "
                    f"{name} ({limit})"
                )

    def _route(self, topic: str) -> _Route:
        """The topic's partitions in the current metadata (waiting for them up to ``max.block.ms``)."""
        cluster = self._client.cluster
        info = self._topic_info(topic)
        if cluster is not self._client.cluster:  # refreshed while waiting: key the route by the new one
            cluster = self._client.cluster
            info = cluster.topics.get(topic) or info
        count = len(info.partitions)
        old = self._routes.get(topic)
        tps = (
            old.tps
            if old is not None and old.num_partitions == count
            else tuple(TopicPartition(topic, p) for p in range(count))
        )
        route = self._routes[topic] = _Route(cluster, tps, count, info.available)
        return route

    def _topic_info(self, topic: str) -> TopicInfo:
        info = self._client.cluster.topics.get(topic)
        if info is not None and info.partitions:
            return info
        if not isinstance(topic, str) or not topic:
            raise TypeError(f"topic must be a non-empty str, got {topic!r}")
        return self._client.wait_for_topic(topic, self.config.max_block_ms)

    # ---------------------------------------------------------------------------- flush, close

    def flush(self, timeout: float | None = None) -> None:
        """Send everything queued now and wait until it is answered and the callbacks of its records have
        run, as Kafka's ``flush`` does (``timeout`` in seconds)."""
        if self._sender.is_sender_thread:
            raise IllegalStateError("flush() from a send callback would wait for itself")
        deadline = None if timeout is None else self._clock.monotonic_ms() + timeout * 1000
        self._accumulator.begin_flush()
        try:
            for batch in self._accumulator.incomplete():
                remaining = None if deadline is None else max(0.0, deadline - self._clock.monotonic_ms()) / 1000
                if not batch.wait(remaining):
                    raise KafkaTimeoutError(f"flush did not complete within {timeout} s")
        finally:
            self._accumulator.end_flush()

    def close(self, timeout: float | None = None) -> None:
        """Deliver what is queued (waiting up to ``timeout`` seconds, None: as long as it takes), then stop.

        Records still undelivered when the timeout passes fail with IllegalStateError.
        """
        if self._closed:
            return
        self._closed = True
        if self._txn is not None:
            self._txn.close()
        self._sender.initiate_close()
        if self._sender.is_sender_thread:
            return
        if not self._sender.join(timeout):
            self._sender.force_close()
            self._sender.join(None)
        self._client.close()

    # ---------------------------------------------------------------------------- transactions

    def init_transactions(self, timeout: float | None = None) -> None:
        """Get this ``transactional.id``'s producer id and epoch, fencing any previous instance (whose open
        transaction is aborted first); ``timeout`` in seconds (default ``max.block.ms``)."""
        self._transactions("init_transactions").init_transactions(None if timeout is None else timeout * 1000)

    def begin_transaction(self) -> None:
        self._transactions("begin_transaction").begin_transaction()

    def send_offsets_to_transaction(
        self, offsets: Mapping[TopicPartition, int], group_metadata: ConsumerGroupMetadata | str
    ) -> None:
        """Commit a consumer group's ``offsets`` (the next offsets to consume) with the transaction:
        ``group_metadata`` is ``consumer.group_metadata()`` (or the group id, for a consumer outside a group)."""
        self._transactions("send_offsets_to_transaction").send_offsets_to_transaction(offsets, group_metadata)

    def commit_transaction(self, timeout: float | None = None) -> None:
        """Flush, then commit; raises the error of a record that failed (then call ``abort_transaction``)."""
        self._transactions("commit_transaction").commit_transaction(lambda: self.flush(timeout))

    def abort_transaction(self, timeout: float | None = None) -> None:
        """Drop the records not sent yet, wait for the others, then abort: none of the transaction's records is
        ever read by a ``read_committed`` consumer."""
        txn = self._transactions("abort_transaction")
        wait_s = self._max_block_ms / 1000 if timeout is None else timeout

        def abort_unsent() -> None:
            if not self._sender.abort_unsent(wait_s):
                raise KafkaTimeoutError(f"the unsent records were not dropped within {wait_s} s")

        txn.abort_transaction(abort_unsent, lambda: self.flush(timeout))

    def transaction_handle(self) -> TransactionHandle:
        """The open transaction's id, producer id and epoch, for another process to end it
        (``odradek.txn_handle.end_transaction``: a two-phase commit, as Spark's exactly-once sink does). Call it
        after ``flush``; the transaction stays open (this producer must not commit or abort it too)."""
        txn = self._transactions("transaction_handle")
        return txn.handle()

    def _transactions(self, what: str) -> TransactionManager:
        if self._txn is None:
            raise IllegalStateError(f"{what}() needs a transactional.id in the producer config")
        if self._closed:
            raise IllegalStateError(f"{what}() after the producer is closed")
        return self._txn

    def partitions_for(self, topic: str) -> list[int]:
        """The partition ids of ``topic`` (waiting up to ``max.block.ms`` for its metadata)."""
        return [p.partition for p in self._topic_info(topic).partitions]

    def __enter__(self) -> Producer:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _bad_partition(topic: str, partition: object, count: int) -> ValueError:
    return ValueError(f"invalid partition {partition!r} for topic {topic!r}: it has partitions 0..{count - 1}")


def _as_bytes(data: object, what: str) -> bytes:
    if isinstance(data, bytearray | memoryview):
        return bytes(data)
    hint = "; encode it first (str.encode())" if isinstance(data, str) else ""
    raise TypeError(f"the record {what} must be bytes or None, got {type(data).__name__}{hint}")


def _check_headers(headers: Sequence[Header]) -> tuple[Header, ...]:
    if isinstance(headers, str | bytes | Mapping) or not isinstance(headers, Sequence):
        raise TypeError(f"headers must be a list of (str, bytes) pairs, got {type(headers).__name__}")
    checked: list[Header] = []
    for item in headers:
        if not isinstance(item, tuple | list) or len(item) != 2:
            raise TypeError(f"each header must be a (str, bytes) pair, got {item!r}")
        name, value = item
        if not isinstance(name, str):
            raise TypeError(f"a header key must be a str, got {type(name).__name__}")
        if value is not None and type(value) is not bytes:
            value = _as_bytes(value, f"header {name!r} value")
        checked.append((name, value))
    return tuple(checked)
