"""The pure core of the source: which offsets a batch or micro-batch reads, and how it is split into tasks.

Nothing here touches Spark or the network: the reader (``spark.source``) asks the cluster for
partitions and offsets, then calls these functions. Offsets are ``{TopicPartition: offset}``; a range
is ``[start, end)``, as in Kafka (``end`` is the next offset to read, at most the high watermark).

Rules, as Spark's Kafka source applies them:

* ``maxOffsetsPerTrigger`` is split across partitions in proportion to what each has to read
  (:func:`rate_limit`); here the total never exceeds the limit, and every partition with data gets at
  least one offset when the limit allows it, so a small partition is never starved.
* ``minOffsetsPerTrigger`` skips a trigger (the source returns its start offsets) until that many
  offsets are available or ``maxTriggerDelay`` has passed since the last batch (:class:`TriggerPacer`).
* A partition whose start offset is gone (deleted by retention, or the topic re-created) is data loss:
  :func:`find_data_loss` names it; ``failOnDataLoss`` decides between an error and a warning.
* ``minPartitions`` / ``maxRecordsPerPartition`` split large ranges into several Spark tasks
  (:func:`plan_ranges`); ``maxPartitions`` (not in Spark's Kafka source) packs the ranges into at most that
  many tasks, a task reading several ranges (:func:`pack_ranges`; :func:`spark.reading.read_ranges`): a
  Python task costs tens of milliseconds to start, which a micro-batch of a few records per partition pays
  once per task.
* ``minRecordsPerPartition`` (not in Spark's Kafka source either; default
  :data:`DEFAULT_MIN_RECORDS_PER_TASK`) packs a small batch into fewer tasks, as Spark's file sources pack
  small files into one task: a batch of N records runs in at most N / minRecordsPerPartition tasks (at least one)
  (:func:`task_count`), never fewer than ``minPartitions`` asks for. Large batches keep one task per range.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from common.clock import Clock
from odradek.types import TopicPartition

Offsets = dict[TopicPartition, int]

# A task should read at least about as many records as it could in the time a task costs to start (tens of
# milliseconds for a Python task; the reader decodes a few hundred thousand records a second).
DEFAULT_MIN_RECORDS_PER_TASK = 10_000


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """One Spark task's share: the offsets ``[start, end)`` of one partition. Picklable."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    @property
    def size(self) -> int:
        return self.end - self.start


def rate_limit(start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int], limit: int) -> Offsets:
    """End offsets that read at most ``limit`` offsets in total from ``start`` toward ``latest``.

    The limit is shared in proportion to each partition's backlog (largest remainder, so the whole limit
    is used); then, when the limit is at least the number of partitions with data, a partition that got
    nothing takes one offset from the largest share, so no partition is starved. A partition missing
    from ``start`` has nothing to read (the caller puts new partitions in ``start`` at their earliest).
    """
    assert limit >= 0, limit
    backlog = {tp: end - start.get(tp, end) for tp, end in latest.items()}
    backlog = {tp: size for tp, size in backlog.items() if size > 0}
    total = sum(backlog.values())
    if total <= limit:
        return dict(latest)
    order = sorted(backlog)
    shares = {tp: limit * backlog[tp] / total for tp in order}
    grant = {tp: math.floor(share) for tp, share in shares.items()}
    left = limit - sum(grant.values())
    for tp in sorted(order, key=lambda tp: (grant[tp] - shares[tp], tp))[:left]:
        grant[tp] += 1
    if limit >= len(order):
        for tp in order:
            if grant[tp] == 0:
                donor = max(order, key=lambda d: (grant[d], d))
                grant[donor] -= 1
                grant[tp] = 1
    ends: Offsets = {tp: start[tp] + grant[tp] if tp in grant else end for tp, end in latest.items()}
    assert sum(grant.values()) == limit
    assert all(ends[tp] <= latest[tp] for tp in latest)
    return ends


def count_offsets(start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int]) -> int:
    """How many offsets lie between ``start`` and ``end`` (partitions missing from ``start`` count none)."""
    return sum(max(0, offset - start.get(tp, offset)) for tp, offset in end.items())


class TriggerPacer:
    """``minOffsetsPerTrigger`` with ``maxTriggerDelay``: whether a trigger with ``available`` new
    offsets runs now or is skipped. Driven by the stream reader's ``latestOffset``; the clock is injected.

    Like Spark's Kafka source, the first trigger of a query is never delayed (it starts the delay), and a
    trigger that runs restarts the delay. Not thread-safe (Spark calls ``latestOffset`` from one thread).
    """

    def __init__(self, min_offsets: int, max_delay_ms: int, clock: Clock) -> None:
        self.min_offsets = min_offsets
        self.max_delay_ms = max_delay_ms
        self._clock = clock
        self._last_trigger_ms: float | None = None

    def should_run(self, available: int) -> bool:
        now = self._clock.monotonic_ms()
        if self._last_trigger_ms is None or now - self._last_trigger_ms >= self.max_delay_ms:
            self._last_trigger_ms = now
            return True
        if available >= self.min_offsets:
            self._last_trigger_ms = now
            return True
        return False


