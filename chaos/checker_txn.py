"""Transaction checkers: what the read_committed consumers (processes ``rc-*``) read of the transactions the
transactional producers (``txn-*``) wrote.

A ``txn`` operation is one transaction: ``info["values"]`` the (partition, value) pairs it sent, and its
outcome ``ok`` (``commit_transaction()`` returned: committed), ``failed`` (aborted: ``abort_transaction()`` was
called, or the transaction ended before ``commit_transaction()`` was; either way no commit was ever asked for)
or ``unknown`` (``commit_transaction()`` raised or timed out: it may have committed or not).

``aborted-read``
    A read_committed consumer read a value of an aborted transaction.
``lost-committed-write``
    A value of a committed transaction that a read_committed consumer never read (each one drains to the end
    after the faults, so each must read every committed value).
``duplicate-committed-write``
    A value of a committed (or unknown) transaction that one read_committed consumer read more than once:
    the log holds it twice, or the consumer went back. (A value at two offsets is also the log checkers'
    ``duplicate``, whoever read it.)
``partial-transaction``
    A transaction of unknown outcome that the read_committed consumers saw in part: one of them read some
    of its values and not others, or one read it and another did not. Either outcome is allowed, but for
    the whole transaction at once.

Each checker reads the history only (:class:`chaos.history_index.Index`).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from chaos.history import FAILED, OK, UNKNOWN, Op
from chaos.history_index import Anomaly, Index, anomaly, is_consumer, is_read_committed, txn_values


def _reads(index: Index) -> dict[str, Counter[str]]:
    """Read_committed consumer -> how many times it read each value (every such consumer, even one that read
    nothing, is a key: it started with a ``reset``)."""
    reads: dict[str, Counter[str]] = {}
    for op in index.ops:
        if not is_read_committed(op.process) or op.kind not in ("reset", "poll"):
            continue
        counts = reads.setdefault(op.process, Counter())
        if is_consumer(op):
            counts.update(value for _, _, value in op.records)
    return reads


def _txn_example(op: Op, **more: Any) -> dict[str, Any]:
    return {"process": op.process, "txn": op.info.get("txn"), "outcome": op.outcome, "t0": op.t0, "t1": op.t1,
            **more}  # fmt: skip


def check_transactions(index: Index) -> list[Anomaly]:
    txns = sorted({id(op): op for op in index.txn_of.values()}.values(), key=lambda op: (op.process, op.seq))
    if not txns:
        return []
    reads = _reads(index)
    aborted: list[dict[str, Any]] = []
    lost: list[dict[str, Any]] = []
    duplicated: list[dict[str, Any]] = []
    partial: list[dict[str, Any]] = []
    for op in txns:
        values = [value for _, value in txn_values(op)]
        for reader, counts in sorted(reads.items()):
            seen = [v for v in values if counts[v]]
            if op.outcome == FAILED and seen:
                aborted.append(_txn_example(op, reader=reader, values_read=seen[:5]))
            if op.outcome == OK and len(seen) < len(values):
                lost.append(_txn_example(op, reader=reader, values_not_read=[v for v in values if not counts[v]][:5]))
            if op.outcome in (OK, UNKNOWN):
                twice = [v for v in values if counts[v] > 1]
                if twice:
                    duplicated.append(_txn_example(op, reader=reader, values_read_twice=twice[:5]))
        if op.outcome == UNKNOWN and reads:
            seen_by = {reader: sum(1 for v in values if counts[v]) for reader, counts in sorted(reads.items())}
            if set(seen_by.values()) not in ({0}, {len(values)}):
                partial.append(_txn_example(op, values=len(values), values_read_by=seen_by))
    return (anomaly("aborted-read", aborted) + anomaly("lost-committed-write", lost)
            + anomaly("duplicate-committed-write", duplicated) + anomaly("partial-transaction", partial))  # fmt: skip
