"""The source's I/O: partitions and offsets on the driver, records of one offset range on an executor.

:class:`OffsetReader` answers the planning questions (which partitions match the subscription, their
earliest and latest offsets, offsets by timestamp) with the Admin client. :func:`read_ranges` runs in a
Spark task: it reads ``[start, end)`` of each of its partitions with the Consumer (assign, seek,
poll_columns; the partitions of a task together) and yields Arrow record batches built from the decoded
columns (no object per record). Both get their clients from :mod:`spark.clients`, so nothing here is
pickled with a gRPC channel in it.
"""

from __future__ import annotations

import bisect
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping

import pyarrow as pa

from odradek import Consumer
from odradek.errors import OffsetOutOfRangeError
from odradek.fetcher import RecordColumns
from odradek.types import TopicPartition
from spark import clients
from spark.options import EARLIEST, OffsetSpec, OptionError, SourceOptions, Subscription
from spark.planning import DataLoss, OffsetRange, Offsets, find_data_loss
from spark.schema import columns_to_record_batch

log = logging.getLogger(__name__)

POLL_SLICE_MS = 500
DATA_LOSS_HINT = (
    "Some data may have been lost because it is not available in Odradek any more: either it was aged out "
    "by retention, or the topic was deleted or re-created before all of its data was processed. If you "
    "do not want the query to fail in such cases, set the source option failOnDataLoss to false."
)


class DataLossError(RuntimeError):
    """Offsets the query needs were deleted (``failOnDataLoss=true``)."""


def report_data_loss(losses: Iterable[DataLoss], fail: bool) -> None:
    """Raise :class:`DataLossError` naming every loss, or log each as a warning (``failOnDataLoss=false``)."""
    messages = [loss.message() for loss in losses]
    if not messages:
        return
    if fail:
        raise DataLossError("; ".join(messages) + ". " + DATA_LOSS_HINT)
    for message in messages:
        log.warning("%s; reading on from the earliest offset still available (failOnDataLoss=false)", message)


class OffsetReader:
    """Partitions and offsets for the driver. One per reader; the Admin client comes from the process cache."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> list[TopicPartition]:
        """The partitions the subscription names now (a topic that does not exist yet has none)."""
        sub: Subscription = self.options.subscription
        admin = clients.admin(self.options.client)
        if sub.assigned:
            return list(sub.assigned)
        existing = set(admin.list_topics())
        topics = sorted(t for t in existing if sub.matches(t))
        if not topics:
            return []
        described = admin.describe_topics(topics)
        return sorted(TopicPartition(t, p.partition) for t, d in described.items() for p in d.partitions)

    def earliest(self, tps: Iterable[TopicPartition]) -> Offsets:
        return self._list(dict.fromkeys(tps, "earliest"))

    def latest(self, tps: Iterable[TopicPartition]) -> Offsets:
        return self._list(dict.fromkeys(tps, "latest"))

    def _list(self, specs: Mapping[TopicPartition, str | int]) -> Offsets:
        if not specs:
            return {}
        # kafka.isolation.level=read_committed: "latest" is the last stable offset, as the consumer reads to it
        level = str(self.options.client.get("isolation.level", "read_uncommitted"))
        return clients.admin(self.options.client).list_offsets(specs, isolation_level=level)

    def resolve(self, spec: OffsetSpec, tps: list[TopicPartition], side: str) -> Offsets:
        """The offsets ``spec`` names for ``tps``; ``side`` ("starting" or "ending") names the option in messages."""
        option = {"timestamp": f"{side}Timestamp", "timestamps": f"{side}OffsetsByTimestamp"}.get(
            spec.kind, f"{side}Offsets"
        )
        if spec.kind == "earliest":
            return self.earliest(tps)
        if spec.kind == "latest":
            return self.latest(tps)
        if spec.kind == "timestamp":
            return self._by_timestamp(dict.fromkeys(tps, spec.timestamp_ms), spec.strategy, option)
        _check_covers(spec.offsets, tps, option)
        if spec.kind == "timestamps":
            return self._by_timestamp(spec.offsets, spec.strategy, option)
        resolved = dict(spec.offsets)
        lookups = {tp: ("earliest" if o == EARLIEST else "latest") for tp, o in resolved.items() if o < 0}
        resolved.update(self._list(lookups))
        return resolved

    def _by_timestamp(self, timestamps: Mapping[TopicPartition, int], strategy: str, option: str) -> Offsets:
        found = self._list(timestamps)
        missing = sorted(tp for tp, offset in found.items() if offset < 0)
        if missing and strategy == "error":
            raise OptionError(
                f"{option}: no record of {', '.join(map(str, missing))} has a timestamp at or after "
                f"{', '.join(str(timestamps[tp]) for tp in missing)}; set startingOffsetsByTimestampStrategy "
                "to latest to start at the end of such partitions"
            )
        if missing:
            found.update(self.latest(missing))
        return found


def _check_covers(offsets: Mapping[TopicPartition, int], tps: list[TopicPartition], option: str) -> None:
    """Like Spark's Kafka source: offsets given per partition must name exactly the subscribed partitions."""
    missing = sorted(set(tps) - set(offsets))
    extra = sorted(set(offsets) - set(tps))
    if missing:
        raise OptionError(f"{option} must name every partition of the subscription; missing: "
                          f"{', '.join(map(str, missing))} (use -2 for earliest, -1 for latest)")  # fmt: skip
    if extra:
        raise OptionError(f"{option} names partitions outside the subscription (or that do not exist): "
                          f"{', '.join(map(str, extra))}")  # fmt: skip


