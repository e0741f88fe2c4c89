"""The producer's record accumulator: per-partition queues of batches, filled by ``send`` and drained
by the sender thread. Pure: no I/O, time from an injected clock.

Rules (Kafka's ``RecordAccumulator``):

- A record joins the last batch of its partition while that batch is open and has room for it
  (``batch.size``, measured as the exact uncompressed size so far plus an upper bound for the record);
  otherwise that batch is closed and a new one opened. A record larger than ``batch.size`` gets a
  batch of its own.
- Opening a batch reserves ``max(batch.size, record size)`` bytes of ``buffer.memory``; the bytes come
  back when the batch completes. With no memory left, ``append`` blocks up to ``max.block.ms`` and then
  raises :class:`KafkaTimeoutError` (back-pressure).
- A partition's first batch is *ready* when it is closed (full), its ``linger.ms`` has passed, a
  flush or close is in progress, or appends are waiting for memory; a retried batch waits out its
  backoff first.
- ``drain`` takes, for each broker, the ready batches of the partitions it leads, in order, up to
  ``max.request.size`` per request, and counts a request in flight for each partition until ``unmute``.
  Without idempotence a partition has at most one request in flight, which keeps records in order across
  retries. With idempotence (a :class:`DrainGate`, ``odradek.idempotence``) up to
  ``max.in.flight.requests.per.connection`` (<= 5): the gate gives each drained batch its sequence number,
  and a retry (batches that have a sequence) resends exactly the batches of its first request, once
  nothing else of its partition is in flight; ``reenqueue`` puts retried batches back in the order they
  were first drained, so the broker sees them in order.
- A partition with a request in flight sends more only once it has a full batch (or a flush, a close or a
  memory wait makes everything ready): its one open batch keeps filling until the answer comes. At a low
  rate each record would otherwise be a request of its own, and a request costs the broker more CPU than
  the record (a few hundred microseconds of gRPC here), so requests queue behind each other and latency
  grows with the rate (``odradek perf e2e``, RF3 at 1,000 records/s: p50 11-15 ms without this rule, 7-8 ms
  with it). Under load batches fill and up to the in-flight limit go out at once, as before. A new batch
  wakes the sender (``wakeup``) unless it is held so: the answer it waits for wakes the sender anyway, and a
  wake-up for nothing was a futex call, a thread switch and a pass of the sender for most records at 1,000/s.
- A batch not in flight whose ``delivery.timeout.ms`` has passed since it was opened expires.

Thread-safety: one lock guards the queues, the memory count and the muted set; ``append`` takes it
once per record, the sender once per pass. Batches drained by the sender belong to the sender thread.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple, Protocol

from common.clock import Clock
from log.record import BatchBuilder
from log.record.header import HEADER_SIZE, NO_SEQUENCE, patch_producer_state
from odradek.errors import IllegalStateError, KafkaTimeoutError
from odradek.record_future import BatchOutcome, RecordFuture
from odradek.types import Header, TopicPartition

RECORD_OVERHEAD_BYTES = 21  # Kafka's upper bound of a record's varints and attributes (5+1+10+5)
BATCH_OVERHEAD_BYTES = HEADER_SIZE  # the RecordBatch v2 header


class DrainGate(Protocol):
    """What idempotence decides about draining (``odradek.idempotence.IdempotenceState``)."""

    def may_drain(self, batch: ProducerBatch, in_flight: int) -> bool:
        """Whether ``batch``, first of its queue, may go out with ``in_flight`` requests of its partition out."""
        ...

    def on_drain(self, batch: ProducerBatch) -> None:
        """``batch`` is drained: give it a sequence number if it has none."""
        ...


def record_size_upper_bound(key: bytes | None, value: bytes | None, headers: Sequence[Header] | None) -> int:
    size = RECORD_OVERHEAD_BYTES + (len(key) if key is not None else 0) + (len(value) if value is not None else 0)
    if headers:
        for name, hvalue in headers:
            size += 10 + len(name.encode("utf-8")) + (len(hvalue) if hvalue is not None else 0)
    return size


class ProducerBatch:
    """The records of one partition bound for one RecordBatch. Held by the accumulator (under its lock)
    until drained, then by the sender thread. Its records' futures share its ``outcome``.

    Each field has one writer (docs/CONVENTIONS.md §6); the others only read it:

    ============================  ====================================================================
    written by                    fields
    ============================  ====================================================================
    nobody (set at creation)      ``tp``, ``transactional``, ``outcome``, ``created_ms``, ``reserved_bytes``
    this class's methods          ``builder`` and ``count`` (``append``, ``build``), ``data`` and ``stamped``
                                  (``build``), ``done`` (``complete``, ``fail``)
    ``RecordAccumulator``         ``closed`` (no more appends), ``sent_to``, ``retry_at_ms``, ``append_id``
    ``IdempotenceState``          ``producer_id``, ``producer_epoch``, ``base_sequence`` (P1), ``drain_order``,
                                  ``head_when_sent`` (``on_drain``, ``on_error``)
    ``Sender``                    ``in_flight``, ``attempts``, ``last_error``
    ============================  ====================================================================
    """

    __slots__ = (
        # set at creation
        "tp",
        "transactional",
        "outcome",
        "created_ms",
        "reserved_bytes",
        # this class's methods
        "builder",
        "count",
        "data",
        "stamped",
        "done",
        # RecordAccumulator
        "closed",
        "sent_to",
        "retry_at_ms",
        "append_id",
        # IdempotenceState
        "producer_id",
        "producer_epoch",
        "base_sequence",
        "drain_order",
        "head_when_sent",
        # Sender
        "in_flight",
        "attempts",
        "last_error",
    )

    def __init__(
        self, tp: TopicPartition, compression: int, created_ms: float, reserved_bytes: int, transactional: bool = False
    ) -> None:
        self.tp = tp
        self.transactional = transactional  # a transactional producer's: built with the transactional attribute
        self.outcome = BatchOutcome(tp)
        self.created_ms = created_ms
        self.reserved_bytes = reserved_bytes
        # this class's methods
        self.builder: BatchBuilder | None = BatchBuilder(compression)
        self.count = 0  # the record count once built (the builder counts until then)
        self.data: bytes | None = None
        self.stamped: tuple[int, int, int] | None = None  # the producer fields ``data`` carries
        self.done = False
        # RecordAccumulator
        self.closed = False
        self.sent_to = -1  # the broker the last attempt went to (KIP-951: a new leader retries at once)
        self.retry_at_ms = 0.0
        self.append_id = -1  # the drain that first sent it with its sequence: a retry resends that group
        # IdempotenceState
        self.producer_id = -1  # set with base_sequence when the batch is first drained
        self.producer_epoch = -1
        self.base_sequence = NO_SEQUENCE
        self.drain_order = -1  # rank of its first drain, kept across epochs (retry order)
        self.head_when_sent = False  # no earlier batch of its partition was unanswered then
        # Sender
        self.in_flight = False  # sent and not answered yet
        self.attempts = 0
        self.last_error: BaseException | None = None  # why the last attempt failed (named when it expires)

    @property
    def record_count(self) -> int:
        builder = self.builder
        return builder.record_count if builder is not None else self.count

    def size_bytes(self) -> int:
        if self.data is not None:
            return len(self.data)
        return self.builder.estimated_size_bytes() if self.builder is not None else 0

    def append(
        self, timestamp_ms: int, key: bytes | None, value: bytes | None, headers: Sequence[Header]
    ) -> RecordFuture:
        assert self.builder is not None
        assert not self.closed
        index = self.builder.append(timestamp_ms, key, value, headers)
        return RecordFuture(self.outcome, index, timestamp_ms)

    def build(self) -> bytes:
        """The batch's bytes (built and compressed once; a retry resends the same bytes), with its producer
        id, epoch and sequence when it has a sequence (restamped, CRC and all, when they change)."""
        if self.data is None:
            builder = self.builder
            assert builder is not None  # the sender builds drained (closed) batches; no append follows a build
            fields = None
            if self.base_sequence != NO_SEQUENCE:  # built with its producer fields: one CRC pass, not two
                fields = (self.producer_id, self.producer_epoch, self.base_sequence)
                builder.set_producer_state(*fields, is_transactional=self.transactional)
            self.data = builder.build()
            self.stamped = fields
            self.count = builder.record_count
            self.builder = None
        if self.base_sequence != NO_SEQUENCE:
            fields = (self.producer_id, self.producer_epoch, self.base_sequence)
            if self.stamped != fields:
                self.data = patch_producer_state(self.data, *fields)
                self.stamped = fields
        return self.data

    def complete(self, base_offset: int, log_append_time_ms: int = -1) -> None:
        """Resolve every record's future with its RecordMetadata (offset -1 with acks=0)."""
        if self.done:
            return
        self.done = True
        self.outcome.resolve(base_offset, log_append_time_ms, None)

    def fail(self, error: BaseException) -> None:
        if self.done:
            return
        self.done = True
        self.outcome.resolve(-1, -1, error)

    def wait(self, timeout_s: float | None) -> bool:
        """Wait until the batch is done and its records' callbacks have run; False when ``timeout_s`` passed."""
        outcome = self.outcome
        with outcome.condition:
            return outcome.condition.wait_for(lambda: outcome.settled, timeout_s)


