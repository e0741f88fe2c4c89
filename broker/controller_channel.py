"""The broker's connection to the controller quorum: gRPC stubs, NOT_CONTROLLER hints, retries with backoff.

Two kinds of calls (proto/controller.proto):

* ``call(..., active=True)``: writes that only the active controller decides (RegisterBroker,
  BrokerHeartbeat, CreateTopics, ...). A NOT_CONTROLLER answer names the active one in its
  ``ControllerHint``: the channel follows the hint (and remembers it), else tries the next address.
* ``call(..., active=False)``: reads that every controller serves (FetchMetadata, DescribeQuorum); the
  channel asks the active controller when it knows it (as KRaft brokers fetch from the quorum leader), else
  the controller that answered last, and moves on when it fails. When an active call learns of another
  active controller, reads in flight elsewhere (a metadata long poll to a controller a network partition
  cut off would hang until its deadline) are cancelled and asked again of the new one.

Unreachable controllers (gRPC errors) and hint-less NOT_CONTROLLER answers are retried with exponential
backoff (50 ms doubling to 1 s) until the call's deadline; then :class:`ControllerUnavailableError`. A
controller that did not answer (a gRPC error: refused, or the deadline passed, as behind a cut link) is a
*suspect* for ``SUSPECT_S``: when the channel picks an address itself (no known active controller, no hint)
it picks the others first. Otherwise a heartbeat whose active controller was cut off (its whole deadline
spent there) could pick the same one again on its next try, and the new active controller fenced a broker
that was on its own side of the partition (the session, ``broker.session.timeout.ms`` 2 s, is about two
heartbeat deadlines). Hints are followed even to a suspect: the active controller may be slow, not gone.
Every call has a deadline; :meth:`ControllerChannel.close` cancels calls in flight (a long poll too).
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

import grpc

from broker.errors import NOT_CONTROLLER, REQUEST_TIMED_OUT, BrokerError
from controller.security.settings import open_channel
from proto import controller_pb2_grpc

logger = logging.getLogger(__name__)

MAX_MESSAGE_BYTES = 64 << 20  # a metadata snapshot travels in one FetchMetadata answer
_BACKOFF_START_S = 0.05
_BACKOFF_MAX_S = 1.0
SUSPECT_S = 5.0  # how long a controller that did not answer is picked last


class ControllerUnavailableError(BrokerError):
    """No controller answered (or none was active) before the deadline."""

    def __init__(self, message: str) -> None:
        super().__init__(REQUEST_TIMED_OUT, message)


class ChannelClosedError(BrokerError):
    def __init__(self) -> None:
        super().__init__(REQUEST_TIMED_OUT, "the broker is shutting down")


class ControllerChannel:
    """Stubs to every known controller address.

    Thread-safety: every method may be called from any thread; one lock guards the stub cache and the
    set of calls in flight, and the remembered active / reading addresses are single attribute writes.
    """

    def __init__(self, addresses: Sequence[str], credentials: Any = None) -> None:
        self._credentials = credentials  # grpc.ChannelCredentials of the controllers' listener; None: plaintext
        if not addresses:
            raise ValueError("at least one controller address is needed")
        self._addresses = list(dict.fromkeys(addresses))
        self._rotation = itertools.cycle(range(1 << 30))
        self._lock = threading.Lock()
        self._channels: dict[str, grpc.Channel] = {}
        self._stubs: dict[str, Any] = {}
        self._inflight: set[grpc.Future] = set()
        self._reads: dict[grpc.Future, str] = {}  # reads in flight and the address each went to
        self._closed = False
        self.active: str | None = None  # the active controller, as last learned
        self._reader: str | None = None  # the controller that served the last read
        self._suspects: dict[str, float] = {}  # address -> until when (monotonic) it is picked last

    @property
    def addresses(self) -> list[str]:
        return list(self._addresses)

    def _stub(self, address: str) -> Any:
        with self._lock:
            if self._closed:
                raise ChannelClosedError()
            stub = self._stubs.get(address)
            if stub is None:
                channel = open_channel(
                    address,
                    self._credentials,
                    [
                        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                    ],
                )
                self._channels[address] = channel
                stub = self._stubs[address] = controller_pb2_grpc.ControllerStub(channel)  # type: ignore[no-untyped-call]
            return stub

    def _next_address(self) -> str:
        """The next address in turn, suspects last (module docstring)."""
        with self._lock:
            start = next(self._rotation) % len(self._addresses)
            picks = self._addresses[start:] + self._addresses[:start]
            now = time.monotonic()
            return next((a for a in picks if self._suspects.get(a, 0.0) <= now), picks[0])

    def _suspect(self, address: str) -> None:
        with self._lock:
            self._suspects[address] = time.monotonic() + SUSPECT_S

    def _cleared(self, address: str) -> None:
        with self._lock:
            self._suspects.pop(address, None)

    def call(self, method: str, request: Any, timeout_s: float, *, active: bool = True) -> Any:
        """Send ``request`` to the ``method`` of a controller; see the module docstring."""
        deadline = time.monotonic() + timeout_s
        backoff = _BACKOFF_START_S
        address = (self.active if active else self.active or self._reader) or self._next_address()
        last_problem = "no controller tried"
        hops = 0
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ControllerUnavailableError(
                    f"{method}: no controller answered in {timeout_s:.1f} s ({last_problem})"
                )
            response, problem, hint = self._try(address, method, request, remaining, read=not active)
            if response is not None:
                if active:
                    self._learn_active(address)
                else:
                    self._reader = address
                return response
            last_problem = problem
            hops += 1
            if hint:
                if hint not in self._addresses:
                    self._addresses.append(hint)
                self._learn_active(hint)
                address = hint
            else:
                if active and self.active == address:
                    self.active = None
                known = self.active
                address = known if not active and known is not None and known != address else self._next_address()
            if not hint or hops > len(self._addresses):  # follow a fresh hint at once; back off otherwise
                time.sleep(min(backoff, max(0.0, deadline - time.monotonic())))
                backoff = min(backoff * 2, _BACKOFF_MAX_S)

    def _learn_active(self, address: str) -> None:
        """``address`` is the active controller: reads in flight to another one are cancelled (asked again)."""
        self.active = address
        with self._lock:
            stale = [f for f, target in self._reads.items() if target != address]
        for future in stale:
            future.cancel()

    def _try(
        self, address: str, method: str, request: Any, timeout_s: float, *, read: bool = False
    ) -> tuple[Any, str, str]:
        """One attempt: ``(response, "", "")``, or ``(None, problem, hint address or "")``."""
        future = getattr(self._stub(address), method).future(request, timeout=timeout_s)
        with self._lock:
            if self._closed:
                future.cancel()
            self._inflight.add(future)
            if read:
                self._reads[future] = address
        try:
            response = future.result()
        except grpc.FutureCancelledError:
            if self._closed:
                raise ChannelClosedError() from None
            return None, f"{address}: asked again of the active controller", ""
        except grpc.RpcError as exc:
            if self._closed:
                raise ChannelClosedError() from None
            self._suspect(address)
            return None, f"{address}: {exc.code().name}", ""
        finally:
            with self._lock:
                self._inflight.discard(future)
                self._reads.pop(future, None)
        self._cleared(address)
        if response.error.code == NOT_CONTROLLER:
            hint = response.controller.address if response.controller.node_id >= 0 else ""
            return None, f"{address}: NOT_CONTROLLER", hint if hint != address else ""
        return response, "", ""

    def close(self) -> None:
        """Cancel calls in flight and close every channel; later calls raise :class:`ChannelClosedError`."""
        with self._lock:
            self._closed = True
            inflight, self._inflight = list(self._inflight), set()
            channels, self._channels = list(self._channels.values()), {}
        for future in inflight:
            future.cancel()
        for channel in channels:
            channel.close()