@dataclass(frozen=True, slots=True)
class DataLoss:
    """Offsets that can no longer be read: ``[lost_from, lost_to)`` of ``tp`` (``lost_to`` -1: all of it)."""

    tp: TopicPartition
    lost_from: int
    lost_to: int
    reason: str

    def message(self) -> str:
        span = f"offsets {self.lost_from} to {self.lost_to - 1}" if self.lost_to >= 0 else "its offsets"
        return f"{self.tp}: {span} were lost ({self.reason})"


def find_data_loss(
    start: Mapping[TopicPartition, int], earliest: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int]
) -> list[DataLoss]:
    """What of ``start`` is gone: offsets below the log start offset (retention), offsets past the end of
    the log (the topic was re-created, or an unclean election truncated it), partitions that vanished."""
    losses = []
    for tp, offset in sorted(start.items()):
        if tp not in earliest or tp not in latest:
            losses.append(DataLoss(tp, offset, -1, "the partition no longer exists; was the topic deleted?"))
        elif offset < earliest[tp]:
            losses.append(DataLoss(tp, offset, earliest[tp], "deleted by retention before they were read"))
        elif offset > latest[tp]:
            losses.append(DataLoss(tp, latest[tp], offset, "the log now ends before the offset already read; "
                                   "was the topic re-created, or an unclean leader elected?"))  # fmt: skip
    return losses


def repair(start: Mapping[TopicPartition, int], earliest: Mapping[TopicPartition, int],
           latest: Mapping[TopicPartition, int]) -> Offsets:  # fmt: skip
    """Start offsets after data loss was accepted (``failOnDataLoss=false``): clamped into the log,
    vanished partitions dropped."""
    repaired: Offsets = {}
    for tp, offset in start.items():
        if tp in earliest and tp in latest:
            repaired[tp] = min(max(offset, earliest[tp]), latest[tp])
    return repaired


def plan_ranges(
    start: Mapping[TopicPartition, int],
    end: Mapping[TopicPartition, int],
    *,
    min_partitions: int | None = None,
    max_records_per_partition: int | None = None,
) -> list[OffsetRange]:
    """The Spark tasks of one batch: one range per partition with data (in both maps), split so that no range holds
    more than ``max_records_per_partition`` offsets, and (like Spark's KafkaOffsetRangeCalculator) so
    that there are at least ``min_partitions`` tasks, large partitions split in proportion to their size.
    """
    ranges = [
        OffsetRange(tp.topic, tp.partition, start[tp], offset)
        for tp, offset in sorted(end.items())
        if tp in start and offset > start[tp]
    ]
    if max_records_per_partition:
        ranges = [piece for r in ranges for piece in _split(r, math.ceil(r.size / max_records_per_partition))]
    if min_partitions and 0 < len(ranges) < min_partitions:
        total = sum(r.size for r in ranges)
        ranges = [piece for r in ranges for piece in _split(r, max(1, math.ceil(min_partitions * r.size / total)))]
    return ranges


def _split(r: OffsetRange, parts: int) -> list[OffsetRange]:
    parts = max(1, min(parts, r.size))
    bounds = [r.start + (r.size * i) // parts for i in range(parts + 1)]
    return [OffsetRange(r.topic, r.partition, a, b) for a, b in zip(bounds, bounds[1:], strict=False) if b > a]


def task_count(
    ranges: list[OffsetRange],
    *,
    min_records_per_task: int,
    min_partitions: int | None = None,
    max_partitions: int | None = None,
) -> int:
    """How many Spark tasks read ``ranges`` (one batch, after :func:`plan_ranges`): one per range, but a batch
    of N records in at most N // ``min_records_per_task`` tasks, at least one (0: no such limit), at least
    ``min_partitions`` (as far as there are ranges), at most ``max_partitions``."""
    tasks = len(ranges)
    if min_records_per_task > 0:
        tasks = min(tasks, max(1, sum(r.size for r in ranges) // min_records_per_task))
        if min_partitions:
            tasks = max(tasks, min(min_partitions, len(ranges)))
    if max_partitions:
        tasks = min(tasks, max_partitions)
    return tasks


def pack_ranges(
    ranges: list[OffsetRange], max_tasks: int, max_records: int | None = None
) -> list[tuple[OffsetRange, ...]]:
    """``ranges`` in at most ``max_tasks`` groups (one Spark task each) of similar sizes: the largest range
    first, each into the group with the fewest offsets (once ``max_tasks`` groups exist). A group never grows
    past ``max_records`` (``maxRecordsPerPartition`` wins: more groups when needed). Groups and the ranges in
    them are in (topic, partition, start) order; with at most ``max_tasks`` ranges, one group per range."""
    assert max_tasks >= 1, max_tasks
    if len(ranges) <= max_tasks:
        return [(r,) for r in ranges]
    groups: list[list[OffsetRange]] = []
    sizes: list[int] = []
    for r in sorted(ranges, key=lambda r: (-r.size, r.topic, r.partition, r.start)):
        fits = [i for i, size in enumerate(sizes) if max_records is None or size + r.size <= max_records]
        if len(groups) < max_tasks or not fits:
            groups.append([r])
            sizes.append(r.size)
            continue
        smallest = min(fits, key=lambda i: (sizes[i], i))
        groups[smallest].append(r)
        sizes[smallest] += r.size
    packed = [tuple(sorted(g, key=lambda r: (r.topic, r.partition, r.start))) for g in groups]
    return sorted(packed, key=lambda g: (g[0].topic, g[0].partition, g[0].start))
