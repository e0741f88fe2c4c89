"""Figures of the group state machine alone (no I/O): ``python -m bench.group_state [--json]``.

* join storm: N members join a group over P partitions and heartbeat round-robin until the group is
  Stable and every partition is owned once (heartbeats needed, wall time);
* steady state: heartbeats per second of a Stable group (nothing to write);
* a member crash: its session expires, the rest heartbeat until Stable again (heartbeats needed);
* load: records replayed per second (decode + replay), as a new coordinator does on failover.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Iterable
from dataclasses import dataclass

from broker.group.config import GroupConfig
from broker.group.records import CoordinatorRecord, OffsetCommitKey, OffsetCommitValue, TopicPartition, decode_record
from broker.group.shard import GroupShard, Heartbeat
from common.clock import ManualClock


@dataclass
class _Topics:
    counts: dict[str, int]

    def partition_count(self, topic: str) -> int | None:
        return self.counts.get(topic)

    def topic_names(self) -> Iterable[str]:
        return list(self.counts)


class _Client:
    def __init__(self) -> None:
        self.member_id, self.epoch = "", 0
        self.owned: frozenset[TopicPartition] = frozenset()
        self.report = True

    def beat(self, shard: GroupShard, topics: _Topics) -> int:
        hb = Heartbeat("bench", self.member_id, self.epoch, subscribed_topic_names=("t",) if not self.epoch else None,
                       owned=self.owned if self.report or not self.epoch else None)  # fmt: skip
        result, records = shard.heartbeat(hb, topics)
        self.member_id, self.epoch, self.report = result.member_id, result.member_epoch, False
        if result.assignment is not None:
            self.owned, self.report = result.assignment, True
        return len(records)


def _until_stable(shard: GroupShard, topics: _Topics, clients: list[_Client], partitions: int) -> tuple[int, int]:
    beats = records = 0
    for _ in range(1000):
        for c in clients:
            records += c.beat(shard, topics)
            beats += 1
        owned = [tp for c in clients for tp in c.owned]
        if shard.groups["bench"].state().value == "Stable" and len(owned) == len(set(owned)) == partitions:
            return beats, records
    raise RuntimeError("the group did not stabilize in 1000 rounds")


def run(members: int, partitions: int) -> dict[str, float]:
    clock = ManualClock()
    config = GroupConfig(session_timeout_ms=10_000, min_session_timeout_ms=1)
    shard, topics = GroupShard(0, config, clock), _Topics({"t": partitions})
    clients = [_Client() for _ in range(members)]
    started = time.perf_counter()
    beats, records = _until_stable(shard, topics, clients, partitions)
    figures: dict[str, float] = {
        "members": members, "partitions": partitions, "join_heartbeats": beats, "join_records": records,
        "join_seconds": round(time.perf_counter() - started, 4),
    }  # fmt: skip
    started, n = time.perf_counter(), 0
    while time.perf_counter() - started < 1.0:
        for c in clients:
            c.beat(shard, topics)
            n += 1
    figures["steady_heartbeats_per_sec"] = round(n / (time.perf_counter() - started))
    # one member crashes: the others keep heartbeating, then its session expires
    crashed, alive = clients[0], clients[1:]
    clock.advance(config.session_timeout_ms + 1)
    for c in alive:
        c.beat(shard, topics)
    for gid in shard.due_groups():
        shard.expire_group(gid)
    assert crashed.member_id not in shard.groups["bench"].members
    if alive:
        beats, _ = _until_stable(shard, topics, alive, partitions)
        figures["crash_heartbeats_to_stable"] = beats
    figures["load_records_per_sec"] = _load_rate()
    return figures


def _load_rate(n: int = 100_000) -> float:
    encoded = [
        CoordinatorRecord(OffsetCommitKey(f"g{i % 100}", "t", i % 50), OffsetCommitValue(i, 0, "", 0)).encode()
        for i in range(n)
    ]
    shard = GroupShard(0, GroupConfig(), ManualClock())
    started = time.perf_counter()
    for key, value in encoded:
        shard.replay(decode_record(key, value))
    return round(n / (time.perf_counter() - started))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    results = [run(m, p) for m, p in ((3, 6), (10, 100), (100, 1000))]
    for r in results:
        if not args.json:
            print(", ".join(f"{k}={v}" for k, v in r.items()))
    if args.json:
        print(json.dumps(results))


if __name__ == "__main__":
    main()
