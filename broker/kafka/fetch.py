"""Fetch (key 1), v4-v12, through :func:`broker.handlers.fetch.fetch`: the same partition reads, limits and
DelayedFetch long poll as gRPC, with a reader of its own (:func:`_read_all`) whose record bytes stay
where they are: on a plaintext listener with ``socket.sendfile.enable`` each partition's bytes are a
:class:`~broker.kafka.api.FileRegion` of its segment file, sent with ``os.sendfile`` (Kafka's zero-copy
path: the slice may end inside a batch, as Kafka's does, and clients drop that partial batch); otherwise
the bytes :meth:`~replication.partition.Partition.read` returns.

Only consumer fetches: ``replica_id`` is ignored (followers replicate over gRPC). ``isolation_level``
read_committed reads to the last stable offset and answers the aborted transactions of what it read (its
bytes are read, never sent with sendfile); read_uncommitted answers a null list, as Kafka.

Fetch sessions (KIP-227, v7+): this broker creates none; it answers ``session_id`` 0, which tells the
client to keep sending full fetch requests. A request naming a session (``session_id`` != 0) answers
FETCH_SESSION_ID_NOT_FOUND, one asking to continue a session that was never created (``session_id`` 0,
``session_epoch`` > 0) INVALID_FETCH_SESSION_EPOCH; both make the client start over with a full request.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from broker.context import BrokerContext
from broker.errors import error_of
from broker.handlers import fetch as fetch_handler
from broker.handlers.common import local_partition
from broker.handlers.fetch import Target, partition_limit
from broker.kafka import fetch_codec
from broker.kafka.api import FileRegion, RawResponse, Request
from broker.kafka.codec import millis
from log.errors import OffsetOutOfRangeError

API_KEY = 1
READ_COMMITTED = 1
FINAL_EPOCH = -1
NO_SESSION = 0


@dataclass(frozen=True, slots=True)
class _PartitionView:
    partition: int
    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int


@dataclass(frozen=True, slots=True)
class _TopicView:
    name: str
    partitions: list[_PartitionView]


@dataclass(frozen=True, slots=True)
class _FetchView:
    replica_id: int
    replica_epoch: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    isolation_level: int
    topics: list[_TopicView]


def handle(request: Request) -> Any:
    body = request.body
    version = request.version
    session_id, session_epoch = getattr(body, "session_id", 0), getattr(body, "session_epoch", FINAL_EPOCH)
    if session_id != NO_SESSION:
        return _top_level_error(version, "FETCH_SESSION_ID_NOT_FOUND", session_id)
    if session_epoch > 0:
        return _top_level_error(version, "INVALID_FETCH_SESSION_EPOCH", 0)
    view = _FetchView(
        -1, -1, millis(body.max_wait), int(body.min_bytes), int(getattr(body, "max_bytes", 2**31 - 1)),
        int(getattr(body, "isolation_level", 0)),
        [
            _TopicView(t.topic, [_PartitionView(p.partition, p.fetch_offset, p.partition_max_bytes,
                                                getattr(p, "current_leader_epoch", -1)) for p in t.partitions])
            for t in body.topics
        ],
    )  # fmt: skip
    sendfile = request.session.sendfile
    reads: list[list[fetch_codec.PartitionResult]] = []

    def read_all(ctx: BrokerContext, _replica_id: int, targets: list[Target], max_bytes: int, _epoch: int) -> Any:
        answer = _read_all(ctx, targets, max_bytes, sendfile)
        reads.append(answer[0])
        return answer

    try:
        results: list[fetch_codec.PartitionResult] = fetch_handler.fetch(request.ctx, view, read_all)  # type: ignore[arg-type]
    finally:  # a read before the long poll is answered again after it: its file regions are not sent
        for earlier in reads[:-1]:
            _close(earlier)
    committed = view.isolation_level == READ_COMMITTED
    return RawResponse(fetch_codec.encode_response(version, results, read_committed=committed))


def _top_level_error(version: int, code: str, session_id: int) -> RawResponse:
    return RawResponse(fetch_codec.encode_response(version, [], error=code, session_id=session_id))


def _read_all(
    ctx: BrokerContext, targets: list[Target], max_bytes: int, sendfile: bool
) -> tuple[list[fetch_codec.PartitionResult], list[int], bool]:
    """The Kafka listener's ``ReadAll`` (see :func:`broker.handlers.fetch.fetch`)."""
    results: list[fetch_codec.PartitionResult] = []
    sizes: list[int] = []
    budget, min_one_batch, failed = max_bytes, True, False
    try:
        for target in targets:
            limit = min(partition_limit(target, max_bytes), budget)
            result = _read_one(ctx, target, max(limit, 0), min_one_batch, sendfile)
            results.append(result)
            failed = failed or bool(result.error)
            sizes.append(result.size)
            if result.size:
                min_one_batch = False
                budget = max(0, budget - result.size)
    except BaseException:
        _close(results)
        raise
    return results, sizes, failed


def _close(results: list[fetch_codec.PartitionResult]) -> None:
    for result in results:
        if isinstance(result.records, FileRegion):
            result.records.close()
            result.records = None


def _read_one(
    ctx: BrokerContext, target: Target, max_bytes: int, min_one_batch: bool, sendfile: bool
) -> fetch_codec.PartitionResult:
    result = fetch_codec.PartitionResult(target.topic, target.partition)
    try:
        partition = local_partition(ctx, target.topic, target.partition)
        if sendfile and not target.read_committed:
            found, high_watermark, _ = partition.read_slice(
                target.fetch_offset, max_bytes, current_leader_epoch=target.current_leader_epoch,
                min_one_batch=min_one_batch,
            )  # fmt: skip
            if found.size_bytes:
                result.records = FileRegion(found.fd, found.position, found.size_bytes)
            result.log_start_offset = found.log_start_offset
        else:
            read = partition.read(target.fetch_offset, max_bytes, current_leader_epoch=target.current_leader_epoch,
                                  min_one_batch=min_one_batch, read_committed=target.read_committed)  # fmt: skip
            high_watermark = read.high_watermark
            result.records = read.records or None
            result.log_start_offset = read.log_start_offset
            result.last_stable_offset = read.last_stable_offset
            result.aborted = tuple((a.producer_id, a.first_offset) for a in read.aborted)
        result.high_watermark = high_watermark
    except OffsetOutOfRangeError as exc:
        result.error = error_of(exc).code
        existing = ctx.replicas.partition(target.topic, target.partition)
        if existing is not None:
            result.high_watermark = existing.high_watermark
            result.log_start_offset = existing.log_start_offset
    except Exception as exc:
        result.error = error_of(exc).code
    return result
