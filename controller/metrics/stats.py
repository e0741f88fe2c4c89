"""Counters and a fixed-bucket latency histogram that server threads update without Prometheus.

The collectors read them at scrape time. Each is written by one thread (said where it is used) or under
the caller's lock, so updates are plain integer and float additions: no lock on the paths that count.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from metadata.image import MetadataImage
from metadata.records import NO_LEADER, PartitionChange

LATENCY_BUCKETS_MS: tuple[float, ...] = (1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000)
"""Upper bounds (ms) of the latency histograms; +Inf is implied."""


class LatencyHistogram:
    """Observations in ms counted per bucket (Prometheus's cumulative buckets are made when read).

    Thread-safety: one writer thread; readers may see a count one observation ahead of the sum.
    """

    __slots__ = ("bounds", "_counts", "count", "sum_ms")

    def __init__(self, bounds: Sequence[float] = LATENCY_BUCKETS_MS) -> None:
        self.bounds = tuple(bounds)
        self._counts = [0] * (len(self.bounds) + 1)
        self.count = 0
        self.sum_ms = 0.0

    def observe(self, value_ms: float) -> None:
        self._counts[bisect.bisect_left(self.bounds, value_ms)] += 1
        self.count += 1
        self.sum_ms += value_ms

    def cumulative(self) -> list[tuple[str, int]]:
        """``[(upper bound, observations <= it), ..., ("+Inf", count)]``, as Prometheus exposes buckets."""
        result, running = [], 0
        counts = list(self._counts)
        for bound, n in zip(self.bounds, counts, strict=False):
            running += n
            result.append((_bound(bound), running))
        result.append(("+Inf", running + counts[-1]))
        return result


def _bound(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


@dataclass(slots=True)
class ControllerStats:
    """What a controller counts as it runs.

    ``leader_elections`` / ``unclean_leader_elections``: partition leaders this node elected while active
    (the controller thread's); ``leader_changes``: LeaderChange records this node applied, i.e. new Raft
    leaders (the Raft thread's); ``commit_latency``: how long this node's metadata appends took to commit
    (the controller thread's).
    """

    leader_elections: int = 0
    unclean_leader_elections: int = 0
    leader_changes: int = 0
    commit_latency: LatencyHistogram = field(default_factory=LatencyHistogram)


def count_elections(stats: ControllerStats, image: MetadataImage, command: Iterable[object]) -> None:
    """Count the leader elections among committed records: a PartitionChange that names a new leader.
    Unclean: the new leader was not in the ISR of ``image`` (the image the decision was made on)."""
    for record in command:
        if not isinstance(record, PartitionChange) or record.leader is None or record.leader == NO_LEADER:
            continue
        before = image.partition(record.topic_id, record.partition)
        if before is not None and before.leader == record.leader:
            continue
        stats.leader_elections += 1
        if before is not None and record.leader not in before.isr:
            stats.unclean_leader_elections += 1
