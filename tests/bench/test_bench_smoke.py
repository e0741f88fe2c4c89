"""The comparison harness and the latency breakdown, run tiny (seconds) against real servers: they start
and stop every server, and print complete, sane output. No speed is asserted (figures only)."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.bench import leader_instructions
from tests.bench.breakdown import STAGES, TOTALS
from tests.bench.compare import WORKLOADS
from tests.bench.systems import OdradekCluster, find_binary, install_packages, peer_workload

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SCALE = 0.01
SYSTEMS = ("odradek-rf1", "odradek-kafka-rf1", "nats-r1", "redis")
WORKLOADS_RUN = ("produce-100", "consume-100", "e2e-1k", "e2e-burst")  # each kind of run; the others differ
# from these only in sizes and rates (CI time)
BINARIES = {"nats-r1": "nats-server", "redis": "redis-server"}


def run(module: str, args: list[str], timeout_s: float = 280) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=timeout_s, check=False)  # fmt: skip


@pytest.fixture(scope="module")
def peers() -> None:
    """Debian's nats-server and redis-server, installed when missing (CI's machines start without them)."""
    missing = [binary for binary in BINARIES.values() if find_binary(binary)[0] is None]
    if missing and shutil.which("apt-get") is None:
        pytest.skip(f"the peers need Debian's {', '.join(missing)} and there is no apt-get to install them")
    why = install_packages(missing)
    assert not why, f"installing the peers: {why}"
    assert all(find_binary(binary)[0] for binary in BINARIES.values()), "the peers installed nowhere"


def test_compare_runs_every_workload_on_every_system(tmp_path: Path, peers: None) -> None:
    out = tmp_path / "compare.json"
    done = run("tests.bench.compare", ["--systems", ",".join(SYSTEMS), "--workloads", ",".join(WORKLOADS_RUN),
                                       "--scale", str(SCALE), "--controllers", "1", "--brokers", "1",
                                       "--json-out", str(out)])  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    doc: dict[str, Any] = json.loads(out.read_text())
    by_key = {(r["workload"], r["system"]): r for r in doc["results"]}
    assert set(by_key) == {(w, s) for w in WORKLOADS_RUN for s in SYSTEMS}
    table = done.stdout
    hop = doc["machine_hop"]  # the machine's speed, measured in the same run (a TCP round trip between processes)
    assert 0 < hop["p50_ms"] <= hop["p99_ms"]
    assert "This machine's hop (python -m bench.rpc_floor's tcp-asyncio, 1000 round trips" in table
    assert f"p50 {hop['p50_ms']:.3f} ms, p99 {hop['p99_ms']:.3f} ms" in table
    steal = doc["steal"]  # Linux: the share of the run's CPU time the hypervisor took
    assert 0.0 <= steal < 1.0
    assert f"CPU time stolen by the hypervisor during the run (/proc/stat): {steal:.1%}" in table
    for system in SYSTEMS:
        for name in WORKLOADS_RUN:
            workload = WORKLOADS[name]
            result = by_key[(name, system)]
            assert result["error"] == "", result
            check_document(result["doc"], workload.kind, workload.scaled(SCALE).records)
            assert any(line.startswith(workload.scaled(SCALE).title) and system in line for line in table.splitlines())
            server_us = result["doc"]["cpu"]["server_us"]
            assert server_us >= 0, (name, system, server_us)
            if system.startswith("odradek"):  # a controller and a broker, idle or not, over a whole client run
                assert server_us > 0, (name, system, server_us)
            # beyond the start-up (a short run's CPU taken off): in runs this tiny the start-up's own variation
            # can outweigh what the records cost, so only that it was measured (metered's own test checks it)
            assert math.isfinite(result["doc"]["cpu"]["client_us"]), (name, system)
    header = next(line for line in table.splitlines() if line.startswith("workload "))
    assert "server µs/rec" in header
    assert "client µs/rec" in header


def test_compare_runs_a_cluster_from_another_checkout(tmp_path: Path) -> None:
    """``--tree NAME:PATH``: the cluster ``odradek-rf1@NAME`` and its perf clients run PATH's code (here this
    checkout itself, which has the .venv that ``make`` makes); a PATH that is no checkout is refused."""
    out = tmp_path / "compare.json"
    done = run("tests.bench.compare", ["--tree", f"same:{ROOT}", "--systems", "odradek-rf1@same", "--workloads",
                                       "e2e-1k", "--scale", str(SCALE), "--controllers", "1", "--brokers", "1",
                                       "--json-out", str(out)])  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"the code of {ROOT}" in done.stderr
    (result,) = json.loads(out.read_text())["results"]
    assert (result["system"], result["error"]) == ("odradek-rf1@same", "")
    check_document(result["doc"], "e2e", WORKLOADS["e2e-1k"].scaled(SCALE).records)
    refused = run("tests.bench.compare", ["--tree", f"other:{tmp_path}", "--systems", "odradek-rf1@other"], 60)
    assert refused.returncode == 2
    assert "PATH a checkout of this repository" in refused.stderr


def test_compare_runs_the_clients_on_the_cpus_asked_and_the_consumer_apart(tmp_path: Path) -> None:
    """``--client-cpus``: the clients start on those CPUs (the harness confines itself once the servers run), the
    table says so; CPUs this process may not use are refused before anything starts. ``--e2e-consumer-process``:
    Odradek's e2e with its consumer in a process of its own, every record counted."""
    cpu = min(os.sched_getaffinity(0))
    out = tmp_path / "compare.json"
    done = run("tests.bench.compare", ["--systems", "odradek-rf1", "--workloads", "e2e-1k", "--scale", str(SCALE),
                                       "--controllers", "1", "--brokers", "1", "--client-cpus", str(cpu),
                                       "--e2e-consumer-process", "--json-out", str(out)])  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"every client on CPU {cpu} only; Odradek's e2e consumer in a process of its own." in done.stdout
    (result,) = json.loads(out.read_text())["results"]
    assert result["error"] == ""
    check_document(result["doc"], "e2e", WORKLOADS["e2e-1k"].scaled(SCALE).records)
    assert any(line.startswith("e2e 1k/s 100 B") and "odradek-rf1" in line for line in done.stdout.splitlines())
    refused = run("tests.bench.compare", ["--systems", "odradek-rf1", "--client-cpus", "4095"], 60)
    assert refused.returncode == 2
    assert "not all of them are this process's CPUs" in refused.stderr


