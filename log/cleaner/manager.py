"""The log cleaner of a broker: which log to clean next, its checkpoints, and the cleaner threads.

:class:`CleanerManager` (Kafka's ``LogCleanerManager``) remembers, per log directory, the first dirty
offset (persisted in the partition directory) and the earliest delete horizon of the tombstones the
last pass left (memory only: after a restart, tombstones wait for the next pass the dirty ratio
starts). It picks the filthiest due log (``plan``) that no other thread is cleaning and that has not been
marked uncleanable: a log whose pass failed (a batch that does not decode, a file error) is skipped from
then on, so that the cleaner goes on with the others (Kafka's ``markPartitionUncleanable``).

Per-partition file::

    cleaner-offset-checkpoint   log.checkpoint format, one entry: first-dirty-offset
                                (Kafka keeps one such file per log dir; one per partition needs no
                                coordination between partitions and goes away with the partition)

:class:`LogCleaner` drives ``log.cleaner.threads`` threads; each loops: grab a log, clean it
(:class:`~log.cleaner.cleaner.Cleaner`), record the result; when no log is due it sleeps
``log.cleaner.backoff.ms``. The logs come from a callable the owner provides (the broker: every
partition whose ``cleanup.policy`` includes ``compact``, with its high watermark as the upper bound),
asked afresh on every pass. :meth:`LogCleaner.clean_once` runs one pass on the calling thread (tests).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from common.clock import Clock
from log.checkpoint import read_checkpoint, write_checkpoint
from log.cleaner.cleaner import Cleaner, CleanResult
from log.cleaner.plan import Cleanable, CleanerConfig, cleanable_range, filthiest, is_due
from log.cleaner.swap import StepHook
from log.errors import LogError
from log.log import Log

logger = logging.getLogger(__name__)

CHECKPOINT_FILE = "cleaner-offset-checkpoint"
FIRST_DIRTY_KEY = "first-dirty-offset"
STOP_TIMEOUT_S = 30.0

LogSource = Callable[[], Mapping[str, tuple[Log, int]]]
"""name -> (log, upper bound): the logs to consider, each with the offset the cleaner must stay below."""


@dataclass(frozen=True, slots=True)
class Grabbed:
    """A log handed to one cleaner thread."""

    name: str
    log: Log
    cleanable: Cleanable


class CleanerManager:
    """Selection and bookkeeping across logs. Thread-safe: one lock around its maps."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._dirty: dict[Path, int] = {}
        self._horizons: dict[Path, int] = {}
        self._in_progress: set[Path] = set()
        self._uncleanable: dict[Path, Log] = {}  # the Log a pass failed on; a reopened Log is tried again

    def first_dirty_offset(self, log: Log) -> int | None:
        """The checkpointed first dirty offset of ``log`` (None: never cleaned)."""
        with self._lock:
            return self._load(log.dir)

    def _load(self, directory: Path) -> int | None:
        if directory in self._dirty and not (directory / CHECKPOINT_FILE).exists():
            del self._dirty[directory]  # the partition was deleted (and maybe created again) meanwhile
            self._horizons.pop(directory, None)
        if directory not in self._dirty:
            try:
                saved = read_checkpoint(directory / CHECKPOINT_FILE) or {}
            except LogError as e:
                logger.warning("%s; cleaning %s from its start", e, directory)
                saved = {}
            if FIRST_DIRTY_KEY not in saved:
                return None
            self._dirty[directory] = saved[FIRST_DIRTY_KEY]
        return self._dirty[directory]

    def grab_filthiest(self, logs: Mapping[str, tuple[Log, int]], now_ms: int) -> Grabbed | None:
        """The due log with the highest dirty ratio that no thread is cleaning, now marked in progress."""
        with self._lock:
            candidates: list[tuple[str, Cleanable]] = []
            by_name: dict[str, Log] = {}
            for name, (log, upper_bound) in logs.items():
                if log.closed or not log.config.compact_enabled or log.dir in self._in_progress:
                    continue
                if self._uncleanable.get(log.dir) is log:
                    continue
                cleanable = cleanable_range(
                    log.segments,
                    log.config,
                    checkpointed_dirty_offset=self._load(log.dir),
                    log_start_offset=log.log_start_offset,
                    upper_bound=upper_bound,
                    now_ms=now_ms,
                )
                if is_due(cleanable, log.config, now_ms, self._horizons.get(log.dir)):
                    candidates.append((name, cleanable))
                    by_name[name] = log
            chosen = filthiest(candidates)
            if chosen is None:
                return None
            name, cleanable = chosen
            log = by_name[name]
            self._in_progress.add(log.dir)
            return Grabbed(name, log, cleanable)

    def mark_uncleanable(self, grabbed: Grabbed) -> None:
        """A pass over ``grabbed`` failed: skip its log from now on (Kafka's ``markPartitionUncleanable``), until
        the partition's log is opened again (a restart, a config change, a new topic of the same name)."""
        with self._lock:
            self._uncleanable[grabbed.log.dir] = grabbed.log

    def uncleanable(self) -> list[str]:
        """The directories of the logs marked uncleanable, sorted (Kafka's ``uncleanable-partitions-count``)."""
        with self._lock:
            for directory in [d for d, log in self._uncleanable.items() if log.closed]:
                del self._uncleanable[directory]  # reopened or deleted: no longer this Log
            return sorted(d.name for d in self._uncleanable)

    def done_cleaning(self, grabbed: Grabbed, result: CleanResult | None) -> None:
        """Record a pass (None: it failed) and release the log. Checkpoints before releasing."""
        directory = grabbed.log.dir
        try:
            if result is not None and result.complete:
                write_checkpoint(directory / CHECKPOINT_FILE, {FIRST_DIRTY_KEY: result.end_offset})
                with self._lock:
                    self._dirty[directory] = result.end_offset
                    if result.tombstone_horizon_ms is None:
                        self._horizons.pop(directory, None)
                    else:
                        self._horizons[directory] = result.tombstone_horizon_ms
        finally:
            with self._lock:
                self._in_progress.discard(directory)


