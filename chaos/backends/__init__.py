"""The backend protocol: how the chaos harness starts, inspects and hurts a cluster.

A backend owns the processes (or containers) of one cluster. The harness drives it from one thread and
asks it for exactly these things, nothing more::

    backend = LocalBackend.start(root, controllers=3, brokers=3)   # or LocalBackend.attach("DIR/cluster.json")
    backend.bootstrap_servers                  # "127.0.0.1:9092,..." for the clients
    backend.nodes()                            # [Node(role, node_id, name, address, state), ...]
    backend.kill(node)                         # kill -9; returns once the process is gone
    backend.start_node(node)                   # start a killed node again (same id, port, data); waits until ready
    backend.pause(node); backend.resume(node)  # SIGSTOP / SIGCONT
    backend.isolate(node); backend.heal(node)  # cut a node off from every other node / undo it
    backend.partition(side, others, both_ways=True); backend.heal_network()  # cut links between two groups
    backend.capabilities                       # frozenset of the capabilities below
    backend.close()                            # stop everything this backend started (bounded), idempotent

Nodes are named ``controller-<id>`` and ``broker-<id>`` (the names of ``odradek up``), and ``Node.role``
is ``"controller"`` or ``"broker"``. Every method takes a :class:`Node` (or its name) and is bounded in
time; failures raise :class:`BackendError` with a sentence that says what failed. A method whose
capability the backend lacks raises :class:`UnsupportedFault`; the harness checks ``capabilities``
first and skips such a fault with a message (a skipped fault never counts as passed).

Capabilities (``Capability``): ``KILL`` (kill / start_node), ``PAUSE`` (pause / resume), ``ISOLATE``
(isolate / heal), ``PARTITION`` (partition / heal_network). A backend that has ``ISOLATE`` must make an
isolated node unable to reach, or be reached by, every other node of the cluster, while the harness's
clients still reach the others. ``PARTITION`` cuts every link from the nodes of ``side`` to the nodes of
``others`` (and back with ``both_ways``); a one-way cut drops what ``side`` sends to ``others`` (the local
backend: ``side`` can open or use no connection to them; connections they open to it still work).

Implementations: :mod:`chaos.backends.local` (processes on loopback addresses, started the way ``odradek
up`` starts them; links cut with :mod:`chaos.backends.netcut`) and :mod:`chaos.backends.compose` (docker
compose, isolate only). Keep this protocol small: a new backend implements :class:`Backend` and nothing else.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable


class BackendError(Exception):
    """A backend operation failed (a node did not start, a process could not be signalled, ...)."""


class UnsupportedFault(BackendError):
    """The backend cannot inject this fault (e.g. isolation on a backend without network namespaces)."""


class Capability(enum.Enum):
    KILL = "kill"  # kill(node) and start_node(node)
    PAUSE = "pause"  # pause(node) and resume(node)
    ISOLATE = "isolate"  # isolate(node) and heal(node)
    PARTITION = "partition"  # partition(side, others, both_ways) and heal_network()


class NodeState(enum.Enum):
    RUNNING = "running"
    KILLED = "killed"  # kill -9, or exited by itself
    PAUSED = "paused"  # SIGSTOP
    ISOLATED = "isolated"  # running, cut off from the other nodes


ROLES = ("controller", "broker")


@dataclass(frozen=True, slots=True)
class Node:
    """One node of the cluster as the backend sees it now (a snapshot: ask ``nodes()`` again for news)."""

    role: str  # "controller" or "broker"
    node_id: int  # the server's --node-id (controllers and brokers are separate id spaces)
    address: str  # the gRPC listener, host:port
    state: NodeState

    @property
    def name(self) -> str:
        return f"{self.role}-{self.node_id}"


NodeRef = Node | str  # a Node or its name ("broker-2")


def node_name(node: NodeRef) -> str:
    return node if isinstance(node, str) else node.name


@runtime_checkable
class Backend(Protocol):
    """A cluster the harness can hurt. Driven from one thread; see the module docstring for the contract."""

    @property
    def bootstrap_servers(self) -> str:
        """The brokers' addresses for the clients, comma-separated."""
        ...

    @property
    def capabilities(self) -> frozenset[Capability]: ...

    def nodes(self) -> list[Node]:
        """Every controller and broker, controllers first, each in node id order."""
        ...

    def kill(self, node: NodeRef) -> None:
        """kill -9 the node; returns once it is gone. Killing a killed node is a no-op."""
        ...

    def start_node(self, node: NodeRef, timeout_s: float = 60.0) -> None:
        """Start a killed node again with its id, address and data; returns once it says it is ready."""
        ...

    def pause(self, node: NodeRef) -> None:
        """SIGSTOP (or the backend's equivalent: the node is frozen, its sockets stay open)."""
        ...

    def resume(self, node: NodeRef) -> None:
        """SIGCONT: undo ``pause``. Resuming a node that is not paused is a no-op."""
        ...

    def isolate(self, node: NodeRef) -> None:
        """Cut the node off from every other node (needs ``Capability.ISOLATE``)."""
        ...

    def heal(self, node: NodeRef) -> None:
        """Undo ``isolate``. Healing a node that is not isolated is a no-op."""
        ...

    def partition(self, side: Sequence[NodeRef], others: Sequence[NodeRef], *, both_ways: bool = True) -> None:
        """Cut the links from ``side`` to ``others`` (and back with ``both_ways``; needs ``Capability.PARTITION``)."""
        ...

    def heal_network(self) -> None:
        """Undo every ``partition`` and ``isolate``."""
        ...

    def close(self) -> None:
        """Resume paused nodes, heal isolated ones, stop every process this backend started (bounded)."""
        ...
