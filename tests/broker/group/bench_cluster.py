"""Coordinator figures with real broker processes and raw-stub members: ``python -m tests.broker.group.bench_cluster``.

3 brokers (``__consumer_offsets`` with replication factor 3, so every write waits for the ISR), a topic of 6
partitions, 3 members that heartbeat as PROTOCOL.md says (at the interval the coordinator answers, at once
after a new assignment). Prints:

* ``stabilize_ms``: from the first join to every partition owned exactly once, balanced, group Stable;
* ``crash_to_reassigned_ms``: from a member's last heartbeat (it crashes) to the survivors owning all
  partitions (bounded below by ``group.consumer.session.timeout.ms``, printed too);
* ``heartbeat_ms_p50`` / ``commit_ms_p50``: round trips of a steady heartbeat and of a one-partition commit.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from proto import broker_pb2 as pb
from tests.broker.cluster import Cluster
from tests.broker.group.test_coordinator_processes import Member, commit, find_coordinator, stub_of

SESSION_TIMEOUT_MS = 3000
CONFIG = {
    "offsets.topic.num.partitions": "3",
    "offsets.topic.replication.factor": "3",
    "group.consumer.heartbeat.interval.ms": "250",
    "group.consumer.session.timeout.ms": str(SESSION_TIMEOUT_MS),
    "group.consumer.min.session.timeout.ms": "1000",
}


def _drive(stub: Any, members: list[Member], done: Any, limit_s: float = 60.0) -> float:
    """Heartbeat like clients do until ``done()``; returns the seconds it took."""
    started = time.monotonic()
    due = {id(m): 0.0 for m in members}
    while time.monotonic() - started < limit_s:
        now = time.monotonic()
        for m in members:
            if m.report or now >= due[id(m)]:
                answer = m.heartbeat(stub)
                assert not answer.error.code, answer.error
                due[id(m)] = now + answer.heartbeat_interval_ms / 1000
        if done():
            return time.monotonic() - started
        time.sleep(0.005)
    raise RuntimeError("no convergence")


def _split(members: list[Member], n: int) -> bool:
    owned = [tp for m in members for tp in m.owned]
    sizes = [len(m.owned) for m in members]
    return len(owned) == len(set(owned)) == n and max(sizes) - min(sizes) <= 1


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp, Cluster(Path(tmp), brokers=3, broker_config=CONFIG) as cluster:
        cluster.create_topic("orders", partitions=6, replication_factor=3)
        stub = stub_of(cluster, find_coordinator(cluster, "bench").node_id)
        members = [Member("bench", ["orders"]) for _ in range(3)]

        def stable() -> bool:
            d = stub.ConsumerGroupDescribe(pb.ConsumerGroupDescribeRequest(group_ids=["bench"])).groups[0]
            return _split(members, 6) and d.group_state == "Stable"

        stabilize_s = _drive(stub, members, stable)
        beats, commits = [], []
        for _ in range(30):
            t0 = time.monotonic()
            members[0].heartbeat(stub)
            beats.append(time.monotonic() - t0)
            t0 = time.monotonic()
            assert not commit(stub, members[0], {sorted(members[0].owned)[0]: 1}).error.code
            commits.append(time.monotonic() - t0)
        crashed, survivors = members[0], members[1:]
        crashed.heartbeat(stub)
        crash_s = _drive(stub, survivors, lambda: _split(survivors, 6))
        print(json.dumps({
            "stabilize_ms": round(stabilize_s * 1000), "crash_to_reassigned_ms": round(crash_s * 1000),
            "session_timeout_ms": SESSION_TIMEOUT_MS, "heartbeat_interval_ms": 250,
            "heartbeat_ms_p50": round(statistics.median(beats) * 1000, 1),
            "commit_ms_p50": round(statistics.median(commits) * 1000, 1),
        }))  # fmt: skip


if __name__ == "__main__":
    main()
