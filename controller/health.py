"""The standard gRPC health checking service (``grpc.health.v1.Health``) of a broker or controller.

Every gRPC server of a node serves it next to its own service. :class:`HealthReporter` keeps the status
of the overall server (service name ``""``) and of the node's own service (``odradek.broker.Broker`` or
``odradek.controller.Controller``) up to date: NOT_SERVING until ``ready()`` says the node can do its job
(a broker: the controller unfenced it; a controller: the quorum has a leader), SERVING while it can,
NOT_SERVING again when it cannot, and NOT_SERVING for good once :meth:`HealthReporter.shutdown` is called
(the node is stopping). ``ready()`` is polled every ``interval_s`` on a thread of the reporter's own.

Clients: ``odradek health HOST:PORT`` (one check, exit status 0 when SERVING), ``odradek up`` (waits for
every node to be SERVING), ``odradek cluster`` (shows each node's status) and the compose health checks.

Thread-safety: ``start`` and ``shutdown`` from one thread; the servicer answers from gRPC threads.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from grpc_health.v1 import health, health_pb2, health_pb2_grpc

log = logging.getLogger("odradek.health")

OVERALL = ""
POLL_INTERVAL_S = 0.2


class HealthReporter:
    """A ``HealthServicer`` and the thread that sets its statuses (see the module docstring)."""

    def __init__(self, service: str, ready: Callable[[], bool], *, interval_s: float = POLL_INTERVAL_S) -> None:
        self.service = service
        self.servicer: Any = health.HealthServicer()
        self._ready = ready
        self._interval_s = interval_s
        self._serving: bool | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"health-{service}", daemon=True)
        self._set(False)

    def add_to(self, server: Any) -> None:
        """Serve the health service on ``server`` (a ``grpc.Server`` not started yet)."""
        health_pb2_grpc.add_HealthServicer_to_server(self.servicer, server)

    def start(self) -> None:
        self._thread.start()

    def shutdown(self) -> None:
        """NOT_SERVING from now on, whatever ``ready()`` says (safe to call twice, or before ``start``)."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(5.0)
        self.servicer.enter_graceful_shutdown()

    @property
    def serving(self) -> bool:
        return bool(self._serving)

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                serving = bool(self._ready())
            except Exception:  # a readiness probe that fails means not ready; it must not stop the reporter
                log.exception("%s: readiness check failed", self.service)
                serving = False
            if serving != self._serving and not self._stop.is_set():
                self._set(serving)

    def _set(self, serving: bool) -> None:
        self._serving = serving
        status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        for name in (OVERALL, self.service):
            self.servicer.set(name, status)
