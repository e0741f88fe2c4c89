"""The history of a chaos run: every operation with its outcome, as JSON lines.

One :class:`Op` per operation, written when it completes (so a crashed run still leaves its history)::

    {"kind": "send", "process": "producer-0", "seq": 17, "t0": 3.2104, "t1": 3.2518, "outcome": "ok",
     "partition": 2, "value": "0-17", "offset": 41}
    {"kind": "poll", "process": "reader-1", "seq": 90, "t0": 5.1, "t1": 5.6, "outcome": "ok",
     "records": [[2, 41, "0-17"], [2, 42, "1-3"]]}
    {"kind": "fault", "process": "nemesis", "seq": 3, "t0": 9.0, "t1": 9.02, "outcome": "ok",
     "action": "kill", "node": "broker-1", "fault": "kill-leader", "episode": 2}

Kinds:

* ``meta`` (first): ``info`` holds the run's parameters: ``topic``, ``partitions``, ``replicas``
  (partition -> broker ids), ``min_insync_replicas``, ``brokers``, ``seed``, ``faults``.
* ``send``: one produced record (``value`` is unique in the run). ``ok``: acknowledged at ``offset``;
  ``unknown``: the delivery failed or timed out after the record was handed to the producer, so it may or may
  not be in the log; ``failed``: ``send`` itself raised, nothing was queued.
* ``txn``: one transaction of a transactional producer (``txn-<i>``): ``info["values"]`` the
  ``[partition, value]`` pairs it sent, ``info["txn"]`` its number; ``ok``: ``commit_transaction()``
  returned; ``failed``: aborted (``abort_transaction()`` called, or ended before ``commit_transaction()``
  was; ``info["intent"]`` says which was meant); ``unknown``: ``commit_transaction()`` raised (``error``).
* ``poll``: one ``Consumer.poll``; ``records`` are ``[partition, offset, value]``. ``failed`` with ``error``
  when poll raised.
* ``reset``: a consumer's position was legitimately moved back (a new consumer, a group rebalance): the
  nonmonotonic-poll checker starts over for that process. ``info["partitions"]`` names the partitions.
* ``fault``: one nemesis action: ``action`` is kill, start, pause, resume, isolate, heal or skip, on ``node``,
  for fault kind ``fault`` in ``episode``. ``t0``/``t1`` bracket the action (kill: ``t1`` is when the
  process was seen dead; start: ``t1`` is when the node said it is ready).
* ``phase``: ``info["name"]`` is ``drain`` when the faults are over and readers catch up, ``end`` at the end.

Times are seconds since the run started (monotonic clock). ``seq`` counts each process's operations in
invocation order.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

OK, FAILED, UNKNOWN = "ok", "failed", "unknown"
OUTCOMES = (OK, FAILED, UNKNOWN)
KINDS = ("meta", "send", "txn", "poll", "reset", "fault", "phase")

Record = tuple[int, int, str]  # (partition, offset, value)


@dataclass(frozen=True, slots=True)
class Op:
    kind: str
    process: str
    seq: int
    t0: float
    t1: float
    outcome: str = OK
    partition: int | None = None
    value: str | None = None
    offset: int | None = None
    error: str | None = None
    records: tuple[Record, ...] = ()
    action: str | None = None
    node: str | None = None
    fault: str | None = None
    episode: int | None = None
    info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        assert self.kind in KINDS, self.kind
        assert self.outcome in OUTCOMES, self.outcome

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"kind": self.kind, "process": self.process, "seq": self.seq,
                               "t0": round(self.t0, 4), "t1": round(self.t1, 4), "outcome": self.outcome}  # fmt: skip
        for key in ("partition", "value", "offset", "error", "action", "node", "fault", "episode"):
            value = getattr(self, key)
            if value is not None:
                doc[key] = value
        if self.records:
            doc["records"] = [list(r) for r in self.records]
        if self.info:
            doc["info"] = self.info
        return doc

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Op:
        fields = dict(doc)
        fields["records"] = tuple((int(p), int(o), str(v)) for p, o, v in doc.get("records", ()))
        return cls(**fields)


class History:
    """Collects operations from many threads and appends each one to a JSON-lines file as it completes.

    Thread-safe: ``record``, ``next_seq`` and ``ops`` take one lock. ``now()`` is seconds since ``start``.
    """

    def __init__(self, path: Path | None = None, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._start = clock()
        self._lock = threading.Lock()
        self._ops: list[Op] = []
        self._seqs: dict[str, int] = {}
        self._file: IO[str] | None = open(path, "w") if path is not None else None  # noqa: SIM115
        self._last_flush = self._start

    def now(self) -> float:
        return self._clock() - self._start

    def next_seq(self, process: str) -> int:
        with self._lock:
            seq = self._seqs.get(process, 0)
            self._seqs[process] = seq + 1
            return seq

    def record(self, op: Op) -> Op:
        with self._lock:
            self._ops.append(op)
            if self._file is not None:
                self._file.write(json.dumps(op.to_json(), separators=(",", ":")) + "\n")
                now = self._clock()
                if now - self._last_flush >= 1.0 or op.kind in ("fault", "phase", "meta"):
                    self._file.flush()
                    self._last_flush = now
        return op

    def add(self, kind: str, process: str, t0: float, **fields: Any) -> Op:
        """Record an operation that started at ``t0`` and completes now."""
        return self.record(Op(kind, process, self.next_seq(process), t0, self.now(), **fields))

    def ops(self) -> list[Op]:
        with self._lock:
            return list(self._ops)

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None


def write_history(ops: Iterable[Op], path: Path) -> None:
    with open(path, "w") as f:
        for op in ops:
            f.write(json.dumps(op.to_json(), separators=(",", ":")) + "\n")


def read_history(path: Path) -> list[Op]:
    return list(iter_history(path))


def iter_history(path: Path) -> Iterator[Op]:
    with open(path) as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                yield Op.from_json(json.loads(line))
            except (ValueError, TypeError, AssertionError) as exc:
                raise ValueError(f"{path}:{number}: not a history operation ({exc})") from None
