"""Replication over plain TCP: the ``REPLICATION`` listener and the followers' connections to it.

A follower's fetches are the data path of every acks=all record (docs/LATENCY.md): each record waits for a
fetch answer from the leader and for the next fetch that reports the follower's position. Over gRPC each of
those messages costs the leader ~115 µs of CPU in grpcio alone and a thread switch on each side; over a
plain socket on an ``asyncio`` loop, about a third (``bench/rpc_floor.py``).

A broker listed with a listener named ``REPLICATION`` (``--listen PLAINTEXT://h:p,REPLICATION://h:q``)
registers it like any other; a follower (``replica.fetch.tcp.enable``, default true) whose leader has one
sends its Fetch requests there, else on the leader's inter-broker gRPC listener as before. Truncation
(OffsetsForLeaderEpoch) stays on gRPC: it is asked once per leader change.

The wire, in lockstep (one request, then its answer; a Kafka connection's order):

    frame    := size:uint32 (big-endian) payload[size]
    request  := a serialized ``odradek.broker.FetchRequest`` with ``replica_id`` >= 0
    answer   := a serialized ``odradek.broker.FetchResponse``

A connection is a fetch session (``broker.fetch_session``, KIP-227): the first request on it is a full fetch
(``session_epoch`` 0), each next one names only the partitions whose fetch state changed
(:class:`FollowerSession`, ``replica.fetch.session.enable``), and the answers carry only the partitions with
news. The server answers each request as the gRPC Fetch does (:func:`broker.handlers.fetch.handle`, on the
connection's thread: the long poll waits there); it checks each request as the gRPC listeners check a
ReplicaFetch message (``controller.security.rules``): the claimed broker's epoch (STALE_BROKER_EPOCH) and,
with an authorizer, CLUSTER_ACTION on the cluster for the connection's principal. A refused request is
answered with the refusal for every partition, as the gRPC stream answers it. A request that is not a
follower's (``replica_id`` < 0: the listener is for brokers) is answered INVALID_REQUEST. A frame larger
than ``socket.request.max.bytes``, or one that does not parse, closes the connection (nothing was read or
changed); so does ``connections.max.idle.ms`` without a request.

Security, by the listener's protocol (``listener.security.protocol.map``): PLAINTEXT (principal
``User:ANONYMOUS``), SSL and SASL_SSL (TLS; the principal is the client certificate's, through
``ssl.principal.mapping.rules``: brokers authenticate to each other by certificate, as on gRPC). SASL has no
exchange on this listener, so SASL_PLAINTEXT is refused at start.

This module is the wire and the follower's side (:class:`FollowerLink`); the listener is
:mod:`broker.replication_listener`.

Thread-safety: :meth:`FollowerLink.call` from one thread at a time (the fetcher's), :meth:`FollowerLink.close`
from any.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import ssl
import threading
import time
from collections.abc import Mapping
from typing import Any

from google.protobuf.message import DecodeError

from common.framing import SIZE, frame, recv_exactly, split_host_port
from common.tls import client_tls_context
from proto import broker_pb2 as pb

logger = logging.getLogger(__name__)

NAME = "REPLICATION"
CONNECT_TIMEOUT_S = 5.0


def is_replication_listener(name: str) -> bool:
    return name == NAME


class LinkError(ConnectionError):
    """The connection to the leader's replication listener failed or closed: the round is retried."""


# ------------------------------------------------------------------------------------------------ client


def protocol_of(settings: Any) -> str | None:
    """The protocol of the ``REPLICATION`` listeners by this node's ``listener.security.protocol.map``
    (:class:`~controller.security.settings.NodeSecurity`), None when a map was given without it: the
    follower then cannot know how to talk to one, and fetches over gRPC."""
    try:
        return str(settings.protocol(NAME))
    except ValueError:  # metadata.configs.ConfigError
        return None


def client_context(settings: Any) -> ssl.SSLContext:
    """A follower's TLS context from the node's settings: trust its truststore (the system's without one),
    present its certificate when it has one (N4: nodes authenticate to each other by certificate)."""
    return client_tls_context(settings.truststore_pem, settings.key_pem, settings.cert_chain_pem)


