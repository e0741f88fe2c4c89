"""Real ``odradek controller`` processes on 127.0.0.1, driven through plain gRPC stubs.

Fake brokers register, heartbeat and follow the metadata log like real ones. Every process is stopped by
the fixtures whatever a test does, and every wait is bounded.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import grpc
import pytest

from controller.client import ControllerClient, ControllerUnavailableError
from metadata.image import MetadataDelta, MetadataImage
from metadata.record_codec import decode_record, encode_record
from metadata.records import ConfigResourceType, FenceBroker, LeaderChange, MetadataRecord, Topic
from metadata.snapshot import decode_snapshot
from proto import controller_pb2 as pb
from tests.support.launcher import LocalQuorum, addresses_of, wait_until

CONFIG = {
    "broker.session.timeout.ms": "2000",
    "leader.imbalance.check.interval.seconds": "1",
    "controller.request.timeout.ms": "4000",
}
WAIT_S = 30.0
Entry = tuple[int, int, bytes]


@pytest.fixture
def quorum(tmp_path: Path) -> Iterator[LocalQuorum]:
    q = LocalQuorum(str(tmp_path), 3, CONFIG)
    try:
        q.start_all()
        yield q
    finally:
        q.close()


@pytest.fixture
def client(quorum: LocalQuorum) -> Iterator[ControllerClient]:
    with ControllerClient(addresses_of(quorum), call_timeout_s=3.0) as c:
        yield c


# --- helpers -------------------------------------------------------------------------------------


def fetch_all(client: ControllerClient, address: str) -> tuple[MetadataImage, list[Entry]]:
    """The committed log of one node from offset 0 (snapshot first if trimmed), and its image."""
    image, entries, offset = MetadataImage(), [], 0
    while True:
        response = client.stub(address).FetchMetadata(
            pb.FetchMetadataRequest(from_offset=offset, max_records=5000, broker_id=-1), timeout=10
        )
        assert not response.error.code, response.error
        if response.HasField("snapshot"):
            image = decode_snapshot(response.snapshot.payload)
        delta = MetadataDelta(image)
        for e in response.entries:
            delta.replay(decode_record(e.payload), e.offset)
            entries.append((e.offset, e.term, e.payload))
        image = delta.apply()
        if not response.entries:
            return image, entries
        offset = response.entries[-1].offset + 1


def log_length(client: ControllerClient, address: str) -> int:
    """How many records ``address`` serves (-1 while it cannot be reached)."""
    try:
        return len(fetch_all(client, address)[1])
    except grpc.RpcError:
        return -1


def has_records(client: ControllerClient, address: str, count: int) -> bool:
    return log_length(client, address) >= count


def records(entries: list[Entry]) -> list[MetadataRecord]:
    return [decode_record(payload) for _, _, payload in entries]


def active_id(quorum: LocalQuorum, client: ControllerClient) -> int:
    """The active controller: the one that answered a write last."""
    client.call("AlterConfigs", pb.AlterConfigsRequest(validate_only=True), deadline_s=WAIT_S)
    return next(i for i, a in quorum.listen.items() if a == client.current)


class FakeBroker:
    """Registers, then follows the metadata log and heartbeats every 100 ms on its own thread."""

    def __init__(self, client: ControllerClient, broker_id: int) -> None:
        self.client = client
        self.broker_id = broker_id
        self.applied = -1
        self.epoch = -1
        self.heartbeating = threading.Event()
        self.heartbeating.set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"fake-broker-{broker_id}", daemon=True)

    def start(self) -> FakeBroker:
        response = self.client.call(
            "RegisterBroker",
            pb.RegisterBrokerRequest(
                broker_id=self.broker_id,
                incarnation_id=str(uuid.uuid4()),
                endpoints={"PLAINTEXT": f"127.0.0.1:{19092 + self.broker_id}"},
            ),  # fmt: skip
            deadline_s=WAIT_S,
        )
        assert not response.error.code, response.error
        self.epoch = response.broker_epoch
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            if not self.heartbeating.is_set():
                continue
            with contextlib.suppress(grpc.RpcError):  # that controller is down: heartbeating finds another
                self._follow()
            try:
                self.client.call(
                    "BrokerHeartbeat",
                    pb.BrokerHeartbeatRequest(
                        broker_id=self.broker_id, broker_epoch=self.epoch, current_metadata_offset=self.applied
                    ),
                    deadline_s=2.0,
                )
            except ControllerUnavailableError:
                continue

    def _follow(self) -> None:
        response = self.client.stub(self.client.current).FetchMetadata(
            pb.FetchMetadataRequest(from_offset=self.applied + 1, max_records=5000, broker_id=self.broker_id),
            timeout=2,
        )
        if response.entries:
            self.applied = response.entries[-1].offset

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


@pytest.fixture
def brokers(client: ControllerClient) -> Iterator[list[FakeBroker]]:
    fakes: list[FakeBroker] = []
    try:
        for b in range(3):
            fakes.append(FakeBroker(client, b).start())
        yield fakes
    finally:
        for fake in fakes:
            fake.stop()


def wait_unfenced(client: ControllerClient, address: str, ids: list[int]) -> None:
    def unfenced() -> bool:
        image, _ = fetch_all(client, address)
        return all(image.broker(b) is not None and not image.brokers[b].fenced for b in ids)

    wait_until(unfenced, WAIT_S, f"brokers {ids} unfenced")


def create(client: ControllerClient, name: str, partitions: int = 1, rf: int = 1, deadline_s: float = WAIT_S) -> str:
    request = pb.CreateTopicsRequest(
        topics=[pb.TopicToCreate(name=name, num_partitions=partitions, replication_factor=rf)]
    )
    response = client.call("CreateTopics", request, deadline_s=deadline_s)
    return str(response.topics[0].error.code)


# --- tests -----------------------------------------------------------------------------------------


def test_one_active_controller_others_point_to_it(quorum: LocalQuorum, client: ControllerClient) -> None:
    """Non-active nodes answer NOT_CONTROLLER with a hint naming the active one; every node serves
    DescribeQuorum and FetchMetadata."""
    active = active_id(quorum, client)

    def described(address: str) -> pb.DescribeQuorumResponse:
        response: pb.DescribeQuorumResponse = client.stub(address).DescribeQuorum(pb.DescribeQuorumRequest(), timeout=5)
        return response

    wait_until(
        lambda: all(described(a).leader_id == active for a in quorum.listen.values()),
        WAIT_S,
        "all nodes know the leader",
    )
    for node_id, address in quorum.listen.items():
        assert {n.node_id: n.address for n in described(address).nodes} == quorum.listen
        assert [n.node_id for n in described(address).nodes if n.is_leader] == [active]
        if node_id == active:
            continue
        response = client.stub(address).CreateTopics(
            pb.CreateTopicsRequest(topics=[pb.TopicToCreate(name="x", num_partitions=1, replication_factor=1)]),
            timeout=5,
        )
        assert response.error.code == "NOT_CONTROLLER"
        assert (response.controller.node_id, response.controller.address) == (active, quorum.listen[active])
    _, entries = fetch_all(client, quorum.listen[active])
    first = records(entries)[0]
    assert isinstance(first, LeaderChange)
    assert first.leader_id == active


def test_broker_that_stops_heartbeating_is_fenced_and_loses_leadership(
    quorum: LocalQuorum, client: ControllerClient, brokers: list[FakeBroker]
) -> None:
    """A silent broker is fenced after broker.session.timeout.ms; the next ISR member leads."""
    address = quorum.listen[active_id(quorum, client)]
    wait_unfenced(client, address, [0, 1, 2])
    request = pb.CreateTopicsRequest()
    topic = request.topics.add(name="t", num_partitions=-1, replication_factor=-1)
    topic.assignments.add(broker_ids=[0, 1, 2])
    assert not client.call("CreateTopics", request, deadline_s=WAIT_S).topics[0].error.code
    brokers[0].heartbeating.clear()

    def moved() -> bool:
        image, _ = fetch_all(client, address)
        reg = image.partition(image.topics_by_name["t"].topic_id, 0)
        return reg is not None and reg.leader == 1 and reg.isr == (1, 2) and image.brokers[0].fenced

    wait_until(moved, WAIT_S, "broker 0 fenced and leadership moved to broker 1")
    _, entries = fetch_all(client, address)
    fences = [r for r in records(entries) if isinstance(r, FenceBroker)]
    assert [f.broker_id for f in fences] == [0]


@pytest.mark.slow
def test_failover_during_writes_loses_and_duplicates_nothing(
    quorum: LocalQuorum, client: ControllerClient, brokers: list[FakeBroker]
) -> None:
    """kill -9 the active controller during a stream of CreateTopics: another takes over, every
    acknowledged topic is in the log exactly once, and all logs agree; the killed node catches up."""
    first_active = active_id(quorum, client)
    wait_unfenced(client, quorum.listen[first_active], [0, 1, 2])
    acked: list[str] = []
    outcomes: dict[str, str] = {}
    done = threading.Event()

    def writer() -> None:
        i = 0
        while not done.is_set() and i < 400:
            name = f"topic-{i}"
            try:
                outcomes[name] = create(client, name, partitions=2, rf=2, deadline_s=20.0)
            except ControllerUnavailableError as exc:
                outcomes[name] = f"unavailable: {exc}"
            if outcomes[name] in ("", "TOPIC_ALREADY_EXISTS"):
                acked.append(name)
            i += 1

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    try:
        wait_until(lambda: len(acked) >= 30, WAIT_S, "30 topics before the kill")
        quorum.nodes[first_active].kill()
        count_at_kill = len(acked)
        wait_until(lambda: len(acked) >= count_at_kill + 30, WAIT_S, "30 topics after the kill")
    finally:
        done.set()
        thread.join(30)
    assert not thread.is_alive()
    survivors = [i for i in quorum.ids if i != first_active]
    new_active = active_id(quorum, client)
    assert new_active in survivors
    logs = {i: fetch_all(client, quorum.listen[i]) for i in survivors}
    (_image, entries), (_, other) = logs[survivors[0]], logs[survivors[1]]
    n = min(len(entries), len(other))
    assert entries[:n] == other[:n]
    assert n >= len(entries) - 5
    names = [r.name for r in records(entries) if isinstance(r, Topic)]
    assert len(names) == len(set(names)), "a topic was created twice"
    assert set(acked) <= set(names), f"acknowledged but missing: {set(acked) - set(names)}"
    assert max(term for _, term, _ in entries) > entries[0][1]  # a new term took over
    assert [o for o in outcomes.values() if o not in ("", "TOPIC_ALREADY_EXISTS")] == []

    quorum.start(first_active)
    end = max(len(fetch_all(client, quorum.listen[i])[1]) for i in survivors)
    wait_until(lambda: log_length(client, quorum.listen[first_active]) >= end, WAIT_S, "the restarted node catching up")
    restarted = fetch_all(client, quorum.listen[first_active])[1]
    reference = fetch_all(client, quorum.listen[new_active])[1]
    assert restarted[:end] == reference[:end]


def set_retention(client: ControllerClient, value: int, deadline_s: float = WAIT_S) -> str:
    """One write that needs no broker: the cluster's log.retention.ms."""
    request = pb.AlterConfigsRequest()
    request.resources.add(resource_type="cluster", resource_name="").entries.add(
        key="log.retention.ms", value=str(value)
    )
    return str(client.call("AlterConfigs", request, deadline_s=deadline_s).resources[0].error.code)


