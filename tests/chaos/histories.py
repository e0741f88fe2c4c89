"""Hand-made histories for the checker tests: a small builder and one clean history to derive anomalies from."""

from __future__ import annotations

from typing import Any

from chaos.history import FAILED, OK, UNKNOWN, Op

TOPIC = "t"


class Builder:
    """Appends operations with explicit times; ``seq`` counts per process, as the harness does."""

    def __init__(self, *, group: bool = False, replicas: dict[str, list[int]] | None = None) -> None:
        self.ops: list[Op] = []
        self._seqs: dict[str, int] = {}
        self.add("meta", "runner", 0.0, 0.0, info={
            "topic": TOPIC, "partitions": 2, "replication_factor": 3, "min_insync_replicas": 2,
            "replicas": replicas if replicas is not None else {"0": [0, 1, 2], "1": [0, 1, 2]},
            "brokers": [0, 1, 2], "seed": 0, "faults": [], "group": "g" if group else None,
        })  # fmt: skip

    def add(self, kind: str, process: str, t0: float, t1: float, **fields: Any) -> Op:
        seq = self._seqs.get(process, 0)
        self._seqs[process] = seq + 1
        op = Op(kind, process, seq, t0, t1, **fields)
        self.ops.append(op)
        return op

    def send(self, process: str, value: str, partition: int, offset: int | None, t0: float, t1: float,
             outcome: str = OK) -> Op:  # fmt: skip
        return self.add("send", process, t0, t1, outcome=outcome, partition=partition, value=value,
                        offset=offset if outcome == OK else None)  # fmt: skip

    def poll(self, process: str, records: list[tuple[int, int, str]], t: float) -> Op:
        return self.add("poll", process, t - 0.1, t, records=tuple(records))

    def reset(self, process: str, t: float) -> Op:
        return self.add("reset", process, t, t, info={"partitions": [0, 1]})

    def fault(self, action: str, node: str, t0: float, t1: float) -> Op:
        return self.add("fault", "nemesis", t0, t1, action=action, node=node, fault="kill-two", episode=0)


# The clean log: partition 0 holds a0 a1 a2 at offsets 0..2, partition 1 holds b0 b1 at 0..1.
LOG = {0: ["a0", "a1", "a2"], 1: ["b0", "b1"]}


def clean(*, group: bool = False, readers: int = 2) -> Builder:
    """Two producers (one per partition), ``readers`` readers reading everything in order, acks at t=1..5."""
    h = Builder(group=group)
    t = 1.0
    for partition, values in LOG.items():
        for offset, value in enumerate(values):
            h.send(f"producer-{partition}", value, partition, offset, t - 0.5, t)
            t += 1.0
    for j in range(readers):
        h.reset(f"reader-{j}", 0.5)
        h.poll(f"reader-{j}", [(0, 0, "a0"), (0, 1, "a1"), (1, 0, "b0")], 6.0 + j)
        h.poll(f"reader-{j}", [(0, 2, "a2"), (1, 1, "b1")], 8.0 + j)
    if group:
        h.reset("group-0", 0.5)
        h.poll("group-0", [(0, 0, "a0"), (0, 1, "a1"), (0, 2, "a2")], 6.5)
        h.poll("group-0", [(1, 0, "b0"), (1, 1, "b1")], 7.5)
    return h


def txn(h: Builder, number: int, outcome: str, t0: float, t1: float, process: str = "txn-0") -> Op:
    """Transaction ``number`` of ``process``: values ``t0-<number>-0`` to partition 0, ``t0-<number>-1`` to 1."""
    values = [[0, f"t0-{number}-0"], [1, f"t0-{number}-1"]]
    intent = "abort" if outcome == FAILED else "commit"
    return h.add("txn", process, t0, t1, outcome=outcome, info={"txn": number, "intent": intent, "values": values})


# The transactional log: per partition, transaction n's value at offset 2n and its marker at 2n + 1.
# Transaction 0 committed, 1 aborted, 2 of unknown outcome that committed, 3 of unknown outcome that aborted.
TXN_OUTCOMES = [OK, FAILED, UNKNOWN, UNKNOWN]
COMMITTED_IN_LOG = {0, 2}


def txn_clean(rc_readers: int = 2) -> Builder:
    """The four transactions; ``reader-0`` (read_uncommitted) reads every data record, each ``rc-reader-<j>``
    the committed ones."""
    h = Builder()
    for number, outcome in enumerate(TXN_OUTCOMES):
        txn(h, number, outcome, number + 0.1, number + 0.9)
    everything = [(p, 2 * n, f"t0-{n}-{p}") for n in range(len(TXN_OUTCOMES)) for p in (0, 1)]
    h.reset("reader-0", 0.05)
    h.poll("reader-0", everything, 6.0)
    for j in range(rc_readers):
        h.reset(f"rc-reader-{j}", 0.05)
        h.poll(f"rc-reader-{j}", [r for r in everything if r[1] // 2 in COMMITTED_IN_LOG], 6.0 + j)
    return h
