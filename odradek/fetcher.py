"""The consumer's fetching: FetchRequests to partition leaders and their answers, decoded lazily.

One FetchRequest per leader broker carries every fetchable partition it leads, and each broker has at
most one fetch in flight. A partition is fetchable when it has a position, is not paused or backing
off, and holds fewer than two undrained answers: so while the application works through one answer,
the next one is already on its way (the fetch offset runs ahead of the position, at the end of the
last complete batch received). Answers are decoded one batch at a time as ``poll`` takes records, so
``max.poll.records`` bounds the work of a poll, not the answer's size.

Per-partition answers: records become a :class:`CompletedFetch`; OFFSET_OUT_OF_RANGE resets the
position by ``auto.offset.reset`` (or fails the partition when it is ``none``); stale-metadata and
other retriable errors refresh metadata and back off; anything else is raised by the next ``poll``.
An answer for a partition that was seeked or reset while it was in flight is dropped (generations).
"""

from __future__ import annotations

import bisect
import itertools
import threading
from collections import deque
from collections.abc import Iterator, Mapping
from typing import Any

import grpc

from log.record import HEADER_SIZE, BatchHeader, Record, iter_batches, iter_batches_with_records
from odradek.config import ConsumerConfig
from odradek.errors import (
    KafkaError,
    MessageTooLargeError,
    NetworkError,
    OffsetOutOfRangeError,
    UnknownKafkaError,
    error_from_code,
)
from odradek.net import ClusterClient, rpc_error
from odradek.types import TIMESTAMP_TYPE_CREATE_TIME, TIMESTAMP_TYPE_LOG_APPEND_TIME, ConsumerRecord, TopicPartition
from proto import broker_pb2

MAX_BUFFERED_ANSWERS = 2
_GENERATIONS = itertools.count()  # unique across states, so a re-assigned partition never takes an old answer


def _offset_of(record: Record) -> int:
    return record[0]


def decode_error(exc: Exception, where: str) -> KafkaError:
    """A decoding failure of :mod:`log.record` (its errors carry Kafka's ``code``) as a typed error."""
    code = getattr(exc, "code", None)
    if isinstance(code, str) and code:
        return error_from_code(code, f"{where}: {exc}")
    return UnknownKafkaError(f"{where}: {exc!r}")


class CompletedFetch:
    """The records of one partition from one fetch answer, decoded batch by batch as they are taken.

    Not thread-safe (the consumer's thread).
    """

    __slots__ = ("tp", "_batches", "_records", "_index", "_batch_next", "_ts_type", "exhausted", "error")

    def __init__(self, tp: TopicPartition, data: bytes, max_decompressed_bytes: int) -> None:
        self.tp = tp
        self._batches: Iterator[tuple[BatchHeader, list[Record]]] = iter_batches_with_records(
            data, max_decompressed_bytes=max_decompressed_bytes
        )
        self._records: list[Record] = []
        self._index = 0
        self._batch_next = -1
        self._ts_type = TIMESTAMP_TYPE_CREATE_TIME
        self.exhausted = False
        self.error: Exception | None = None  # a batch failed to decode: nothing after it is returned

    def take(self, position: int, max_records: int, out: list[ConsumerRecord]) -> int:
        """Append up to ``max_records`` records at or after ``position`` to ``out``; returns the new position.

        Control batches are skipped, and so are records below ``position`` (a fetch from the middle
        of a batch returns the whole batch). A batch that fails to decode ends the answer: ``error``
        holds why, and the returned position is that batch's first offset.
        """
        topic, partition = self.tp
        records, index = self._records, self._index
        new = tuple.__new__
        record_type = ConsumerRecord
        while max_records > 0:
            if index >= len(records):
                if self._batch_next > position:
                    position = self._batch_next
                try:
                    batch = next(self._batches, None)
                except Exception as exc:  # CorruptRecordError and friends from log.record
                    batch, self.error = None, exc
                if batch is None:
                    self.exhausted = True
                    break
                header, records = batch
                index = 0
                self._batch_next = header.next_offset
                if header.is_control or header.next_offset <= position:
                    records = []
                    continue
                self._ts_type = (
                    TIMESTAMP_TYPE_LOG_APPEND_TIME if header.is_log_append_time else TIMESTAMP_TYPE_CREATE_TIME
                )
                if records and records[0][0] < position:
                    index = bisect.bisect_left(records, position, key=_offset_of)
                continue
            end = min(len(records), index + max_records)
            ts_type = self._ts_type
            chunk = records[index:end]
            out.extend([new(record_type, (topic, partition, o, t, k, v, h, ts_type)) for o, t, k, v, h, _ in chunk])
            max_records -= end - index
            index = end
            position = chunk[-1][0] + 1
        if index >= len(records) and self._batch_next > position:
            position = self._batch_next
        self._records, self._index = records, index
        return position


