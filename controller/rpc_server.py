"""A gRPC server whose long polls hold no thread: ``grpc.aio`` on an event loop of its own.

The controller and the broker serve with it (the broker imports it from here: ``broker -> controller``).

Why: a synchronous gRPC server runs every call on a worker of one thread pool, start to finish, so a
call that waits (a Fetch long poll, FetchMetadata) holds a worker for its whole wait, and a handful of
clients opening long polls can take every worker and starve the short requests (heartbeats, metadata,
produce). Here:

- *short* handlers (plain functions) run on a bounded thread pool (``workers`` threads), as before;
- *long-poll* handlers (``async def``) run on the event loop: they do their reads on the same pool
  (:func:`controller.long_poll.run_blocking`) and *wait* on a :class:`~controller.long_poll.Wakeup` that the
  event they wait for completes from whatever thread it happens on. A waiting call holds a coroutine, not
  a thread.

Admission (docs/CONVENTIONS.md §8, every request has a maximum): ``maximum_concurrent_rpcs`` bounds the calls in
progress (beyond it gRPC answers RESOURCE_EXHAUSTED at once); the services leave room in it for their
waiting long polls, which they bound separately (the purgatory's ``max_operations``, the controller's
waiting FetchMetadata), so long polls alone can never fill it.

Thread-safety: ``start`` and ``stop`` from the owner's thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

import grpc
import grpc.aio

logger = logging.getLogger(__name__)

_START_TIMEOUT_S = 10.0


class RpcServer:
    """One ``grpc.aio`` server listening on one address, on its own event-loop thread (see the module
    docstring). ``add_servicers`` gets the ``grpc.aio.Server`` to register servicers on, before it starts."""

    def __init__(
        self,
        name: str,
        listen: str,
        add_servicers: Callable[[grpc.aio.Server], None],
        *,
        workers: int,
        maximum_concurrent_rpcs: int,
        options: Sequence[tuple[str, Any]] = (),
        credentials: grpc.ServerCredentials | None = None,
        interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
    ) -> None:
        self.name = name
        self._credentials = credentials  # TLS (docs/SECURITY.md); None: plaintext
        self._interceptors = list(interceptors)
        self.listen = listen
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"{name}-rpc")
        self._add_servicers = add_servicers
        self._maximum_concurrent_rpcs = maximum_concurrent_rpcs
        self._options = list(options)
        self._loop = asyncio.new_event_loop()
        self._server: grpc.aio.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"{name}-loop", daemon=True)
        self._stopped = threading.Event()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def start(self) -> None:
        """Bind and serve; ``RuntimeError`` naming the address when it cannot bind."""
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(self._start(), self._loop)
        try:
            future.result(_START_TIMEOUT_S)
        except BaseException:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(_START_TIMEOUT_S)
            self._close_loop()
            self.pool.shutdown(wait=False)
            raise

    async def _start(self) -> None:
        server = grpc.aio.server(
            migration_thread_pool=self.pool,
            options=self._options,
            maximum_concurrent_rpcs=self._maximum_concurrent_rpcs,
            interceptors=self._interceptors,
        )
        self._add_servicers(server)
        try:
            if self._credentials is None:
                port = server.add_insecure_port(self.listen)
            else:
                port = server.add_secure_port(self.listen, self._credentials)
        except RuntimeError as exc:
            raise RuntimeError(f"cannot listen on {self.listen}: {exc}") from None
        if port == 0:
            raise RuntimeError(f"cannot listen on {self.listen}")
        await server.start()
        self._server = server

    def stop(self, grace_s: float) -> threading.Event:
        """Stop accepting calls, give those in progress ``grace_s`` to finish, then cancel them; the event
        is set once the loop and the pool are done (safe to call twice)."""
        if self._stopped.is_set() or not self._thread.is_alive():
            self._close_loop()  # never started (or already stopped)
            self._stopped.set()
            return self._stopped
        threading.Thread(target=self._stop, args=(grace_s,), name=f"{self.name}-stop", daemon=True).start()
        return self._stopped

    def _stop(self, grace_s: float) -> None:
        try:
            if self._server is not None:
                future = asyncio.run_coroutine_threadsafe(self._server.stop(grace_s), self._loop)
                future.result(grace_s + 5.0)
        except Exception:
            logger.exception("%s: stopping the gRPC server failed", self.name)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5.0)
            self._close_loop()
            self.pool.shutdown(wait=False, cancel_futures=True)
            self._stopped.set()

    def _close_loop(self) -> None:
        """Close the event loop (its selector and self-pipe) once its thread has stopped running it."""
        if not self._thread.is_alive() and not self._loop.is_closed():
            self._loop.close()
