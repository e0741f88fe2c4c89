"""A broker that cannot start says why and exits: a listener whose port is taken, the gRPC one or the Kafka one
(then the gRPC server already runs and must stop). Its shutdown path used to join a thread that start had not
reached yet, and "cannot join thread before it is started" replaced the real reason."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import pytest

from broker.config import BrokerConfig
from broker.isr_manager import IsrManager
from controller.ports import free_ports
from tests.broker.cluster import odradek_command


def start_broker(
    tmp_path: Path, grpc_port: int, kafka_port: int, controller_port: int
) -> subprocess.CompletedProcess[str]:
    listeners = f"PLAINTEXT://127.0.0.1:{grpc_port},KAFKA://127.0.0.1:{kafka_port}"
    argv = [*odradek_command(), "broker", "--node-id", "0", "--listen", listeners,
            "--controllers", f"0@127.0.0.1:{controller_port}", "--data-dir", str(tmp_path / "broker")]  # fmt: skip
    env = {**os.environ, "ODRADEK_CLUSTER_SECRET": "odradek-tests-" + os.urandom(8).hex()}
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("taken", ["grpc", "kafka"])
def test_a_taken_port_is_the_reason_given(tmp_path: Path, taken: str) -> None:
    grpc_port, kafka_port, controller_port = free_ports(3)
    busy = grpc_port if taken == "grpc" else kafka_port
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", busy))
        holder.listen()
        done = start_broker(tmp_path, grpc_port, kafka_port, controller_port)
    assert done.returncode != 0
    assert f"127.0.0.1:{busy}" in done.stderr.splitlines()[-1], done.stderr[-2000:]
    assert "cannot start" in done.stderr
    assert "cannot join thread" not in done.stderr, done.stderr[-2000:]
    assert "failed too" not in done.stderr, done.stderr[-2000:]  # every part stopped cleanly


def test_the_isr_manager_stops_before_it_started() -> None:
    manager = IsrManager(0, None, None, BrokerConfig.from_props(), lambda: 1)  # type: ignore[arg-type]
    manager.stop()  # raised RuntimeError("cannot join thread before it is started")
    manager.stop()