def test_compare_runs_odradek_secured_with_sasl(tmp_path: Path) -> None:
    """``--security sasl_ssl``: the cluster is made by ``odradek up --security sasl_ssl`` and the perf clients use
    its ``client.properties`` (SASL over TLS); the Kafka peer, which has no secured settings here, is refused."""
    out = tmp_path / "compare.json"
    done = run("tests.bench.compare", ["--systems", "odradek-rf1", "--workloads", "e2e-1k", "--scale", str(SCALE),
                                       "--controllers", "1", "--brokers", "1", "--security", "sasl_ssl",
                                       "--json-out", str(out)])  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "; Odradek with odradek up --security sasl_ssl." in done.stdout
    (result,) = json.loads(out.read_text())["results"]
    assert result["error"] == ""
    check_document(result["doc"], "e2e", WORKLOADS["e2e-1k"].scaled(SCALE).records)
    refused = run("tests.bench.compare", ["--systems", "odradek-kafka-rf1", "--security", "sasl_ssl"], 60)
    assert refused.returncode == 2
    assert "the Kafka peer (odradek-kafka-*) has no secured settings here" in refused.stderr


def test_the_kafka_peer_runs_through_the_kafka_listener(tmp_path: Path) -> None:
    """``tests.bench.peers kafka``: librdkafka against a real cluster's Kafka listener (1 controller, 1 broker,
    started and stopped here); produce, consume and e2e count every record they sent, latencies sane."""
    cluster = OdradekCluster(tmp_path / "cluster", controllers=1, brokers=1)
    try:
        cluster.start()
        assert cluster.kafka_bootstrap.startswith("127.0.0.1:")
        for topic in ("produced", "e2e"):
            cluster.create_topic(topic, 1, 1)
        runs = (("produce", "produced", 1000, -1.0), ("consume", "produced", 1000, -1.0), ("e2e", "e2e", 200, 400.0))
        for workload, topic, records, rate in runs:
            done = peer_workload("kafka", workload, cluster.kafka_bootstrap, topic, records, 100, rate, 1, 120)
            assert done.returncode == 0, done.stderr.decode()[-3000:]
            doc = json.loads(done.stdout.decode().strip().splitlines()[-1])
            check_document(doc, workload, records)
            if workload != "consume":
                assert doc["errors"] == 0, doc
            if workload == "e2e":
                assert doc["sent"] == records
                assert 200 / 400.0 * 0.9 < doc["seconds"] < 60, doc  # paced at the rate, not all at once
    finally:
        cluster.stop()