def retention(image: MetadataImage) -> str | None:
    return image.config(ConfigResourceType.CLUSTER, "").get("log.retention.ms")


@pytest.mark.slow
def test_no_write_commits_without_a_majority(quorum: LocalQuorum, client: ControllerClient) -> None:
    """With 2 of 3 controllers dead no write commits: requests fail (NOT_CONTROLLER / time out); once a
    second node is back, writes commit again."""
    active = active_id(quorum, client)
    assert set_retention(client, 1) == ""
    others = [i for i in quorum.ids if i != active]
    for i in others:
        quorum.nodes[i].kill()
    _, before = fetch_all(client, quorum.listen[active])
    with pytest.raises(ControllerUnavailableError):
        set_retention(client, 2, deadline_s=3.0)
    image, after = fetch_all(client, quorum.listen[active])
    assert after == before
    assert retention(image) == "1"
    quorum.start(others[0])
    assert set_retention(client, 3) == ""
    wait_until(lambda: log_length(client, quorum.listen[others[0]]) > len(after), WAIT_S, "the restarted node serving")
    image, _ = fetch_all(client, quorum.listen[others[0]])
    assert retention(image) == "3"


@pytest.mark.slow
def test_whole_quorum_restart_keeps_everything(
    quorum: LocalQuorum, client: ControllerClient, brokers: list[FakeBroker]
) -> None:
    """kill -9 every controller and start them again: every committed record is still there."""
    active = active_id(quorum, client)
    wait_unfenced(client, quorum.listen[active], [0, 1, 2])
    for i in range(5):
        assert create(client, f"t{i}", partitions=3, rf=3) == ""
    assert set_retention(client, 5) == ""
    _, before = fetch_all(client, quorum.listen[active])
    for node in quorum.nodes.values():
        node.kill()
    for i in quorum.ids:
        quorum.start(i)
    active_id(quorum, client)
    for address in quorum.listen.values():
        wait_until(partial(has_records, client, address, len(before)), WAIT_S, f"{address} serving")
        image, after = fetch_all(client, address)
        assert after[: len(before)] == before
        assert {f"t{k}" for k in range(5)} <= set(image.topics_by_name)
        assert retention(image) == "5"
        assert set(image.brokers) == {0, 1, 2}


