"""The consumer's fetching: FetchRequests to partition leaders and their answers, decoded lazily.

One FetchRequest per leader broker carries every fetchable partition it leads, and each broker has at
most one fetch in flight. A partition is fetchable when it has a position, is not paused or backing
off, and holds fewer than two undrained answers: so while the application works through one answer,
the next one is already on its way (the fetch offset runs ahead of the position, at the end of the
last complete batch received). Answers are decoded one batch at a time as ``poll`` takes records, so
``max.poll.records`` bounds the work of a poll, not the answer's size. A broker's fetches go on one
``FetchStream`` (``common.streams``: no call set-up per fetch; a broken stream fails the fetch on it,
retried after the partitions' backoff on a new stream; a broker without the stream gets unary Fetch calls),
or, when the broker has a ``DATA`` listener, on one TCP connection of plain frames to it
(``odradek.net.data_link``: a third of the broker's CPU per fetch, the answer read by the connection's own
thread; a listener that cannot be reached gets gRPC for ``DATA_FALLBACK_MS``).

Per-partition answers: records become a :class:`CompletedFetch`; OFFSET_OUT_OF_RANGE resets the
position by ``auto.offset.reset`` (or fails the partition when it is ``none``); stale-metadata and
other retriable errors refresh metadata and back off; anything else is raised by the next ``poll``.
An answer for a partition that was seeked or reset while it was in flight is dropped (generations).

Divergence (KIP-320): each fetch names the leader epoch of the last batch fetched before its offset
(``last_fetched_epoch``). A leader whose log no longer holds that epoch up to the offset (an unclean
election cut records this consumer read) answers ``diverging_epoch``: where that epoch ends in its log.
Below the position the consumer resets there and reads the leader's records (with ``auto.offset.reset``
none it raises :class:`~odradek.errors.LogTruncationError` instead), never skipping them nor reading a
diverged tail; at or above it only prefetched, not yet returned records are dropped.
"""

from __future__ import annotations

import bisect
import itertools
import logging
import threading
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from itertools import repeat
from typing import Any

import grpc

from common.framing import FETCH
from common.streams import OrderedStream
from log.record import HEADER_SIZE, BatchHeader, iter_batches
from log.record.columns import Columns, iter_batch_columns
from odradek.config import ConsumerConfig
from odradek.errors import (
    KafkaError,
    LogTruncationError,
    MessageTooLargeError,
    NetworkError,
    OffsetOutOfRangeError,
    UnknownKafkaError,
    error_from_code,
)
from odradek.net import ClusterClient, rpc_error
from odradek.net.data_link import DataLink, DataLinkUnreachable
from odradek.read_committed import AbortedTransactionFilter
from odradek.types import (
    TIMESTAMP_TYPE_CREATE_TIME,
    TIMESTAMP_TYPE_LOG_APPEND_TIME,
    ConsumerRecord,
    Header,
    TopicPartition,
)
from proto import broker_pb2

logger = logging.getLogger(__name__)

MAX_BUFFERED_ANSWERS = 2
DATA_ANSWER_SLACK = 1 << 20  # a FetchResponse from a DATA listener: its records plus this much
READ_COMMITTED = 1  # isolation_level
_GENERATIONS = itertools.count()  # unique across states, so a re-assigned partition never takes an old answer


def decode_error(exc: Exception, where: str) -> KafkaError:
    """A decoding failure of :mod:`log.record` (its errors carry Kafka's ``code``) as a typed error."""
    code = getattr(exc, "code", None)
    if isinstance(code, str) and code:
        return error_from_code(code, f"{where}: {exc}")
    return UnknownKafkaError(f"{where}: {exc!r}")


@dataclass(frozen=True, slots=True)
class RecordColumns:
    """Consecutive records of one partition (all from one batch), one list per field: what
    :meth:`odradek.Consumer.poll_columns` returns for callers that build columnar data.

    ``offsets`` grow; ``headers`` holds ``()`` for a record without headers; ``timestamp_type`` is that
    of every record here (0 CreateTime, 1 LogAppendTime). The lists belong to the caller.
    """

    topic: str
    partition: int
    timestamp_type: int
    offsets: list[int]
    timestamps: list[int]
    keys: list[bytes | None]
    values: list[bytes | None]
    headers: list[tuple[Header, ...]]

    def __len__(self) -> int:
        return len(self.offsets)

    def head(self, n: int) -> RecordColumns:
        """The first ``n`` records."""
        return RecordColumns(self.topic, self.partition, self.timestamp_type, self.offsets[:n], self.timestamps[:n],
                             self.keys[:n], self.values[:n], self.headers[:n])  # fmt: skip


