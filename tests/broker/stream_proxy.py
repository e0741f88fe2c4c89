"""A gRPC proxy in front of one broker that forwards unary calls and streams, and can break the streams
(test-only; no fault hook in the broker itself).

The broker runs with ``--advertised <proxy address>``, so clients and followers that find it through
Metadata connect to the proxy. Every call is forwarded as raw bytes. :attr:`StreamProxy.mode` says what
happens to a stream (``ReplicaFetch``, ``FetchStream``, ``ProduceStream``):

- ``"forward"``: forwarded whole;
- ``"break"``: forwarded, then aborted UNAVAILABLE after ``break_after`` answers (a reset connection, a
  restarted peer, as the client sees it): the requests waiting on it fail;
- ``"refuse"``: failed INTERNAL at once, before any answer (a path that breaks streams but not unary calls);
  a stream opened before is broken UNAVAILABLE after its next answer.

Thread-safety: the counters are guarded by one lock; gRPC calls come on the server's threads.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc

STREAMS = frozenset(f"/odradek.broker.Broker/{name}" for name in ("ReplicaFetch", "FetchStream", "ProduceStream"))
_OPTIONS = [("grpc.max_send_message_length", 128 << 20), ("grpc.max_receive_message_length", 128 << 20)]


class StreamProxy:
    def __init__(self, listen: str, target: str) -> None:
        self.listen = listen
        self.mode = "forward"
        self.break_after = 5
        self._channel = grpc.insecure_channel(target, options=_OPTIONS)
        self._lock = threading.Lock()
        self.streams: Counter[str] = Counter()  # streams opened, by method name
        self.broken: Counter[str] = Counter()  # streams broken or refused, by method name
        self.unary: Counter[str] = Counter()  # unary calls, by method name
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=64, thread_name_prefix="stream-proxy"),
                                   options=[*_OPTIONS, ("grpc.so_reuseport", 0)])  # fmt: skip
        self._server.add_generic_rpc_handlers((_Handler(self),))
        if self._server.add_insecure_port(listen) == 0:
            raise RuntimeError(f"proxy cannot listen on {listen}")
        self._server.start()

    def _count(self, counter: Counter[str], method: str) -> None:
        with self._lock:
            counter[method.rsplit("/", 1)[-1]] += 1

    def forward(self, method: str, request: bytes, context: Any) -> bytes:
        self._count(self.unary, method)
        try:
            answer: bytes = self._channel.unary_unary(method)(request, timeout=context.time_remaining())
        except grpc.RpcError as exc:
            context.abort(exc.code(), exc.details() or "proxied call failed")
            raise
        return answer

    def forward_stream(self, method: str, requests: Iterator[bytes], context: Any) -> Iterator[bytes]:
        self._count(self.streams, method)
        if self.mode == "refuse":
            self._count(self.broken, method)
            context.abort(grpc.StatusCode.INTERNAL, "the proxy breaks streams")
        call = self._channel.stream_stream(method)(requests)
        context.add_callback(call.cancel)  # the client went away: so does the call to the broker
        answered = 0
        try:
            for answer in call:
                yield answer
                answered += 1
                # streams opened before the mode changed too (a refusing proxy breaks those at their next answer)
                if (self.mode == "break" and answered >= self.break_after) or self.mode == "refuse":
                    self._count(self.broken, method)
                    context.abort(grpc.StatusCode.UNAVAILABLE, "the proxy broke the stream")
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.CANCELLED:
                context.abort(exc.code(), exc.details() or "proxied stream failed")
            raise
        finally:
            call.cancel()

    def close(self) -> None:
        self._server.stop(grace=None).wait(5)
        self._channel.close()


class _Handler(grpc.GenericRpcHandler):
    def __init__(self, proxy: StreamProxy) -> None:
        self._proxy = proxy

    def service(self, handler_call_details: Any) -> Any:
        method = handler_call_details.method
        if method in STREAMS:
            return grpc.stream_stream_rpc_method_handler(
                lambda requests, context: self._proxy.forward_stream(method, requests, context)
            )
        return grpc.unary_unary_rpc_method_handler(
            lambda request, context: self._proxy.forward(method, request, context)
        )
