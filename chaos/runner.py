"""One chaos run, end to end: cluster, topic, workload, faults, recovery, drain, checks, files.

Order of a run (each wait bounded):

1. the backend: a cluster it starts, one attached from ``cluster.json``, or one given by the caller (tests);
2. the topic (RF 3, ``min.insync.replicas`` 2, ``partitions``), waited for until every partition has a leader
   and its full ISR; its replica sets go into the history's meta;
3. the workload starts (group members only when ``Consumer.subscribe`` works: :func:`group_support`);
4. the nemesis runs the seeded schedule until ``duration_s``;
5. every node is brought back and the cluster waited for until it is healthy (``Nemesis.healthy``: every broker
   agrees, so that no broker still on its image from before a network partition is believed);
6. the producers stop (their pending sends end as ok or unknown), the end offsets are read, and the readers
   (and the group) drain to them, and at least past every acknowledged write (:func:`drain_targets`);
7. the checkers run over the history; ``history.jsonl``, ``summary.json`` and ``report.txt`` are written to
   ``out_dir``.

:class:`RunResult` ``.passed`` is false on any anomaly and on any run problem (a worker crashed, the
cluster did not recover, the drain did not finish, no fault was injected at all).
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos.backends import Backend
from chaos.checker import Anomaly, check
from chaos.faults import Episode, Nemesis, Timing, plan_schedule
from chaos.history import OK, History, Op
from chaos.report import render, summarize
from chaos.workload import Workload, WorkloadConfig, group_support
from metadata.configs import ControllerConfig
from odradek import Admin, NewTopic, TopicPartition
from odradek.errors import OdradekError

# The cluster a run starts has the default settings (broker.session.timeout.ms 2000, heartbeats every 500 ms):
# the unavailability the report gives is what a user of a default cluster would see.
CHAOS_BROKER_CONFIG: dict[str, str] = {}
CHAOS_CONTROLLER_CONFIG: dict[str, str] = {}
SESSION_TIMEOUT_S = ControllerConfig().broker_session_timeout_ms / 1000


@dataclass(frozen=True, slots=True)
class RunConfig:
    duration_s: float
    seed: int
    faults: tuple[str, ...]
    out_dir: Path
    topic: str = ""  # default: chaos-<seed>-<time>
    partitions: int = 6
    replication_factor: int = 3
    min_insync_replicas: int = 2
    producers: int = 3
    readers: int = 2
    group_members: int = 2  # used only when Consumer.subscribe works
    txn_producers: int = 0  # transactional producers (chaos.workload.TxnProducerWorker)
    rc_readers: int = 0  # read_committed readers (what the transaction checkers read)
    rate: float = 150.0
    timing: Timing = field(default_factory=lambda: Timing(pause_s=SESSION_TIMEOUT_S * 1.5))
    drain_timeout_s: float = 90.0
    setup_timeout_s: float = 60.0


@dataclass(slots=True)
class RunResult:
    summary: dict[str, Any]
    report: str
    anomalies: list[Anomaly]
    problems: list[str]
    out_dir: Path

    @property
    def passed(self) -> bool:
        return not self.anomalies and not self.problems


def wait_for(predicate: Callable[[], Any], timeout_s: float, interval_s: float = 0.25) -> Any:
    """``predicate()`` until it returns something truthy (returned) or ``timeout_s`` passes (None)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval_s)


def create_topic(admin: Admin, config: RunConfig, topic: str) -> dict[str, list[int]]:
    """Create the topic and wait until it is fully replicated; partition -> replica broker ids."""
    admin.create_topics([NewTopic(topic, config.partitions, config.replication_factor,
                                  config={"min.insync.replicas": str(config.min_insync_replicas)})])  # fmt: skip

    def ready() -> dict[str, list[int]] | None:
        try:
            partitions = admin.describe_topics([topic])[topic].partitions
        except OdradekError:
            return None
        if len(partitions) != config.partitions:
            return None
        if any(p.leader < 0 or set(p.isr) != set(p.replicas) for p in partitions):
            return None
        return {str(p.partition): sorted(p.replicas) for p in partitions}

    replicas: dict[str, list[int]] | None = wait_for(ready, config.setup_timeout_s)
    if replicas is None:
        raise RuntimeError(f"topic {topic} did not get leaders and full ISRs within {config.setup_timeout_s:.0f} s")
    return replicas


def end_offsets(admin: Admin, topic: str, partitions: int, timeout_s: float) -> dict[int, int] | None:
    def ask() -> dict[int, int] | None:
        try:
            listed = admin.list_offsets({TopicPartition(topic, p): "latest" for p in range(partitions)})
        except OdradekError:
            return None
        return {tp.partition: offset for tp, offset in listed.items()}

    found: dict[int, int] | None = wait_for(ask, timeout_s)
    return found