_NO_COLUMNS = Columns(0)  # never filled: stands for "no batch taken yet"
_Emit = Callable[[Columns, int, int], None]


class CompletedFetch:
    """The records of one partition from one fetch answer, decoded batch by batch (as columns) as they are taken.

    Not thread-safe (the consumer's thread).
    """

    __slots__ = ("tp", "_batches", "_columns", "_index", "_batch_next", "exhausted", "error", "_aborted")

    def __init__(
        self,
        tp: TopicPartition,
        data: bytes,
        max_decompressed_bytes: int,
        aborted: AbortedTransactionFilter | None = None,
    ) -> None:
        self.tp = tp
        self._aborted = aborted  # read_committed: the batches of aborted transactions are skipped (R1-R4)
        self._batches: Iterator[tuple[BatchHeader, Columns]] = iter_batch_columns(
            data, max_decompressed_bytes=max_decompressed_bytes
        )
        self._columns = _NO_COLUMNS
        self._index = 0
        self._batch_next = -1
        self.exhausted = False
        self.error: Exception | None = None  # a batch failed to decode: nothing after it is returned

    def take(self, position: int, max_records: int, out: list[ConsumerRecord]) -> int:
        """Append up to ``max_records`` records at or after ``position`` to ``out``; returns the new position.

        Control batches are skipped, and so are records below ``position`` (a fetch from the middle
        of a batch returns the whole batch). A batch that fails to decode ends the answer: ``error``
        holds why, and the returned position is that batch's first offset.
        """
        topic, partition = self.tp
        new = tuple.__new__
        record_type = ConsumerRecord

        def emit(c: Columns, start: int, end: int) -> None:
            # Rows zipped and records made in C (zip, repeat, map): no Python bytecode per record.
            ts_type = TIMESTAMP_TYPE_LOG_APPEND_TIME if c.is_log_append_time else TIMESTAMP_TYPE_CREATE_TIME
            if start == 0 and end == len(c.offsets):
                fields = (c.offsets, c.timestamps, c.keys, c.values, c.headers)
            else:
                fields = (c.offsets[start:end], c.timestamps[start:end], c.keys[start:end], c.values[start:end],
                          c.headers[start:end])  # fmt: skip
            rows = zip(repeat(topic), repeat(partition), *fields, repeat(ts_type))  # noqa: B905 (repeat is endless)
            out.extend(map(new, repeat(record_type), rows))

        return self._take(position, max_records, emit)[0]

    def take_columns(self, position: int, max_records: int, out: list[RecordColumns]) -> tuple[int, int]:
        """Like :meth:`take`, as one :class:`RecordColumns` per batch; returns ``(position, records taken)``."""
        topic, partition = self.tp

        def emit(c: Columns, start: int, end: int) -> None:
            ts_type = TIMESTAMP_TYPE_LOG_APPEND_TIME if c.is_log_append_time else TIMESTAMP_TYPE_CREATE_TIME
            if start == 0 and end == len(c.offsets):  # the whole batch: hand its lists over
                out.append(RecordColumns(topic, partition, ts_type, c.offsets, c.timestamps, c.keys, c.values,
                                         c.headers))  # fmt: skip
                return
            out.append(RecordColumns(topic, partition, ts_type, c.offsets[start:end], c.timestamps[start:end],
                                     c.keys[start:end], c.values[start:end], c.headers[start:end]))  # fmt: skip

        return self._take(position, max_records, emit)

    def _take(self, position: int, max_records: int, emit: _Emit) -> tuple[int, int]:
        """Hand up to ``max_records`` records at or after ``position`` to ``emit`` as ``(columns, start, end)``
        slices; returns the new position and how many records were handed."""
        columns, index = self._columns, self._index
        taken = 0
        while taken < max_records:
            if index >= len(columns.offsets):
                if self._batch_next > position:
                    position = self._batch_next
                try:
                    batch = next(self._batches, None)
                except Exception as exc:  # CorruptRecordError and friends from log.record
                    batch, self.error = None, exc
                if batch is None:
                    self.exhausted = True
                    break
                header, columns = batch
                index = 0
                self._batch_next = header.next_offset
                skip = header.is_control
                if self._aborted is not None:  # sees every batch, in order
                    skip = self._aborted.skip(header, columns.keys[0] if skip and columns.keys else None)
                if skip or header.next_offset <= position:
                    columns = _NO_COLUMNS
                    continue
                if columns.offsets and columns.offsets[0] < position:
                    index = bisect.bisect_left(columns.offsets, position)
                continue
            end = min(len(columns.offsets), index + max_records - taken)
            emit(columns, index, end)
            taken += end - index
            index = end
            position = columns.offsets[end - 1] + 1
        if index >= len(columns.offsets) and self._batch_next > position:
            position = self._batch_next
        if index >= len(columns.offsets):
            columns, index = _NO_COLUMNS, 0  # let the batch's lists go
        self._columns, self._index = columns, index
        return position, taken


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
        "last_fetched_epoch",
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
        self.last_fetched_epoch = -1  # the leader epoch of the batch before fetch_offset (-1: unknown)

    def seek(self, offset: int, epoch: int = -1) -> None:
        self.position = self.fetch_offset = offset
        self.reset = None
        self._discard()
        self.last_fetched_epoch = epoch

    def request_reset(self, strategy: str | None) -> None:
        self.position = self.fetch_offset = None
        self.reset = strategy
        self._discard()
        self.last_fetched_epoch = -1

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
        self._streams: dict[str, OrderedStream] = {}  # by broker address
        self._links: dict[int, DataLink] = {}  # each broker's DATA connection, by node id (odradek.net.data_link)
        self._max_answer_bytes = max(config.fetch_max_bytes, config.max_partition_fetch_bytes) + DATA_ANSWER_SLACK

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

    def caught_up(self, states: Mapping[TopicPartition, PartitionState]) -> bool:
        """Whether every partition :meth:`send_fetches` would fetch now is known to have nothing more to read: its
        fetch offset is at the high watermark of its last answer. Such a fetch would only wait at its leader.
        False while a partition's high watermark is not known yet."""
        for state in states.values():
            if state.fetch_offset is None or state.in_flight is not None or state.paused or state.error is not None:
                continue  # not fetched now either
            if state.high_watermark < 0 or state.fetch_offset < state.high_watermark:
                return False
        return True

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
                    last_fetched_epoch=state.last_fetched_epoch,
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
        link = self._link_for(node)
        if link is not None:
            pending.call = link.start(FETCH, request, timeout_s)
        else:
            stream = self._streams.get(address)
            if stream is None:  # one FetchStream per broker; unary Fetch calls (on the pool) where it has none
                stream = self._streams[address] = OrderedStream(
                    stub, f"odradek-consumer-fetch-{address}", "FetchStream", "Fetch",
                    lambda request, timeout: self._client.submit(stub.Fetch, request, timeout),
                )  # fmt: skip
            pending.call = stream.start(request, timeout_s)
        pending.call.add_done_callback(lambda _: self._finished(pending))

    def _link_for(self, node: int) -> DataLink | None:
        """The connection to the broker's DATA listener, None when its fetches go on gRPC (a broker has one
        fetch in flight at most, and none now: the switch is free)."""
        address = self._client.data_address(node)
        link = self._links.get(node)
        if link is not None and link.address != address:
            link.close()  # the broker moved, or its DATA listener went away or could not be reached
            del self._links[node]
            link = None
        if link is None and address:
            link = self._links[node] = self._client.data_link(node, address, self._max_answer_bytes, "consumer")
        return link

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
            except DataLinkUnreachable as exc:  # gRPC for this broker for a while; the fetch is retried
                link = self._links.pop(request.node, None)
                if link is not None:
                    self._client.data_unreachable(link.address, exc)
                    link.close()
                self._failed(request, states, exc, now_ms)
                continue
            except KafkaError as exc:  # from the DATA listener: a refusal, or the connection lost (NetworkError)
                self._failed(request, states, exc, now_ms)
                continue
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
        if answer.HasField("diverging_epoch"):
            self._diverged(state, fetch_offset, answer.diverging_epoch.epoch, answer.diverging_epoch.end_offset)
            return
        data: bytes = answer.records  # read once: protobuf copies bytes on every access
        if not data:
            return
        next_offset, last_epoch = _next_offset(data)
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
        aborted = None
        if self._isolation_level == READ_COMMITTED:
            aborted = AbortedTransactionFilter((a.producer_id, a.first_offset) for a in answer.aborted_transactions)
        state.buffered.append(CompletedFetch(state.tp, data, self._max_decompressed, aborted))
        if next_offset > fetch_offset:
            state.fetch_offset = next_offset
            state.last_fetched_epoch = last_epoch

    def _diverged(self, state: PartitionState, fetch_offset: int, epoch: int, end_offset: int) -> None:
        """KIP-320 (module docstring): the leader's epoch ``epoch`` ends at ``end_offset``, before ``fetch_offset``."""
        position = state.position if state.position is not None else fetch_offset
        policy = self._config.auto_offset_reset
        if epoch < 0 or end_offset < 0:  # the leader has no such epoch any more: nothing is known to agree
            where = f"{state.tp} at offset {position}: the leader has no record of the epoch fetched last"
            if policy == "none":
                state.error = LogTruncationError(f"{where} and auto.offset.reset is none")
            else:
                logger.warning("%s; resetting by auto.offset.reset=%s", where, policy)
                state.request_reset(policy)
            return
        if end_offset < position:
            where = f"{state.tp}: the log was truncated at {end_offset}, below the position {position}"
            if policy == "none":
                state.error = LogTruncationError(f"{where} and auto.offset.reset is none", end_offset)
                return
            logger.warning("%s (records read there are gone); reading on from %d", where, end_offset)
            position = end_offset
        state.seek(position, epoch)  # prefetched records past the divergence are dropped

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

        def take(answer: CompletedFetch, position: int, n: int) -> tuple[int, int]:
            before = len(out)
            position = answer.take(position, n, out)
            return position, len(out) - before

        self._collect(states, max_records, take)
        return out

    def collect_columns(
        self, states: Mapping[TopicPartition, PartitionState], max_records: int
    ) -> list[RecordColumns]:
        """:meth:`collect`, as one :class:`RecordColumns` per batch (or part of one) taken."""
        out: list[RecordColumns] = []
        self._collect(states, max_records, lambda answer, position, n: answer.take_columns(position, n, out))
        return out

    def _collect(
        self,
        states: Mapping[TopicPartition, PartitionState],
        max_records: int,
        take: Callable[[CompletedFetch, int, int], tuple[int, int]],
    ) -> None:
        """Take up to ``max_records`` buffered records through ``take(answer, position, n) -> (position, taken)``,
        partitions in turn (a different first one each call); raise a partition's error when nothing was taken."""
        ordered = list(states.values())
        if not ordered:
            return
        taken = 0
        self._start = (self._start + 1) % len(ordered)
        for state in ordered[self._start :] + ordered[: self._start]:
            if state.error is not None:
                if taken:
                    break
                error, state.error = state.error, None
                raise error
            while state.buffered and taken < max_records and state.position is not None:
                answer = state.buffered[0]
                state.position, n = take(answer, state.position, max_records - taken)
                taken += n
                if answer.error is not None:  # a corrupt batch: raised now or by the next poll
                    state.buffered.clear()
                    state.fetch_offset = state.position
                    state.error = decode_error(answer.error, f"decoding {state.tp} at offset {state.position}")
                    break
                if answer.exhausted:
                    state.buffered.popleft()
            if taken >= max_records:
                break

    def close(self) -> None:
        self._in_flight.clear()  # their calls end when the client closes its channels
        self._done.clear()
        for stream in self._streams.values():
            stream.close()
        self._streams.clear()
        for link in self._links.values():
            link.close()
        self._links.clear()


def _next_offset(data: bytes) -> tuple[int | None, int]:
    """The offset after the last complete batch of a fetch answer (None: not one complete batch), and that
    batch's leader epoch.

    Headers only, no CRC: the decoder checks batches as poll() reaches them. A header too short to be
    one stops the scan (the decoder raises CORRUPT_MESSAGE when it gets there).
    """
    last: int | None = None
    epoch = -1
    for _, header in iter_batches(data, validate=False):
        if header.size_bytes < HEADER_SIZE or header.magic != 2:
            return (last if last is not None else -1), epoch
        last, epoch = header.next_offset, header.partition_leader_epoch
    return last, epoch