class FollowerLink:
    """A follower's connection to one leader's replication listener, opened on the first call and again
    after a failure; :meth:`call` sends a FetchRequest and returns its FetchResponse, or raises
    :class:`LinkError` (the connection is then closed)."""

    def __init__(self, address: str, tls: ssl.SSLContext | None, max_answer_bytes: int) -> None:
        self.address = address
        self._tls = tls
        self._max_answer_bytes = max_answer_bytes
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self._closed = False

    @property
    def connected(self) -> bool:
        """Whether a connection is open: the next :meth:`call` goes on it (False: it opens a new one)."""
        return self._sock is not None

    def _connect(self, deadline: float) -> socket.socket:
        host, port = split_host_port(self.address)
        sock = socket.create_connection(
            (host, port), timeout=max(0.01, min(CONNECT_TIMEOUT_S, deadline - time.monotonic()))
        )
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._tls is not None:
                sock = self._tls.wrap_socket(sock, server_hostname=host)
        except BaseException:
            sock.close()
            raise
        with self._lock:
            if self._closed:
                sock.close()
                raise LinkError(f"the link to {self.address} is closed")
            self._sock = sock
        return sock

    def call(self, request: pb.FetchRequest, timeout_s: float) -> pb.FetchResponse:
        deadline = time.monotonic() + timeout_s
        try:
            sock = self._sock or self._connect(deadline)
            sock.settimeout(max(0.01, deadline - time.monotonic()))
            sock.sendall(frame(request.SerializeToString()))
            head = recv_exactly(sock, SIZE.size, deadline)
            if head is None:
                raise LinkError(f"{self.address} closed the connection")
            (size,) = SIZE.unpack(head)
            if size > self._max_answer_bytes:
                raise LinkError(f"{self.address} answered {size} bytes, over the limit of {self._max_answer_bytes}")
            payload = recv_exactly(sock, size, deadline) if size else b""
            if payload is None:
                raise LinkError(f"{self.address} closed the connection")
            return pb.FetchResponse.FromString(bytes(payload))
        except (OSError, DecodeError) as exc:  # TimeoutError and ssl.SSLError are OSErrors
            self._drop()
            if isinstance(exc, LinkError):
                raise
            if isinstance(exc, (ConnectionResetError, BrokenPipeError)):
                raise LinkError(f"{self.address} closed the connection ({exc!r})") from exc
            if isinstance(exc, TimeoutError) and time.monotonic() >= deadline - 0.001:
                raise LinkError(f"{self.address} did not answer within {timeout_s:g} s") from exc
            raise LinkError(f"replication link to {self.address}: {exc!r}") from exc

    def _drop(self) -> None:
        with self._lock:
            sock, self._sock = self._sock, None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.close()

    def close(self) -> None:
        """Close the connection; a call in progress fails at once (its socket is shut down)."""
        with self._lock:
            self._closed = True
            sock, self._sock = self._sock, None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()


def replication_address(image: Any, broker_id: int) -> str | None:
    """The address of broker ``broker_id``'s ``REPLICATION`` listener, or None when it registered none."""
    broker = image.broker(broker_id)
    endpoint = None if broker is None else broker.endpoint(NAME)
    return None if endpoint is None else f"{endpoint.host}:{endpoint.port}"


# ------------------------------------------------------------------------------------ fetch sessions

# the follower's side of a fetch session on the link (the leader's, and the rules: broker.fetch_session)
MAX_EPOCH = 2**31 - 1
INVALID_FETCH_SESSION_EPOCH = "INVALID_FETCH_SESSION_EPOCH"
FETCH_SESSION_ID_NOT_FOUND = "FETCH_SESSION_ID_NOT_FOUND"
SESSION_ERRORS = frozenset({INVALID_FETCH_SESSION_EPOCH, FETCH_SESSION_ID_NOT_FOUND})
TopicPartition = tuple[str, int]
# what a follower's fetch says of one partition: fetch offset, current leader epoch, log start offset
Position = tuple[int, int, int]


def next_epoch(epoch: int) -> int:
    """The session epoch after ``epoch`` (1 again after ``MAX_EPOCH``: 0 means a new session)."""
    return 1 if epoch >= MAX_EPOCH else epoch + 1


class FollowerSession:
    """What a follower named on its current connection to one leader (see the module docstring)."""

    def __init__(self) -> None:
        self._next = 0  # the epoch of the next request; 0: a full fetch
        self._sent: dict[TopicPartition, Position] = {}

    def reset(self) -> None:
        """Start over: the next request is a full fetch (a new connection, an error about the session)."""
        self._next = 0
        self._sent = {}

    def next(
        self, positions: Mapping[TopicPartition, Position]
    ) -> tuple[list[TopicPartition], list[TopicPartition], int]:
        """The next request for the partitions fetched now (key -> position): ``(named, forgotten, epoch)``.
        Taken as sent: a request that fails must be followed by :meth:`reset`."""
        epoch = self._next
        if epoch == 0:
            self._sent = {}
        named = [key for key, position in positions.items() if self._sent.get(key) != position]
        forgotten = [key for key in self._sent if key not in positions]
        for key in forgotten:
            del self._sent[key]
        for key in named:
            self._sent[key] = positions[key]
        self._next = next_epoch(epoch)
        return named, forgotten, epoch


def forgotten_topics(keys: list[TopicPartition]) -> list[Any]:
    """``keys`` as the FetchRequest's ``forgotten`` field."""
    by_topic: dict[str, list[pb.FetchPartition]] = {}
    for topic, number in keys:
        by_topic.setdefault(topic, []).append(pb.FetchPartition(partition=number))
    return [pb.FetchTopic(name=name, partitions=parts) for name, parts in by_topic.items()]
