"""Latency trace points: timestamps of one record's way through producer, leader, followers and consumer.

Off unless the environment variable ``ODRADEK_LATENCY_TRACE`` names a directory when the process starts;
then every process that imports this module (brokers, clients, the perf tools) keeps its events in memory
and writes them, at exit or on :func:`flush`, to ``<dir>/<role>-<pid>.trace``, one event a line::

    <t_ns> <event> <topic> <partition> <value> <value> ...

``t_ns`` is ``time.perf_counter_ns()``: on Linux ``CLOCK_MONOTONIC``, one clock for every process of the
machine, so events of different processes on one machine compare directly (the breakdown in
``tests/bench/breakdown.py`` joins them; ``docs/LATENCY.md`` lists the events and where each is taken).

Cost when off: a call site tests the module flag ``ON`` first (one global load), so the hot paths pay
nothing else. When on, an event is one tuple appended to a list (the GIL makes that safe from any thread),
bounded by ``MAX_EVENTS`` (the rest are counted and dropped). This module imports nothing of the project:
clients and brokers both use it.
"""

from __future__ import annotations

import atexit
import os
import threading
import time

ENV_VAR = "ODRADEK_LATENCY_TRACE"
MAX_EVENTS = 2_000_000

DIRECTORY = os.environ.get(ENV_VAR, "")
ON = bool(DIRECTORY)

now_ns = time.perf_counter_ns

_events: list[tuple[object, ...]] = []
_dropped = 0
_role = "process"
_lock = threading.Lock()  # flush against flush (appends need no lock: list.append is atomic under the GIL)


def set_role(role: str) -> None:
    """Name this process in its trace file (``broker-1``, ``perf``...)."""
    global _role
    _role = role


def point(event: str, topic: str, partition: int, *values: int) -> None:
    """Record ``event`` for ``topic``-``partition`` now; callers test ``ON`` first."""
    record(now_ns(), event, topic, partition, *values)


def record(t_ns: int, event: str, topic: str, partition: int, *values: int) -> None:
    """Record ``event`` at ``t_ns`` (a ``perf_counter_ns`` taken earlier on the path)."""
    global _dropped
    if len(_events) >= MAX_EVENTS:
        _dropped += 1
        return
    _events.append((t_ns, event, topic, partition, *values))


def flush() -> str | None:
    """Append the events kept so far to this process's trace file; its path (None when tracing is off)."""
    global _dropped
    if not ON:
        return None
    with _lock:
        events = _events[:]
        del _events[: len(events)]
        dropped, _dropped = _dropped, 0
        path = os.path.join(DIRECTORY, f"{_role}-{os.getpid()}.trace")
        os.makedirs(DIRECTORY, exist_ok=True)
        with open(path, "a", encoding="utf-8") as out:
            for event in events:
                out.write(" ".join(str(v) for v in event))
                out.write("\n")
            if dropped:
                out.write(f"{now_ns()} dropped - -1 {dropped}\n")
    return path


if ON:
    atexit.register(flush)
