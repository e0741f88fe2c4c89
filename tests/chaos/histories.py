"""Hand-made histories for the checker tests: a small builder and one clean history to derive anomalies from."""

from __future__ import annotations

from typing import Any

from chaos.history import OK, Op

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
