"""Short seeded chaos runs against a real local cluster, one per fault kind: zero anomalies expected.

One cluster (3 controllers, 3 brokers, started as ``odradek up`` starts them, each node on a loopback
address and in a cgroup of its own so that links between them can be cut, ``chaos.backends.netcut``)
serves the whole module; each run uses its own topic. Group consumers run in the last test only: the
group coordinator's 50 ``__consumer_offsets`` partitions make every later broker restart slower. Every run
is seeded and bounded (about 20 s of faults, then recovery and drain); the module takes a few minutes. A
failure prints the run's report; the history and report stay under pytest's tmp_path.

Network partitions (isolate, isolate-one-way, brokers from controllers, the leader on the minority and on
the majority side) need root, iptables and cgroup v2: the fixture installs iptables with apt-get when it
is missing; every rule it adds is removed when the module ends, passed or failed (``LocalBackend.close``).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from chaos.backends import Backend, Capability, NodeState
from chaos.backends.local import LocalBackend, plan_on_free_ports
from chaos.backends.netcut import COMMENT_PREFIX
from chaos.faults import PARTITION_KINDS, Episode, Nemesis, Timing, broker_view
from chaos.history import History
from chaos.runner import RunConfig, RunResult, cluster_configs, run
from odradek import Admin, NewTopic
from proto import broker_pb2, broker_pb2_grpc
from tests.support.apt import apt_install
from tests.support.launcher import wait_until

pytestmark = pytest.mark.chaos

TIMING = Timing(quiet_s=(2.0, 4.0), hold_s=(4.0, 7.0), pause_s=3.0, recover_timeout_s=60.0)
DURATION_S = 20.0
# longer than the controller takes to fence a broker cut off from it (broker.session.timeout.ms, set by the runner,
# and the election after): only then do its partitions and transaction coordinators move while it is cut off
ISOLATION_HOLD_S = (8.0, 10.0)


def ensure_iptables() -> None:
    """Install iptables with apt-get when it is missing (CI runs as root on a machine that may lack it)."""
    if shutil.which("iptables") is not None:
        return
    why = apt_install(["iptables"])
    assert why is None, f"the partition runs need iptables: {why}"


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBackend]:
    ensure_iptables()
    broker_config, controller_config = cluster_configs()
    with LocalBackend.start(tmp_path_factory.mktemp("chaos-cluster"), controllers=3, brokers=3, isolation=True,
                            broker_config=broker_config, controller_config=controller_config) as started:  # fmt: skip
        yield started
    assert not _our_rules(), "the backend left iptables rules behind"


def _our_rules() -> list[str]:
    listed = subprocess.run(["iptables", "-w", "-S", "OUTPUT"], capture_output=True, text=True, check=True)
    return [line for line in listed.stdout.splitlines() if COMMENT_PREFIX in line and f":{os.getpid()}-" in line]


def chaos_run(
    backend: Backend, tmp_path: Path, kind: str, seed: int, group_members: int = 0, *, duration_s: float = DURATION_S,
    txn_producers: int = 0, rc_readers: int = 0, timing: Timing = TIMING,
) -> RunResult:  # fmt: skip
    kinds = tuple(kind.split(","))
    config = RunConfig(duration_s=duration_s, seed=seed, faults=kinds, out_dir=tmp_path / kinds[0],
                       topic=f"chaos-{kinds[0]}-{seed}", partitions=4, rate=100.0, timing=timing,
                       group_members=group_members, drain_timeout_s=60.0, txn_producers=txn_producers,
                       rc_readers=rc_readers)  # fmt: skip
    lines: list[str] = []
    result = run(config, backend, out=lines.append)
    assert result.passed, "\n".join(lines) + "\n" + result.report
    for one in kinds:
        assert result.summary["faults"]["by_kind"].get(one, 0) >= 1, result.report
    assert not result.summary["faults"]["skipped"], result.report
    assert result.summary["operations"]["sends"].get("ok", 0) > 0
    return result


@pytest.mark.parametrize(("kind", "seed"), [("kill-leader", 1), ("kill-follower", 2), ("kill-controller", 3)])
def test_kill_and_restart(backend: LocalBackend, tmp_path: Path, kind: str, seed: int) -> None:
    result = chaos_run(backend, tmp_path, kind, seed)
    (episode,) = [e for e in result.summary["episodes"] if e["fault"] == kind][:1]
    assert episode["recovered_s"] is not None


def test_pause_longer_than_the_session_timeout(backend: LocalBackend, tmp_path: Path) -> None:
    result = chaos_run(backend, tmp_path, "pause", 4)
    episode = next(e for e in result.summary["episodes"] if e["fault"] == "pause")
    assert episode["held_s"] > 2.0  # broker.session.timeout.ms of the chaos cluster (the default)


def test_kill_two_brokers_writes_stall(backend: LocalBackend, tmp_path: Path) -> None:
    """With RF 3 and min.insync.replicas 2, no write invoked while two brokers are down is acknowledged
    before one of them starts again (the acked-below-min-isr checker); the window must have seen writes."""
    result = chaos_run(backend, tmp_path, "kill-two", 5)
    below = result.summary["below_min_isr"]
    assert below["seconds"] > 0
    assert sum(below["outcomes"].values()) > 0, result.report


def test_isolate_the_leader(backend: LocalBackend, tmp_path: Path) -> None:
    """The leader cut off from every other node both ways: the controller fences it, the others elect."""
    result = chaos_run(backend, tmp_path, "isolate", 6)
    episode = next(e for e in result.summary["episodes"] if e["fault"] == "isolate")
    assert episode["recovered_s"] is not None


def test_partitions(backend: LocalBackend, tmp_path: Path) -> None:
    """One-way isolation, brokers from controllers, the leader (with the active controller) on the minority
    side and on the majority side: one episode each, the checks unchanged."""
    chaos_run(backend, tmp_path, ",".join(PARTITION_KINDS), 7, duration_s=4 * (TIMING.quiet_s[1] + TIMING.hold_s[1]))


def test_isolation_cuts_links_and_heal_restores_them(backend: LocalBackend) -> None:
    """The rules: an isolated broker's heartbeats do not reach the controllers (the others' metadata shows it
    fenced), and the harness's clients still reach it; heal removes every rule of the run."""
    assert {Capability.ISOLATE, Capability.PARTITION} <= backend.capabilities
    nodes = {n.name: n for n in backend.nodes()}
    assert len({n.address.rpartition(":")[0] for n in nodes.values()}) == 6  # a loopback address per node
    with grpc.insecure_channel(nodes["broker-0"].address) as channel, \
            grpc.insecure_channel(nodes["broker-2"].address) as isolated:  # fmt: skip
        witness, cut_off = broker_pb2_grpc.BrokerStub(channel), broker_pb2_grpc.BrokerStub(isolated)  # type: ignore[no-untyped-call]

        def fenced() -> list[int]:
            answer = witness.DescribeCluster(broker_pb2.DescribeClusterRequest(), timeout=10)
            return sorted(b.node_id for b in answer.brokers if b.fenced)

        try:
            backend.isolate("broker-2")
            assert {n.name: n.state for n in backend.nodes()}["broker-2"] is NodeState.ISOLATED
            assert len(_our_rules()) == 10  # both ways between broker-2 and the 5 other nodes
            wait_until(lambda: fenced() == [2], 30.0, "broker-2 fenced")
            assert cut_off.DescribeCluster(broker_pb2.DescribeClusterRequest(), timeout=10).brokers  # still reached
            backend.heal("broker-2")
            assert _our_rules() == []
            wait_until(lambda: fenced() == [], 30.0, "broker-2 back")
        finally:
            backend.heal_network()


