"""A client of the Controller gRPC service that finds the active controller by itself.

:meth:`ControllerClient.call` sends a request to the controller it believes active; on NOT_CONTROLLER it
follows the :class:`ControllerHint` (or tries the next address when the hint names none), on an
unreachable node it tries the next one, on REQUEST_TIMED_OUT it retries, each with a short backoff,
until the deadline. Writes are not idempotent across such retries (a CreateTopics whose answer was lost
may be answered TOPIC_ALREADY_EXISTS when retried), as with Kafka's clients.

Thread-safety: every method may be called from any thread (gRPC stubs are thread-safe; the client's
guess of the active node is guarded by a lock).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any, TypeVar

import grpc

from proto import controller_pb2_grpc

R = TypeVar("R")
RETRIABLE = frozenset({"NOT_CONTROLLER", "REQUEST_TIMED_OUT"})
_UNREACHABLE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED})
MAX_MESSAGE_BYTES = 64 << 20
_STUB: Any = controller_pb2_grpc.ControllerStub  # generated code is untyped


class ControllerUnavailableError(Exception):
    """No controller answered (other than with a retriable error) before the deadline."""


class ControllerClient:
    """Calls a controller quorum given the Controller gRPC addresses of its nodes (see module docstring)."""

    def __init__(self, addresses: Sequence[str], *, call_timeout_s: float = 10.0, backoff_s: float = 0.05) -> None:
        if not addresses:
            raise ValueError("a ControllerClient needs at least one address")
        self._addresses = list(dict.fromkeys(addresses))
        self._call_timeout_s = call_timeout_s
        self._backoff_s = backoff_s
        self._lock = threading.Lock()
        self._channels: dict[str, grpc.Channel] = {}
        self._stubs: dict[str, Any] = {}
        self._current = self._addresses[0]

    def stub(self, address: str) -> Any:
        """The Controller stub of one node (made on first use)."""
        with self._lock:
            stub = self._stubs.get(address)
            if stub is None:
                channel = grpc.insecure_channel(
                    address,
                    options=[
                        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                        # a restarted controller is reachable again within a second, not gRPC's minutes
                        ("grpc.initial_reconnect_backoff_ms", 100),
                        ("grpc.min_reconnect_backoff_ms", 100),
                        ("grpc.max_reconnect_backoff_ms", 1000),
                    ],
                )
                self._channels[address] = channel
                stub = self._stubs[address] = _STUB(channel)
            return stub

    @property
    def current(self) -> str:
        """The address this client believes is the active controller's."""
        with self._lock:
            return self._current

    def _move(self, hint_address: str | None) -> None:
        with self._lock:
            if hint_address:
                if hint_address not in self._addresses:
                    self._addresses.append(hint_address)
                self._current = hint_address
            else:
                i = self._addresses.index(self._current) if self._current in self._addresses else -1
                self._current = self._addresses[(i + 1) % len(self._addresses)]

    def call(self, rpc: str, request: Any, *, deadline_s: float = 30.0) -> Any:
        """Send ``rpc`` to the active controller; the first answer that is not retriable, or raise
        :class:`ControllerUnavailableError` at the deadline."""
        deadline = time.monotonic() + deadline_s
        last = "no attempt"
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ControllerUnavailableError(f"{rpc}: no controller answered within {deadline_s} s ({last})")
            address = self.current
            try:
                response = getattr(self.stub(address), rpc)(request, timeout=min(self._call_timeout_s, remaining))
            except grpc.RpcError as exc:
                code = exc.code() if isinstance(exc, grpc.Call) else None
                if code not in _UNREACHABLE:
                    raise
                last = f"{address}: {code}"
                self._move(None)
            else:
                code = response.error.code
                if code not in RETRIABLE:
                    return response
                last = f"{address}: {code} {response.error.message}"
                self._move(response.controller.address if code == "NOT_CONTROLLER" else address)
            time.sleep(min(self._backoff_s, max(0.0, deadline - time.monotonic())))

    def close(self) -> None:
        with self._lock:
            channels, self._channels, self._stubs = list(self._channels.values()), {}, {}
        for channel in channels:
            channel.close()

    def __enter__(self) -> ControllerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
