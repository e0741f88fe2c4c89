"""What the Controller gRPC service (``controller/service.py``) and the metrics collector
(``controller/metrics/collector.py``) need of a controller node (``ControllerServer`` in
``controller/server.py``): the :class:`ControllerNode` protocol and the :class:`Unanswered` error of
``ControllerServer.submit``.

They live here so that the imports go one way: the server starts the service and the collector
(``ControllerServer.start`` imports them), and they know the server only through this protocol.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, TypeVar

from controller.long_poll import OffsetWaiters
from controller.metrics.stats import ControllerStats
from controller.quorum import MetadataQuorum
from controller.security.node import NodeGuard
from controller.security.settings import NodeSecurity
from metadata.configs import ControllerConfig
from metadata.image import MetadataImage
from proto import common_pb2

R = TypeVar("R")


class Unanswered(Exception):
    """A request the controller could not answer: ``code`` is Kafka's error name."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code

    def to_error(self) -> common_pb2.Error:
        return common_pb2.Error(code=self.code, message=str(self))


class NodeOptions(Protocol):
    """The part of ``ServerOptions`` the service reads."""

    @property
    def cluster_id(self) -> str: ...

    @property
    def security(self) -> NodeSecurity: ...


class NodePublisher(Protocol):
    """The part of ``MetadataPublisher`` read here: the committed image, node id -> Controller gRPC address."""

    @property
    def image(self) -> MetadataImage: ...

    @property
    def addresses(self) -> Mapping[int, str]: ...


class ControllerNode(Protocol):
    """A controller node as the Controller service and the collector see it (``ControllerServer`` is the one)."""

    @property
    def node_id(self) -> int: ...

    @property
    def config(self) -> ControllerConfig: ...

    @property
    def options(self) -> NodeOptions: ...

    @property
    def publisher(self) -> NodePublisher: ...

    @property
    def stats(self) -> ControllerStats: ...

    @property
    def quorum(self) -> MetadataQuorum: ...

    @property
    def fetch_waiters(self) -> OffsetWaiters: ...

    @property
    def guard(self) -> NodeGuard: ...

    def hint(self) -> common_pb2.ControllerHint:
        """Where the active controller is, as this node knows it (-1: unknown)."""
        ...

    def submit(self, rpc: str, request: Any, response_type: type[R], timeout_ms: int = 0) -> R:
        """Have the controller thread decide ``request``; raises :class:`Unanswered`."""
        ...