def test_clean_shutdown_on_sigterm_and_restart(quorum: LocalQuorum, client: ControllerClient) -> None:
    """SIGTERM stops a node cleanly (status 0); it restarts from its data directory and catches up."""
    active = active_id(quorum, client)
    assert set_retention(client, 10) == ""
    assert quorum.nodes[active].stop() == 0
    assert set_retention(client, 11) == ""
    node = quorum.start(active)
    wait_until(lambda: log_length(client, node.listen) >= 0, WAIT_S, "the restarted node serving")
    wait_until(lambda: retention(fetch_all(client, node.listen)[0]) == "11", WAIT_S, "the restarted node caught up")


def test_fetch_metadata_long_poll_and_snapshot(tmp_path: Path) -> None:
    """FetchMetadata long-polls until a record commits; a reader below the trim point gets the snapshot
    first, then the records after it, and rebuilds the same image (single-node quorum)."""
    with LocalQuorum(str(tmp_path), 1, {**CONFIG, "metadata.log.max.records.between.snapshots": "40"}) as q:
        q.start_all()
        client = ControllerClient(addresses_of(q))
        try:
            active_id(q, client)
            end = fetch_all(client, q.listen[1])[1][-1][0] + 1
            idle = client.stub(q.listen[1]).FetchMetadata(
                pb.FetchMetadataRequest(from_offset=end, max_wait_ms=200), timeout=10
            )
            assert list(idle.entries) == []
            assert idle.end_offset == end
            polled: list[pb.FetchMetadataResponse] = []
            poller = threading.Thread(
                target=lambda: polled.append(
                    client.stub(q.listen[1]).FetchMetadata(
                        pb.FetchMetadataRequest(from_offset=end, max_wait_ms=20_000), timeout=30
                    )
                )
            )
            poller.start()
            time.sleep(0.2)  # not needed for correctness: the poll may start before or after the writes
            for i in range(60):
                request = pb.AlterConfigsRequest()
                request.resources.add(resource_type="cluster", resource_name="").entries.add(
                    key="log.retention.ms", value=str(i + 1)
                )
                assert not client.call("AlterConfigs", request).resources[0].error.code
            poller.join(30)
            assert polled
            assert polled[0].entries
            assert polled[0].entries[0].offset == end
            response = client.stub(q.listen[1]).FetchMetadata(pb.FetchMetadataRequest(from_offset=0), timeout=10)
            assert response.HasField("snapshot")
            assert response.snapshot.offset > 0
            assert response.entries[0].offset == response.snapshot.offset + 1
            image, _ = fetch_all(client, q.listen[1])
            assert image.config(ConfigResourceType.CLUSTER, "") == {"log.retention.ms": "60"}
        finally:
            client.close()


