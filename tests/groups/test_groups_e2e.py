"""Consumer groups end to end: real controller and broker processes, consumers in-process and as processes.

The issue's list: three members over six partitions share them exactly; a member killed with SIGKILL
has its partitions moved within the session timeout and, committing after processing, no record is
skipped; a static member that restarts keeps its partitions; a duplicate instance id is fenced; killing
the coordinator's broker moves the group to a new coordinator with its committed offsets; lag is right.
Small timeouts (session 3 s, heartbeat 200 ms) keep the suite short; every wait is bounded.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from odradek import Admin, Consumer, KafkaError, Producer, TopicPartition
from odradek.errors import FencedInstanceIdError
from odradek.group import ConsumerRebalanceListener
from odradek.group.coordinator import find_coordinator
from odradek.net import ClusterClient
from tests.broker.cluster import Cluster
from tests.support.launcher import wait_until

pytestmark = pytest.mark.slow

BROKER_CONFIG = {
    "offsets.topic.num.partitions": "3",
    "group.consumer.heartbeat.interval.ms": "200",
    "group.consumer.min.session.timeout.ms": "1000",
    "group.consumer.session.timeout.ms": "3000",
}
SESSION_MS = 3000
REPO_ROOT = Path(__file__).resolve().parents[2]
WAIT_S = 60.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with Cluster(tmp_path_factory.mktemp("groups"), brokers=3, broker_config=BROKER_CONFIG) as c:
        yield c


def consumer(cluster: Cluster, group: str, **config: object) -> Consumer:
    settings: dict[str, object] = {
        "bootstrap.servers": cluster.bootstrap_servers,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": SESSION_MS,
        "fetch.max.wait.ms": 100,
    }
    return Consumer({**settings, **config})


def produce(cluster: Cluster, topic: str, count: int, partitions: int) -> None:
    with Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 5}) as p:
        futures = [p.send(topic, b"%d" % i, partition=i % partitions) for i in range(count)]
        for f in futures:
            f.result(timeout=30)


def poll_all(consumers: list[Consumer], done: Callable[[], bool], what: str) -> list[Any]:
    """Poll every consumer in turn until ``done()``; the records they returned."""
    records: list[Any] = []
    deadline = time.monotonic() + WAIT_S
    while not done():
        assert time.monotonic() < deadline, f"timed out: {what}"
        for c in consumers:
            records.extend(c.poll(timeout_ms=50))
    return records


def shares(consumers: list[Consumer], partitions: set[TopicPartition], each: int) -> bool:
    owned = [c.assignment() for c in consumers]
    return all(len(o) == each for o in owned) and set().union(*owned) == partitions


class Events(ConsumerRebalanceListener):
    def __init__(self) -> None:
        self.log: list[tuple[str, set[TopicPartition]]] = []

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.log.append(("revoked", revoked))

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.log.append(("assigned", assigned))

    def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        self.log.append(("lost", lost))


def test_three_members_share_six_partitions_exactly(cluster: Cluster) -> None:
    cluster.create_topic("share", partitions=6, replication_factor=1)
    tps = {TopicPartition("share", p) for p in range(6)}
    members = [consumer(cluster, "share-g") for _ in range(3)]
    try:
        for c in members:
            c.subscribe(["share"])
        poll_all(members, lambda: shares(members, tps, 2), "three members with two partitions each")
        owned = [c.assignment() for c in members]
        assert sum(len(o) for o in owned) == 6  # exactly: nobody shares a partition
        produce(cluster, "share", 60, 6)
        got = poll_all(members, lambda: sum(c.position(tp) for c in members for tp in c.assignment()) == 60, "60")
        assert sorted((r.partition, r.offset) for r in got) == sorted((i % 6, i // 6) for i in range(60))
    finally:
        for c in members:
            c.close()


def test_a_killed_member_partitions_move_and_no_record_is_skipped(cluster: Cluster, tmp_path: Path) -> None:
    cluster.create_topic("crash", partitions=6, replication_factor=1)
    produce(cluster, "crash", 600, 6)
    procs = [_member(cluster, tmp_path / f"m{i}.out", "crash-g", "crash") for i in range(3)]
    try:
        wait_until(lambda: all(_assigned(p) for p in procs), WAIT_S, "every member process assigned")
        wait_until(lambda: len(_processed(procs)) >= 100, WAIT_S, "some records processed")
        victim = procs[0]
        lost = _assigned(victim)
        victim[0].kill()
        victim[0].wait(10)
        produce(cluster, "crash", 600, 6)
        survivors = procs[1:]
        wait_until(lambda: lost <= set().union(*(_assigned(p) for p in survivors)), WAIT_S, "partitions moved")
        wait_until(lambda: len(_processed(procs)) == 1200, WAIT_S, "every record processed")
        seen = _processed(procs)
        assert seen == {(p, o) for p in range(6) for o in range(200)}  # nothing skipped (duplicates allowed)
    finally:
        for proc, _ in procs:
            proc.kill()
            proc.wait(10)


def test_a_static_member_restarts_and_keeps_its_partitions(cluster: Cluster) -> None:
    cluster.create_topic("static", partitions=6, replication_factor=1)
    tps = {TopicPartition("static", p) for p in range(6)}
    events = [Events() for _ in range(3)]
    members = [consumer(cluster, "static-g", **{"group.instance.id": f"box-{i}"}) for i in range(3)]
    try:
        for c, e in zip(members, events, strict=True):
            c.subscribe(["static"], e)
        poll_all(members, lambda: shares(members, tps, 2), "three static members")
        before = [c.assignment() for c in members]
        quiet = [len(e.log) for e in events[1:]]
        members[0].close()  # leaves with epoch -2: its partitions wait for it
        members[0] = consumer(cluster, "static-g", **{"group.instance.id": "box-0"})
        members[0].subscribe(["static"])
        poll_all(members, lambda: members[0].assignment() == before[0], "the restarted member's partitions back")
        for _ in range(10):  # nothing moved for the others
            for c in members:
                c.poll(timeout_ms=20)
        assert [c.assignment() for c in members] == before
        assert [len(e.log) for e in events[1:]] == quiet
    finally:
        for c in members:
            c.close()


def test_a_killed_static_member_restarted_in_time_gets_its_partitions_back(cluster: Cluster, tmp_path: Path) -> None:
    cluster.create_topic("static9", partitions=6, replication_factor=1)
    session = ["--session-timeout-ms", "30000"]  # long enough for a restart: nothing may move meanwhile
    procs = [
        _member(cluster, tmp_path / f"s{i}.out", "static9-g", "static9", "--instance-id", f"s-{i}", *session)
        for i in range(3)
    ]
    try:
        wait_until(lambda: all(len(_assigned(p)) == 2 for p in procs), WAIT_S, "three static members, two each")
        before = [_assigned(p) for p in procs]
        others = [_rebalances(p) for p in procs[1:]]
        procs[0][0].kill()  # SIGKILL: no leave heartbeat at all
        procs[0][0].wait(10)
        procs[0] = _member(cluster, tmp_path / "s0-again.out", "static9-g", "static9", "--instance-id", "s-0", *session)
        wait_until(lambda: _assigned(procs[0]) == before[0], WAIT_S, "the restarted member gets its partitions")
        time.sleep(1.0)  # a moment in which a wrong move would show
        assert [_assigned(p) for p in procs] == before
        assert [_rebalances(p) for p in procs[1:]] == others  # the other members saw nothing move
    finally:
        for proc, _ in procs:
            proc.kill()
            proc.wait(10)


def test_a_duplicate_instance_id_is_fenced(cluster: Cluster) -> None:
    cluster.create_topic("dup", partitions=2, replication_factor=1)
    old = consumer(cluster, "dup-g", **{"group.instance.id": "same"})
    new = consumer(cluster, "dup-g", **{"group.instance.id": "same"})
    try:
        old.subscribe(["dup"])
        poll_all([old], lambda: len(old.assignment()) == 2, "the first member")
        new.subscribe(["dup"])
        poll_all([new], lambda: len(new.assignment()) == 2, "the second member takes over the instance id")
        with pytest.raises(FencedInstanceIdError, match="group.instance.id 'same'"):
            poll_all([old], lambda: False, "the old member fenced")
    finally:
        new.close()
        old.close()


def test_lag_is_right(cluster: Cluster) -> None:
    cluster.create_topic("lag", partitions=2, replication_factor=1)
    produce(cluster, "lag", 30, 2)  # 15 per partition
    tp0, tp1 = TopicPartition("lag", 0), TopicPartition("lag", 1)
    with consumer(cluster, "lag-g") as c:
        c.subscribe(["lag"])
        poll_all([c], lambda: len(c.assignment()) == 2, "assigned")
        c.commit({tp0: 4, tp1: 15})
        with Admin({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
            described = admin.describe_group("lag-g")
            assert described.state == "Stable"
            assert [m.assignment for m in described.members] == [[tp0, tp1]]
            assert [(p.partition, p.committed_offset, p.log_end_offset, p.lag) for p in described.offsets] == [
                (tp0, 4, 15, 11),
                (tp1, 15, 15, 0),
            ]
            assert "lag-g" in {g.group_id for g in admin.list_groups()}
    with Admin({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
        wait_until(lambda: admin.describe_group("lag-g").state == "Empty", WAIT_S, "the group empty after close")
        plan = admin.reset_group_offsets("lag-g", [tp0, tp1], "earliest")
        assert plan == {tp0: 0, tp1: 0}
        assert admin.list_group_offsets("lag-g") == {tp0: 0, tp1: 0}
        admin.delete_groups(["lag-g"])
        assert "lag-g" not in {g.group_id for g in admin.list_groups()}


def test_the_group_goes_on_at_a_new_coordinator_after_a_broker_is_killed(cluster: Cluster) -> None:
    cluster.create_topic("failover", partitions=3, replication_factor=3)
    produce(cluster, "failover", 30, 3)
    client = ClusterClient(bootstrap_servers=cluster.bootstrap_servers.split(","))
    try:
        old_node, _ = find_coordinator(client, "failover-g")
        c = consumer(cluster, "failover-g")
        c.subscribe(["failover"])
        got = poll_all([c], lambda: sum(c.position(tp) for tp in c.assignment()) == 30, "the first 30 records")
        c.commit()
        cluster.kill_broker(old_node)
        produce(cluster, "failover", 30, 3)
        got += poll_all([c], lambda: sum(c.position(tp) for tp in c.assignment()) == 60, "30 more after failover")
        assert len(got) == 60
        c.commit()
        c.close()
        errors: list[str] = []
        try:
            new_node, _ = wait_until(lambda: _coordinator_other_than(client, old_node, errors), WAIT_S, "coordinator")
        except TimeoutError:
            raise AssertionError(f"no new coordinator; last answers: {errors[-3:]}") from None
        assert new_node != old_node
        with consumer(cluster, "failover-g") as again:  # starts from the committed offsets: nothing left
            again.subscribe(["failover"])
            poll_all([again], lambda: len(again.assignment()) == 3, "assigned at the new coordinator")
            assert again.poll(timeout_ms=500) == []
            assert again.committed_offsets(again.assignment()) == dict.fromkeys(again.assignment(), 20)
    finally:
        client.close()
        cluster.start_broker(old_node)


# ----------------------------------------------------------------------------------------- helpers


def _coordinator_other_than(client: ClusterClient, node: int, errors: list[str]) -> tuple[int, str] | None:
    """(node id, address) of the group's coordinator when it is not ``node`` (a tuple: node 0 is a real answer)."""
    try:
        client.refresh()  # the live brokers first, not the bootstrap list
        found = find_coordinator(client, "failover-g")
    except KafkaError as exc:
        errors.append(repr(exc))
        return None
    if found[0] == node:
        errors.append(f"still answered {node}")
        return None
    return found


