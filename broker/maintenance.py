"""Log maintenance on one thread: retention, time-based flushes, high-watermark checkpoints.

Three periodic tasks (Kafka's ``LogManager`` scheduler):

* retention every ``log.retention.check.interval.ms``: each partition deletes whole segments by
  ``retention.ms`` / ``retention.bytes`` (never past its high watermark), advancing its log start offset;
  fetches waiting on it are checked again (their offset may have fallen out of range);
* flush: a log whose ``flush.ms`` is finite is fsynced once that long passed since this thread last did
  (appends flush by ``flush.messages`` / ``flush.ms`` themselves; this covers logs that went idle), checked
  every ``log.flush.scheduler.interval.ms`` or every smallest ``flush.ms``, whichever is sooner;
* every ``replica.high.watermark.checkpoint.interval.ms``: the high watermarks go to
  ``replication-offset-checkpoint``.

:meth:`LogMaintenance.run_due` does whatever is due at a given time (tests call it with a manual clock);
:meth:`LogMaintenance.start` runs it on a thread.
"""

from __future__ import annotations

import logging
import threading

from broker.config import LONG_MAX, BrokerConfig
from broker.replica_manager import ReplicaManager
from common.clock import Clock
from log.cleaner.manager import LogCleaner
from log.cleaner.plan import CleanerConfig
from log.log import Log

logger = logging.getLogger(__name__)

MIN_FLUSH_CHECK_MS = 10
MAX_SLEEP_MS = 1000


class LogMaintenance:
    """The periodic tasks above.

    Thread-safety: ``run_due`` is called by one thread at a time (its own once started); ``stop`` from any.
    """

    def __init__(self, replicas: ReplicaManager, config: BrokerConfig, clock: Clock) -> None:
        self._replicas = replicas
        self._clock = clock
        self.retention_interval_ms = config.retention_check_interval_ms
        self.checkpoint_interval_ms = int(config.get("replica.high.watermark.checkpoint.interval.ms"))
        self.flush_scheduler_ms = int(config.get("log.flush.scheduler.interval.ms"))
        now = clock.monotonic_ms()
        self._next_retention = now + self.retention_interval_ms
        self._next_checkpoint = now + self.checkpoint_interval_ms
        self._next_flush_check = now
        self._last_flush: dict[tuple[str, int], float] = {}
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def run_due(self) -> float:
        """Run the tasks due now; returns when the next one is due (monotonic ms)."""
        now = self._clock.monotonic_ms()
        if now >= self._next_retention:
            self._next_retention = now + self.retention_interval_ms
            self.run_retention()
        if now >= self._next_flush_check:
            self._next_flush_check = now + self.flush_idle_logs(now)
        if now >= self._next_checkpoint:
            self._next_checkpoint = now + self.checkpoint_interval_ms
            self._replicas.checkpoint_high_watermarks()
        return min(self._next_retention, self._next_flush_check, self._next_checkpoint)

    def run_retention(self) -> int:
        """Retention over every partition; returns the segments deleted."""
        deleted = 0
        for key, partition in self._replicas.partitions().items():
            try:
                count = partition.delete_old_segments()
            except Exception:
                logger.exception("retention of %s failed", partition)
                continue
            if count:
                deleted += count
                logger.info("%s: retention deleted %d segments; log start offset %d", partition.key_str, count,
                            partition.log_start_offset)  # fmt: skip
                self._replicas.complete_delayed(key)
        return deleted

    def flush_idle_logs(self, now: float) -> float:
        """fsync logs whose ``flush.ms`` passed since their last flush here; returns ms to the next check."""
        next_check = float(self.flush_scheduler_ms)
        partitions = self._replicas.partitions()
        for key in set(self._last_flush) - set(partitions):
            del self._last_flush[key]
        for key, partition in partitions.items():
            flush_ms = partition.config.flush_ms
            if flush_ms >= LONG_MAX:
                continue
            last = self._last_flush.setdefault(key, now)
            if now - last >= flush_ms:
                try:
                    partition.flush()
                except Exception:
                    logger.exception("flushing %s failed", partition)
                self._last_flush[key] = now
                last = now
            next_check = min(next_check, last + flush_ms - now)
        return max(next_check, MIN_FLUSH_CHECK_MS)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="log-maintenance", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                next_due = self.run_due()
            except Exception:
                logger.exception("log maintenance failed")
                next_due = self._clock.monotonic_ms() + MAX_SLEEP_MS
            wait_ms = min(max(next_due - self._clock.monotonic_ms(), 1), MAX_SLEEP_MS)
            self._stopping.wait(wait_ms / 1000.0)

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(10.0)


def make_log_cleaner(replicas: ReplicaManager, config: BrokerConfig, clock: Clock) -> LogCleaner:
    """The log cleaner (``log.cleaner.*``) over every partition whose ``cleanup.policy`` includes ``compact``.

    Each partition is cleaned below its last stable offset (Kafka's first uncleanable offset,
    ``UnifiedLog.cleanable_upper_bound``), leaders and followers alike: every replica compacts its own log,
    aborted transactions and markers included (``log.cleaner.transactions``).
    """

    def compacted_logs() -> dict[str, tuple[Log, int]]:
        return {
            partition.key_str: (partition.log, partition.cleanable_upper_bound)
            for partition in replicas.partitions().values()
            if partition.config.compact_enabled
        }

    cleaner_config = CleanerConfig(
        enable=bool(config.get("log.cleaner.enable")),
        threads=int(config.get("log.cleaner.threads")),
        backoff_ms=int(config.get("log.cleaner.backoff.ms")),
        dedupe_buffer_size=int(config.get("log.cleaner.dedupe.buffer.size")),
        io_buffer_size=int(config.get("log.cleaner.io.buffer.size")),
        io_buffer_load_factor=float(config.get("log.cleaner.io.buffer.load.factor")),
    )
    return LogCleaner(compacted_logs, cleaner_config, clock)