# --- the command line ---------------------------------------------------------------------------------


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if k != "ODRADEK_CLUSTER_SECRET"}
    environment.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "odradek.cli", "controller", *args],
        capture_output=True, text=True, timeout=30, env=environment,
    )  # fmt: skip


BASE = ["--node-id", "1", "--listen", "127.0.0.1:1", "--raft-listen", "127.0.0.1:2", "--data-dir", "/nonexistent/x"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--quorum", "1@10.0.0.1:2,2@10.0.0.2:2"], "no cluster secret"),
        (["--quorum", "1@127.0.0.1:2"], "no cluster secret"),  # issue 17: no loopback exception
        (["--quorum", "2@127.0.0.1:2"], "is not one of the --quorum voters"),
        (["--quorum", "1@127.0.0.1:3"], "different ports"),
        (["--quorum", "1@127.0.0.1:2", "--config", "no.such=1"], "no.such"),
        (["--quorum", "1@127.0.0.1:2", "--config", "broker.session.timeout.ms=x"], "broker.session.timeout.ms"),
        (["--quorum", "one@127.0.0.1:2"], "ID@HOST:PORT"),
    ],
)
def test_cli_refuses_bad_arguments_with_one_sentence(args: list[str], message: str) -> None:
    result = run_cli(*BASE, *args)
    assert result.returncode != 0
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""


