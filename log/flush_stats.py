"""Flush observations for the whole process (Kafka's ``LogFlushStats``): every :meth:`log.log.Log.flush` that
synced something reports the log directory's name (``<topic>-<partition>``) and how long it took.

The process that wants them (the broker's metrics) sets one observer; without one a report costs a global
read. The observer runs on the flushing thread, under the log's lock: it must be quick and must not raise.
"""

from __future__ import annotations

from collections.abc import Callable

FlushObserver = Callable[[str, float], None]
"""``observer(log_dir_name, duration_ms)``."""

_observer: FlushObserver | None = None


def set_flush_observer(observer: FlushObserver | None) -> None:
    """Report every flush to ``observer`` from now on (None: to nobody)."""
    global _observer
    _observer = observer


def report_flush(log_dir_name: str, duration_ms: float) -> None:
    observer = _observer
    if observer is not None:
        observer(log_dir_name, duration_ms)