def read_range(
    options: SourceOptions,
    r: OffsetRange,
    *,
    monotonic: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[pa.RecordBatch]:
    """The records ``[r.start, r.end)`` of one partition as Arrow batches (for one Spark task): :func:`read_ranges`
    of that one range."""
    return read_ranges(options, [r], monotonic=monotonic, sleep=sleep)


def read_ranges(
    options: SourceOptions,
    ranges: Iterable[OffsetRange],
    *,
    monotonic: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[pa.RecordBatch]:
    """The records of ``ranges`` as Arrow batches (one per partition and poll), for one Spark task.

    The ranges of different partitions are read together: the worker's consumer is assigned all of them, so
    one fetch per broker carries every partition (``minRecordsPerPartition`` and ``maxPartitions`` pack
    several into a task). Ranges of a partition that has more than one here are read after the others, one
    after the other. Offsets that
    vanished since planning (retention) follow ``failOnDataLoss``. No progress for
    ``kafkaConsumer.pollTimeoutMs`` (the leader gone for good, say) fails the task with a message naming the
    partition and offsets; Spark then retries it.
    """
    first: dict[TopicPartition, OffsetRange] = {}
    later: list[OffsetRange] = []
    for r in ranges:
        if r.tp in first:
            later.append(r)
        else:
            first[r.tp] = r
    yield from _read_together(options, list(first.values()), monotonic, sleep)
    for r in later:
        yield from _read_together(options, [r], monotonic, sleep)


def _read_together(
    options: SourceOptions, ranges: list[OffsetRange], monotonic: Callable[[], float], sleep: Callable[[float], None]
) -> Iterator[pa.RecordBatch]:
    """Ranges of distinct partitions, with one consumer assigned all of them.

    Between tasks the consumer keeps its assignment, paused: no fetches go out, and the next task's
    ``assign`` of partitions of the same topics needs no metadata round trip (unassigning would drop the
    topics, and assigning them again would ask for their metadata before the first fetch)."""
    consumer = clients.consumer(options.client)
    ends = {r.tp: r.end for r in ranges}
    tps = sorted(ends)
    try:
        consumer.assign(tps)
        positions: dict[TopicPartition, int] = {}
        for r in ranges:
            consumer.seek(r.tp, r.start)
            positions[r.tp] = r.start
        consumer.resume(*tps)
        pending = {tp for tp in tps if positions[tp] < ends[tp]}
        deadline = monotonic() + options.poll_timeout_ms / 1000
        while pending:
            try:
                chunks = consumer.poll_columns(timeout_ms=POLL_SLICE_MS)
            except OffsetOutOfRangeError:
                chunks = []
                moved = False
                for tp in sorted(pending):
                    resumed = _after_loss(consumer, tp, positions[tp], ends[tp], options.fail_on_data_loss)
                    moved = moved or resumed != positions[tp]
                    positions[tp] = min(resumed, ends[tp])
                    consumer.seek(tp, positions[tp])
                if not moved:
                    sleep(POLL_SLICE_MS / 1000)  # a transient answer: give the new leader time
            if chunks:
                deadline = monotonic() + options.poll_timeout_ms / 1000
                for tp, of_tp in _by_partition(chunks).items():
                    kept = _below(of_tp, ends[tp]) if tp in ends else []
                    if kept:
                        yield columns_to_record_batch(kept, options.include_headers)
            for tp in sorted(pending):
                if positions[tp] < ends[tp]:
                    positions[tp] = consumer.position(tp)
                if positions[tp] >= ends[tp]:
                    pending.discard(tp)
                    consumer.pause(tp)  # no fetches for it while the others are read
            if pending and monotonic() > deadline:
                tp = min(pending)
                raise TimeoutError(
                    f"reading {tp} made no progress at offset {positions[tp]} (the range ends at {ends[tp]}) within "
                    f"kafkaConsumer.pollTimeoutMs={options.poll_timeout_ms}"
                )
    except BaseException:
        clients.discard_consumer(options.client)  # a fresh one for the retry: no half-read fetch state
        raise
    consumer.pause(*tps)  # no fetches until the next task


def _by_partition(chunks: list[RecordColumns]) -> dict[TopicPartition, list[RecordColumns]]:
    grouped: dict[TopicPartition, list[RecordColumns]] = {}
    for chunk in chunks:
        grouped.setdefault(TopicPartition(chunk.topic, chunk.partition), []).append(chunk)
    return grouped


def _below(chunks: list[RecordColumns], end: int) -> list[RecordColumns]:
    """The chunks' records with offsets below ``end`` (chunks of one partition, in offset order)."""
    kept: list[RecordColumns] = []
    for chunk in chunks:
        if not chunk.offsets or chunk.offsets[0] >= end:
            break
        if chunk.offsets[-1] >= end:
            kept.append(chunk.head(bisect.bisect_left(chunk.offsets, end)))
            break
        kept.append(chunk)
    return kept


def _after_loss(consumer: Consumer, tp: TopicPartition, position: int, end: int, fail: bool) -> int:
    """Where reading goes on after OFFSET_OUT_OF_RANGE at ``position`` (or raise, by ``failOnDataLoss``):
    the earliest offset left, or ``end`` when the log now ends before ``position`` (nothing left to read)."""
    earliest = consumer.beginning_offsets([tp])[tp]
    latest = consumer.end_offsets([tp])[tp]
    losses = find_data_loss({tp: position}, {tp: earliest}, {tp: latest})
    report_data_loss(losses, fail)
    if not losses:  # a transient answer (a new leader catching up): try the same offset again
        return position
    return earliest if position < earliest else end
