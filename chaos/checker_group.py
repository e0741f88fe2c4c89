"""Group checkers: the consumers of one consumer group (processes named ``group-<n>``) taken together.

``group-stall``
    The group made no progress (read no value it had not read before) for longer than ``stall_s`` while
    an acknowledged value was waiting for it. For each gap between two moments of progress (or between the
    last one and the end of the run) the stall starts at the later of the gap's start and the
    acknowledgement of the oldest value still unread at the gap's end. Faults stall a group for a while
    (a leader or the coordinator is down, a rebalance runs), so ``stall_s`` must exceed a fault's length
    plus its recovery: the run passes the longest fault hold plus the session timeout and a margin.
``group-unseen``
    An acknowledged value that no member of the group read by the end of the run (the run drains the group
    after the faults, like the readers).

Duplicates are legal for a group (at-least-once delivery after a rebalance), so the group is not checked
for them; its reads do take part in the log-level checkers (inconsistent offsets, lost writes).
Both checkers run only when the history's meta names a group (``info["group"]``).
"""

from __future__ import annotations

import bisect
from typing import Any

from chaos.history import OK
from chaos.history_index import Anomaly, Index, anomaly

GROUP_PREFIX = "group-"
DEFAULT_STALL_S = 60.0


def check_group(index: Index, *, stall_s: float | None = None) -> list[Anomaly]:
    if not index.meta.get("group"):
        return []
    stall_s = DEFAULT_STALL_S if stall_s is None else stall_s
    first_read: dict[str, float] = {}
    start: float | None = None
    for op in index.ops:
        if not op.process.startswith(GROUP_PREFIX):
            continue
        start = op.t0 if start is None else min(start, op.t0)
        if op.kind == "poll" and op.outcome == OK:
            for _, _, value in op.records:
                if value not in first_read or op.t1 < first_read[value]:
                    first_read[value] = op.t1
    if start is None:
        return []
    end = max(op.t1 for op in index.ops)
    acks = sorted((op.t1, value) for value, op in index.acked.items())
    unseen = [{"value": v, "acked_at": t, "partition": index.acked[v].partition, "offset": index.acked[v].offset}
              for t, v in acks if v not in first_read]  # fmt: skip
    return anomaly("group-stall", _stalls(start, end, first_read, acks, stall_s)) + anomaly("group-unseen", unseen)


def _stalls(
    start: float, end: float, first_read: dict[str, float], acks: list[tuple[float, str]], stall_s: float
) -> list[dict[str, Any]]:
    progress = sorted(set(first_read.values()))
    ack_times = [t for t, _ in acks]
    found: list[dict[str, Any]] = []
    bounds = [start, *progress, end]
    for a, b in zip(bounds, bounds[1:], strict=False):
        if b - a <= stall_s:
            continue
        # the oldest value acknowledged before b and not read by b
        waiting = [(t, v) for t, v in acks[: bisect.bisect_left(ack_times, b)] if first_read.get(v, float("inf")) >= b]
        if not waiting:
            continue
        oldest_t, oldest_v = waiting[0]
        stall_start = max(a, oldest_t)
        if b - stall_start > stall_s:
            found.append({"from": round(stall_start, 4), "to": round(b, 4), "seconds": round(b - stall_start, 3),
                          "waiting_values": len(waiting), "oldest_waiting": oldest_v})  # fmt: skip
    return found