class PartitionState:
    """What the consumer knows of one assigned partition. Not thread-safe (the consumer's thread)."""

    __slots__ = (
        "tp",
        "position",
        "reset",
        "fetch_offset",
        "buffered",
        "generation",
        "in_flight",
        "high_watermark",
        "log_start_offset",
        "retry_at_ms",
        "attempts",
        "max_bytes",
        "paused",
        "error",
    )

    def __init__(self, tp: TopicPartition, max_bytes: int) -> None:
        self.tp = tp
        self.position: int | None = None  # the next offset poll() returns
        self.reset: str | None = None  # a pending seek_to_beginning/end: "earliest" | "latest"
        self.fetch_offset: int | None = None  # the next offset to fetch (>= position)
        self.buffered: deque[CompletedFetch] = deque()
        self.generation = next(_GENERATIONS)  # renewed by every seek/reset: older answers are dropped
        self.in_flight: object | None = None  # the fetch carrying this partition, if any
        self.high_watermark = -1
        self.log_start_offset = -1
        self.retry_at_ms = 0.0
        self.attempts = 0
        self.max_bytes = max_bytes
        self.paused = False
        self.error: KafkaError | None = None

    def seek(self, offset: int) -> None:
        self.position = self.fetch_offset = offset
        self.reset = None
        self._discard()

    def request_reset(self, strategy: str | None) -> None:
        self.position = self.fetch_offset = None
        self.reset = strategy
        self._discard()

    def _discard(self) -> None:
        self.buffered.clear()
        self.generation = next(_GENERATIONS)
        self.error = None
        self.retry_at_ms = 0.0
        self.attempts = 0


class _FetchRequest:
    __slots__ = ("node", "address", "sent", "call")

    def __init__(self, node: int, address: str, sent: dict[TopicPartition, tuple[int, int]]) -> None:
        self.node = node
        self.address = address
        self.sent = sent  # tp -> (generation, fetch offset)
        self.call: Any = None


