"""Consumer-group figures against a running cluster: time for a group of 3 to stabilize, and time from a
member's crash (SIGKILL) to its partitions being consumed again.

    python -m bench.group_rebalance [--bootstrap-servers H:P,...] [--runs 3] [--session-timeout-ms 45000]

Each run creates a 6-partition topic and starts three member processes (``multiprocessing``, spawn)
subscribed to it. *Stabilize*: from the last member's ``subscribe`` until the six partitions are owned
two by two, disjointly. *Crash*: one member is killed with SIGKILL while records flow into every
partition (one every 20 ms); measured until a survivor returns a record of one of the dead member's
partitions. That is bounded below by the session timeout (the broker clamps it to
``group.consumer.min/max.session.timeout.ms``; start the cluster with a low minimum to measure small
timeouts). Prints one line per run and, last, one JSON object with the medians.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import sys
import threading
import time
import uuid
from typing import Any

PARTITIONS = 6
MEMBERS = 3
WAIT_S = 180.0


def member(bootstrap: str, group: str, topic: str, session_timeout_ms: int, name: str, events: Any) -> None:
    """One member process: reports its subscribe time, each assignment, and the first record per partition."""
    from odradek import Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "latest",
            "enable.auto.commit": True,
            "session.timeout.ms": session_timeout_ms,
            "fetch.max.wait.ms": 50,
        }
    )
    consumer.subscribe([topic])
    events.put(("subscribed", name, time.monotonic()))
    owned: set[int] = set()
    seen: set[int] = set()
    while True:
        records = consumer.poll(timeout_ms=20)
        now = time.monotonic()
        current = {tp.partition for tp in consumer.assignment()}
        if current != owned:
            owned, seen = current, set()
            events.put(("assigned", name, now, sorted(owned)))
        for r in records:
            if r.partition not in seen:
                seen.add(r.partition)
                events.put(("record", name, now, r.partition))


def _stable(parts: list[set[int]]) -> bool:
    """Every member owns PARTITIONS / MEMBERS partitions, and together all of them (so none twice)."""
    even = len(parts) == MEMBERS and all(len(p) == PARTITIONS // MEMBERS for p in parts)
    return even and set().union(*parts) == set(range(PARTITIONS))


def one_run(bootstrap: str, session_timeout_ms: int) -> tuple[float, float]:
    from odradek import Admin, NewTopic, Producer

    topic, group = f"groups-bench-{uuid.uuid4().hex[:8]}", f"groups-bench-{uuid.uuid4().hex[:8]}"
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
    ctx = mp.get_context("spawn")
    events: Any = ctx.Queue()
    procs = [
        ctx.Process(target=member, args=(bootstrap, group, topic, session_timeout_ms, f"m{i}", events), daemon=True)
        for i in range(MEMBERS)
    ]
    stop = threading.Event()
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})

    def flow() -> None:
        while not stop.is_set():
            for p in range(PARTITIONS):
                producer.send(topic, b"x", partition=p)
            stop.wait(0.02)

    flowing = threading.Thread(target=flow, daemon=True)
    try:
        for proc in procs:
            proc.start()
        subscribed: dict[str, float] = {}
        owned: dict[str, set[int]] = {}
        deadline = time.monotonic() + WAIT_S
        stable_at = None
        while stable_at is None:
            kind, name, at, *rest = events.get(timeout=max(0.1, deadline - time.monotonic()))
            if kind == "subscribed":
                subscribed[name] = at
            elif kind == "assigned":
                owned[name] = set(rest[0])
            if len(subscribed) == MEMBERS and _stable(list(owned.values())):
                stable_at = at
        stabilize_ms = (stable_at - max(subscribed.values())) * 1000
        flowing.start()
        victim = procs[0]
        lost = owned["m0"]
        time.sleep(1.0)  # records flowing to everyone
        killed_at = time.monotonic()
        victim.kill()
        while True:
            kind, name, at, *rest = events.get(timeout=max(0.1, killed_at + WAIT_S - time.monotonic()))
            if kind == "record" and name != "m0" and rest[0] in lost and at > killed_at:
                return stabilize_ms, (at - killed_at) * 1000
    finally:
        stop.set()
        for proc in procs:
            proc.kill()
            proc.join(10)
        producer.close()
        with Admin({"bootstrap.servers": bootstrap}) as admin:
            admin.delete_topics([topic])


def main(argv: list[str] | None = None) -> int:
    from odradek.bootstrap import resolve_bootstrap_servers

    parser = argparse.ArgumentParser(prog="python -m bench.group_rebalance", description=__doc__.split("\n")[0])
    parser.add_argument("--bootstrap-servers", metavar="HOST:PORT[,...]")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--session-timeout-ms", type=int, default=45000)
    args = parser.parse_args(argv)
    bootstrap = resolve_bootstrap_servers(args.bootstrap_servers)
    stabilize, crash = [], []
    for run in range(args.runs):
        s, c = one_run(bootstrap, args.session_timeout_ms)
        stabilize.append(s)
        crash.append(c)
        print(f"run {run + 1}: group of {MEMBERS} stable in {s:.0f} ms; crashed member's partitions consumed "
              f"again {c:.0f} ms after SIGKILL (session.timeout.ms={args.session_timeout_ms})")  # fmt: skip
    print(
        json.dumps(
            {
                "runs": args.runs,
                "members": MEMBERS,
                "partitions": PARTITIONS,
                "session_timeout_ms": args.session_timeout_ms,
                "stabilize_ms_median": round(statistics.median(stabilize), 1),
                "stabilize_ms": [round(x, 1) for x in stabilize],
                "crash_to_consumed_ms_median": round(statistics.median(crash), 1),
                "crash_to_consumed_ms": [round(x, 1) for x in crash],
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