def test_a_broker_on_a_stale_image_is_not_a_recovery(backend: LocalBackend, tmp_path: Path) -> None:
    """broker-0 cut off from every controller (the other brokers and the clients still reach it) keeps
    answering from its metadata image of before the cut, in which all is well; the others see it fenced. The
    harness's recovery check must not believe it (it once did, and drained the consumers to the end offsets
    of a deposed leader: unseen-write anomalies), and must see the cluster healthy again after the heal."""
    topic = "chaos-stale-image"
    admin = Admin({"bootstrap.servers": backend.bootstrap_servers, "request.timeout.ms": 5000,
                   "default.api.timeout.ms": 10000})  # fmt: skip
    history = History(tmp_path / "history.jsonl")
    addresses = {n.name: n.address for n in backend.nodes()}
    try:
        admin.create_topics([NewTopic(topic, 2, 3, config={"min.insync.replicas": "2"})])
        nemesis = Nemesis(backend, history, admin, topic, 2, out=lambda _: None)
        assert nemesis.wait_recovered(Episode(0, "stale-image", 0.0, 0.0, 0.0, 0.0), 60.0)
        controllers = [n.name for n in backend.nodes() if n.role == "controller"]
        backend.partition(["broker-0"], controllers)
        try:

            def stale() -> bool:
                own, other = broker_view(addresses["broker-0"], topic), broker_view(addresses["broker-1"], topic)
                assert not isinstance(own, str), own
                assert not isinstance(other, str), other
                return 0 in own.unfenced and 0 not in other.unfenced and own.metadata_offset < other.metadata_offset

            wait_until(stale, 30.0, "broker-0 fenced in the others' view, not in its own")
            problems = [nemesis.healthy() for _ in range(30)]
            assert None not in problems, problems
        finally:
            backend.heal_network()
        assert nemesis.wait_recovered(Episode(1, "stale-image", 0.0, 0.0, 0.0, 0.0), 60.0)
    finally:
        history.close()
        admin.close()