def test_cli_refuses_a_short_cluster_secret(tmp_path: Path) -> None:
    result = run_cli(*BASE, "--quorum", "1@127.0.0.1:2", env={"ODRADEK_CLUSTER_SECRET": "short"})
    assert result.returncode != 0
    assert "at least 8 bytes" in result.stderr
    empty = tmp_path / "secret"
    empty.write_text("\n")
    result = run_cli(*BASE, "--quorum", "1@127.0.0.1:2", "--cluster-secret-file", str(empty))
    assert result.returncode != 0
    assert "empty" in result.stderr


def test_snapshot_fold_in_pieces_equals_one_replay() -> None:
    """The quorum's fold (controller.server.SnapshotFolder) is deterministic and incremental: folding a log
    in pieces, with or without its cache, gives the snapshot of replaying it at once."""
    from controller.core.common import preview
    from controller.server import SnapshotFolder
    from metadata.snapshot import encode_snapshot
    from tests.controller.conftest import CoreHarness

    h = CoreHarness()
    h.start_brokers([0, 1, 2])
    for i in range(4):
        h.create_topic(f"t{i}", 3, 2, configs={"retention.ms": str(i + 1)})
    h.heartbeat(1, want_shut_down=True)
    payloads = [encode_record(LeaderChange(1, 0))] + [encode_record(r) for res in h.results for r in res.records]
    expected = encode_snapshot(preview(MetadataImage(), [tuple(decode_record(p) for p in payloads)]))
    for cut in (1, 7, len(payloads) - 1):
        cached, fresh = SnapshotFolder(), SnapshotFolder()
        first = cached(None, 0, payloads[:cut])
        assert cached(first, cut, payloads[cut:]) == expected
        assert fresh(bytes(first), cut, payloads[cut:]) == expected
