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
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from types import TracebackType

from log.record import codec_from_name
from odradek.accumulator import BATCH_OVERHEAD_BYTES, RECORD_OVERHEAD_BYTES, RecordAccumulator, record_size_upper_bound
from odradek.backoff import ExponentialBackoff
from odradek.clock import SYSTEM_CLOCK, Clock
from odradek.config import ProducerConfig
from odradek.errors import IllegalStateError, KafkaTimeoutError, MessageTooLargeError
from odradek.idempotence import IdempotenceState
from odradek.net import Cluster, ClusterClient, TopicInfo
from odradek.partitioner import StickyPartitioner, partition_for_key
from odradek.sender import Sender
from odradek.types import Header, RecordMetadata, TopicPartition

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
        self._client = ClusterClient(
            bootstrap_servers=cfg.bootstrap_servers,
            client_id=cfg.client_id,
            request_timeout_ms=cfg.request_timeout_ms,
            retry_backoff_ms=cfg.retry_backoff_ms,
            retry_backoff_max_ms=cfg.retry_backoff_max_ms,
            metadata_max_age_ms=cfg.metadata_max_age_ms,
            security=cfg.security,
            max_message_bytes=cfg.max_request_size,
            clock=self._clock,
            max_concurrent_calls=64,
            name="odradek-producer",
        )
        # Idempotence needs acks=all (the config turns a defaulted enable.idempotence off otherwise).
        self._idempotence = IdempotenceState() if cfg.enable_idempotence and cfg.acks == -1 else None
        self._accumulator = RecordAccumulator(
            batch_size=cfg.batch_size,
            linger_ms=cfg.linger_ms,
            buffer_memory=cfg.buffer_memory,
            compression=codec_from_name(cfg.compression_type),
            delivery_timeout_ms=cfg.delivery_timeout_ms,
            clock=self._clock,
            wakeup=self._wakeup,
            max_in_flight_per_partition=cfg.max_in_flight_requests_per_connection if self._idempotence else 1,
            gate=self._idempotence,
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
        if partition is not None:
            if type(partition) is not int or not 0 <= partition < route.num_partitions:
                raise _bad_partition(topic, partition, route.num_partitions)
            tp = tps[partition]
        elif key is not None and not self._ignore_keys:
            tp = tps[partition_for_key(key, route.num_partitions)]
        else:  # sticky (KIP-480): stay while the partition's batch has room, else move on
            tp = tps[self._sticky_partition(topic, route.num_partitions, route.available)]
            future = append(tp, timestamp_ms, key, value, record_headers, size, max_block_ms, True)
            if future is not None:
                return future
            tp = tps[self._partitioner.on_new_batch(topic, route.num_partitions, route.available, tp.partition)]
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
        self._sender.initiate_close()
        if self._sender.is_sender_thread:
            return
        if not self._sender.join(timeout):
            self._sender.force_close()
            self._sender.join(None)
        self._client.close()

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