def test_backend_states(backend: LocalBackend) -> None:
    assert [n.name for n in backend.nodes()] == [
        "controller-0", "controller-1", "controller-2", "broker-0", "broker-1", "broker-2",
    ]  # fmt: skip
    backend.pause("broker-2")
    assert {n.name: n.state for n in backend.nodes()}["broker-2"] is NodeState.PAUSED
    backend.resume("broker-2")
    backend.kill("broker-2")
    assert {n.name: n.state for n in backend.nodes()}["broker-2"] is NodeState.KILLED
    backend.start_node("broker-2")
    assert all(n.state is NodeState.RUNNING for n in backend.nodes())


def test_attach_to_a_running_odradek_up(tmp_path: Path) -> None:
    """``--cluster-json``: faults against the processes of a real ``odradek up``; restarted nodes are ours."""
    data_dir = tmp_path / "up"
    log = open(tmp_path / "up.out", "wb")  # noqa: SIM115 (closed in the finally below)
    up = subprocess.Popen(
        [sys.executable, "-m", "odradek.cli", "up", "--controllers", "1", "--brokers", "2", "--data-dir",
         str(data_dir), "--base-port", str(_free_base_port(tmp_path))],
        stdout=log, stderr=subprocess.STDOUT, process_group=0,
    )  # fmt: skip
    try:
        wait_until(lambda: (data_dir / "cluster.json").exists() or up.poll() is not None, 120.0, "odradek up")
        assert up.poll() is None, (tmp_path / "up.out").read_text()
        with LocalBackend.attach(data_dir / "cluster.json") as attached:
            assert [n.state for n in attached.nodes()] == [NodeState.RUNNING] * 3
            attached.kill("broker-1")
            assert {n.name: n.state for n in attached.nodes()}["broker-1"] is NodeState.KILLED
            attached.start_node("broker-1")
            assert {n.name: n.state for n in attached.nodes()}["broker-1"] is NodeState.RUNNING
    finally:
        os.killpg(up.pid, signal.SIGTERM)
        up.wait(60)
        log.close()


def _free_base_port(tmp_path: Path) -> int:
    plan = plan_on_free_ports(str(tmp_path / "plan"), 1, 2, None)
    return min(int(b.listen.rpartition(":")[2]) for b in plan.brokers)


