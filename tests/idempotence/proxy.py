"""A gRPC proxy in front of one broker that can lose Produce answers on purpose (test-only; no fault hook in
the broker itself).

The broker runs with ``--advertised <proxy address>``, so clients that find it through Metadata connect to
the proxy. Every unary call is forwarded as raw bytes; the streams (the followers' ``ReplicaFetch``, the
consumers' ``FetchStream``, the producers' ``ProduceStream``) are not served (UNIMPLEMENTED: the followers,
consumers and producers then make unary calls, ``common.streams``); after :meth:`lose_answers`
the next ``n`` Produce calls are forwarded, answered by the broker (the records are written), and then
fail towards the client with UNAVAILABLE, as if the connection dropped before the answer arrived.

Thread-safety: ``lose_answers`` and the counters are guarded by one lock; gRPC calls come on its threads.
"""

from __future__ import annotations

import threading
from concurrent import futures
from typing import Any

import grpc

PRODUCE = "/odradek.broker.Broker/Produce"
STREAMS = frozenset(f"/odradek.broker.Broker/{name}" for name in ("ReplicaFetch", "FetchStream", "ProduceStream"))


class LossyProxy:
    def __init__(self, listen: str, target: str) -> None:
        self.listen = listen
        self._channel = grpc.insecure_channel(
            target,
            options=[("grpc.max_send_message_length", 128 << 20), ("grpc.max_receive_message_length", 128 << 20)],
        )
        self._lock = threading.Lock()
        self._to_lose = 0
        self.lost = 0  # Produce answers lost so far
        self.produce_calls = 0
        self._server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=32, thread_name_prefix="lossy-proxy"),
            options=[("grpc.max_send_message_length", 128 << 20), ("grpc.max_receive_message_length", 128 << 20),
                     ("grpc.so_reuseport", 0)],
        )  # fmt: skip
        self._server.add_generic_rpc_handlers((_Handler(self),))
        if self._server.add_insecure_port(listen) == 0:
            raise RuntimeError(f"proxy cannot listen on {listen}")
        self._server.start()

    def lose_answers(self, n: int) -> None:
        """Lose the answers of the next ``n`` Produce calls (after the broker handled them)."""
        with self._lock:
            self._to_lose += n

    def forward(self, method: str, request: bytes, context: Any) -> bytes:
        call = self._channel.unary_unary(method)  # no serializers: bytes in, bytes out
        remaining = context.time_remaining()
        try:
            answer: bytes = call(request, timeout=remaining)
        except grpc.RpcError as exc:
            context.abort(exc.code(), exc.details() or "proxied call failed")
            raise
        if method == PRODUCE:
            with self._lock:
                self.produce_calls += 1
                lose = self._to_lose > 0
                if lose:
                    self._to_lose -= 1
                    self.lost += 1
            if lose:
                context.abort(grpc.StatusCode.UNAVAILABLE, "the proxy lost this Produce answer on purpose")
        return answer

    def close(self) -> None:
        self._server.stop(grace=None).wait(5)
        self._channel.close()


class _Handler(grpc.GenericRpcHandler):
    def __init__(self, proxy: LossyProxy) -> None:
        self._proxy = proxy

    def service(self, handler_call_details: Any) -> Any:
        method = handler_call_details.method
        if method in STREAMS:
            return None  # UNIMPLEMENTED (see the module docstring)
        return grpc.unary_unary_rpc_method_handler(
            lambda request, context: self._proxy.forward(method, request, context)
        )