def _member(cluster: Cluster, out: Path, group: str, topic: str, *extra: str) -> tuple[subprocess.Popen[bytes], Path]:
    argv = [sys.executable, "-m", "tests.groups.member", cluster.bootstrap_servers, group, topic]
    argv += ["--session-timeout-ms", str(SESSION_MS), *extra]
    with out.open("wb") as sink:
        proc = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, cwd=REPO_ROOT)
    return proc, out


def _events(member: tuple[subprocess.Popen[bytes], Path]) -> list[dict[str, Any]]:
    lines = member[1].read_text().splitlines()
    return [json.loads(line) for line in lines if line.startswith("{") and line.endswith("}")]


def _assigned(member: tuple[subprocess.Popen[bytes], Path]) -> set[TopicPartition]:
    owned: set[TopicPartition] = set()
    for event in _events(member):
        for key, sign in (("assigned", 1), ("revoked", -1), ("lost", -1)):
            for topic, p in event.get(key, ()):
                if sign > 0:
                    owned.add(TopicPartition(topic, p))
                else:
                    owned.discard(TopicPartition(topic, p))
    return owned


def _rebalances(member: tuple[subprocess.Popen[bytes], Path]) -> list[dict[str, Any]]:
    return [e for e in _events(member) if "records" not in e]