def test_group_consumers_under_kill_leader(backend: LocalBackend, tmp_path: Path) -> None:
    """Readers and a two-member group under kill-leader: the group checkers too (group-stall, group-unseen)."""
    result = chaos_run(backend, tmp_path, "kill-leader", 8, group_members=2)
    assert not any("group consumers off" in note for note in result.summary["notes"]), result.summary["notes"]
    assert result.summary["meta"]["group"] == "chaos"


def test_transactions_under_kills_and_pause(backend: LocalBackend, tmp_path: Path) -> None:
    """Two transactional producers committing and aborting (every fourth transaction) and two read_committed
    readers while the transaction coordinator's broker (a partition leader too) is killed and a partition
    leader is paused: the transaction checkers (aborted-read, lost-committed-write, duplicate-committed-write,
    partial-transaction) and the log checkers find nothing. The duration leaves room for the recovery after
    each episode (not part of the planned times), which takes longer on a loaded machine."""
    kinds = "kill-txn-coordinator,pause"
    result = chaos_run(backend, tmp_path, kinds, 9, txn_producers=2, rc_readers=2,
                       duration_s=2 * (TIMING.quiet_s[1] + TIMING.hold_s[1]) + 15.0)  # fmt: skip
    txns = result.summary["operations"]["transactions"]
    assert txns.get("ok", 0) > 0, result.report
    assert txns.get("failed", 0) > 0, result.report  # the aborted ones: what aborted-read looks for
    assert result.summary["meta"]["rc_readers"] == 2


def test_transactions_under_isolation(backend: LocalBackend, tmp_path: Path) -> None:
    """The transactional workload (two transactional producers, every fourth transaction aborted, two
    read_committed readers) while a broker is cut off from every other node, the clients still reaching it: its
    partitions and its transaction coordinators move, a transaction open on it is refused (INVALID_TXN_STATE)
    and aborted, the producer's epoch is bumped, and a record of the next transaction may be fenced. No
    transaction may then commit without that record: before the commit checked for a fatal record error, every
    isolation of a partition leader lost committed values (lost-committed-write, 4-7 of them in 90-150 s runs)."""
    timing = Timing(quiet_s=TIMING.quiet_s, hold_s=ISOLATION_HOLD_S, pause_s=TIMING.pause_s,
                    recover_timeout_s=TIMING.recover_timeout_s)  # fmt: skip
    result = chaos_run(backend, tmp_path, "isolate", 11, txn_producers=2, rc_readers=2, timing=timing,
                       duration_s=2 * (timing.quiet_s[1] + timing.hold_s[1]) + 15.0)  # fmt: skip
    txns = result.summary["operations"]["transactions"]
    assert txns.get("ok", 0) > 0, result.report
    assert txns.get("failed", 0) > 0, result.report  # the aborted ones: what aborted-read looks for
    assert result.summary["meta"]["rc_readers"] == 2


def test_transactions_under_kill_leader(backend: LocalBackend, tmp_path: Path) -> None:
    """The transactional workload of the test above (two transactional producers, every fourth transaction
    aborted, two read_committed readers) while partition leaders of the data topic are killed (kill -9) and
    started again with transactions open on them: the leader changes under open transactions, and the new
    leader must know them (its producer state, its last stable offset, its aborted-transaction index) from
    replication alone. The same checkers find nothing: no aborted value read by a read_committed reader, every
    value of a committed transaction read, none twice, no transaction of unknown outcome read in part, and the
    log checkers (nothing acknowledged lost, offsets consistent)."""
    result = chaos_run(backend, tmp_path, "kill-leader", 10, txn_producers=2, rc_readers=2,
                       duration_s=2 * (TIMING.quiet_s[1] + TIMING.hold_s[1]) + 15.0)  # fmt: skip
    txns = result.summary["operations"]["transactions"]
    assert txns.get("ok", 0) > 0, result.report
    assert txns.get("failed", 0) > 0, result.report  # the aborted ones: what aborted-read looks for
    assert result.summary["meta"]["rc_readers"] == 2
    episodes = [e for e in result.summary["episodes"] if e["fault"] == "kill-leader"]
    assert episodes, result.report
    assert all(e["recovered_s"] is not None for e in episodes), result.report