class LogCleaner:
    """The cleaner threads of a broker (see the module docstring). ``start``/``stop`` from the owner's thread."""

    def __init__(
        self, source: LogSource, config: CleanerConfig, clock: Clock, *, on_swap_step: StepHook | None = None
    ) -> None:
        self.config = config
        self.manager = CleanerManager()
        self._source = source
        self._clock = clock
        self._on_swap_step = on_swap_step
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._stats_lock = threading.Lock()
        self.passes = 0
        self.bytes_read = 0

    def clean_once(self, cleaner: Cleaner | None = None) -> CleanResult | None:
        """Clean the filthiest due log once; None when no log is due. A log whose pass fails (a corrupt batch,
        a file error) is marked uncleanable, with the reason logged, and the next filthiest is cleaned."""
        while True:
            grabbed = self.manager.grab_filthiest(self._source(), self._clock.time_ms())
            if grabbed is None:
                return None
            result: CleanResult | None = None
            try:
                worker = cleaner or Cleaner(self.config, self._on_swap_step)
                result = worker.clean(grabbed.log, grabbed.cleanable, self._clock.time_ms())
            except Exception as exc:
                logger.error("cannot clean %s; marking it uncleanable and going on with the others: %s",
                             grabbed.name, exc, exc_info=not isinstance(exc, LogError | OSError))  # fmt: skip
                self.manager.mark_uncleanable(grabbed)
                continue
            finally:
                self.manager.done_cleaning(grabbed, result)
            break
        with self._stats_lock:
            self.passes += 1
            self.bytes_read += result.bytes_read + result.map_bytes_read
        logger.info(
            "cleaned %s: offsets up to %d, %d -> %d segments, %d -> %d bytes, %d of %d records kept%s",
            grabbed.name,
            result.end_offset,
            result.segments_before,
            result.segments_after,
            result.bytes_read,
            result.bytes_written,
            result.records_retained,
            result.records_read,
            "" if result.complete else " (incomplete: the log changed)",
        )
        return result

    def start(self) -> None:
        if not self.config.enable:
            logger.info("log cleaner disabled (log.cleaner.enable=false)")
            return
        for i in range(self.config.threads):
            thread = threading.Thread(target=self._run, name=f"log-cleaner-{i}", daemon=True)
            self._threads.append(thread)
            thread.start()

    def _run(self) -> None:
        cleaner = Cleaner(self.config, self._on_swap_step, self._stopping.is_set)
        while not self._stopping.is_set():
            try:
                result = self.clean_once(cleaner)
            except Exception:
                logger.exception("log cleaner pass failed")
                result = None
            if result is None:
                self._stopping.wait(self.config.backoff_ms / 1000.0)

    def stop(self) -> None:
        """Stop the threads; a pass in progress ends after the group it is writing (left incomplete)."""
        self._stopping.set()
        for thread in self._threads:
            thread.join(STOP_TIMEOUT_S)
        self._threads.clear()