def _processed(members: list[tuple[subprocess.Popen[bytes], Path]]) -> set[tuple[int, int]]:
    return {(p, o) for m in members for e in _events(m) for p, o in e.get("records", ())}


def test_the_command_line_consumes_in_a_group_and_describes_it(cluster: Cluster, tmp_path: Path) -> None:
    cluster.create_topic("cli", partitions=2, replication_factor=1)
    produce(cluster, "cli", 10, 2)
    env = {**os.environ, "ODRADEK_BOOTSTRAP_SERVERS": cluster.bootstrap_servers, "XDG_STATE_HOME": str(tmp_path)}

    def odradek(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "odradek.cli", *args]
        return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False, cwd=REPO_ROOT)

    consumed = odradek("consume", "cli", "--group", "cli-g", "--from-beginning", "--max-messages", "10")
    assert consumed.returncode == 0, consumed.stderr
    assert sorted(consumed.stdout.split()) == sorted(str(i) for i in range(10))
    described = wait_until(
        lambda: (r := odradek("groups", "describe", "cli-g")).returncode == 0 and "Empty" in r.stdout and r,
        WAIT_S,
        "the group described, empty",
    )
    rows = [line.split() for line in described.stdout.splitlines() if line.startswith("cli-g")]
    assert [row[1:6] for row in rows] == [["cli", "0", "5", "5", "0"], ["cli", "1", "5", "5", "0"]]
    again = odradek("consume", "cli", "--group", "cli-g", "--timeout-ms", "3000")  # from the committed offsets
    assert again.returncode == 0, again.stderr
    assert again.stdout == ""
    reset = odradek("groups", "reset-offsets", "cli-g", "--topic", "cli:0", "--to-offset", "3", "--execute")
    assert reset.returncode == 0, reset.stderr
    assert [line.split() for line in reset.stdout.splitlines()][1] == ["cli-g", "cli", "0", "3"]
    listed = odradek("groups", "list")
    assert "cli-g" in listed.stdout.split()


