"""Asynchronous gRPC calls on a few daemon worker threads.

gRPC's own ``stub.Method.future(...)`` starts a polling thread whenever its channel has no other call
in flight; a producer or consumer with one request in flight per broker would start a thread per
request, which costs more than the request. Here each worker makes ordinary blocking calls (which
wait without holding the GIL) and completes a :class:`concurrent.futures.Future`, so the clients keep
their non-blocking style at the cost of one thread per concurrent call, started on demand and reused.

Workers are daemon threads: a client that is never closed does not keep the interpreter alive.

What this pool cannot do is keep order: two calls submitted one after the other may start in either order
(each worker starts its own). Where order matters -- the producer's Produce requests to one broker, which
carry a partition's sequences in order -- the caller starts the call itself with ``.future()``
(``ClusterClient.start_ordered``): a channel sends calls in the order they are started. Measured (a producer,
3 brokers on one 2-core machine): at 200k records/s the channels are rarely idle and gRPC started ~20
polling threads for ~80 requests; at 2,000 records/s (~160 requests/s, one at a time) it started one per
request, ~3% of a core more than this pool.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

_Job = tuple[Future[Any], Callable[..., Any], Any, float]


class CallPool:
    """Runs ``fn(request, timeout=timeout_s)`` on worker threads; at most ``max_workers`` at once.

    Thread-safe: ``submit`` and ``shutdown`` may be called from any thread.
    """

    def __init__(self, max_workers: int, name: str) -> None:
        self._max_workers = max(1, max_workers)
        self._name = name
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._workers: list[threading.Thread] = []
        self._idle = 0  # workers free for a new job, minus jobs waiting for one
        self._closed = False

    def submit(self, fn: Callable[..., Any], request: Any, timeout_s: float) -> Future[Any]:
        future: Future[Any] = Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("the client is closed")
            self._jobs.put((future, fn, request, timeout_s))
            if self._idle <= 0 and len(self._workers) < self._max_workers:
                worker = threading.Thread(target=self._work, name=f"{self._name}-{len(self._workers)}", daemon=True)
                self._workers.append(worker)
                worker.start()  # it takes this job
            else:
                self._idle -= 1  # a waiting worker takes it (below zero: jobs queue behind busy workers)
        return future

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            future, fn, request, timeout_s = job
            if future.set_running_or_notify_cancel():
                try:
                    result = fn(request, timeout=timeout_s)
                except BaseException as exc:  # grpc.RpcError and the rest: the caller's to handle
                    future.set_exception(exc)
                else:
                    future.set_result(result)
            with self._lock:
                self._idle += 1

    def shutdown(self) -> None:
        """Stop the workers once their current calls end (closing the channels ends those)."""
        with self._lock:
            self._closed = True
            for _ in self._workers:
                self._jobs.put(None)
