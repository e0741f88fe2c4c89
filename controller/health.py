"""The standard gRPC health checking service (``grpc.health.v1.Health``) of a broker or controller.

Every gRPC server of a node serves it next to its own service. :class:`HealthReporter` keeps the status
of the overall server (service name ``""``) and of the node's own service (``odradek.broker.Broker`` or
``odradek.controller.Controller``) up to date: NOT_SERVING until ``ready()`` says the node can do its job
(a broker: the controller unfenced it; a controller: the quorum has a leader), SERVING while it can,
NOT_SERVING again when it cannot, and NOT_SERVING for good once :meth:`HealthReporter.shutdown` is called
(the node is stopping). ``ready()`` is polled every ``interval_s`` on a thread of the reporter's own.

Clients: ``odradek health HOST:PORT`` (one check, exit status 0 when SERVING), ``odradek up`` (waits for
every node to be SERVING), ``odradek cluster`` (shows each node's status) and the compose health checks.

On a ``grpc.aio`` server (:class:`controller.rpc_server.RpcServer`, as every node serves) the service is
:class:`AsyncHealthServicer`: Check and Watch are coroutines on the server's event loop, so a Watch stream,
which lasts as long as its client keeps it open, holds no thread. (grpcio's synchronous ``HealthServicer``
there would run each Watch on a worker of the server's small pool for the stream's whole life: a few
watchers, such as orchestrators' health probes, would take every worker and starve the node's requests.)
On a synchronous ``grpc.Server``, where every call has its thread anyway, grpcio's ``HealthServicer`` serves.

Thread-safety: ``start`` and ``shutdown`` from one thread; the servicers answer from gRPC threads or event
loops; a status change reaches each asynchronous servicer on its own loop (``call_soon_threadsafe``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable
from typing import Any

import grpc
import grpc.aio
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

log = logging.getLogger("odradek.health")

OVERALL = ""
POLL_INTERVAL_S = 0.2


Status = int  # a health_pb2.HealthCheckResponse.ServingStatus value
NOT_SERVING: Status = health_pb2.HealthCheckResponse.NOT_SERVING


class AsyncHealthServicer(health_pb2_grpc.HealthServicer):  # type: ignore[misc]  # generated code is untyped
    """``grpc.health.v1.Health`` for one ``grpc.aio`` server: Check and Watch run on its event loop, reading the
    statuses of ``statuses`` (a callable of the service name: its status, None when unknown); :meth:`changed`
    (from any thread) wakes the Watch streams, which send the status again if it changed."""

    def __init__(self, statuses: Callable[[str], Status | None], loop: asyncio.AbstractEventLoop) -> None:
        self._statuses = statuses
        self._loop = loop
        self._watchers: set[asyncio.Event] = set()  # touched on the loop only

    async def Check(self, request: health_pb2.HealthCheckRequest, context: Any) -> health_pb2.HealthCheckResponse:
        status = self._statuses(request.service)
        if status is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"unknown service {request.service!r}")
        return health_pb2.HealthCheckResponse(status=status)

    async def Watch(self, request: health_pb2.HealthCheckRequest, context: Any) -> None:
        """The current status, then every change, until the client or the server ends the stream (SERVICE_UNKNOWN
        for a service this node does not have, as gRPC's servicers answer)."""
        woken = asyncio.Event()
        self._watchers.add(woken)
        last: Status | None = None
        try:
            while True:
                woken.clear()  # before reading: a change after the read sets it again
                status = self._statuses(request.service)
                if status is None:
                    status = health_pb2.HealthCheckResponse.SERVICE_UNKNOWN
                if status != last:
                    await context.write(health_pb2.HealthCheckResponse(status=status))
                    last = status
                await woken.wait()
        finally:
            self._watchers.discard(woken)

    def changed(self) -> None:
        """A status changed (any thread)."""
        with contextlib.suppress(RuntimeError):  # the server's loop is closed: no stream left to tell
            self._loop.call_soon_threadsafe(self._wake)

    def _wake(self) -> None:
        for woken in self._watchers:
            woken.set()


class HealthReporter:
    """The statuses, the servicers that serve them, and the thread that sets them (see the module docstring)."""

    def __init__(self, service: str, ready: Callable[[], bool], *, interval_s: float = POLL_INTERVAL_S) -> None:
        self.service = service
        self.servicer: Any = health.HealthServicer()  # for synchronous servers
        self._async_servicers: list[AsyncHealthServicer] = []
        self._lock = threading.Lock()
        self._status: Status = NOT_SERVING
        self._shut_down = False
        self._ready = ready
        self._interval_s = interval_s
        self._serving: bool | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"health-{service}", daemon=True)
        self._set(False)

    def add_to(self, server: Any) -> None:
        """Serve the health service on ``server``, not started yet: a ``grpc.aio.Server`` (from a coroutine on its
        event loop, as :class:`~controller.rpc_server.RpcServer` registers servicers) or a ``grpc.Server``."""
        if isinstance(server, grpc.aio.Server):
            servicer = AsyncHealthServicer(self.status_of, asyncio.get_running_loop())
            with self._lock:
                self._async_servicers.append(servicer)
            health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
        else:
            health_pb2_grpc.add_HealthServicer_to_server(self.servicer, server)

    def status_of(self, service: str) -> Status | None:
        """The status of ``service`` ("" = the node), None for a service the node does not have."""
        if service not in (OVERALL, self.service):
            return None
        with self._lock:
            return self._status

    def start(self) -> None:
        self._thread.start()

    def shutdown(self) -> None:
        """NOT_SERVING from now on, whatever ``ready()`` says (safe to call twice, or before ``start``)."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(5.0)
        self.servicer.enter_graceful_shutdown()
        with self._lock:
            self._shut_down, self._status = True, NOT_SERVING
            servicers = list(self._async_servicers)
        for servicer in servicers:
            servicer.changed()

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
        with self._lock:
            if self._shut_down:
                return
            self._status = status
            servicers = list(self._async_servicers)
        for servicer in servicers:
            servicer.changed()
