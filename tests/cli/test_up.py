"""``odradek up`` and the client commands against it, as real processes on 127.0.0.1.

The lifecycle (docs/INTERFACE.md): up writes cluster.json with live pids; ``cluster`` and ``topics`` find it
by the address up recorded; lines go in through ``produce`` and come out of ``consume``; SIGTERM stops
every child; up on the same DIR brings the same cluster back with its data; a SIGKILLed up takes its
children down too (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import json
import os
import signal
import socket
from collections.abc import Callable
from pathlib import Path

import pytest

from odradek.launcher.children import pid_alive
from tests.cli.helpers import UpProcess, free_base_port, odradek, wait_for

Start = Callable[..., UpProcess]


def ok(args: list[str], env: dict[str, str], input: bytes | None = None) -> str:
    result = odradek(args, env, input=input)
    assert result.returncode == 0, f"odradek {' '.join(args)} failed: {result.stderr.decode()}"
    return result.stdout.decode()


def fails(args: list[str], env: dict[str, str], input: bytes | None = None) -> str:
    """The one-sentence error of a failing command."""
    result = odradek(args, env, input=input)
    err = result.stderr.decode()
    assert result.returncode != 0, f"odradek {' '.join(args)} succeeded: {result.stdout.decode()}"
    assert "Traceback" not in err
    assert err.startswith("odradek: ")
    assert err.count("\n") == 1, err
    return err


def roundtrip_lines(count: int) -> list[str]:
    return [f"key-{i}:value {i} with: a colon" for i in range(count)]


def consume_all(env: dict[str, str], topic: str, count: int) -> list[str]:
    out = ok(["consume", topic, "--from-beginning", "--max-messages", str(count), "--print-key",
              "--timeout-ms", "30000"], env)  # fmt: skip
    return out.splitlines()


@pytest.mark.slow
def test_up_topics_produce_consume_stop_and_restart(start_up: Start, env: dict[str, str]) -> None:
    base = free_base_port(1, 1)
    up = start_up(1, 1, base_port=base)
    doc = up.wait_ready()
    assert doc["bootstrap_servers"] == f"127.0.0.1:{base}"
    assert doc["controllers"][0]["listen"] == f"127.0.0.1:{base + 100}"
    assert all(pid_alive(pid) for pid in up.child_pids(doc))
    assert f"Bootstrap servers: 127.0.0.1:{base}" in up.stdout()

    # no --bootstrap-servers: the commands find the cluster up recorded last
    cluster = ok(["cluster"], env)
    assert f"  0   127.0.0.1:{base + 100}  active   SERVING" in cluster
    assert f"  0   127.0.0.1:{base}  alive    SERVING" in cluster
    assert doc["brokers"][0]["metrics"] == f"127.0.0.1:{base + 500}"
    assert doc["controllers"][0]["metrics"] == f"127.0.0.1:{base + 600}"

    ok(["topics", "create", "lines", "--partitions", "1", "--replication-factor", "1"], env)
    ok(["topics", "create", "other", "--partitions", "3", "--replication-factor", "1", "--config",
        "retention.ms=3600000"], env)  # fmt: skip
    assert ok(["topics", "list"], env).split() == ["lines", "other"]
    described = ok(["topics", "describe", "other"], env).splitlines()
    assert described[0].startswith("Topic: other\t")
    assert "\tPartitionCount: 3\tReplicationFactor: 1\tConfigs: retention.ms=3600000" in described[0]
    assert described[1:] == [f"\tTopic: other\tPartition: {p}\tLeader: 0\tReplicas: 0\tIsr: 0" for p in range(3)]
    err = fails(["topics", "create", "other", "--partitions", "1", "--replication-factor", "1"], env)
    assert "already exists (TOPIC_ALREADY_EXISTS)" in err
    assert ok(["topics", "delete", "other"], env) == "Deleted topic other.\n"
    assert ok(["topics", "list"], env).split() == ["lines"]

    lines = roundtrip_lines(40)
    ok(["produce", "lines", "--key-separator", ":"], env, input="".join(f"{line}\n" for line in lines).encode())
    expected = [line.replace(":", "\t", 1) for line in lines]
    assert consume_all(env, "lines", len(lines)) == expected

    # Ctrl-\ (SIGQUIT): every process prints its threads' stacks, up passes it on, and everything goes on
    up.send(signal.SIGQUIT)
    for name in ("controller-0", "broker-0"):
        log = up.data_dir / "logs" / f"{name}.log"
        wait_for(lambda log=log: "(most recent call first)" in log.read_text(errors="replace"), 10.0,
                 f"{name}'s thread dump in its log")  # fmt: skip
    wait_for(lambda: "in watch" in up.stderr(), 10.0, "up's own stack, waiting in watch()")
    assert up.alive()
    assert all(pid_alive(pid) for pid in up.child_pids(doc))
    assert consume_all(env, "lines", len(lines)) == expected  # still serving

    assert up.stop(signal.SIGTERM) == 0  # also checks that every child is gone
    assert "odradek up: stopped" in up.stderr()

    again = start_up(restart=True, data_dir=up.data_dir)
    doc2 = again.wait_ready()
    assert doc2["bootstrap_servers"] == doc["bootstrap_servers"]
    assert set(again.child_pids(doc2)).isdisjoint(up.child_pids(doc))
    assert "restarting the cluster" in again.stderr()
    assert consume_all(env, "lines", len(lines)) == expected

    again.send(signal.SIGKILL)  # no chance to clean up: the children must go by themselves
    assert again.popen is not None
    again.popen.wait(10)
    again.assert_no_orphans()


@pytest.mark.slow
def test_command_errors_against_a_cluster(start_up: Start, env: dict[str, str]) -> None:
    up = start_up(1, 1)
    up.wait_ready()
    ok(["topics", "create", "t", "--partitions", "2", "--replication-factor", "1"], env)
    assert "line 2 has no key separator ':'" in fails(["produce", "t", "--key-separator", ":"], env,
                                                        input=b"a:1\nno separator\nb:2\n")  # fmt: skip
    assert "UNKNOWN_TOPIC_OR_PARTITION" in fails(["consume", "missing", "--timeout-ms", "100"], env)
    assert "UNKNOWN_TOPIC_OR_PARTITION" in fails(["produce", "missing"], env, input=b"x\n")
    ok(["topics", "create", "small", "--partitions", "1", "--replication-factor", "1", "--config",
        "max.message.bytes=200"], env)  # fmt: skip
    err = fails(["produce", "small"], env, input=b"x" * 600 + b"\n")  # the broker refuses it: a delivery failure
    assert "1 of 1 records were not delivered to 'small'" in err
    assert "MESSAGE_TOO_LARGE" in err
    assert "UNKNOWN_TOPIC_OR_PARTITION" in fails(["topics", "describe", "missing"], env)
    assert "REPLICATION_FACTOR" in fails(["topics", "create", "x", "--partitions", "1", "--replication-factor",
                                          "3"], env)  # fmt: skip
    result = odradek(["consume", "t", "--timeout-ms", "300"], env)  # nothing new: exits after the timeout
    assert result.returncode == 0
    assert result.stderr.decode() == "Processed a total of 0 messages\n"
    out = ok(["consume", "t", "--from-beginning", "--max-messages", "1", "--print-offset", "--timeout-ms", "20000"],
             env)  # fmt: skip
    assert out == "Offset:0\t1\n"  # the line before the bad one was delivered
    out = ok(["consume", "t", "--group", "g", "--from-beginning", "--max-messages", "1", "--timeout-ms", "30000"],
             env)  # fmt: skip
    assert out == "1\n"  # a new group member reads from the beginning (nothing committed yet)
    assert "cannot get an answer" in fails(["topics", "list", "--bootstrap-servers", "127.0.0.1:1"], env)
    assert "another 'odradek up' is running" in fails(["up", "--data-dir", str(up.data_dir)], env)

    broker_pid = up.cluster_json()["brokers"][0]["pid"]
    os.kill(broker_pid, signal.SIGKILL)  # up reports a child that dies, and keeps running
    wait_for(lambda: "broker-0 was killed by SIGKILL" in up.stderr(), 30, "up to report the dead broker")
    assert up.alive()


def test_ports_in_use_are_one_sentence(tmp_path: Path, env: dict[str, str]) -> None:
    base = free_base_port(1, 1)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", base + 100))
        listener.listen()
        result = odradek(["up", "--controllers", "1", "--brokers", "1", "--base-port", str(base), "--data-dir",
                          str(tmp_path / "d")], env, timeout_s=60)  # fmt: skip
    assert result.returncode == 1
    assert result.stderr.decode().endswith(
        f"already in use: {base + 100} (controller 0); stop what listens there or choose another --base-port\n"
    )
    assert not (tmp_path / "d" / "logs").exists(), "no child was started"


def test_no_bootstrap_servers_anywhere(env: dict[str, str]) -> None:
    err = fails(["topics", "list"], env)
    assert "give --bootstrap-servers" in err
    assert "ODRADEK_BOOTSTRAP_SERVERS" in err


@pytest.mark.slow
def test_a_child_that_cannot_start_fails_up(start_up: Start) -> None:
    up = start_up(1, 1, extra=("--broker-config", "no.such.key=1"))
    assert up.popen is not None
    assert up.popen.wait(120) == 1
    err = up.stderr()
    assert "broker-0 exited with status" in err
    assert "no.such.key" in err
    assert not (up.data_dir / "cluster.json").exists()
    up.assert_no_orphans()


@pytest.mark.slow
def test_three_controllers_three_brokers(start_up: Start, env: dict[str, str]) -> None:
    up = start_up(3, 3)
    doc = up.wait_ready()
    assert [c["node_id"] for c in doc["controllers"]] == [0, 1, 2]
    assert [b["node_id"] for b in doc["brokers"]] == [0, 1, 2]
    cluster = ok(["cluster"], env).splitlines()
    assert sum(line.endswith("active   SERVING") for line in cluster) == 1
    assert sum(line.endswith("standby  SERVING") for line in cluster) == 2
    assert sum(line.endswith("alive    SERVING") for line in cluster) == 3
    ok(["topics", "create", "r3", "--partitions", "3", "--replication-factor", "3", "--config",
        "min.insync.replicas=2"], env)  # fmt: skip
    described = ok(["topics", "describe", "r3"], env).splitlines()
    assert "ReplicationFactor: 3\tConfigs: min.insync.replicas=2" in described[0]
    assert all(len(line.split("Replicas: ")[1].split("\t")[0].split(",")) == 3 for line in described[1:])
    ok(["topics", "create", "spread", "--partitions", "3", "--replication-factor", "1"], env)
    leaders = {
        line.split("Leader: ")[1].split("\t")[0] for line in ok(["topics", "describe", "spread"], env).splitlines()[1:]
    }
    assert leaders == {"0", "1", "2"}, "one partition on each broker"
    lines = roundtrip_lines(30)
    ok(["produce", "spread", "--key-separator", ":"], env, input="".join(f"{line}\n" for line in lines).encode())
    assert sorted(consume_all(env, "spread", len(lines))) == sorted(line.replace(":", "\t", 1) for line in lines)
    assert up.stop(signal.SIGINT) == 0  # Ctrl-C
    assert json.loads((up.data_dir / "cluster.json").read_text())["bootstrap_servers"] == doc["bootstrap_servers"]


@pytest.mark.slow
def test_replicated_roundtrip_with_acks_all(start_up: Start, env: dict[str, str]) -> None:
    up = start_up(3, 3)
    up.wait_ready()
    ok(["topics", "create", "r3", "--partitions", "3", "--replication-factor", "3"], env)
    lines = roundtrip_lines(30)
    bounded = ["--producer-config", "delivery.timeout.ms=20000", "--producer-config", "request.timeout.ms=10000"]
    ok(["produce", "r3", "--key-separator", ":", "--acks", "all", *bounded], env,
       input="".join(f"{line}\n" for line in lines).encode())  # fmt: skip
    assert sorted(consume_all(env, "r3", len(lines))) == sorted(line.replace(":", "\t", 1) for line in lines)