class Fetcher:
    """Sends fetches and turns their answers into CompletedFetches on the partition states.

    Not thread-safe: the consumer's thread calls every method; gRPC callbacks only append to a deque
    and set an event.
    """

    def __init__(self, client: ClusterClient, config: ConsumerConfig) -> None:
        self._client = client
        self._config = config
        self._isolation_level = 1 if config.isolation_level == "read_committed" else 0
        self._max_decompressed = max(64 << 20, config.fetch_max_bytes * 4)
        self._in_flight: dict[int, _FetchRequest] = {}
        self._done: deque[_FetchRequest] = deque()
        self._event = threading.Event()
        self._start = 0

    # ---------------------------------------------------------------------------------- send

    def send_fetches(self, states: Mapping[TopicPartition, PartitionState], now_ms: float) -> int:
        """Issue a FetchRequest to every leader with fetchable partitions and none in flight."""
        cluster = self._client.cluster
        by_node: dict[int, list[PartitionState]] = {}
        for state in states.values():
            if (
                state.fetch_offset is None
                or state.in_flight is not None
                or state.paused
                or state.error is not None
                or len(state.buffered) >= MAX_BUFFERED_ANSWERS
                or state.retry_at_ms > now_ms
            ):
                continue
            leader = cluster.leader(state.tp)
            if leader < 0:
                self._client.request_update()
                continue
            if leader not in self._in_flight:
                by_node.setdefault(leader, []).append(state)
        for node, node_states in by_node.items():
            self._send(node, node_states)
        return len(by_node)

    def _send(self, node: int, states: list[PartitionState]) -> None:
        target = self._client.stub_for(node)
        if target is None:
            self._client.request_update()
            return
        stub, address = target
        cluster = self._client.cluster
        topics: dict[str, list[broker_pb2.FetchPartition]] = {}
        sent: dict[TopicPartition, tuple[int, int]] = {}
        for state in states:
            assert state.fetch_offset is not None
            info = cluster.partition(state.tp)
            topics.setdefault(state.tp.topic, []).append(
                broker_pb2.FetchPartition(
                    partition=state.tp.partition,
                    fetch_offset=state.fetch_offset,
                    partition_max_bytes=state.max_bytes,
                    current_leader_epoch=info.leader_epoch if info is not None else -1,
                    log_start_offset=-1,
                    last_fetched_epoch=-1,
                )
            )
            sent[state.tp] = (state.generation, state.fetch_offset)
        cfg = self._config
        request = broker_pb2.FetchRequest(
            replica_id=-1,
            max_wait_ms=cfg.fetch_max_wait_ms,
            min_bytes=cfg.fetch_min_bytes,
            max_bytes=cfg.fetch_max_bytes,
            isolation_level=self._isolation_level,
            topics=[broker_pb2.FetchTopic(name=name, partitions=parts) for name, parts in topics.items()],
        )
        pending = _FetchRequest(node, address, sent)
        for state in states:
            state.in_flight = pending
        self._in_flight[node] = pending
        timeout_s = (cfg.request_timeout_ms + cfg.fetch_max_wait_ms) / 1000
        pending.call = self._client.submit(stub.Fetch, request, timeout_s)
        pending.call.add_done_callback(lambda _: self._finished(pending))

    def _finished(self, request: _FetchRequest) -> None:
        """On a gRPC thread: hand the answer to the consumer's thread."""
        self._done.append(request)
        self._event.set()

    def wait(self, timeout_s: float) -> None:
        """Sleep until an answer arrives or ``timeout_s`` passes."""
        if not self._done:
            self._event.wait(max(0.0, timeout_s))
        self._event.clear()

    @property
    def has_answers(self) -> bool:
        return bool(self._done)

    # ------------------------------------------------------------------------------- answers

    def handle_answers(self, states: Mapping[TopicPartition, PartitionState], now_ms: float) -> None:
        while self._done:
            request = self._done.popleft()
            del self._in_flight[request.node]
            for tp in request.sent:
                state = states.get(tp)
                if state is not None and state.in_flight is request:
                    state.in_flight = None
            try:
                response = request.call.result()
            except grpc.RpcError as exc:
                self._failed(request, states, rpc_error(exc, "Fetch", request.address), now_ms)
                continue
            except Exception as exc:  # cancelled when the channel closed
                self._failed(request, states, NetworkError(f"Fetch to {request.address} failed: {exc!r}"), now_ms)
                continue
            if response.error.code:
                error = error_from_code(response.error.code, response.error.message)
                self._failed(request, states, error, now_ms)
                continue
            for topic in response.topics:
                for answer in topic.partitions:
                    tp = TopicPartition(topic.name, answer.partition)
                    state = states.get(tp)
                    sent = request.sent.get(tp)
                    if state is None or sent is None or state.generation != sent[0]:
                        continue  # unassigned, seeked or reset since: drop
                    self._handle_partition(state, sent[1], answer, now_ms)

    def _failed(
        self, request: _FetchRequest, states: Mapping[TopicPartition, PartitionState], error: KafkaError, now_ms: float
    ) -> None:
        if error.invalid_metadata or not error.retriable:
            self._client.request_update()
        for tp, (generation, _) in request.sent.items():
            state = states.get(tp)
            if state is not None and state.generation == generation:
                if error.retriable:
                    self._back_off(state, now_ms)
                else:
                    state.error = error

    def _back_off(self, state: PartitionState, now_ms: float) -> None:
        state.retry_at_ms = now_ms + self._client.backoff.backoff_ms(state.attempts)
        state.attempts += 1

    def _handle_partition(self, state: PartitionState, fetch_offset: int, answer: Any, now_ms: float) -> None:
        code = answer.error.code
        if code:
            self._partition_error(state, fetch_offset, code, answer.error.message)
            if state.error is None and state.position is not None:
                self._back_off(state, now_ms)
            return
        state.attempts = 0
        state.high_watermark = answer.high_watermark
        state.log_start_offset = answer.log_start_offset
        data: bytes = answer.records  # read once: protobuf copies bytes on every access
        if not data:
            return
        next_offset = _next_offset(data)
        if next_offset is None:  # only part of a batch: the batch is larger than the fetch size
            limit = self._config.fetch_max_bytes
            if state.max_bytes >= limit:
                state.error = MessageTooLargeError(
                    f"a record batch of {state.tp} at offset {fetch_offset} is larger than fetch.max.bytes ({limit})"
                )
            else:
                state.max_bytes = min(limit, max(state.max_bytes * 2, 1))
            return
        state.max_bytes = self._config.max_partition_fetch_bytes
        state.buffered.append(CompletedFetch(state.tp, data, self._max_decompressed))
        state.fetch_offset = max(next_offset, fetch_offset)

    def _partition_error(self, state: PartitionState, fetch_offset: int, code: str, message: str) -> None:
        where = f"fetching {state.tp} at offset {fetch_offset}"
        if code == OffsetOutOfRangeError.code:
            policy = self._config.auto_offset_reset
            if policy == "none":
                state.error = OffsetOutOfRangeError(
                    f"{where}: the offset is out of range and auto.offset.reset is none"
                )
            else:
                state.request_reset(policy)
            return
        error = error_from_code(code, f"{where}: {message or code}")
        if error.invalid_metadata:
            self._client.request_update()
        if not error.retriable:
            state.error = error

    # ------------------------------------------------------------------------------- collect

    def collect(self, states: Mapping[TopicPartition, PartitionState], max_records: int) -> list[ConsumerRecord]:
        """Up to ``max_records`` buffered records, moving positions; raises a partition's error when
        there are no records to return first (then it is raised by the next call)."""
        out: list[ConsumerRecord] = []
        ordered = list(states.values())
        if not ordered:
            return out
        self._start = (self._start + 1) % len(ordered)
        for state in ordered[self._start :] + ordered[: self._start]:
            if state.error is not None:
                if out:
                    break
                error, state.error = state.error, None
                raise error
            while state.buffered and len(out) < max_records and state.position is not None:
                answer = state.buffered[0]
                state.position = answer.take(state.position, max_records - len(out), out)
                if answer.error is not None:  # a corrupt batch: raised now or by the next poll
                    state.buffered.clear()
                    state.fetch_offset = state.position
                    state.error = decode_error(answer.error, f"decoding {state.tp} at offset {state.position}")
                    break
                if answer.exhausted:
                    state.buffered.popleft()
            if len(out) >= max_records:
                break
        return out

    def close(self) -> None:
        self._in_flight.clear()  # their calls end when the client closes its channels
        self._done.clear()


def _next_offset(data: bytes) -> int | None:
    """The offset after the last complete batch of a fetch answer (None: not one complete batch).

    Headers only, no CRC: the decoder checks batches as poll() reaches them. A header too short to be
    one stops the scan (the decoder raises CORRUPT_MESSAGE when it gets there).
    """
    last: int | None = None
    for _, header in iter_batches(data, validate=False):
        if header.size_bytes < HEADER_SIZE or header.magic != 2:
            return last if last is not None else -1
        last = header.next_offset
    return last
