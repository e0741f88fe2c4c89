"""The console's lag history: every ``interval_s`` it describes every consumer group and keeps, per group, the
last ``max_samples`` samples of its lag per partition, for the group page's chart.

The history lives in the console process only (it starts empty when the console starts); a group that
cannot be described in a round (its coordinator moving) just misses that sample.

Thread-safety: one sampling thread writes; page threads read ``history`` (copies, under the lock).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from odradek.errors import OdradekError
from odradek.types import GroupDescription, GroupListing, TopicPartition

log = logging.getLogger("odradek.console")

DEFAULT_INTERVAL_S = 10.0
DEFAULT_MAX_SAMPLES = 360  # an hour at the default interval


@dataclass(frozen=True, slots=True)
class LagSample:
    time_s: float  # time.time() of the sample
    lags: dict[TopicPartition, int]  # partitions with a known lag

    @property
    def total(self) -> int:
        return sum(self.lags.values())


class LagSampler:
    """Samples consumer group lag in the background (see the module docstring)."""

    def __init__(
        self, list_groups: Callable[[], list[GroupListing]], describe_group: Callable[[str], GroupDescription],
        *, interval_s: float = DEFAULT_INTERVAL_S, max_samples: int = DEFAULT_MAX_SAMPLES,
    ) -> None:  # fmt: skip
        self._list_groups = list_groups
        self._describe_group = describe_group
        self.interval_s = interval_s
        self._max_samples = max_samples
        self._history: dict[str, deque[LagSample]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="console-lag-sampler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10.0)

    def history(self, group_id: str) -> list[LagSample]:
        with self._lock:
            return list(self._history.get(group_id, ()))

    def sample_once(self) -> int:
        """One round over every group; returns how many groups were sampled."""
        try:
            groups = self._list_groups()
        except OdradekError as exc:
            log.info("lag sampler: cannot list groups: %s", exc)
            return 0
        sampled = 0
        for listing in groups:
            with contextlib.suppress(OdradekError):
                group = self._describe_group(listing.group_id)
                lags = {p.partition: p.lag for p in group.offsets if p.lag is not None}
                self._add(listing.group_id, LagSample(time.time(), lags))
                sampled += 1
        with self._lock:  # groups that are gone
            for gone in self._history.keys() - {g.group_id for g in groups}:
                del self._history[gone]
        return sampled

    def _add(self, group_id: str, sample: LagSample) -> None:
        with self._lock:
            history = self._history.get(group_id)
            if history is None:
                history = self._history[group_id] = deque(maxlen=self._max_samples)
            history.append(sample)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.sample_once()
            except Exception:  # a bug must not end the sampling
                log.exception("lag sampler: round failed")
            self._stop.wait(self.interval_s)