def test_assign_with_a_group_id_starts_at_the_committed_offsets(cluster: Cluster) -> None:
    """As Kafka's consumer: ``assign`` with a ``group.id`` starts each partition at the group's committed
    offset; a partition the group never committed starts at ``auto.offset.reset``; ``seek`` overrides both."""
    cluster.create_topic("assigned", partitions=2, replication_factor=1)
    produce(cluster, "assigned", 10, 2)  # 5 records per partition
    p0, p1 = TopicPartition("assigned", 0), TopicPartition("assigned", 1)
    with consumer(cluster, "assigners") as first:
        first.assign([p0])
        first.commit({p0: 3})
    with consumer(cluster, "assigners", **{"auto.offset.reset": "latest"}) as second:
        second.assign([p0, p1])
        records = poll_all([second], lambda: second.position(p0) >= 5, "p0 read from its committed offset")
        assert [(r.partition, r.offset) for r in records] == [(0, 3), (0, 4)]
        assert second.position(p1) == 5  # never committed: auto.offset.reset latest
    with consumer(cluster, "assigners") as third:
        third.assign([p0])
        third.seek(p0, 1)
        assert third.position(p0) == 1
        records = poll_all([third], lambda: third.position(p0) >= 5, "p0 read from the seek")
        assert [r.offset for r in records] == [1, 2, 3, 4]
    with consumer(cluster, "other-group") as elsewhere:  # no committed offsets at all: auto.offset.reset
        elsewhere.assign([p0])
        assert elsewhere.position(p0) == 0