def check_document(doc: dict[str, Any], kind: str, records: int) -> None:
    assert doc["records"] == records
    assert doc["seconds"] > 0
    assert doc["records_per_sec"] > 0
    assert doc["mb_per_sec"] > 0
    latencies = [doc["latency_ms"]] if kind == "produce" else []
    if kind == "e2e":
        latencies = [doc["latency_ms"], doc["ack_latency_ms"]]
    for latency in latencies:
        assert 0 < latency["p50"] <= latency["p99"] <= latency["p999"] <= latency["max"]
    if kind == "consume":
        assert "latency_ms" not in doc


def test_breakdown_traces_every_stage(tmp_path: Path) -> None:
    done = run("tests.bench.breakdown", ["--controllers", "1", "--brokers", "3", "--num-records", "300", "--rate",
                                         "300"])  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    names = {name for name, _ in (*STAGES, *TOTALS)}
    rows = {line[:50].rstrip(): line[50:].split() for line in done.stdout.splitlines() if line[:50].rstrip() in names}
    assert set(rows) == names
    for name, _ in TOTALS:
        assert int(rows[name][0]) == 300, (name, rows[name])
    for name, cells in rows.items():
        count, p50, p99 = int(cells[0]), float(cells[1]), float(cells[2])
        assert count > 0, name
        assert 0 <= p50 <= p99, name
    found = re.search(r"^run: (\d+) Produce requests at the leader for (\d+) records received \(([\d.]+) records a "
                      r"request\)$", done.stdout, re.MULTILINE)  # fmt: skip
    assert found is not None, done.stdout[-2000:]
    produces, records = int(found.group(1)), int(found.group(2))
    assert records == 300, found.group(0)
    assert 1 <= produces <= 300, found.group(0)
    assert float(found.group(3)) == round(records / produces, 2)


def test_the_rpc_floor_bench_measures_every_transport() -> None:
    """``bench.rpc_floor``: a server process per transport, started and stopped; every figure present and sane."""
    done = run("bench.rpc_floor", ["--round-trips", "50", "--repeat", "1", "--pace-ms", "0.2", "--json"], 120)
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(doc["transports"]) == {"grpc-sync-stream", "grpc-aio-stream", "grpc-sync-unary", "tcp-asyncio",
                                      "tcp-asyncio-protocol"}  # fmt: skip
    for name, figures in doc["transports"].items():
        assert 0 < figures["p50_ms"] <= figures["p99_ms"], name
        assert figures["client_cpu_us"] > 0, name
        assert figures["server_cpu_us"] >= 0, name  # /proc counts in clock ticks: a short run may show none
    table = done.stdout.split("\n")
    assert any(line.startswith("tcp-asyncio ") for line in table)
    assert any(line.startswith("tcp-asyncio-protocol ") for line in table)


def test_the_wakeup_cost_bench_measures_every_case_and_reaps_its_children() -> None:
    """``bench.wakeup_cost``: a send to a sleeping and to a spinning child process, and a thread's wake-up; every
    figure present and sane, the children gone (each is reaped or killed before the run ends)."""
    before = {line for line in _command_lines() if b"bench.wakeup_cost" in line}
    done = run("bench.wakeup_cost", ["--count", "30", "--pace-ms", "0.2", "--json"], 120)
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads(done.stdout.strip().splitlines()[-1])
    assert doc["count"] == 30
    assert set(doc["cases"]) == {"tcp-send-to-sleeper", "tcp-send-to-spinner", "thread-wake"}
    for case, figures in doc["cases"].items():
        for kind in ("wall_us", "cpu_us"):
            summary = figures[kind]
            assert 0 <= summary["p50"] <= summary["p99"], (case, kind, summary)
            assert summary["mean"] <= summary["p99"], (case, kind, summary)  # of 30, the p99 is the largest
        assert figures["wall_us"]["p50"] > 0, case
        assert any(line.startswith(case) for line in done.stdout.splitlines()), case
    assert {line for line in _command_lines() if b"bench.wakeup_cost" in line} <= before


