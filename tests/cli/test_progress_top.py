"""Progress lines and ``odradek top``: the pure parts (the progress line, when it is shown, top's rates and
table) and the commands against a real cluster (progress on stderr with stdout untouched, top's frames)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from odradek import Admin, Producer, TopicPartition
from odradek.cli_top import Sample, frame, render
from odradek.progress import Progress, wanted
from tests.broker.cluster import Cluster
from tests.cli.helpers import cli_env, odradek


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_line_counts_rates_and_eta() -> None:
    now = [100.0]
    out = io.StringIO()
    progress = Progress("sent", 1000, out=out, clock=lambda: now[0], interval_s=1.0)
    now[0] = 102.0
    progress.update(250)
    assert out.getvalue().endswith("sent 250 of 1,000 records (25%), 125/s, ETA 6 s")
    progress.update(300)  # within the interval: not redrawn
    assert "300" not in out.getvalue()
    now[0] = 110.0
    progress.close()  # the final state, and a newline
    assert out.getvalue().endswith("sent 300 of 1,000 records (30%), 30/s, ETA 23 s\n")


def test_progress_without_a_total_and_stages() -> None:
    out = io.StringIO()
    progress = Progress("consumed", None, out=out, clock=lambda: 2.0)
    progress.started = 0.0
    progress.update(5000)
    assert out.getvalue().endswith("consumed 5,000 records, 2,500/s")
    staged = io.StringIO()
    resets = Progress("reset-offsets", out=staged)
    resets.stage("committing 4 offsets")
    resets.close()
    assert staged.getvalue().endswith("reset-offsets: committing 4 offsets\n")


def test_disabled_progress_writes_nothing() -> None:
    out = io.StringIO()
    progress = Progress("sent", 10, out=out, enabled=False)
    progress.update(5, force=True)
    progress.stage("x")
    progress.close()
    assert out.getvalue() == ""


def test_progress_is_wanted_on_a_terminal_unless_told() -> None:
    assert wanted(None, err=Tty(), out=io.StringIO())
    assert not wanted(None, err=io.StringIO(), out=io.StringIO())
    assert wanted(True, err=io.StringIO())
    assert not wanted(False, err=Tty())
    # records on the terminal: their own progress; to a file: a progress line
    assert not wanted(None, quiet_stdout_tty=True, err=Tty(), out=Tty())
    assert wanted(None, quiet_stdout_tty=True, err=Tty(), out=io.StringIO())


def sample(t: float, offsets: int, size: int | None, committed: int) -> Sample:
    header = {"bootstrap": "b:1", "controller_id": 0, "brokers": 3, "brokers_alive": 2, "under_replicated": 1,
              "offline": 0}  # fmt: skip
    return Sample(t, header, {"t": 2}, {"t": offsets}, {} if size is None else {"t": size},
                  {"g": {"state": "Stable", "members": 2, "lag": 40, "committed": committed}})  # fmt: skip


def test_top_rates_come_from_two_samples() -> None:
    first = frame(None, sample(10.0, 100, 1000, 60))
    assert first["topics"][0]["records_per_sec"] is None
    assert first["groups"][0]["consumed_per_sec"] is None
    second = frame(sample(10.0, 100, 1000, 60), sample(12.0, 300, 5096, 160))
    topic = second["topics"][0]
    assert (topic["records_per_sec"], topic["bytes_per_sec"]) == (100.0, 2048.0)
    assert second["groups"][0]["consumed_per_sec"] == 50.0
    retention = frame(sample(10.0, 100, 5000, 60), sample(12.0, 100, 1000, 60))  # segments deleted
    assert retention["topics"][0]["bytes_per_sec"] == 0.0
    text = render(second, "12:00:00")
    assert "brokers 2/3 alive" in text
    assert "under-replicated 1" in text
    assert "2.0 KiB/s" in text
    assert text.splitlines()[3].split() == ["t", "2", "100", "2.0", "KiB/s", "300", "5.0", "KiB"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    config = {"offsets.topic.num.partitions": "1", "offsets.topic.replication.factor": "1"}
    with Cluster(tmp_path_factory.mktemp("top"), brokers=1, broker_config=config) as c:
        c.create_topic("events", partitions=2)
        yield c


def produce(cluster: Cluster, count: int) -> None:
    with Producer({"bootstrap.servers": cluster.bootstrap_servers}) as producer:
        for i in range(count):
            producer.send("events", value=b"e%05d" % i, partition=i % 2)
        producer.flush(30)


@pytest.mark.slow
def test_progress_goes_to_stderr_and_leaves_stdout_alone(cluster: Cluster, tmp_path: Path) -> None:
    env = cli_env(tmp_path / "state", ODRADEK_BOOTSTRAP_SERVERS=cluster.bootstrap_servers)
    perf = odradek(["perf", "produce", "--topic", "events", "--num-records", "3000", "--record-size", "50",
                    "--json", "--progress"], env)  # fmt: skip
    assert perf.returncode == 0, perf.stderr
    assert json.loads(perf.stdout.decode().splitlines()[-1])["records"] == 3000  # --json: still the last line
    assert b"sent 3,000 of 3,000 records (100%)" in perf.stderr
    consumed = odradek(["consume", "events", "--from-beginning", "--max-messages", "3000", "--progress"], env)
    assert consumed.returncode == 0, consumed.stderr
    assert len(consumed.stdout.splitlines()) == 3000  # the records alone
    assert b"consumed 3,000 of 3,000 records (100%)" in consumed.stderr
    quiet = odradek(["consume", "events", "--from-beginning", "--max-messages", "10"], env)  # not a terminal
    assert b"consumed" not in quiet.stderr
    with Admin({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
        admin.alter_group_offsets("readers", {TopicPartition("events", 0): 1})
    reset = odradek(["groups", "reset-offsets", "readers", "--topic", "events", "--to-latest", "--execute",
                     "--progress"], env)  # fmt: skip
    assert reset.returncode == 0, reset.stderr
    assert b"reset-offsets: committed 2 offsets" in reset.stderr
    assert b"NEW-OFFSET" in reset.stdout


@pytest.mark.slow
def test_top_shows_throughput_and_lag(cluster: Cluster, tmp_path: Path) -> None:
    env = cli_env(tmp_path / "state", ODRADEK_BOOTSTRAP_SERVERS=cluster.bootstrap_servers)
    with Admin({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
        admin.alter_group_offsets("laggards", {TopicPartition("events", 0): 0, TopicPartition("events", 1): 0})
    top = subprocess.Popen([sys.executable, "-m", "odradek.cli", "top", "--iterations", "3", "--interval", "1.5",
                            "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        first = top.stdout.readline() if top.stdout else b""  # the first frame: no rates yet
        assert first, top.stderr.read() if top.stderr else ""
        while time.monotonic() < deadline and top.poll() is None:
            produce(cluster, 200)  # records arrive while top samples
        out, err = top.communicate(timeout=60)
    finally:
        if top.poll() is None:
            top.kill()
            top.wait(10)
    assert top.returncode == 0, err
    frames = [json.loads(first), *(json.loads(line) for line in out.splitlines())]
    assert len(frames) == 3
    assert frames[0]["topics"][0]["records_per_sec"] is None
    events = [t for f in frames[1:] for t in f["topics"] if t["topic"] == "events"]
    assert any(t["records_per_sec"] > 0 for t in events)
    assert all(t["size_bytes"] > 0 for t in events)
    laggards = next(g for g in frames[-1]["groups"] if g["group"] == "laggards")
    assert laggards["lag"] >= 200  # nothing consumed of at least one produce
    assert (laggards["members"], laggards["consumed_per_sec"]) == (0, 0.0)
    table = odradek(["top", "--once", "--interval", "0.5"], env)
    assert table.returncode == 0, table.stderr
    assert b"TOPIC" in table.stdout
    assert b"laggards" in table.stdout
