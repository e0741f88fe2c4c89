"""Real ``odradek controller`` and ``odradek broker`` processes on 127.0.0.1, for integration tests.

Reusable by any test suite (it depends on nothing in a conftest)::

    from tests.broker.cluster import Cluster

    with Cluster(tmp_path, brokers=3) as cluster:          # starts 1 controller + 3 brokers, waits until ready
        cluster.bootstrap_servers                          # "127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3"
        stub = cluster.broker_stub(0)                      # proto.broker_pb2_grpc.BrokerStub of broker 0
        cluster.create_topic("t", partitions=3, replication_factor=1, configs={"segment.bytes": "1024"})
        leader = cluster.leader("t", 0)                    # node id of the partition leader (Metadata)
        cluster.has_leaders(i, "t", 3)                     # broker i's Metadata shows 3 partitions, all led
        cluster.stop_broker(1)                             # SIGTERM, waits (bounded) for exit 0
        cluster.start_broker(1)                            # same node id, port and data dir; waits until ready
        cluster.kill_broker(2)                             # SIGKILL
    # leaving the block stops every process (SIGTERM; one not gone after a bound fails the test: NodeHung)

``Cluster(root, brokers=1, controllers=1, broker_config=None, controller_config=None, start=True,
metrics=False)``:

* ``root``: a directory (pytest's ``tmp_path``); each process gets ``root/<name>/`` as data dir and writes
  ``root/<name>.out`` / ``.err``.
* ``broker_config`` / ``controller_config``: ``--config KEY=VALUE`` for every broker / controller. Brokers
  default to ``broker.heartbeat.interval.ms=500`` so tests settle quickly.
* ``metrics``: every process serves ``/metrics`` on a free port (``Proc.metrics_address``, else "").
* ``brokers[i]`` / ``controllers[i]`` are :class:`Proc` objects: ``node_id``, ``address``, ``data_dir``,
  ``popen``, ``output()`` (stdout so far), ``errors()`` (stderr so far), ``alive()``.
* ``broker_channel(i)`` / ``broker_stub(i)`` / ``controller_stub(i)``: gRPC channels and stubs (closed by
  ``stop``).
* ``kafka=True``: every broker also listens for Kafka's protocol (``KAFKA`` listener) on a free port;
  ``kafka_bootstrap_servers`` lists them.
* ``channel_credentials``: gRPC channel credentials of the test's own stubs (TLS clusters).
* ``client_listener``: the name of a second gRPC listener on every broker (e.g. ``CLIENT``), on free ports
  ``client_addresses`` (not with ``kafka``).
* ``replication=True``: every broker also has a ``REPLICATION`` listener (``broker.replication_link``: the
  followers fetch there) on a free port, ``replication_addresses``.
* ``data=True``: every broker also has a ``DATA`` listener (``broker.data_listener``: Odradek's clients
  produce and fetch there) on a free port, ``data_addresses``.
* ``wait_for(predicate, timeout_s, what)``: poll (every 20 ms) until ``predicate()`` is true, else fail.

Processes run ``python -m odradek.cli`` (the ``odradek`` command), or the command in the environment
variable ``ODRADEK_TEST_COMMAND`` (split on spaces) when set. Brokers are started with
``MALLOC_MMAP_THRESHOLD_=67108864``, as ``broker.server`` asks of launchers. Every
wait is bounded; a process that exits early fails the wait with the tail of its stderr.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, TypeVar

import grpc

from controller.ports import free_ports
from proto import broker_pb2, broker_pb2_grpc, controller_pb2, controller_pb2_grpc
from tests.support.launcher import STACKS_TAIL_CHARS, stop_every, stop_or_fail
from tests.support.launcher import wait_until as wait_for

READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 40.0
BROKER_DEFAULTS = {"broker.heartbeat.interval.ms": "500"}
MAX_MESSAGE_BYTES = 128 << 20


class _Proxy(Protocol):
    listen: str


P = TypeVar("P", bound=_Proxy)


def odradek_command() -> list[str]:
    override = os.environ.get("ODRADEK_TEST_COMMAND", "").split()
    return override or [sys.executable, "-m", "odradek.cli"]


class Proc:
    """One server process (controller or broker) and its files."""

    def __init__(self, name: str, node_id: int, address: str, data_dir: Path, argv: list[str], env: dict[str, str]):
        self.name = name
        self.node_id = node_id
        self.address = address
        self.data_dir = data_dir
        self.argv = argv
        self.env = env
        self.out_path = data_dir.parent / f"{name}.out"
        self.err_path = data_dir.parent / f"{name}.err"
        self.popen: subprocess.Popen[bytes] | None = None
        self._offset = 0
        self.metrics_address = next((argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--metrics-listen"), "")

    def start(self) -> None:
        assert not self.alive(), f"{self.name} is already running"
        self._offset = self.out_path.stat().st_size if self.out_path.exists() else 0
        with open(self.out_path, "ab") as out, open(self.err_path, "ab") as err:
            self.popen = subprocess.Popen(self.argv, stdout=out, stderr=err, env=self.env)

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def output(self) -> str:
        """stdout of the current run."""
        if not self.out_path.exists():
            return ""
        with open(self.out_path, "rb") as f:
            f.seek(self._offset)
            return f.read().decode(errors="replace")

    def errors(self, tail: int = 4000) -> str:
        return self.err_path.read_text(errors="replace")[-tail:] if self.err_path.exists() else ""

    def wait_line(self, marker: str, timeout_s: float = READY_TIMEOUT_S) -> str:
        def seen() -> str | None:
            for line in self.output().splitlines():
                if marker in line:
                    return line
            if not self.alive():
                raise AssertionError(f"{self.name} exited ({self.returncode}) before {marker!r}:\n{self.errors()}")
            return None

        line: str = wait_for(seen, timeout_s, f"{self.name} to print {marker!r}")
        return line

    @property
    def returncode(self) -> int | None:
        return None if self.popen is None else self.popen.poll()

    def signal(self, signum: int) -> None:
        if self.alive():
            assert self.popen is not None
            self.popen.send_signal(signum)

    def wait(self, timeout_s: float) -> int:
        assert self.popen is not None
        return self.popen.wait(timeout_s)

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int | None:
        """SIGTERM and wait (bounded); the exit status (None if it never ran). A process still running after
        ``timeout_s`` is a bug: it is asked for its threads' stacks, killed, and ``NodeHung`` names it with the
        end of its stderr (``tests.support.launcher.stop_or_fail``)."""
        if self.popen is None:
            return None
        if self.alive():
            return stop_or_fail(self.popen, self.name, timeout_s, lambda: self.errors(STACKS_TAIL_CHARS))
        return self.popen.wait(10)


class Cluster:
    """Controllers and brokers as processes; see the module docstring. Not thread-safe (one test drives it)."""

    def __init__(
        self,
        root: Path,
        *,
        brokers: int = 1,
        controllers: int = 1,
        broker_config: Mapping[str, str] | None = None,
        controller_config: Mapping[str, str] | None = None,
        start: bool = True,
        metrics: bool = False,
        kafka: bool = False,
        channel_credentials: grpc.ChannelCredentials | None = None,
        client_listener: str | None = None,
        replication: bool = False,
        data: bool = False,
    ) -> None:
        self.root = Path(root)
        self.channel_credentials = channel_credentials  # for the test's own stubs: TLS to TLS listeners
        # reserved across processes, below the ephemeral range (controller.ports)
        nodes = controllers + brokers
        extra = brokers if client_listener else 0
        links = brokers if replication else 0
        datas = brokers if data else 0
        ports = free_ports(
            2 * controllers + brokers + (brokers if kafka else 0) + (nodes if metrics else 0) + extra + links + datas
        )
        self.data_addresses = [f"127.0.0.1:{p}" for p in ports[len(ports) - datas :]] if datas else []
        ports = ports[: len(ports) - datas]
        self.replication_addresses = [f"127.0.0.1:{p}" for p in ports[len(ports) - links :]] if links else []
        ports = ports[: len(ports) - links]
        self.client_addresses = [f"127.0.0.1:{p}" for p in ports[len(ports) - extra :]] if extra else []
        ports = ports[: len(ports) - extra]
        grpc_ports, raft_ports = ports[:controllers], ports[controllers : 2 * controllers]
        broker_ports = ports[2 * controllers : 2 * controllers + brokers]
        kafka_ports = ports[2 * controllers + brokers : 2 * controllers + brokers + (brokers if kafka else 0)]
        self.kafka_addresses = [f"127.0.0.1:{p}" for p in kafka_ports]
        metrics_ports = ports[len(ports) - (nodes if metrics else 0) :]

        def metrics_args(i: int) -> list[str]:
            return ["--metrics-listen", f"127.0.0.1:{metrics_ports[i]}"] if metrics else []

        quorum = ",".join(f"{i}@127.0.0.1:{p}" for i, p in enumerate(raft_ports))
        addresses = ",".join(f"{i}@127.0.0.1:{p}" for i, p in enumerate(grpc_ports))
        env = {k: v for k, v in os.environ.items() if k != "ODRADEK_CLUSTER_SECRET"}
        env["ODRADEK_CLUSTER_SECRET"] = "odradek-tests-" + os.urandom(8).hex()
        self.controllers = []
        for i in range(controllers):
            listen, data_dir = f"127.0.0.1:{grpc_ports[i]}", self.root / f"controller-{i}"
            argv = [*odradek_command(), "controller", "--node-id", str(i), "--listen", listen]
            argv += ["--raft-listen", f"127.0.0.1:{raft_ports[i]}", "--quorum", quorum]
            argv += ["--controller-addresses", addresses, "--data-dir", str(data_dir)]
            argv += _config_args(controller_config or {}) + metrics_args(i)
            self.controllers.append(Proc(f"controller-{i}", i, listen, data_dir, argv, env))
        self.controller_addresses = ",".join(c.address for c in self.controllers)
        broker_env = {**env, "MALLOC_MMAP_THRESHOLD_": "67108864"}
        config = {**BROKER_DEFAULTS, **(broker_config or {})}
        self.brokers = []
        for i in range(brokers):
            listen, data_dir = f"127.0.0.1:{broker_ports[i]}", self.root / f"broker-{i}"
            listeners = f"PLAINTEXT://{listen},KAFKA://{self.kafka_addresses[i]}" if kafka else listen
            if client_listener:
                listeners = f"PLAINTEXT://{listen},{client_listener}://{self.client_addresses[i]}"
            if replication:
                listeners = ("" if "://" in listeners else "PLAINTEXT://") + listeners
                listeners += f",REPLICATION://{self.replication_addresses[i]}"
            if data:
                listeners = ("" if "://" in listeners else "PLAINTEXT://") + listeners
                listeners += f",DATA://{self.data_addresses[i]}"
            argv = [*odradek_command(), "broker", "--node-id", str(i), "--listen", listeners]
            argv += ["--controllers", self.controller_addresses, "--data-dir", str(data_dir), *_config_args(config)]
            argv += metrics_args(controllers + i)
            self.brokers.append(Proc(f"broker-{i}", i, listen, data_dir, argv, broker_env))
        self._channels: dict[str, grpc.Channel] = {}
        if start:
            self.start()

    # --- processes ----------------------------------------------------------------------------------

    def start(self) -> None:
        try:
            for proc in self.controllers:
                proc.start()
            for proc in self.controllers:
                proc.wait_line("listening on")
            for proc in self.brokers:
                proc.start()
            for proc in self.brokers:
                proc.wait_line("ready on")
        except BaseException:
            self.stop()
            raise

    def start_broker(self, i: int, *, wait: bool = True) -> Proc:
        proc = self.brokers[i]
        proc.start()
        if wait:
            proc.wait_line("ready on")
        return proc

    def stop_broker(self, i: int, timeout_s: float = STOP_TIMEOUT_S) -> int | None:
        self._drop_channel(self.brokers[i].address)
        return self.brokers[i].stop(timeout_s)

    def kill_broker(self, i: int) -> None:
        self._drop_channel(self.brokers[i].address)
        self.brokers[i].signal(signal.SIGKILL)
        self.brokers[i].wait(10)

    def stop(self) -> None:
        """Stop every process: brokers first (their controlled shutdown needs the controller), bounded."""
        for channel in self._channels.values():
            channel.close()
        self._channels.clear()
        for proc in self.brokers:
            proc.signal(signal.SIGTERM)
        stop_every([proc.stop for proc in [*self.brokers, *self.controllers]])  # NodeHung after all stopped

    def __enter__(self) -> Cluster:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # --- clients ------------------------------------------------------------------------------------

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(b.address for b in self.brokers)

    @property
    def kafka_bootstrap_servers(self) -> str:
        """The brokers' Kafka-protocol listeners (``kafka=True``)."""
        return ",".join(self.kafka_addresses)

    def _channel(self, address: str) -> grpc.Channel:
        channel = self._channels.get(address)
        if channel is None:
            options = [("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                       ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)]  # fmt: skip
            if self.channel_credentials is None:
                channel = grpc.insecure_channel(address, options=options)
            else:
                channel = grpc.secure_channel(address, self.channel_credentials, options=options)
            self._channels[address] = channel
        return channel

    def _drop_channel(self, address: str) -> None:
        channel = self._channels.pop(address, None)
        if channel is not None:
            channel.close()

    def broker_channel(self, i: int) -> grpc.Channel:
        return self._channel(self.brokers[i].address)

    def broker_stub(self, i: int) -> Any:
        return broker_pb2_grpc.BrokerStub(self.broker_channel(i))  # type: ignore[no-untyped-call]

    def controller_stub(self, i: int) -> Any:
        return controller_pb2_grpc.ControllerStub(self._channel(self.controllers[i].address))  # type: ignore[no-untyped-call]

    def wait_for(self, predicate: Callable[[], Any], timeout_s: float, what: str) -> Any:
        return wait_for(predicate, timeout_s, what)

    # --- topics -------------------------------------------------------------------------------------

    def create_topic(
        self, name: str, partitions: int = 1, replication_factor: int = 1, configs: Mapping[str, str] | None = None,
        *, via: int = 0, timeout_s: float = 30.0,
    ) -> controller_pb2.TopicResult:  # fmt: skip
        """CreateTopics through broker ``via`` (forwarded); waits until every partition has a leader that
        every live broker knows. Returns the controller's TopicResult (asserted successful)."""
        request = controller_pb2.CreateTopicsRequest(
            topics=[controller_pb2.TopicToCreate(name=name, num_partitions=partitions,
                                                 replication_factor=replication_factor, configs=configs or {})],
            timeout_ms=int(timeout_s * 1000),
        )  # fmt: skip
        response = self.broker_stub(via).CreateTopics(request, timeout=timeout_s)
        assert not response.error.code, response.error
        result: controller_pb2.TopicResult = response.topics[0]
        assert not result.error.code, result.error
        for i, proc in enumerate(self.brokers):
            if proc.alive():
                self.wait_for(partial(self.has_leaders, i, name, partitions), timeout_s, f"{name} on broker {i}")
        return result

    def has_leaders(self, i: int, topic: str, partitions: int) -> bool:
        metadata = self.metadata(i, [topic])
        found = metadata.topics[0] if metadata.topics else None
        return bool(found and not found.error.code and len(found.partitions) == partitions
                    and all(p.leader >= 0 for p in found.partitions))  # fmt: skip

    def metadata(self, i: int = 0, topics: list[str] | None = None) -> broker_pb2.MetadataResponse:
        request = broker_pb2.MetadataRequest(topics=topics or [], all_topics=topics is None)
        response: broker_pb2.MetadataResponse = self.broker_stub(i).Metadata(request, timeout=10)
        return response

    def partition_metadata(self, topic: str, partition: int, via: int = 0) -> broker_pb2.PartitionMetadata:
        for p in self.metadata(via, [topic]).topics[0].partitions:
            if p.partition == partition:
                return p
        raise AssertionError(f"no partition {topic}-{partition} in the metadata of broker {via}")

    def leader(self, topic: str, partition: int = 0, via: int = 0) -> int:
        return self.partition_metadata(topic, partition, via).leader


def behind_proxies(cluster: Cluster, make: Callable[[str, str], P]) -> list[P]:
    """Before ``cluster.start()``: one proxy per broker, ``make(listen address, broker address)`` on a free port,
    and each broker advertised at its proxy's address (clients and followers then go through the proxies)."""
    proxies = [make(f"127.0.0.1:{port}", b.address) for port, b in zip(free_ports(len(cluster.brokers)),
                                                                       cluster.brokers, strict=True)]  # fmt: skip
    for broker, proxy in zip(cluster.brokers, proxies, strict=True):
        broker.argv += ["--advertised", proxy.listen]
    return proxies


def _config_args(config: Mapping[str, str]) -> list[str]:
    args: list[str] = []
    for key, value in config.items():
        args += ["--config", f"{key}={value}"]
    return args


def established_connections(address: str) -> int:
    """How many TCP connections to ``address`` (``HOST:PORT`` a process of this machine listens on) are
    established now, from the kernel's tables (``/proc/net/tcp``, ``/proc/net/tcp6``): the accepted sides."""
    return len(established_peer_ports(address))


def established_peer_ports(address: str) -> list[int]:
    """The client-side ports of the TCP connections established now to ``address`` (a listener of this
    machine), one per connection: a connection closed and opened again shows as a new port."""
    port = int(address.rpartition(":")[2])
    text = ""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            text += Path(table).read_text()
        except OSError:
            continue
    return [remote for local, remote in established_tcp(text) if local == port]


def established_tcp(text: str) -> list[tuple[int, int]]:
    """``(local port, remote port)`` of each ESTABLISHED connection in ``text``, the contents of
    ``/proc/net/tcp`` and ``/proc/net/tcp6`` (of this machine, or of a container's network namespace)."""
    connections = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) > 3 and fields[3] == "01":  # 01: ESTABLISHED (the header lines have "st" there)
            connections.append((int(fields[1].rpartition(":")[2], 16), int(fields[2].rpartition(":")[2], 16)))
    return connections
