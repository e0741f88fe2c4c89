"""Checkers: pure functions from a history (:mod:`chaos.history`) to anomalies.

Every checker reads the operations only, never the cluster. What each one reports (Jepsen's names where
Jepsen's Kafka, Redpanda and Bufstream analyses have one):

``lost-write``
    An acknowledged send whose value no consumer ever read, although consumers read past its offset in
    its partition (so the log went on without it).
``unseen-write``
    An acknowledged send whose value no consumer read by the end, and no consumer read as far as its offset
    (the end of the log fell back below it, or the readers stalled). The run drains the readers to the end
    offsets after the faults, so a clean run has none.
``duplicate``
    One value at two or more offsets (of any partitions): the log holds it twice.
``inconsistent-offset``
    One offset of a partition holding two values: two consumers read different values there, or a send was
    acknowledged at an offset where a consumer read another value, or read its value elsewhere.
``nonmonotonic-send`` (per-partition order)
    One producer's acknowledged sends to one partition, in the order it called ``send``, whose offsets do not
    increase: the log reordered them.
``nonmonotonic-poll``
    One consumer reading an offset of a partition at or below one it read before, with no ``reset`` of
    that consumer in between.
``poll-skip``
    One consumer jumping from offset a to offset b > a + 1 of a partition while another consumer read a
    value at an offset between them: it skipped records. (An acknowledged offset that nobody read is a
    lost or unseen write, not a skip; a read_committed consumer, ``rc-*``, rightly skips the records of
    transactions that were not committed, so those offsets do not count for it.)
``acked-below-min-isr``
    A send acknowledged although fewer than ``min.insync.replicas`` replicas of its partition were running
    during its whole life. The rule, for each partition: from the fault actions, a replica is down from the
    moment its kill was seen complete (``t1`` of kill, pause or isolate) until the moment its restart
    began (``t0`` of start, resume or heal). A window is a time interval in which fewer than
    ``min_insync_replicas`` replicas are up. A send is a violation when it was invoked at or after a
    window's start and acknowledged at or before its end: its record did not exist before the window
    began, and no second replica could have stored it before the acknowledgement. A send invoked before
    the window and acknowledged inside it is not a violation: it may have been fully replicated before the
    kill, with the answer in flight. A send acknowledged after the window ended is not one either: it may
    have been replicated to a restarted replica.

The group checkers live in :mod:`chaos.checker_group`, the transaction checkers in :mod:`chaos.checker_txn`,
what they all share in :mod:`chaos.history_index`. :func:`check` runs all of them.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable
from typing import Any

from chaos.checker_group import check_group
from chaos.checker_txn import check_transactions
from chaos.history import OK, Op
from chaos.history_index import MAX_EXAMPLES, Anomaly, Index, anomaly, is_read_committed, send_example

__all__ = ["CHECKERS", "Anomaly", "Index", "check", "down_windows"]

DOWN_ACTIONS = {"kill": "start", "pause": "resume", "isolate": "heal"}


def check_lost_and_unseen(index: Index) -> list[Anomaly]:
    lost: list[dict[str, Any]] = []
    unseen: list[dict[str, Any]] = []
    for value, op in sorted(index.acked.items(), key=lambda item: (item[1].partition or 0, item[1].offset or 0)):
        if index.reads_of.get(value):
            continue
        assert op.partition is not None
        assert op.offset is not None
        highest = index.max_read.get(op.partition, -1)
        example = {**send_example(op), "highest_offset_read": highest}
        (lost if highest > op.offset else unseen).append(example)
    return anomaly("lost-write", lost) + anomaly("unseen-write", unseen)


def check_duplicates(index: Index) -> list[Anomaly]:
    found = [
        {"value": value, "offsets": sorted(offsets)}
        for value, offsets in sorted(index.reads_of.items())
        if len(offsets) > 1
    ]
    return anomaly("duplicate", found)


def check_inconsistent_offsets(index: Index) -> list[Anomaly]:
    found: list[dict[str, Any]] = []
    for (partition, offset), values in sorted(index.values_at.items()):
        if len(values) > 1:
            found.append({"partition": partition, "offset": offset, "values": sorted(values), "source": "reads"})
    for value, op in sorted(index.acked.items()):
        read_at = index.reads_of.get(value)
        if read_at and (op.partition, op.offset) not in read_at:
            found.append({**send_example(op), "read_at": sorted(read_at), "source": "ack offset"})
        there = index.values_at.get((op.partition or 0, op.offset or 0), set()) - {value}
        if there:
            found.append({**send_example(op), "read_there": sorted(there), "source": "ack offset"})
    return anomaly("inconsistent-offset", found)


def check_send_order(index: Index) -> list[Anomaly]:
    found: list[dict[str, Any]] = []
    last: dict[tuple[str, int], Op] = {}
    for op in sorted(index.acked.values(), key=lambda op: (op.process, op.seq)):
        assert op.partition is not None
        assert op.offset is not None
        key = (op.process, op.partition)
        before = last.get(key)
        if before is not None and before.offset is not None and op.offset <= before.offset:
            found.append({"process": op.process, "partition": op.partition, "earlier": send_example(before),
                          "later": send_example(op)})  # fmt: skip
        last[key] = op
    return anomaly("nonmonotonic-send", found)


def check_polls(index: Index) -> list[Anomaly]:
    """``nonmonotonic-poll`` and ``poll-skip``, per consumer process, between its resets."""
    nonmonotonic: list[dict[str, Any]] = []
    skips: list[dict[str, Any]] = []
    known = {p: index.read_offsets(p) for p in index.max_read}
    # a read_committed consumer skips the records of transactions that were not committed
    known_committed = {p: index.read_offsets(p, committed_only=True) for p in index.max_read}
    last: dict[tuple[str, int], int] = {}
    for op in sorted((op for op in index.ops if op.kind in ("poll", "reset")), key=lambda op: (op.process, op.seq)):
        if op.kind == "reset":
            for key in [k for k in last if k[0] == op.process]:
                del last[key]
            continue
        if op.outcome != OK:
            continue
        for partition, offset, value in op.records:
            key = (op.process, partition)
            before = last.get(key)
            last[key] = offset
            if before is None:
                continue
            where = {"process": op.process, "partition": partition, "previous_offset": before, "offset": offset,
                     "value": value, "t1": op.t1}  # fmt: skip
            if offset <= before:
                nonmonotonic.append(where)
            elif offset > before + 1:
                offsets = known_committed if is_read_committed(op.process) else known
                between = _between(offsets.get(partition, []), before, offset)
                if between:
                    skips.append({**where, "skipped_offsets": between[:MAX_EXAMPLES]})
    return anomaly("nonmonotonic-poll", nonmonotonic) + anomaly("poll-skip", skips)


def _between(sorted_offsets: list[int], low: int, high: int) -> list[int]:
    return sorted_offsets[bisect.bisect_right(sorted_offsets, low) : bisect.bisect_left(sorted_offsets, high)]


def down_windows(ops: Iterable[Op], nodes: Iterable[str], minimum: int, end: float) -> list[tuple[float, float]]:
    """Intervals in which fewer than ``minimum`` of ``nodes`` were up (see the module docstring for "up")."""
    wanted = set(nodes)
    events: list[tuple[float, int]] = []  # (time, +1 up / -1 down)
    down_since: dict[tuple[str, str], float] = {}
    for op in sorted(ops, key=lambda op: op.t0):
        if op.kind != "fault" or op.node not in wanted or op.outcome != OK or op.action is None:
            continue
        if op.action in DOWN_ACTIONS:
            down_since[(op.node, op.action)] = op.t1
            events.append((op.t1, -1))
        for down, up in DOWN_ACTIONS.items():
            if op.action == up and (op.node, down) in down_since:
                del down_since[(op.node, down)]
                events.append((op.t0, +1))
    events.sort(key=lambda e: (e[0], -e[1]))  # ups first at equal times: the shorter window
    windows: list[tuple[float, float]] = []
    running = len(wanted)
    start: float | None = None
    for t, delta in events:
        running += delta
        if running < minimum and start is None:
            start = t
        elif running >= minimum and start is not None:
            windows.append((start, t))
            start = None
    if start is not None:
        windows.append((start, end))
    return windows


def check_min_isr(index: Index) -> list[Anomaly]:
    minimum = int(index.meta.get("min_insync_replicas", 0))
    replicas: dict[str, list[int]] = index.meta.get("replicas", {})
    if minimum <= 0 or not replicas:
        return []
    end = max((op.t1 for op in index.ops), default=0.0)
    found: list[dict[str, Any]] = []
    for partition_key, broker_ids in sorted(replicas.items()):
        partition = int(partition_key)
        windows = down_windows(index.ops, [f"broker-{b}" for b in broker_ids], minimum, end)
        if not windows:
            continue
        for op in index.acked.values():
            if op.partition != partition:
                continue
            for start, stop in windows:
                if op.t0 >= start and op.t1 <= stop:
                    found.append({**send_example(op), "window": [round(start, 4), round(stop, 4)]})
    return anomaly("acked-below-min-isr", sorted(found, key=lambda e: e["t1"]))


Checker = Callable[[Index], list[Anomaly]]
CHECKERS: tuple[Checker, ...] = (
    check_lost_and_unseen,
    check_duplicates,
    check_inconsistent_offsets,
    check_send_order,
    check_polls,
    check_min_isr,
)


def check(ops: Iterable[Op], *, group_stall_s: float | None = None) -> list[Anomaly]:
    """Every checker over ``ops``; the group and transaction checkers too (``group_stall_s``: the longest
    tolerated stall of the group)."""
    index = Index(ops)
    found: list[Anomaly] = []
    for checker in CHECKERS:
        found += checker(index)
    found += check_group(index, stall_s=group_stall_s)
    found += check_transactions(index)
    return found