def run(config: RunConfig, backend: Backend, out: Callable[[str], None] = print) -> RunResult:
    """One run against ``backend`` (which the caller owns and closes)."""
    config.out_dir.mkdir(parents=True, exist_ok=True)
    topic = config.topic or f"chaos-{config.seed}-{int(time.time())}"
    problems: list[str] = []
    notes: list[str] = []
    admin = Admin({"bootstrap.servers": backend.bootstrap_servers, "request.timeout.ms": 5000,
                   "default.api.timeout.ms": 10000})  # fmt: skip
    history = History(config.out_dir / "history.jsonl")
    try:
        replicas = create_topic(admin, config, topic)
        group_members = config.group_members
        if group_members:
            why_not = group_support(backend.bootstrap_servers, topic)
            if why_not:
                notes.append(f"group consumers off: {why_not}; group-stall/group-unseen NOT checked")
                group_members = 0
        brokers = sorted(n.node_id for n in backend.nodes() if n.role == "broker")
        history.add("meta", "runner", 0.0, info={
            "topic": topic, "partitions": config.partitions, "replication_factor": config.replication_factor,
            "min_insync_replicas": config.min_insync_replicas, "replicas": replicas, "brokers": brokers,
            "seed": config.seed, "faults": list(config.faults), "duration_s": config.duration_s,
            "group": "chaos" if group_members else None,
            "txn_producers": config.txn_producers, "rc_readers": config.rc_readers,
        })  # fmt: skip
        for note in notes:
            out(f"note: {note}")
        workload = Workload(WorkloadConfig(backend.bootstrap_servers, topic, config.partitions,
                                           producers=config.producers, readers=config.readers,
                                           group_members=group_members, rate=config.rate,
                                           txn_producers=config.txn_producers, rc_readers=config.rc_readers),
                            history)  # fmt: skip
        episodes = plan_schedule(random.Random(config.seed), config.faults, config.duration_s, config.timing)
        out(f"chaos: seed {config.seed}, {len(episodes)} episodes planned over {config.duration_s:.0f} s "
            f"({', '.join(e.kind for e in episodes) or 'none'}); topic {topic}; files in {config.out_dir}")  # fmt: skip
        nemesis = Nemesis(backend, history, admin, topic, config.partitions, out)
        workload.start()
        try:
            nemesis.run(episodes, config.duration_s, config.timing, lambda: bool(workload.crashed()))
            nemesis.heal_all(len(episodes))
            if not nemesis.wait_recovered(_final(len(episodes)), config.timing.recover_timeout_s):
                problems.append("the cluster did not recover after the faults (see the last 'recovered' line)")
            _finish(config, workload, history, admin, topic, problems, out)
        finally:
            workload.stop(timeout_s=30.0)
            problems += workload.failures()
        notes.append(f"{workload.empty_polls()} empty polls (not recorded)")
    finally:
        history.close()
        admin.close()
    return _conclude(config, history.ops(), problems, notes, group_members)


def _final(count: int) -> Episode:
    return Episode(count, "heal-all", 0.0, 0.0, 0.0, 0.0)


def _finish(config: RunConfig, workload: Workload, history: History, admin: Admin, topic: str,
            problems: list[str], out: Callable[[str], None]) -> None:  # fmt: skip
    """Stop the producers, read the end offsets, drain the consumers to them (and at least past every
    acknowledged write: :func:`drain_targets`)."""
    workload.stop_producers(timeout_s=60.0)
    listed = end_offsets(admin, topic, config.partitions, 30.0)
    acknowledged = acknowledged_ends(history.ops())
    targets = None if listed is None else drain_targets(listed, acknowledged)
    history.add("phase", "runner", history.now(), info={"name": "drain", "targets": targets, "listed": listed,
                                                         "acknowledged": acknowledged})  # fmt: skip
    if targets is None:
        problems.append("could not read the end offsets for the drain")
        return
    out(f"[{history.now():8.2f}s] faults over; draining the consumers to {sum(targets.values())} records")
    if targets != listed:
        out(f"note: the end offsets listed {listed} are below the acknowledged writes {acknowledged}; "
            f"draining to {targets}")  # fmt: skip
    workload.drain(targets)
    if not wait_for(workload.drained, config.drain_timeout_s):
        problems.append(f"the consumers did not reach the end offsets within {config.drain_timeout_s:.0f} s: "
                        f"{workload.progress.lagging(workload.drain_keys())}")  # fmt: skip
    history.add("phase", "runner", history.now(), info={"name": "end"})


def acknowledged_ends(ops: Iterable[Op]) -> dict[int, int]:
    """Partition -> one past the highest offset a send was acknowledged at."""
    ends: dict[int, int] = {}
    for op in ops:
        if op.kind == "send" and op.outcome == OK and op.partition is not None and op.offset is not None:
            ends[op.partition] = max(ends.get(op.partition, 0), op.offset + 1)
    return dict(sorted(ends.items()))


def drain_targets(listed: Mapping[int, int], acknowledged: Mapping[int, int]) -> dict[int, int]:
    """Where the consumers must read to: per partition, the listed end offset, or past the last acknowledged
    write when that is further. The listing alone can be short: a new leader's high watermark may lag the
    offsets acknowledged before it took over, and a broker still on the metadata image it had before a
    network partition answers as the leader it was (the consumers would stop before writes they must read)."""
    return {p: max(end, acknowledged.get(p, 0)) for p, end in listed.items()}


def _conclude(config: RunConfig, ops: list[Op], problems: list[str], notes: list[str],
              group_members: int) -> RunResult:  # fmt: skip
    stall_s = config.timing.hold_s[1] + config.timing.pause_s + SESSION_TIMEOUT_S + 30.0
    anomalies = check(ops, group_stall_s=stall_s)
    summary = summarize(ops, anomalies, extra={"problems": problems, "notes": notes})
    if config.faults and not summary["faults"]["by_kind"]:
        problems.append("no fault was injected (every planned episode was skipped, or none fit the duration)")
    problems += [f"fault action failed: {action}" for action in summary["faults"]["failed_actions"]]
    text = render(summary)
    (config.out_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    (config.out_dir / "report.txt").write_text(text)
    return RunResult(summary, text, anomalies, problems, config.out_dir)


def cluster_configs(
    broker: Mapping[str, str] | None = None, controller: Mapping[str, str] | None = None
) -> tuple[dict[str, str], dict[str, str]]:
    """The chaos defaults overridden by the given broker and controller configs."""
    return {**CHAOS_BROKER_CONFIG, **(broker or {})}, {**CHAOS_CONTROLLER_CONFIG, **(controller or {})}
