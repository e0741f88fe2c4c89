"""One gRPC channel per broker address (gRPC failures are mapped to Kafka's errors by
``odradek.rpc_errors``).

A channel multiplexes every call to its broker over one HTTP/2 connection, so "max in flight per
connection" is a count the clients keep themselves. Channels reconnect on their own; the reconnect
backoff follows ``retry.backoff.ms`` / ``retry.backoff.max.ms`` (gRPC's defaults go up to two minutes,
far too long for a client that waits on a restarted broker).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import grpc

from odradek.errors import IllegalStateError
from odradek.security.channels import channel_credentials
from odradek.security.config import SecurityConfig
from odradek.security.sasl_client import SaslSession, sasl_channel
from odradek.version import __version__
from proto import broker_pb2_grpc

MESSAGE_SLACK_BYTES = 1 << 20  # request/response framing around the record bytes
TLS_CONNECT_TIMEOUT_MS = 10_000

_new_stub: Callable[[grpc.Channel], Any] = broker_pb2_grpc.BrokerStub  # generated code is untyped


class ChannelPool:
    """gRPC channels and Broker stubs by ``host:port``. Thread-safe: creation and close take a lock."""

    def __init__(
        self,
        *,
        max_message_bytes: int,
        client_id: str = "",
        reconnect_backoff_ms: int = 100,
        reconnect_backoff_max_ms: int = 1000,
        security: SecurityConfig | None = None,
    ) -> None:
        self._credentials = channel_credentials(security) if security is not None else None  # None: plaintext
        self._security = security
        limit = max_message_bytes + MESSAGE_SLACK_BYTES
        agent = f"odradek/{__version__}" + (f" {client_id}" if client_id else "")
        self._options = [
            ("grpc.max_send_message_length", limit),
            ("grpc.max_receive_message_length", limit),
            ("grpc.primary_user_agent", agent),
            ("grpc.initial_reconnect_backoff_ms", max(1, reconnect_backoff_ms)),
            # gRPC also takes this as the floor of a connection attempt's deadline: a TLS handshake on a busy
            # machine can take longer than a reconnect backoff, so TLS channels get TLS_CONNECT_TIMEOUT_MS
            # (measured: 100 ms failed handshakes under load); the first retry still comes after the initial
            # backoff.
            ("grpc.min_reconnect_backoff_ms",
             max(1, reconnect_backoff_ms, TLS_CONNECT_TIMEOUT_MS if self._credentials is not None else 0)),
            ("grpc.max_reconnect_backoff_ms", max(1, reconnect_backoff_max_ms, reconnect_backoff_ms)),
        ]
        self._lock = threading.Lock()
        self._channels: dict[str, grpc.Channel] = {}
        self._stubs: dict[str, Any] = {}
        self._sessions: dict[str, SaslSession] = {}  # by address, with SASL
        self._closed = False

    def stub(self, address: str) -> Any:
        stub = self._stubs.get(address)
        if stub is not None:
            return stub
        with self._lock:
            if self._closed:
                raise IllegalStateError("the client is closed")
            stub = self._stubs.get(address)
            if stub is None:
                if self._credentials is None:
                    channel = grpc.insecure_channel(address, options=self._options)
                else:
                    channel = grpc.secure_channel(address, self._credentials, options=self._options)
                if self._security is not None:
                    channel, session = sasl_channel(channel, self._security)  # a SASL session per node
                    if session is not None:
                        self._sessions[address] = session
                self._channels[address] = channel
                stub = self._stubs[address] = _new_stub(channel)
            return stub

    def sasl_session(self, address: str) -> SaslSession | None:
        """The SASL session of the node at ``address`` (its channel's; made with it), None without SASL."""
        self.stub(address)
        return self._sessions.get(address)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            channels = list(self._channels.values())
            self._channels.clear()
            self._stubs.clear()
        for channel in channels:
            channel.close()
