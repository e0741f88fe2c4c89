"""Fetch: whole batches from many partitions at once, for consumers and followers; long poll via the purgatory.

Limits (Kafka's ``ReplicaManager.readFromLog``): the response carries at most ``max_bytes`` (capped by
``fetch.max.bytes``, or ``replica.fetch.response.max.bytes`` for followers), each partition at most its
``partition_max_bytes`` (0 or less: no per-partition limit), except that the first batch of the first
partition that has data is returned whole even when larger (so a consumer always makes progress).
Records go out unchanged from disk.

Consumers (``replica_id`` < 0) read below the high watermark (``read_committed``: below the last stable
offset, with the aborted transactions of what they read), followers to the log end; a follower's fetch
reports its position (which may move the high watermark: waiting acks=all produces are then checked).

Per partition: UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH
(``current_leader_epoch``), OFFSET_OUT_OF_RANGE with the log start and end offsets filled in. With
``last_fetched_epoch`` >= 0 a reader whose epoch ends before its fetch offset here gets ``diverging_epoch``
and no records (KIP-320; ``Partition.read``).

The answer is immediate when ``max_wait_ms`` <= 0, the data reaches ``min_bytes``, any partition has an
error, or there is nothing to fetch; otherwise a :class:`~broker.delayed_fetch.DelayedFetch` waits (its
docstring lists when it completes; ``max_wait_ms`` is capped at 300 s) and the partitions are read again.
A fetch that will wait and whose every partition is caught up (its fetch offset is the log end for a follower,
the high watermark or last stable offset for a consumer: :func:`skips_first_read`) does not read before it
waits: that read would find nothing, and the read after the wait answers it.
The gRPC service waits without a thread (:func:`begin_grpc`, then :func:`finish` once the operation
completed: ``broker.service``); :func:`handle` does it all on the calling thread.

A fetch with a ``replica_id`` must carry that broker's current broker epoch (``replica_epoch``), else every
partition answers STALE_BROKER_EPOCH and nothing is read: a client cannot pose as a follower to move a
high watermark.

With metrics on, the bytes of the answer actually sent are counted per topic (out to consumers, or
replication out to followers), whichever listener asked; the gRPC listener also counts the records sent to
consumers, from the batch headers of what it read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from typing import Any, Generic, NamedTuple, TypeVar

from broker.context import BrokerContext
from broker.delayed_fetch import DelayedFetch, FetchStatus, HeldFetch
from broker.errors import STALE_BROKER_EPOCH, error, error_of
from broker.handlers.common import local_partition
from log import trace
from log.errors import OffsetOutOfRangeError
from proto import broker_pb2 as pb
from replication.partition_reads import IdleFetch
from replication.views import FetchPosition

WAIT_SLACK_S = 5.0
READ_COMMITTED = 1  # isolation_level
MAX_WAIT_CAP_MS = 300_000  # a longer max_wait_ms is cut to this (docs/CONVENTIONS.md §8: every request has a maximum)


R = TypeVar("R")


class Target(NamedTuple):
    topic: str
    partition: int
    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int
    last_fetched_epoch: int = -1
    read_committed: bool = False  # isolation_level 1: below the LSO, with the aborted transactions


# reads every target within the limits: (response, bytes per target, whether any partition failed)
ReadAll = Callable[[BrokerContext, int, "list[Target]", int, int], tuple[R, list[int], bool]]


@dataclass(frozen=True, slots=True)
class PendingFetch(Generic[R]):
    """A fetch waiting in the purgatory: once ``op`` completes, :func:`finish` reads again and answers (a
    ``HeldFetch``: a fetch session's, ``broker.fetch_session``)."""

    op: DelayedFetch | HeldFetch
    replica_id: int
    replica_epoch: int
    targets: list[Target]
    max_bytes: int
    read_all: ReadAll[R]
    sent: list[tuple[str, bytes]] | None = None  # the gRPC reader's records of its last read (metrics)

    @property
    def wait_s(self) -> float:
        """How long to wait for ``op`` before expiring it (its own timer should have fired by then)."""
        return self.op.delay_ms / 1000 + WAIT_SLACK_S


def handle(ctx: BrokerContext, request: pb.FetchRequest) -> pb.FetchResponse:
    """A gRPC Fetch on the calling thread, waiting on it (the asynchronous server uses :func:`begin_grpc` and
    :func:`finish_grpc`, and waits without a thread)."""
    started = begin_grpc(ctx, request)
    if not isinstance(started, PendingFetch):
        return started
    if not started.op.wait(started.wait_s):
        started.op.expire()
    return finish_grpc(ctx, started)


def begin_grpc(ctx: BrokerContext, request: pb.FetchRequest) -> pb.FetchResponse | PendingFetch[pb.FetchResponse]:
    """A gRPC Fetch up to its wait: :func:`check_replica`, then :func:`begin` with the gRPC reader (which, with
    metrics on, keeps a consumer's records for the per-topic record counts). A request that continues or
    forgets into a fetch session (``session_epoch``, ``forgotten``) is INVALID_REQUEST: sessions live on a
    REPLICATION listener's connection (``broker/fetch_session.py``), and reading only the partitions named
    would silently leave out the rest."""
    refusal = check_replica(ctx, request)
    if refusal is not None:
        return refusal
    if request.session_epoch or len(request.forgotten):
        return refused(request, "INVALID_REQUEST", f"a fetch with session_epoch {request.session_epoch} and "
                       f"{len(request.forgotten)} forgotten topics: fetch sessions are served only on a "
                       "REPLICATION listener's connection; elsewhere every fetch names all its partitions")  # fmt: skip
    sent: list[tuple[str, bytes]] | None = None if ctx.metrics is None or request.replica_id >= 0 else []
    reader = read_partitions if sent is None else partial(read_partitions, sent=sent)
    started = begin(ctx, request, reader, sent)
    if not isinstance(started, PendingFetch):
        _records_out(ctx, sent)
    return started


def finish_grpc(ctx: BrokerContext, pending: PendingFetch[pb.FetchResponse]) -> pb.FetchResponse:
    """:func:`finish` for :func:`begin_grpc`, with the consumer's record counts."""
    response = finish(ctx, pending)
    _records_out(ctx, pending.sent)
    return response


def _records_out(ctx: BrokerContext, sent: list[tuple[str, bytes]] | None) -> None:
    if ctx.metrics is not None and sent:
        for topic, records in sent:
            ctx.metrics.topics.records_out(topic, records)


def fetch(ctx: BrokerContext, request: pb.FetchRequest, read_all: ReadAll[R]) -> R:
    """The fetch of the module docstring with ``read_all`` reading the partitions (the Kafka listener's
    reader builds its own response, with file regions for sendfile); ``request`` is read by attribute.
    Waits on the calling thread. No replica-epoch check here: callers that take ``replica_id`` from a
    client check it first (:func:`check_replica`; the Kafka listener serves consumers only)."""
    started = begin(ctx, request, read_all)
    if not isinstance(started, PendingFetch):
        return started
    pending: PendingFetch[R] = started
    if not pending.op.wait(pending.wait_s):
        pending.op.expire()
    return finish(ctx, pending)


def begin(
    ctx: BrokerContext, request: pb.FetchRequest, read_all: ReadAll[R], sent: list[tuple[str, bytes]] | None = None
) -> R | PendingFetch[R]:
    """The first read: the answer, or the fetch left waiting in the purgatory (see the module docstring);
    ``sent``: what ``read_all`` keeps of its reads, carried to :func:`finish_grpc`."""
    for_replica = request.replica_id >= 0
    max_bytes = response_limit(ctx, request.max_bytes, for_replica)
    read_committed = not for_replica and getattr(request, "isolation_level", 0) == READ_COMMITTED
    targets = [
        Target(topic.name, p.partition, p.fetch_offset, p.partition_max_bytes, p.current_leader_epoch,
               _last_fetched_epoch(p), read_committed)
        for topic in request.topics
        for p in topic.partitions
    ]
    starts = positions(ctx, targets, for_replica)  # before the read: nothing that arrives after is missed
    if skips_first_read(ctx, request, targets, starts, max_bytes):
        sizes = [0] * len(targets)
    else:
        response, sizes, failed = read_all(ctx, request.replica_id, targets, max_bytes, request.replica_epoch)
        if answers_now(request, sum(sizes), failed, max_bytes) or not targets:
            count_out(ctx, targets, sizes, for_replica)
            return response
    op = delayed_fetch(ctx, request, targets, starts, sizes, max_bytes, for_replica)
    ctx.replicas.fetch_purgatory.try_complete_else_watch(op, op.keys, first_try=False)  # the first read was its try
    return PendingFetch(op, request.replica_id, request.replica_epoch, targets, max_bytes, read_all, sent)


def response_limit(ctx: BrokerContext, max_bytes: int, for_replica: bool) -> int:
    """The most an answer carries: the request's ``max_bytes`` (0 or less: none asked), capped by
    ``fetch.max.bytes`` or, for followers, ``replica.fetch.response.max.bytes``."""
    limit = ctx.config.replica_fetch_response_max_bytes if for_replica else ctx.config.fetch_max_bytes
    return min(max_bytes, limit) if max_bytes > 0 else limit


def answers_now(request: Any, total: int, failed: bool, max_bytes: int) -> bool:
    """Whether the first read is the answer: no wait asked, ``min_bytes`` or the response's limit reached by its
    ``total`` bytes, or a partition failed (an error or a diverging epoch answers at once)."""
    return request.max_wait_ms <= 0 or total >= request.min_bytes or failed or total >= max_bytes


def skips_first_read(
    ctx: BrokerContext, request: Any, targets: list[Target], starts: list[FetchPosition | None], max_bytes: int
) -> bool:  # fmt: skip
    """Whether a fetch can wait without its first read: it waits when it finds nothing (``max_wait_ms`` and
    ``min_bytes`` above 0), and every target would find nothing and raise nothing
    (``Partition.note_caught_up_fetch``, which records a follower's fetch as the read would; a high watermark
    that moved completes what waited for it, as after a read). ``starts``: the targets' positions, taken before.
    A partition that would be read ends the look (False): the caller reads them all, and a follower's fetch
    of the partitions looked at before is recorded a second time, as a fetch at the same offset."""
    if answers_now(request, 0, False, max_bytes) or not targets or None in starts:
        return False
    for target in targets:
        partition = ctx.replicas.partition(target.topic, target.partition)
        if partition is None:
            return False
        outcome = partition.note_caught_up_fetch(
            target.fetch_offset, replica_id=request.replica_id, current_leader_epoch=target.current_leader_epoch,
            replica_epoch=request.replica_epoch, last_fetched_epoch=target.last_fetched_epoch,
            read_committed=target.read_committed,
        )  # fmt: skip
        if outcome is IdleFetch.READ:
            return False
        if outcome is IdleFetch.HW_MOVED:
            high_watermark_moved(ctx, target.topic, target.partition, partition.high_watermark, request.replica_id)
    return True


def delayed_fetch(
    ctx: BrokerContext, request: Any, targets: list[Target], starts: list[FetchPosition | None], sizes: list[int],
    max_bytes: int, for_replica: bool,
) -> DelayedFetch:  # fmt: skip
    """The wait of a fetch whose first read found ``sizes`` from the positions ``starts`` (taken before it); the
    caller watches it in a purgatory."""
    statuses = [
        FetchStatus((t.topic, t.partition), t.fetch_offset, partition_limit(t, max_bytes), start, size)
        for t, start, size in zip(targets, starts, sizes, strict=True)
        if start is not None
    ]
    return DelayedFetch(min(request.max_wait_ms, MAX_WAIT_CAP_MS), request.min_bytes, for_replica, statuses,
                        lambda key: ctx.replicas.partition(*key))  # fmt: skip


INLINE_CHECK_MAX_PARTITIONS = 64  # a larger fetch is never looked at for nothing_to_read


def nothing_to_read(ctx: BrokerContext, request: pb.FetchRequest) -> bool:
    """Whether every partition of ``request`` is led here and has nothing to read yet from its fetch offset
    (followers: at the log end; consumers: at the high watermark): the first read will find nothing and the
    fetch will wait, so the gRPC service may run it on its event loop. Looks at no more than
    ``INLINE_CHECK_MAX_PARTITIONS`` partitions (False beyond); an unknown partition is False, and so is a fetch
    of no partition."""
    named = ((topic.name, p.partition, p.fetch_offset) for topic in request.topics for p in topic.partitions)
    return caught_up(ctx, named, request.replica_id >= 0, when_empty=False)


def caught_up(
    ctx: BrokerContext, positions: Iterable[tuple[str, int, int] | None], for_replica: bool, *, when_empty: bool
) -> bool:  # fmt: skip
    """Whether each ``(topic, partition, fetch offset)`` is of a partition here with nothing to read from that
    offset (followers: at the log end; consumers: at the high watermark); False past
    ``INLINE_CHECK_MAX_PARTITIONS`` of them, for None (a position not known) and for a partition not here;
    ``when_empty`` for none at all."""
    count = 0
    for position in positions:
        count += 1
        if count > INLINE_CHECK_MAX_PARTITIONS or position is None:
            return False
        topic, partition_id, fetch_offset = position
        partition = ctx.replicas.partition(topic, partition_id)
        if partition is None:
            return False
        end = partition.log_end_offset if for_replica else partition.high_watermark
        if fetch_offset < end:
            return False
    return count > 0 or when_empty


def finish(ctx: BrokerContext, pending: PendingFetch[R]) -> R:
    """The answer once the wait is over: every target read again (and counted, metrics on)."""
    response, sizes, _ = pending.read_all(ctx, pending.replica_id, pending.targets, pending.max_bytes,
                                          pending.replica_epoch)  # fmt: skip
    count_out(ctx, pending.targets, sizes, pending.replica_id >= 0)
    return response


def check_replica(ctx: BrokerContext, request: Any) -> pb.FetchResponse | None:
    """A fetch that claims to come from broker ``replica_id`` must carry that broker's current epoch, as the
    metadata image has it (KIP-903's ``ReplicaEpoch``); otherwise STALE_BROKER_EPOCH for every partition and
    nothing is read, so no follower position and no high watermark moves on its word."""
    if request.replica_id < 0:
        return None
    broker = ctx.metadata.image.broker(request.replica_id)
    if broker is not None and broker.broker_epoch == request.replica_epoch:
        return None
    known = "is not registered" if broker is None else f"has broker epoch {broker.broker_epoch}"
    message = (
        f"a fetch claims to come from broker {request.replica_id} with broker epoch {request.replica_epoch}, but "
        f"broker {request.replica_id} {known} in the metadata of broker {ctx.broker_id}"
    )
    return refused(request, STALE_BROKER_EPOCH, message)


def refused(request: Any, code: str, message: str) -> pb.FetchResponse:
    """The answer to a fetch refused before any read: ``code`` at the top and for every partition it named
    (``request``: a FetchRequest, or a fetch session's view of one)."""
    response = pb.FetchResponse(error=error(code, message))
    for topic in request.topics:
        answer = response.topics.add(name=topic.name)
        for p in topic.partitions:
            answer.partitions.add(
                partition=p.partition, error=error(code, message), high_watermark=-1,
                last_stable_offset=-1, log_start_offset=-1, log_end_offset=-1, leader_epoch=-1,
            )  # fmt: skip
    return response


def count_out(ctx: BrokerContext, targets: list[Target], sizes: list[int], for_replica: bool) -> None:
    """Per-topic bytes out of the answer sent (metrics on only)."""
    if ctx.metrics is None:
        return
    for target, size in zip(targets, sizes, strict=True):
        if size:
            ctx.metrics.topics.bytes_sent(target.topic, size, for_replica=for_replica)


def _last_fetched_epoch(p: object) -> int:
    """KIP-320: the reader's last fetched epoch, -1 when not given (an unset proto3 ``optional``, or a request
    view without the field)."""
    has_field = getattr(p, "HasField", None)
    if has_field is not None:
        return int(p.last_fetched_epoch) if has_field("last_fetched_epoch") else -1  # type: ignore[attr-defined]
    return int(getattr(p, "last_fetched_epoch", -1))


def partition_limit(target: Target, max_bytes: int) -> int:
    return target.partition_max_bytes if target.partition_max_bytes > 0 else max_bytes


def positions(ctx: BrokerContext, targets: list[Target], for_replica: bool) -> list[FetchPosition | None]:
    positions: list[FetchPosition | None] = []
    for target in targets:
        partition = ctx.replicas.partition(target.topic, target.partition)
        positions.append(None if partition is None else partition.fetch_position(for_replica))
    return positions


def read_partitions(
    ctx: BrokerContext, replica_id: int, targets: list[Target], max_bytes: int, replica_epoch: int = -1,
    *, sent: list[tuple[str, bytes]] | None = None,
) -> tuple[pb.FetchResponse, list[int], bool]:
    """Read every target within the limits; ``(response, bytes per target, whether any failed)``; ``sent``
    (when given) gets ``(topic, records)`` of this read's non-empty partitions, in place of an earlier read's."""
    if sent is not None:
        sent.clear()
    response = pb.FetchResponse()
    topics: dict[str, pb.FetchTopicResponse] = {}
    sizes: list[int] = []
    budget, min_one_batch, failed = max_bytes, True, False
    for target in targets:
        topic = topics.get(target.topic)
        if topic is None:
            topic = topics[target.topic] = response.topics.add(name=target.topic)
        answer = topic.partitions.add(partition=target.partition)
        records = _read_one(ctx, replica_id, target, min(partition_limit(target, max_bytes), budget), min_one_batch,
                            answer, replica_epoch)  # fmt: skip
        size = len(records)
        if sent is not None and size:
            sent.append((target.topic, records))
        failed = failed or bool(answer.error.code) or answer.HasField("diverging_epoch")  # both answer at once
        sizes.append(size)
        if size:
            min_one_batch = False
            budget = max(0, budget - size)
    return response, sizes, failed


def _read_one(
    ctx: BrokerContext, replica_id: int, target: Target, max_bytes: int, min_one_batch: bool,
    answer: pb.FetchPartitionResponse, replica_epoch: int = -1,
) -> bytes:  # fmt: skip
    """Read one partition into ``answer``; returns the records read (empty: none)."""
    answer.high_watermark = answer.last_stable_offset = answer.log_start_offset = answer.log_end_offset = -1
    answer.leader_epoch = -1
    try:
        partition = local_partition(ctx, target.topic, target.partition)
        read = partition.read(
            target.fetch_offset, max(max_bytes, 0), replica_id=replica_id,
            current_leader_epoch=target.current_leader_epoch, min_one_batch=min_one_batch, replica_epoch=replica_epoch,
            last_fetched_epoch=target.last_fetched_epoch, read_committed=target.read_committed,
        )  # fmt: skip
    except OffsetOutOfRangeError as exc:
        answer.error.CopyFrom(error_of(exc))
        _fill_offsets(ctx, target, answer)
        return b""
    except Exception as exc:
        answer.error.CopyFrom(error_of(exc))
        return b""
    if read.high_watermark_moved:
        high_watermark_moved(ctx, target.topic, target.partition, read.high_watermark, replica_id)
    answer.high_watermark = read.high_watermark
    answer.last_stable_offset = read.last_stable_offset if read.last_stable_offset >= 0 else read.high_watermark
    for aborted in read.aborted:
        answer.aborted_transactions.add(producer_id=aborted.producer_id, first_offset=aborted.first_offset)
    answer.log_start_offset = read.log_start_offset
    answer.log_end_offset = read.log_end_offset
    answer.leader_epoch = read.leader_epoch
    if read.diverging_epoch is not None:  # KIP-320: no records, where the reader's epoch ends here
        answer.diverging_epoch.epoch = read.diverging_epoch.leader_epoch
        answer.diverging_epoch.end_offset = read.diverging_epoch.end_offset
    records: bytes = read.records
    if records:
        answer.records = records
    return records


def high_watermark_moved(ctx: BrokerContext, topic: str, partition: int, high_watermark: int, replica_id: int) -> None:
    """A follower's fetch moved the high watermark of ``topic``-``partition``: complete the consumer fetches and
    the acks=all produces that waited for it, the fetches first: a record reaches its consumers sooner, and its
    producer's answer comes a few tens of microseconds later (on one client, the two answers then also do not
    contend for its interpreter at once; ``python -m tests.bench.compare``: e2e p50 0.93-0.97x, docs/LATENCY.md)."""
    if trace.ON:  # the high watermark passed records now (log.trace's ``hw``)
        trace.point("hw", topic, partition, high_watermark, replica_id)
    ctx.replicas.fetch_purgatory.check_and_complete((topic, partition))
    ctx.replicas.produce_purgatory.check_and_complete((topic, partition))


def _fill_offsets(ctx: BrokerContext, target: Target, answer: pb.FetchPartitionResponse) -> None:
    partition = ctx.replicas.partition(target.topic, target.partition)
    if partition is not None:
        answer.log_start_offset = partition.log_start_offset
        answer.log_end_offset = partition.log_end_offset
        answer.high_watermark = partition.high_watermark
        answer.last_stable_offset = partition.last_stable_offset
        answer.leader_epoch = partition.leader_epoch


def trace_fetch(request: pb.FetchRequest, response: pb.FetchResponse, arrived_s: float, woke_ns: int) -> None:
    """``fe`` events (``log.trace``): per fetched partition, who fetched (``replica_id``, -1 for consumers),
    from which offset, how many bytes it got, when the fetch arrived, when a parked fetch was woken (0: it
    did not wait), and when its answer was ready."""
    answered_ns = trace.now_ns()
    offsets = {(t.name, p.partition): p.fetch_offset for t in request.topics for p in t.partitions}
    for topic in response.topics:
        for answer in topic.partitions:
            offset = offsets.get((topic.name, answer.partition), -1)
            trace.record(answered_ns, "fe", topic.name, answer.partition, request.replica_id, offset,
                         answer.ByteSize(), int(arrived_s * 1e9), woke_ns)  # fmt: skip
