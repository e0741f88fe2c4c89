"""``odradek perf produce|consume|e2e --json`` on a small N against ``odradek up --controllers 1 --brokers 1``:
the last stdout line is one JSON object with the keys docs/INTERFACE.md names; progress goes to stderr."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cli.helpers import FAST_BROKER_CONFIG, UpProcess, cli_env, free_base_port, odradek

pytestmark = pytest.mark.slow

LATENCY_KEYS = {"avg", "p50", "p95", "p99", "p999", "max"}


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A running one-controller, one-broker cluster (topic ``perf``, 3 partitions); the commands' env."""
    root = tmp_path_factory.mktemp("perf")
    env = cli_env(root / "state")
    args = ["--controllers", "1", "--brokers", "1", "--base-port", str(free_base_port(1, 1))]
    for item in FAST_BROKER_CONFIG:
        args += ["--broker-config", item]
    up = UpProcess(root / "cluster", env, args).start()
    try:
        up.wait_ready()
        created = odradek(["topics", "create", "perf", "--partitions", "3", "--replication-factor", "1"], env)
        assert created.returncode == 0, created.stderr.decode()
        yield env
    finally:
        up.kill_everything()
        up.assert_no_orphans()


def last_json(args: list[str], env: dict[str, str]) -> dict[str, Any]:
    result = odradek(["perf", *args, "--json"], env)
    assert result.returncode == 0, result.stderr.decode()
    lines = result.stdout.decode().splitlines()
    assert len(lines) == 2, "the summary line, then the JSON line"
    doc: dict[str, Any] = json.loads(lines[-1])
    assert {"records", "seconds", "records_per_sec", "mb_per_sec"} <= set(doc)
    assert doc["seconds"] > 0
    assert doc["records_per_sec"] == pytest.approx(doc["records"] / doc["seconds"], rel=1e-3)
    return doc


def test_perf_produce_then_consume(env: dict[str, str]) -> None:
    options = ["--throughput", "-1", "--acks", "all", "--linger-ms", "2", "--compression", "lz4"]
    produced = last_json(["produce", "--topic", "perf", "--num-records", "3000", "--record-size", "100", *options], env)
    assert produced["records"] == 3000
    assert produced["errors"] == 0
    assert set(produced["latency_ms"]) == LATENCY_KEYS
    latency = produced["latency_ms"]
    assert 0 <= latency["p50"] <= latency["p95"] <= latency["p99"] <= latency["p999"] <= latency["max"]
    assert produced["mb_per_sec"] == pytest.approx(produced["records_per_sec"] * 100 / 2**20, rel=1e-3)
    assert (produced["latency_sample_every"], produced["latency_samples"]) == (1, 3000)  # few records: all timed

    consumed = last_json(["consume", "--topic", "perf", "--num-records", "3000"], env)
    assert consumed["records"] == 3000
    assert "latency_ms" not in consumed


def test_perf_produce_throttled(env: dict[str, str]) -> None:
    doc = last_json(["produce", "--topic", "perf", "--num-records", "300", "--record-size", "10",
                     "--throughput", "200"], env)  # fmt: skip
    assert doc["records"] == 300
    assert doc["records_per_sec"] <= 230  # 300 records at 200/s take at least 1.5 s


def test_perf_produce_samples_latencies_and_counts_every_record(env: dict[str, str]) -> None:
    result = odradek(["perf", "produce", "--topic", "perf", "--num-records", "2000", "--record-size", "50",
                      "--acks", "1", "--latency-sample-every", "7", "--json"], env)  # fmt: skip
    assert result.returncode == 0, result.stderr.decode()
    summary, line = result.stdout.decode().splitlines()
    doc: dict[str, Any] = json.loads(line)
    assert (doc["records"], doc["errors"]) == (2000, 0)
    assert (doc["latency_sample_every"], doc["latency_samples"]) == (7, 286)  # records 1, 8, 15, ..., 1996
    assert summary.startswith("2000 records sent, ")
    assert summary.endswith(" ms 99.9th (latency of every 7th record).")


def test_perf_e2e(env: dict[str, str]) -> None:
    doc = last_json(["e2e", "--topic", "perf", "--num-records", "300", "--rate", "300"], env)
    assert doc["records"] == 300
    assert doc["sent"] == 300
    assert doc["duplicates"] == 0
    assert set(doc["latency_ms"]) == LATENCY_KEYS
    assert doc["latency_ms"]["max"] > 0
    ack = doc["ack_latency_ms"]  # send to acknowledgement: the producer's side of the same records
    assert set(ack) == LATENCY_KEYS
    assert 0 < ack["p50"] <= ack["p99"] <= ack["max"]


def test_perf_e2e_with_the_consumer_in_its_own_process(env: dict[str, str], tmp_path: Path) -> None:
    """``--consumer-process``: the same document; the records are polled in a child process, as its trace file
    shows (``log.trace`` writes one file per process: the child's has the run's ``e2e`` events, the tool's only
    the acknowledgements)."""
    traced = {**env, "ODRADEK_LATENCY_TRACE": str(tmp_path)}
    doc = last_json(["e2e", "--topic", "perf", "--num-records", "300", "--rate", "300", "--consumer-process"], traced)
    assert doc["records"] == 300
    assert doc["sent"] == 300
    assert doc["duplicates"] == 0
    assert doc["errors"] == 0
    assert 0 < doc["latency_ms"]["p50"] <= doc["latency_ms"]["p99"] <= doc["latency_ms"]["max"]
    assert 0 < doc["ack_latency_ms"]["p50"] <= doc["ack_latency_ms"]["max"]
    (child,) = tmp_path.glob("perf-e2e-consumer-*.trace")
    (tool,) = tmp_path.glob("perf-e2e-[0-9]*.trace")
    kinds = {name: Counter(line.split()[1] for line in path.read_text().splitlines()) for name, path in
             (("child", child), ("tool", tool))}  # fmt: skip
    assert kinds["child"]["e2e"] == 300
    assert kinds["tool"]["e2e"] == 0
    assert kinds["tool"]["ack"] == 300


def test_perf_consume_reports_a_shortfall(env: dict[str, str]) -> None:
    result = odradek(["perf", "consume", "--topic", "perf", "--num-records", "10000000", "--timeout-ms", "500",
                      "--json"], env)  # fmt: skip
    assert result.returncode == 1
    assert "records arrived (none for 500 ms)" in result.stderr.decode()
    assert json.loads(result.stdout.decode().splitlines()[-1])["records"] < 10000000


def test_perf_on_a_missing_topic_is_one_sentence(env: dict[str, str]) -> None:
    result = odradek(["perf", "produce", "--topic", "missing", "--num-records", "1", "--record-size", "1"], env)
    assert result.returncode == 1
    err = result.stderr.decode()
    assert err.startswith("odradek: topic 'missing'")
    assert err.endswith("(UNKNOWN_TOPIC_OR_PARTITION)\n")
    assert err.count("\n") == 1