class ReadyCheck(NamedTuple):
    nodes: set[int]  # brokers with at least one sendable batch
    next_check_ms: float  # how long until another batch may become ready (linger, backoff, expiry)
    unknown_leaders: bool  # some partition with data has no known leader: refresh metadata
    leaders: frozenset[int] = frozenset()  # the leaders of the partitions with queued batches


class RecordAccumulator:
    """See the module docstring. Thread-safe (one lock)."""

    def __init__(
        self,
        *,
        batch_size: int,
        linger_ms: int,
        buffer_memory: int,
        compression: int,
        delivery_timeout_ms: int,
        clock: Clock,
        wakeup: Callable[[], None] = lambda: None,
        max_in_flight_per_partition: int = 1,
        gate: DrainGate | None = None,
        transactional: bool = False,
    ) -> None:
        self._transactional = transactional
        self._batch_size = max(batch_size, 1)
        self._max_in_flight = max(max_in_flight_per_partition, 1)
        self._gate = gate
        self._linger_ms = linger_ms
        self._buffer_memory = buffer_memory
        self._available = buffer_memory
        self._compression = compression
        self._delivery_timeout_ms = delivery_timeout_ms
        self._clock = clock
        self._wakeup = wakeup
        self._lock = threading.Lock()
        self._memory = threading.Condition(self._lock)
        self._memory_waiters = 0
        self._queues: dict[TopicPartition, deque[ProducerBatch]] = {}
        self._in_flight: dict[TopicPartition, int] = {}  # requests out per partition (drain .. unmute)
        self._drains = 0
        self._incomplete: set[ProducerBatch] = set()
        self._flushes = 0
        self._closed = False

    # ---------------------------------------------------------------------------------- appends

    def append(
        self,
        tp: TopicPartition,
        timestamp_ms: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[Header],
        size_estimate: int,
        max_block_ms: float,
        abort_on_new_batch: bool = False,
    ) -> RecordFuture | None:
        """Add a record to ``tp``'s open batch, or to a new one; blocks for memory up to ``max_block_ms``.

        With ``abort_on_new_batch`` a record that would need a new batch is not added and None is
        returned: the sticky partitioner then moves on to another partition (KIP-480).
        """
        with self._lock:
            if self._closed:
                raise IllegalStateError("cannot send after the producer is closed")
            queue = self._queues.get(tp)
            if queue is None:
                queue = self._queues[tp] = deque()
            elif queue:
                last = queue[-1]
                builder = last.builder
                if not last.closed and builder is not None:
                    if builder.estimated_size_bytes() + size_estimate <= self._batch_size:
                        index = builder.append(timestamp_ms, key, value, headers)
                        return RecordFuture(last.outcome, index, timestamp_ms)
                    if abort_on_new_batch:
                        return None
                    last.closed = True
            if abort_on_new_batch:
                return None
            batch = self._new_batch(tp, queue, size_estimate, max_block_ms)
            try:
                future = batch.append(timestamp_ms, key, value, headers)
            except BaseException:
                queue.pop()  # the record was rejected: the empty batch goes away with its memory
                self._incomplete.discard(batch)
                self._available += batch.reserved_bytes
                raise
            # a new batch held for its partition's request in flight goes out when that answer comes, which
            # wakes the sender itself: waking it now would only make it look and sleep again
            held = self._held(tp, queue, self._exhausted())
        if not held:
            self._wakeup()
        return future

    def _new_batch(
        self, tp: TopicPartition, queue: deque[ProducerBatch], size_estimate: int, max_block_ms: float
    ) -> ProducerBatch:
        """Reserve memory (waiting if needed; the lock is released while waiting) and open a batch."""
        size = max(self._batch_size, size_estimate + BATCH_OVERHEAD_BYTES)
        if size > self._buffer_memory:
            raise IllegalStateError(f"a batch of {size} bytes can never fit buffer.memory ({self._buffer_memory})")
        if self._available < size:
            self._wait_for_memory(size, max_block_ms)
            if queue and not queue[-1].closed:  # another thread opened a batch while we waited
                queue[-1].closed = True
        self._available -= size
        batch = ProducerBatch(tp, self._compression, self._clock.monotonic_ms(), size, self._transactional)
        queue.append(batch)
        self._incomplete.add(batch)
        return batch

    def _wait_for_memory(self, size: int, max_block_ms: float) -> None:
        deadline = self._clock.monotonic_ms() + max_block_ms
        self._memory_waiters += 1
        try:
            self._wakeup()  # exhausted memory makes every batch ready
            while self._available < size:
                if self._closed:
                    raise IllegalStateError("the producer was closed while send() waited for buffer memory")
                remaining = deadline - self._clock.monotonic_ms()
                if remaining <= 0:
                    raise KafkaTimeoutError(
                        f"failed to allocate {size} bytes within max.block.ms ({max_block_ms:.0f} ms): "
                        f"buffer.memory is {self._buffer_memory} bytes and {self._available} are free"
                    )
                self._memory.wait(remaining / 1000)
        finally:
            self._memory_waiters -= 1

    # ---------------------------------------------------------------------------------- draining

    def ready(self, leader_of: Callable[[TopicPartition], int], now_ms: float) -> ReadyCheck:
        nodes: set[int] = set()
        leaders: set[int] = set()
        next_check = float("inf")
        unknown = False
        with self._lock:
            exhausted = self._exhausted()
            for tp, queue in self._queues.items():
                if not queue or not self._may_drain(tp, queue[0]) or self._held(tp, queue, exhausted):
                    continue  # blocked or held: an answer in flight wakes the sender
                first = queue[0]
                next_check = min(next_check, first.created_ms + self._delivery_timeout_ms - now_ms)
                leader = leader_of(tp)
                if leader < 0:
                    unknown = True
                    continue
                leaders.add(leader)
                if leader in nodes:
                    continue
                wait = self._wait_ms(first, len(queue), exhausted, now_ms, leader)
                if wait <= 0:
                    nodes.add(leader)
                else:
                    next_check = min(next_check, wait)
        return ReadyCheck(nodes, max(next_check, 0.0), unknown, frozenset(leaders))

    def _exhausted(self) -> bool:
        """Whether every batch is ready now (appends wait for memory, a flush or a close is in progress); the lock
        is held."""
        return self._memory_waiters > 0 or self._flushes > 0 or self._closed

    def _held(self, tp: TopicPartition, queue: deque[ProducerBatch], exhausted: bool) -> bool:
        """Whether the partition's only batch, still open and never sent, waits for the partition's request in
        flight to be answered before it goes out (see the module docstring: fewer, fuller requests)."""
        first = queue[0]
        return (
            len(queue) == 1
            and not first.closed
            and first.size_bytes() < self._batch_size  # full (Kafka's isFull): goes out at once
            and not first.attempts
            and not exhausted
            and self._in_flight.get(tp, 0) > 0
        )

    def _may_drain(self, tp: TopicPartition, first: ProducerBatch) -> bool:
        """The partition's in-flight limit, then the idempotence gate (sequences, ordered retries)."""
        in_flight = self._in_flight.get(tp, 0)
        if in_flight >= self._max_in_flight:
            return False
        return self._gate is None or self._gate.may_drain(first, in_flight)

    def _wait_ms(self, batch: ProducerBatch, queued: int, exhausted: bool, now_ms: float, leader: int) -> float:
        """0 when ``batch`` (first of its queue) may be sent now, else how long until it may. A retry waits its
        backoff unless the partition has another leader than the one its last attempt went to (Kafka's
        KIP-951: the backoff was for the old leader)."""
        if batch.attempts:
            if 0 <= batch.sent_to != leader:
                return 0.0
            return batch.retry_at_ms - now_ms
        if batch.closed or queued > 1 or exhausted:
            return 0.0
        return batch.created_ms + self._linger_ms - now_ms

    def drain(
        self, leader_of: Callable[[TopicPartition], int], nodes: Iterable[int], max_request_size: int, now_ms: float
    ) -> dict[int, list[ProducerBatch]]:
        """Take the sendable batches of ``nodes``' partitions, at most ``max_request_size`` per node; each
        partition drained counts one more request in flight until ``unmute``."""
        wanted = set(nodes)
        drained: dict[int, list[ProducerBatch]] = {}
        sizes: dict[int, int] = {}
        with self._lock:
            exhausted = self._exhausted()
            self._drains += 1
            for tp, queue in self._queues.items():
                if not queue or not self._may_drain(tp, queue[0]) or self._held(tp, queue, exhausted):
                    continue
                node = leader_of(tp)
                if node not in wanted:
                    continue
                taken = self._drain_queue(
                    queue, drained.setdefault(node, []), sizes.get(node, 0), max_request_size, exhausted, now_ms, node
                )
                if taken:
                    sizes[node] = sizes.get(node, 0) + taken
                    self._in_flight[tp] = self._in_flight.get(tp, 0) + 1
        return {node: batches for node, batches in drained.items() if batches}

    def _drain_queue(
        self,
        queue: deque[ProducerBatch],
        out: list[ProducerBatch],
        used: int,
        limit: int,
        exhausted: bool,
        now_ms: float,
        node: int,
    ) -> int:
        """Move ready batches from the front of ``queue`` to ``out``; returns the bytes taken. With a gate, every
        batch must pass it (which sequences it), and a retry resends exactly the batches its first request
        carried for the partition (the broker recognizes a duplicate append only whole, S5); the gate
        checked, before the drain, that nothing else of the partition is in flight then."""
        taken = 0
        gate = self._gate
        group = -1  # the append id of a retried request being resent
        while queue and self._wait_ms(queue[0], len(queue), exhausted, now_ms, node) <= 0:
            batch = queue[0]
            size = batch.size_bytes()
            if (out or taken) and used + taken + size > limit:
                break
            retry = batch.base_sequence != NO_SEQUENCE  # sent before with this sequence
            if not retry:
                batch.append_id = self._drains
            if gate is not None:
                if taken and (group >= 0 or retry) and (not retry or batch.append_id != group):
                    break
                if taken and not retry and not gate.may_drain(batch, 1):
                    break
                gate.on_drain(batch)
                if not taken and retry:
                    group = batch.append_id
            queue.popleft()
            batch.closed = True
            batch.sent_to = node
            out.append(batch)
            taken += size
        return taken

    def unmute(self, tp: TopicPartition) -> None:
        """A request carrying ``tp``'s batches is answered (or failed)."""
        with self._lock:
            count = self._in_flight.get(tp, 0) - 1
            if count > 0:
                self._in_flight[tp] = count
            else:
                self._in_flight.pop(tp, None)

    def in_flight(self, tp: TopicPartition) -> int:
        with self._lock:
            return self._in_flight.get(tp, 0)

    def reenqueue(self, batches: Sequence[ProducerBatch], retry_at_ms: float) -> None:
        """Put batches that will be retried back at the front of their queues, in their order; with
        idempotence a batch goes after the queued ones first drained before it (answers of several requests
        in flight may come back in any order)."""
        with self._lock:
            for batch in reversed(batches):
                batch.retry_at_ms = retry_at_ms
                queue = self._queues.setdefault(batch.tp, deque())
                position = 0
                if batch.drain_order >= 0:
                    while position < len(queue) and 0 <= queue[position].drain_order < batch.drain_order:
                        position += 1
                queue.insert(position, batch)

    def expire(self, now_ms: float) -> list[ProducerBatch]:
        """Remove and return the queued batches whose delivery timeout has passed (oldest first per queue)."""
        expired: list[ProducerBatch] = []
        with self._lock:
            for tp, queue in self._queues.items():
                if self._in_flight.get(tp, 0):
                    continue
                while queue and now_ms - queue[0].created_ms >= self._delivery_timeout_ms:
                    expired.append(queue.popleft())
        return expired

    def deallocate(self, batch: ProducerBatch) -> None:
        """A batch is done (completed or failed): return its memory."""
        with self._lock:
            if batch in self._incomplete:
                self._incomplete.discard(batch)
                self._available += batch.reserved_bytes
                self._memory.notify_all()

    # ----------------------------------------------------------------------------- flush, close

    def begin_flush(self) -> None:
        with self._lock:
            self._flushes += 1
        self._wakeup()

    def end_flush(self) -> None:
        with self._lock:
            self._flushes -= 1

    def incomplete(self) -> list[ProducerBatch]:
        with self._lock:
            return list(self._incomplete)

    def has_incomplete(self) -> bool:
        return bool(self._incomplete)

    def close(self) -> None:
        """No more appends; every queued batch becomes ready. Blocked appends fail."""
        with self._lock:
            self._closed = True
            self._memory.notify_all()
        self._wakeup()

    def abort_all(self) -> list[ProducerBatch]:
        """Remove every queued batch (not the drained ones) and return them, to be failed by the caller."""
        with self._lock:
            batches = [batch for queue in self._queues.values() for batch in queue]
            self._queues.clear()
        return batches

    def abort_partition(self, tp: TopicPartition) -> list[ProducerBatch]:
        """Remove the queued batches of ``tp`` (not the drained ones) and return them, to be failed by the caller."""
        with self._lock:
            queue = self._queues.pop(tp, None)
        return list(queue) if queue else []

    def available_memory(self) -> int:
        return self._available

    def queued_batches(self, tp: TopicPartition) -> list[ProducerBatch]:
        with self._lock:
            return list(self._queues.get(tp, ()))