def test_the_path_floor_bench_runs_every_client_and_mode_and_stops_its_servers() -> None:
    """``bench.path_floor``: a leader and two followers per run, started and stopped; every record of every run
    measured (the bench fails otherwise), every figure present and sane, no server process left behind."""
    done = run("bench.path_floor", ["--records", "200", "--warmup", "20", "--rates", "500", "--repeat", "1",
                                    "--json"], 120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(doc["runs"]) == {f"{client} {mode} 500" for client in ("asyncio", "threads")
                                for mode in ("at-once", "held")}  # fmt: skip
    for name, figures in doc["runs"].items():
        assert 0 < figures["p50_ms"] <= figures["p99_ms"], name
        assert figures["server_cpu_us"] >= 0, name  # /proc counts in clock ticks: a short run may show none
    assert doc["hop"]["p50_ms"] > 0
    assert any(line.startswith("threads  held ") for line in done.stdout.split("\n"))
    left = [cmdline for cmdline in _command_lines() if b"bench.path_floor\0--serve" in cmdline]
    assert not left, f"servers left running: {left}"


def test_the_leader_cycle_bench_moves_every_record_through_the_leader() -> None:
    """``tests.bench.leader_cycle``: every cycle's answers come (to both followers, the consumer and the producer;
    the bench fails otherwise) and the high watermark reaches every record; the figures are sane."""
    done = run("tests.bench.leader_cycle", ["--cycles", "50", "--repeat", "2", "--json"], 120)
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads(done.stdout.strip().splitlines()[-1])
    assert doc["cycles"] == 50
    assert len(doc["runs"]) == 2
    assert 0 < doc["us_per_cycle"] == min(doc["runs"])


def test_the_instructions_of_a_cycle_are_the_difference_of_two_runs() -> None:
    """``tests.bench.leader_instructions``'s arithmetic and its reading of callgrind's summary. (Its runs under
    valgrind take a minute or more even at a few cycles, the interpreter's start-up alone: not run in CI; the
    leader cycle bench itself is, above.)"""
    assert leader_instructions.instructions("==1== Collected : 12\n==1== \n==1== I   refs:      4,314,428,857\n") == (
        4_314_428_857
    )
    with pytest.raises(ValueError, match="no 'I refs'"):
        leader_instructions.instructions("==1== Events    : Ir\n")
    assert leader_instructions.per_cycle((150, 4_000_000_000), (400, 5_000_000_000)) == 2_000_000  # 500 cycles more
    with pytest.raises(ValueError, match="must be longer"):
        leader_instructions.per_cycle((400, 1), (150, 2))


def test_a_peer_run_that_misses_records_fails(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``tests.bench.peers``, as ``odradek perf``: a consume or e2e run whose consumer saw fewer records than were
    sent exits 1 and says how many were missed (it printed its figures as a success before: a CI run's Redis
    e2e, which skipped a record, failed only on the test's count)."""
    from tests.bench import peers

    def short(args: Any) -> dict[str, Any]:
        return peers.document(49, 49 * 100, 0.05, None, sent=args.num_records)

    for workload in ("consume", "e2e"):
        monkeypatch.setitem(peers.WORKLOADS, ("redis", workload), short)
        assert peers.main(["redis", workload, "--servers", "127.0.0.1:1", "--stream", "s", "--num-records", "50"]) == 1
        out, err = capsys.readouterr()
        assert json.loads(out)["records"] == 49
        assert "1 of 50 records never reached the consumer" in err
    monkeypatch.setitem(peers.WORKLOADS, ("redis", "consume"), lambda args: peers.document(50, 5000, 0.05, None))
    assert peers.main(["redis", "consume", "--servers", "127.0.0.1:1", "--stream", "s", "--num-records", "50"]) == 0


def _command_lines() -> list[bytes]:
    lines = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                lines.append((entry / "cmdline").read_bytes())
            except OSError:  # gone meanwhile
                continue
    return lines


def test_the_cpu_bench_counts_every_process_by_role(tmp_path: Path) -> None:
    """``tests.bench.cpu``: one cluster (1 controller, 3 brokers, RF 3), a fresh topic per round; each role's CPU
    per record present (a leader, two followers, the other broker absent at RF 3 of 3), the e2e figures sane."""
    out = tmp_path / "cpu.json"
    done = run("tests.bench.cpu", ["--controllers", "1", "--brokers", "3", "--num-records", "300", "--rate", "300",
                                   "--repeat", "2", "--json-out", str(out)])  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    (cluster,) = json.loads(out.read_text())
    assert cluster["cluster"] == "this"
    assert [r["round"] for r in cluster["rounds"]] == [0, 1]
    for doc in cluster["rounds"]:
        roles = doc["cpu_us_per_record"]
        assert {role: len(values) for role, values in roles.items()} == {
            "leader": 1, "follower": 2, "broker": 0, "controller": 1, "client": 1,
        }  # fmt: skip
        assert roles["leader"][0] > 0, roles  # it did work (the others may show no clock tick in a run this short)
        assert roles["client"][0] > 0, roles
        assert doc["perf"]["records"] == 300
        assert 0 < doc["e2e_ms"]["p50"] <= doc["e2e_ms"]["p99"]
    assert any(line.startswith("this ") for line in done.stdout.splitlines())
