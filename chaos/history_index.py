"""What every checker shares: the :class:`Anomaly` it reports and the :class:`Index` of a history it reads.

The checkers themselves live in :mod:`chaos.checker` (the log), :mod:`chaos.checker_group` (one consumer
group) and :mod:`chaos.checker_txn` (transactions); each imports this module only, and :func:`chaos.checker.check`
runs them all.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from chaos.history import OK, Op

MAX_EXAMPLES = 5
READ_COMMITTED_PREFIX = "rc-"  # consumers with isolation.level=read_committed: rc-reader-<j>


@dataclass(frozen=True, slots=True)
class Anomaly:
    kind: str
    count: int
    examples: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "count": self.count, "examples": self.examples}


def anomaly(kind: str, found: Sequence[dict[str, Any]]) -> list[Anomaly]:
    """``kind`` counted over ``found``, with the first few as examples; nothing when ``found`` is empty."""
    return [Anomaly(kind, len(found), list(found[:MAX_EXAMPLES]))] if found else []


def is_consumer(op: Op) -> bool:
    return op.kind == "poll" and op.outcome == OK


def is_read_committed(process: str) -> bool:
    return process.startswith(READ_COMMITTED_PREFIX)


def send_example(op: Op) -> dict[str, Any]:
    return {"value": op.value, "partition": op.partition, "offset": op.offset, "process": op.process,
            "t0": op.t0, "t1": op.t1}  # fmt: skip


def txn_values(op: Op) -> list[tuple[int, str]]:
    """The (partition, value) pairs a ``txn`` operation sent."""
    return [(int(p), str(v)) for p, v in op.info.get("values", ())]


class Index:
    """Acknowledged sends, transactions and every read, indexed once."""

    def __init__(self, ops: Iterable[Op]) -> None:
        self.ops = sorted(ops, key=lambda op: (op.t1, op.process, op.seq))
        self.meta: dict[str, Any] = next((op.info for op in self.ops if op.kind == "meta"), {})
        self.acked: dict[str, Op] = {}  # value -> its ok send
        self.sent: set[str] = set()
        self.txn_of: dict[str, Op] = {}  # value -> the txn operation that sent it
        self.values_at: dict[tuple[int, int], set[str]] = defaultdict(set)  # (partition, offset) -> values read
        self.reads_of: dict[str, set[tuple[int, int]]] = defaultdict(set)  # value -> offsets it was read at
        self.max_read: dict[int, int] = {}  # partition -> highest offset read
        for op in self.ops:
            if op.kind == "send":
                assert op.value is not None
                self.sent.add(op.value)
                if op.outcome == OK:
                    self.acked[op.value] = op
            elif op.kind == "txn":
                for _, value in txn_values(op):
                    self.txn_of[value] = op
            elif is_consumer(op):
                for partition, offset, value in op.records:
                    self.values_at[(partition, offset)].add(value)
                    self.reads_of[value].add((partition, offset))
                    if offset > self.max_read.get(partition, -1):
                        self.max_read[partition] = offset

    def read_offsets(self, partition: int, *, committed_only: bool = False) -> list[int]:
        """The offsets of ``partition`` some consumer read, sorted; with ``committed_only``, those a
        read_committed consumer must read too (not holding a value of a transaction that was not committed)."""
        return sorted(o for (p, o), values in self.values_at.items() if p == partition
                      and not (committed_only and any(self.uncommitted(v) for v in values)))  # fmt: skip

    def uncommitted(self, value: str) -> bool:
        """``value`` was sent in a transaction whose commit did not return (aborted, or unknown)."""
        op = self.txn_of.get(value)
        return op is not None and op.outcome != OK
