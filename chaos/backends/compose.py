"""The docker-compose backend: the cluster of ``deploy/docker-compose.yml``, one container per node.

Two ways in:

* :meth:`ComposeBackend.start` brings up a fresh compose project (``up -d --no-build``: the images must
  exist, ``deploy/build.sh`` makes them) on free host ports and a free subnet, waits until every node is
  healthy, and ``close()`` takes it down with its volumes (``down -v``); ``overlays`` lays more compose files
  over the main one (``deploy/docker-compose.secured.yml``: then :meth:`~ComposeBackend.wait_completed` waits
  for its one-shot ``security-admin`` and :meth:`~ComposeBackend.copy_out` takes the client files out).
* :meth:`ComposeBackend.attach` takes a running project (``docker compose -p NAME -f FILE up -d``);
  ``close()`` then only resumes and reconnects the nodes it hurt, and leaves the project running.

Faults, per container (the compose service ``controller-<id>`` / ``broker-<id>`` is the node's name):

* kill / start_node: ``docker kill`` (SIGKILL to the whole container; Docker does not restart a container
  killed that way, whatever its restart policy) and ``docker start``, which waits until Docker's health
  check says the node is ready again (controller: the quorum has a leader; broker: unfenced);
* pause / resume: ``docker pause`` / ``docker unpause`` (the cgroup freezer: sockets stay open);
* isolate / heal: ``docker network disconnect`` from the project's network, then ``docker network connect``
  with the address and alias the node had (the compose file gives the network a subnet of its own, which
  is what allows reconnecting at a given address: the other nodes' resolvers may still cache it). An
  isolated broker is unreachable for the clients too (its published port goes through that network).

Compose is ``docker compose`` (v2) when that works, else ``docker-compose`` (v1); both take the same
arguments here. Every docker call is bounded (``DOCKER_TIMEOUT_S``); failures raise
:class:`~chaos.backends.BackendError` with the command and its error output.

Thread-safety: none; the harness's fault thread drives it.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import random
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from chaos.backends import BackendError, Capability, Node, NodeRef, NodeState, UnsupportedFault, node_name

DEFAULT_COMPOSE_FILE = Path(__file__).resolve().parents[2] / "deploy" / "docker-compose.yml"
DOCKER_TIMEOUT_S = 120.0
UP_TIMEOUT_S = 600.0  # `up -d` creates 6 containers: slow on a loaded machine
DOWN_TIMEOUT_S = 300.0
KILL_WAIT_S = 30.0
POLL_S = 0.5
FREEZE_ATTEMPTS = 5  # `docker pause` tries when cgroup v1 cannot freeze the container (see ComposeBackend._freeze)
CONTROLLERS = 3
BROKERS = 3
EXTERNAL_HOST = "127.0.0.1"
SUBNET_POOL = ipaddress.IPv4Network("172.30.0.0/16")  # /24s are picked from it


def compose_command() -> list[str] | None:
    """``["docker", "compose"]`` or ``["docker-compose"]``, whichever answers ``version``; None if neither."""
    candidates: list[list[str]] = []
    if shutil.which("docker"):
        candidates.append(["docker", "compose"])
    if shutil.which("docker-compose"):
        candidates.append(["docker-compose"])
    for argv in candidates:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            done = subprocess.run([*argv, "version"], capture_output=True, timeout=30, check=False)
            if done.returncode == 0:
                return argv
    return None


def docker(*args: str, timeout_s: float = DOCKER_TIMEOUT_S, env: Mapping[str, str] | None = None) -> str:
    """Run ``docker ARGS`` (or a compose command when ``args`` start with one); stdout, or BackendError."""
    argv = list(args) if args and args[0] in ("docker", "docker-compose") else ["docker", *args]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, env=env, check=False)
    except subprocess.TimeoutExpired:
        raise BackendError(f"`{' '.join(argv)}` did not finish within {timeout_s:.0f} s") from None
    except OSError as exc:
        raise BackendError(f"`{' '.join(argv)}` could not run: {exc}") from None
    if done.returncode != 0:
        raise BackendError(f"`{' '.join(argv)}` failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    return done.stdout


def free_host_ports(count: int) -> list[int]:
    from controller.ports import free_ports

    return list(free_ports(count))


def free_subnet(rng: random.Random) -> str:
    """A /24 of :data:`SUBNET_POOL` that no docker network uses."""
    used: list[ipaddress.IPv4Network] = []
    for network_id in docker("network", "ls", "-q").split():
        with contextlib.suppress(BackendError):
            for config in json.loads(docker("network", "inspect", "-f", "{{json .IPAM.Config}}", network_id)) or []:
                with contextlib.suppress(KeyError, ValueError):
                    used.append(ipaddress.IPv4Network(config["Subnet"], strict=False))  # IPv6 ones: ValueError
    candidates = list(SUBNET_POOL.subnets(new_prefix=24))
    rng.shuffle(candidates)
    for subnet in candidates:
        if not any(subnet.overlaps(other) for other in used):
            return str(subnet)
    raise BackendError(f"no free /24 in {SUBNET_POOL} for the compose network")


class ComposeBackend:
    """See the module docstring. Implements :class:`chaos.backends.Backend`."""

    def __init__(
        self, project: str, compose_file: Path, env: Mapping[str, str], broker_ports: Sequence[int], *, owned: bool,
        kafka_ports: Sequence[int] = (9392, 9393, 9394), data_ports: Sequence[int] = (9892, 9893, 9894),
        overlays: Sequence[Path] = (),
    ) -> None:  # fmt: skip
        command = compose_command()
        if command is None:
            raise BackendError("neither `docker compose` nor `docker-compose` answers")
        self.project = project
        self.compose_file = Path(compose_file)
        self.overlays = [Path(o) for o in overlays]
        files = [self.compose_file, *self.overlays]
        self._compose = [*command, "-p", project, *(arg for f in files for arg in ("-f", str(f)))]
        self._env = dict(env)
        self._broker_ports = list(broker_ports)
        self._kafka_ports = list(kafka_ports)
        self._data_ports = list(data_ports)
        self._owned = owned
        self._containers: dict[str, str] = {}  # node name -> container id
        self._paused: set[str] = set()
        self._isolated: dict[str, tuple[str, str]] = {}  # node name -> (network, ip address)
        self._closed = False

    # ------------------------------------------------------------------------------------ creation

    @classmethod
    def start(
        cls, project: str | None = None, *, compose_file: str | Path = DEFAULT_COMPOSE_FILE,
        image: str | None = None, broker_config: Mapping[str, str] | None = None,
        controller_config: Mapping[str, str] | None = None, timeout_s: float = 300.0, wait: bool = True,
        overlays: Sequence[str | Path] = (),
    ) -> ComposeBackend:  # fmt: skip
        """``up -d`` a fresh project (default name ``odradek-chaos-<random>``) and wait until every node is
        healthy (unless ``wait`` is false). ``*_config``: ``--config`` pairs for every broker / controller;
        ``overlays``: compose files laid over ``compose_file`` (``-f`` each, in order), such as
        ``deploy/docker-compose.secured.yml``."""
        rng = random.Random(os.getpid() ^ time.monotonic_ns())  # names and ports only
        project = project or f"odradek-chaos-{rng.randrange(16**6):06x}"
        # one call: ports from two calls could overlap (each call's sockets are closed when it returns)
        ports = free_host_ports(3 * BROKERS + 2)
        prometheus_port, console_port = ports[-2:]
        ports, kafka_ports, data_ports = ports[:BROKERS], ports[BROKERS : 2 * BROKERS], ports[2 * BROKERS : -2]
        env = dict(os.environ)
        env.update({f"ODRADEK_BROKER_{i}_PORT": str(port) for i, port in enumerate(ports)})
        env.update({f"ODRADEK_BROKER_{i}_KAFKA_PORT": str(port) for i, port in enumerate(kafka_ports)})
        env.update({f"ODRADEK_BROKER_{i}_DATA_PORT": str(port) for i, port in enumerate(data_ports)})
        env["ODRADEK_PROMETHEUS_PORT"], env["ODRADEK_CONSOLE_PORT"] = str(prometheus_port), str(console_port)
        env["ODRADEK_SUBNET"] = free_subnet(rng)
        env["ODRADEK_PUBLISH_HOST"] = env["ODRADEK_ADVERTISED_HOST"] = EXTERNAL_HOST
        env["ODRADEK_BROKER_ARGS"] = " ".join(f"--config {k}={v}" for k, v in (broker_config or {}).items())
        env["ODRADEK_CONTROLLER_ARGS"] = " ".join(f"--config {k}={v}" for k, v in (controller_config or {}).items())
        if image is not None:
            env["ODRADEK_IMAGE"] = image
        backend = cls(
            project,
            Path(compose_file),
            env,
            ports,
            owned=True,
            kafka_ports=kafka_ports,
            data_ports=data_ports,
            overlays=[Path(o) for o in overlays],
        )
        try:
            docker(*backend._compose, "up", "-d", "--no-build", timeout_s=UP_TIMEOUT_S, env=env)
            if wait:
                backend.wait_healthy(timeout_s)
        except BaseException:
            backend.close()
            raise
        return backend

    @classmethod
    def attach(
        cls, project: str, *, compose_file: str | Path = DEFAULT_COMPOSE_FILE,
        broker_ports: Sequence[int] = (9092, 9093, 9094),
    ) -> ComposeBackend:  # fmt: skip
        """A running project; ``broker_ports``: the host ports its brokers are published on."""
        backend = cls(project, Path(compose_file), dict(os.environ), broker_ports, owned=False)
        missing = [name for name in backend.names() if backend._container(name, required=False) is None]
        if missing:
            raise BackendError(f"project {project} has no container for {', '.join(missing)} (is it up?)")
        return backend

    # ------------------------------------------------------------------------------------- queries

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"{EXTERNAL_HOST}:{port}" for port in self._broker_ports)

    @property
    def kafka_bootstrap_servers(self) -> str:
        """The brokers' Kafka-protocol listeners as published on the host (KAFKA_EXTERNAL)."""
        return ",".join(f"{EXTERNAL_HOST}:{port}" for port in self._kafka_ports)

    @property
    def data_addresses(self) -> list[str]:
        """The brokers' DATA_EXTERNAL listeners as published on the host (where the host's Odradek clients
        produce and fetch), in broker order."""
        return [f"{EXTERNAL_HOST}:{port}" for port in self._data_ports]

    @property
    def prometheus_url(self) -> str:
        """The compose file's Prometheus server, as published on the host."""
        return f"http://{EXTERNAL_HOST}:{self._env.get('ODRADEK_PROMETHEUS_PORT', '9090')}"

    @property
    def console_url(self) -> str:
        """The compose file's web console, as published on the host."""
        return f"http://{EXTERNAL_HOST}:{self._env.get('ODRADEK_CONSOLE_PORT', '8080')}"

    @property
    def capabilities(self) -> frozenset[Capability]:
        return frozenset({Capability.KILL, Capability.PAUSE, Capability.ISOLATE})

    @staticmethod
    def names() -> list[str]:
        return [f"controller-{i}" for i in range(CONTROLLERS)] + [f"broker-{i}" for i in range(BROKERS)]

    def nodes(self) -> list[Node]:
        result = []
        for name in self.names():
            role, _, number = name.rpartition("-")
            address = f"{name}:9190" if role == "controller" else f"{EXTERNAL_HOST}:{self._broker_ports[int(number)]}"
            result.append(Node(role, int(number), address, self._state(name)))
        return result

    def _state(self, name: str) -> NodeState:
        state = self._inspect(name)["State"]
        if not state.get("Running"):
            return NodeState.KILLED
        if state.get("Paused"):
            return NodeState.PAUSED
        return NodeState.ISOLATED if name in self._isolated else NodeState.RUNNING

    def _container(self, name: str, *, required: bool = True) -> str | None:
        if name not in self._containers:
            found = docker(
                "ps", "-a", "-q", "--filter", f"label=com.docker.compose.project={self.project}",
                "--filter", f"label=com.docker.compose.service={name}",
            ).split()  # fmt: skip
            if not found:
                if required:
                    raise BackendError(f"project {self.project} has no container for {name}")
                return None
            self._containers[name] = found[0]
        return self._containers[name]

    def container(self, node: NodeRef) -> str:
        """The container id of ``node``."""
        name = self._name(node)
        container = self._container(name)
        assert container is not None
        return container

    def _inspect(self, name: str) -> dict[str, Any]:
        result: list[dict[str, Any]] = json.loads(docker("inspect", self.container(name)))
        return result[0]

    def _name(self, node: NodeRef) -> str:
        name = node_name(node)
        if name not in self.names():
            raise BackendError(f"no node named {name!r} (the cluster has {', '.join(self.names())})")
        return name

    def health(self, node: NodeRef) -> str:
        """Docker's health status of the node's container: ``starting``, ``healthy``, ``unhealthy``, or
        ``stopped``."""
        state = self._inspect(self._name(node))["State"]
        assert isinstance(state, dict)
        if not state.get("Running"):
            return "stopped"
        return str((state.get("Health") or {}).get("Status", "starting"))

    def wait_healthy(self, timeout_s: float, nodes: Sequence[NodeRef] | None = None) -> None:
        """Wait (bounded) until Docker reports every node (default: all) healthy."""
        pending = [self._name(n) for n in nodes] if nodes is not None else self.names()
        deadline = time.monotonic() + timeout_s
        while pending:
            pending = [name for name in pending if self.health(name) != "healthy"]
            if not pending:
                return
            if time.monotonic() >= deadline:
                states = ", ".join(f"{name} {self.health(name)}" for name in pending)
                raise BackendError(f"not healthy within {timeout_s:.0f} s: {states}; see `{self.logs_hint()}`")
            time.sleep(POLL_S)

    def wait_completed(self, service: str, timeout_s: float) -> None:
        """Wait (bounded) until the one-shot ``service`` (``security-admin``, ...) has exited with status 0;
        BackendError when it exited otherwise or is still running at the deadline."""
        deadline = time.monotonic() + timeout_s
        while True:
            container = self._container(service, required=False)
            if container is not None:
                state = json.loads(docker("inspect", container))[0]["State"]
                if state.get("Status") == "exited":
                    if state.get("ExitCode") == 0:
                        return
                    raise BackendError(f"{service} exited with status {state.get('ExitCode')}; see "
                                       f"`{self.logs_hint()} {service}`")  # fmt: skip
            if time.monotonic() >= deadline:
                raise BackendError(f"{service} did not complete within {timeout_s:.0f} s; see `{self.logs_hint()}`")
            time.sleep(POLL_S)

    def copy_out(self, service: str, path: str, destination: Path) -> None:
        """``docker cp`` the file or directory ``path`` of the service's container to ``destination`` on the
        host (which must not exist yet: it becomes the copy)."""
        container = self._container(service)
        assert container is not None
        docker("cp", f"{container}:{path}", str(destination))

    def logs_hint(self) -> str:
        return " ".join([*self._compose, "logs"])

    def logs(self, node: NodeRef, tail: int = 200) -> str:
        """The last ``tail`` lines the node's container wrote (stdout and stderr)."""
        done = subprocess.run(
            ["docker", "logs", "--tail", str(tail), self.container(node)],
            capture_output=True, text=True, timeout=DOCKER_TIMEOUT_S, check=False,
        )  # fmt: skip
        return done.stdout + done.stderr

    def exec(self, node: NodeRef, argv: Sequence[str], *, stdin: str = "", timeout_s: float = 120.0) -> str:
        """Run ``argv`` in the node's container (a client inside the compose network); its stdout."""
        command = ["docker", "exec", "-i", self.container(node), *argv]
        try:
            done = subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired:
            raise BackendError(f"`{' '.join(command)}` did not finish within {timeout_s:.0f} s") from None
        if done.returncode != 0:
            raise BackendError(f"`{' '.join(command)}` failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
        return done.stdout

    # -------------------------------------------------------------------------------------- faults

    def kill(self, node: NodeRef) -> None:
        name = self._name(node)
        if self._state(name) is NodeState.KILLED:
            return
        docker("kill", self.container(name))
        self._paused.discard(name)
        deadline = time.monotonic() + KILL_WAIT_S
        while self._state(name) is not NodeState.KILLED:
            if time.monotonic() >= deadline:
                raise BackendError(f"{name} still runs {KILL_WAIT_S:.0f} s after docker kill")
            time.sleep(POLL_S)

    def start_node(self, node: NodeRef, timeout_s: float = 60.0) -> None:
        name = self._name(node)
        if self._state(name) is not NodeState.KILLED:
            raise BackendError(f"{name} is running already")
        docker("start", self.container(name))
        self.wait_healthy(timeout_s, [name])

    def pause(self, node: NodeRef) -> None:
        name = self._name(node)
        if self._state(name) is NodeState.KILLED:
            raise BackendError(f"cannot pause {name}: it is not running")
        if name not in self._paused:
            self._freeze(self.container(name))
            self._paused.add(name)

    @staticmethod
    def _freeze(container: str) -> None:
        """``docker pause``, tried again when runc's cgroup v1 freezer gives up: with cgroup v1 the kernel may leave
        the cgroup FREEZING while the process starts threads or sits in an uninterruptible wait (a slow disk), and
        runc then thaws it back and fails with "unable to freeze" (runc's own advice: retry or thaw). Nothing was
        paused then, so trying again is the same action; any other failure, or the last try's, is raised."""
        for attempt in range(1, FREEZE_ATTEMPTS + 1):
            try:
                docker("pause", container)
                return
            except BackendError as exc:
                if "unable to freeze" not in str(exc) or attempt == FREEZE_ATTEMPTS:
                    raise
            time.sleep(POLL_S)

    def resume(self, node: NodeRef) -> None:
        name = self._name(node)
        if name in self._paused:
            docker("unpause", self.container(name))
            self._paused.discard(name)

    def isolate(self, node: NodeRef) -> None:
        name = self._name(node)
        if name in self._isolated:
            return
        networks = self._inspect(name)["NetworkSettings"]
        assert isinstance(networks, dict)
        attached = networks.get("Networks") or {}
        if len(attached) != 1:
            raise BackendError(f"{name} is on networks {sorted(attached)}; expected the project's one network")
        ((network, settings),) = attached.items()
        address = settings.get("IPAddress") or (settings.get("IPAMConfig") or {}).get("IPv4Address")
        if not address:
            raise BackendError(f"{name} has no IPv4 address on {network}")
        docker("network", "disconnect", network, self.container(name))
        self._isolated[name] = (network, address)

    def heal(self, node: NodeRef) -> None:
        name = self._name(node)
        if name not in self._isolated:
            return
        network, address = self._isolated[name]
        docker("network", "connect", "--ip", address, "--alias", name, network, self.container(name))
        del self._isolated[name]

    def partition(self, side: Sequence[NodeRef], others: Sequence[NodeRef], *, both_ways: bool = True) -> None:
        raise UnsupportedFault("the compose backend isolates whole nodes only; partitions run on the local backend")

    def heal_network(self) -> None:
        for name in list(self._isolated):
            self.heal(name)

    # ---------------------------------------------------------------------------------------- end

    def close(self) -> None:
        """Resume and reconnect every node this backend hurt; ``down -v`` when it started the project."""
        if self._closed:
            return
        self._closed = True
        problems = []
        for name in list(self._paused):
            try:
                self.resume(name)
            except BackendError as exc:
                problems.append(str(exc))
        for name in list(self._isolated):
            try:
                self.heal(name)
            except BackendError as exc:
                problems.append(str(exc))
        if self._owned:
            try:
                docker(*self._compose, "down", "-v", "--remove-orphans", "-t", "10", timeout_s=DOWN_TIMEOUT_S,
                       env=self._env)  # fmt: skip
            except BackendError as exc:
                problems.append(str(exc))
        if problems:
            raise BackendError("closing the compose cluster: " + "; ".join(problems))

    def __enter__(self) -> ComposeBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
