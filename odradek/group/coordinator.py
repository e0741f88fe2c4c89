"""Finding a group's coordinator (FindCoordinator) and calling it, retrying where Kafka retries.

The coordinator of a group is the leader of one ``__consumer_offsets`` partition; any broker answers
FindCoordinator. A call answered NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE, or that cannot reach the
broker, forgets the coordinator and looks it up again; COORDINATOR_LOAD_IN_PROGRESS and
REQUEST_TIMED_OUT retry the same broker after a backoff (``broker/group/PROTOCOL.md``, section 1).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import grpc

from odradek.errors import (
    CoordinatorNotAvailableError,
    KafkaError,
    KafkaTimeoutError,
    NetworkError,
    error_from_code,
)
from odradek.net import ClusterClient, rpc_error
from proto import broker_pb2

GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1
_WHAT = {GROUP_KEY_TYPE: "group", TRANSACTION_KEY_TYPE: "transactional id"}
REDISCOVER_CODES = frozenset({"NOT_COORDINATOR", "COORDINATOR_NOT_AVAILABLE"})
RETRY_SAME_CODES = frozenset({"COORDINATOR_LOAD_IN_PROGRESS", "REQUEST_TIMED_OUT"})


def find_coordinator(client: ClusterClient, group_id: str, key_type: int = GROUP_KEY_TYPE) -> tuple[int, str]:
    """One FindCoordinator round: ``(node_id, "host:port")``, or a (retriable) KafkaError. ``key_type`` 1: the
    transaction coordinator of the transactional id ``group_id``."""
    what = _WHAT.get(key_type, "key")
    response = client.call_any(
        "FindCoordinator", broker_pb2.FindCoordinatorRequest(key_type=key_type, keys=[group_id])
    )
    for c in response.coordinators:
        if c.key != group_id:
            continue
        if c.error.code:
            raise error_from_code(c.error.code, f"finding the coordinator of {what} {group_id!r}: {c.error.message}")
        if c.node_id < 0 or not c.address:
            raise CoordinatorNotAvailableError(f"{what} {group_id!r} has no coordinator yet")
        return c.node_id, c.address
    raise CoordinatorNotAvailableError(f"FindCoordinator did not answer for {what} {group_id!r}")


class CoordinatorClient:
    """Calls to one group's coordinator. Thread-safe: the known address is guarded by a lock, calls are
    independent (the heartbeat thread and the application thread both call)."""

    def __init__(self, client: ClusterClient, group_id: str, key_type: int = GROUP_KEY_TYPE) -> None:
        self._client = client
        self.group_id = group_id
        self.key_type = key_type
        self._lock = threading.Lock()
        self._address: str | None = None
        self._node_id = -1

    @property
    def node_id(self) -> int:
        return self._node_id

    def address(self) -> str:
        """The coordinator's address, looked up when unknown (raises a KafkaError when the lookup fails)."""
        with self._lock:
            if self._address is not None:
                return self._address
        node_id, address = find_coordinator(self._client, self.group_id, self.key_type)
        with self._lock:
            self._node_id, self._address = node_id, address
        return address

    def mark_unknown(self, address: str | None = None) -> None:
        """Forget the coordinator (only if it is still ``address``, when given)."""
        with self._lock:
            if address is None or self._address == address:
                self._address, self._node_id = None, -1

    def call_once(self, method: str, request: Any, timeout_s: float) -> Any:
        """One call to the coordinator; a connection failure forgets it and raises NetworkError.

        The response's own ``error`` is the caller's to read (see :func:`coordinator_error`).
        """
        address = self.address()
        try:
            return getattr(self._client.pool.stub(address), method)(request, timeout=timeout_s)
        except grpc.RpcError as exc:
            error = rpc_error(exc, method, address)
            if isinstance(error, NetworkError | KafkaTimeoutError):
                self.mark_unknown(address)
            raise error from None

    def call(
        self,
        method: str,
        make_request: Callable[[], Any],
        timeout_ms: float,
        error_code: Callable[[Any], str] = lambda r: str(r.error.code),
    ) -> Any:
        """Call until the answer is not a coordinator error, or ``timeout_ms`` passes (KafkaTimeoutError).

        ``make_request`` is called per attempt (a member epoch may change between attempts); the answer
        is returned with whatever other error it carries, for the caller to interpret.
        """
        clock = self._client.clock
        deadline = clock.monotonic_ms() + timeout_ms
        attempt = 0
        last: KafkaError | None = None
        while True:
            remaining_s = (deadline - clock.monotonic_ms()) / 1000
            if remaining_s <= 0:
                raise KafkaTimeoutError(
                    f"{method} for {_WHAT.get(self.key_type, 'key')} {self.group_id!r} did not succeed within "
                    f"{timeout_ms:.0f} ms"
                    + (f"; last error: {last}" if last else "")
                )
            try:
                response = self.call_once(method, make_request(), min(remaining_s, self._client.request_timeout_s))
            except KafkaError as exc:
                if not exc.retriable:
                    raise
                last = exc
            else:
                code = error_code(response)
                if code not in REDISCOVER_CODES and code not in RETRY_SAME_CODES:
                    return response
                if code in REDISCOVER_CODES:
                    self.mark_unknown()
                last = error_from_code(code, f"{method} for group {self.group_id!r}: {code}")
            wait_ms = min(self._client.backoff.backoff_ms(attempt), max(0.0, deadline - clock.monotonic_ms()))
            time.sleep(wait_ms / 1000)
            attempt += 1
