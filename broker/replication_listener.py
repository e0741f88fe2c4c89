"""The ``REPLICATION`` listener: followers' fetches over plain TCP (the wire and the rules are
:mod:`broker.replication_link`'s docstring).

It is the Kafka listener's acceptor and thread per connection (:class:`~broker.kafka.server.KafkaListener`),
each connection serving framed FetchRequests in lockstep as :func:`broker.handlers.fetch.handle` does (the
long poll waits on the connection's thread), with the gRPC Fetch's ``fe`` trace events (``log.trace``). A
high watermark a follower's fetch moves completes the waiting acks=all produces from that thread (their
wake-ups reach the gRPC event loop as any other thread's).

Thread-safety: as :class:`~broker.kafka.server.KafkaListener`.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import time
from typing import Any

from google.protobuf.message import DecodeError

from broker.context import BrokerContext
from broker.handlers import fetch
from broker.kafka.api import Session
from broker.kafka.server import KafkaListener
from broker.replication_link import SIZE, frame, recv_exactly
from controller.security.rules import BROKER_RULES, Check
from log import trace
from metadata.configs import ConfigError
from proto import broker_pb2 as pb

logger = logging.getLogger(__name__)

RULE = "ReplicaFetch"  # each request is checked as a message of the gRPC ReplicaFetch stream


class _ServerConnection:
    """One follower's connection (see the module docstring); :meth:`serve` runs on its own thread."""

    def __init__(self, ctx: BrokerContext, sock: socket.socket, session: Session, max_request_bytes: int,
                 idle_timeout_s: float) -> None:  # fmt: skip
        self.ctx = ctx
        self.sock = sock
        self.session = session
        self.max_request_bytes = max_request_bytes
        self.idle_timeout_s = idle_timeout_s

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)

    def serve(self) -> None:
        who = f"{self.session.client_host}:{self.session.client_port}"
        try:
            while True:
                self.sock.settimeout(self.idle_timeout_s)
                head = recv_exactly(self.sock, SIZE.size, None)
                if head is None:
                    return
                (size,) = SIZE.unpack(head)
                if size > self.max_request_bytes:
                    logger.info("replication listener: closing %s: a request of %d bytes is over "
                                "socket.request.max.bytes (%d)", who, size, self.max_request_bytes)  # fmt: skip
                    return
                payload = recv_exactly(self.sock, size, time.monotonic() + self.idle_timeout_s) if size else b""
                if payload is None:
                    return
                try:
                    request = pb.FetchRequest.FromString(bytes(payload))
                except DecodeError as exc:
                    logger.info("replication listener: closing %s: a request that is not a FetchRequest: %s", who,
                                exc)  # fmt: skip
                    return
                arrived = time.perf_counter()
                response = self._answer(request, arrived)
                self.sock.settimeout(self.idle_timeout_s)
                self.sock.sendall(frame(response.SerializeToString()))
                if self.ctx.metrics is not None:
                    self.ctx.metrics.requests.record(fetch.handle, request, response, arrived)
        except OSError as exc:  # TimeoutError (idle) and ssl.SSLError among them
            logger.debug("replication listener: connection from %s ended: %s", who, exc)
        except Exception:
            logger.exception("broker %d: replication listener: a fetch from %s failed", self.ctx.broker_id, who)
        finally:
            self.sock.close()

    def _answer(self, request: pb.FetchRequest, arrived: float) -> pb.FetchResponse:
        if request.replica_id < 0:
            return fetch.refused(request, "INVALID_REQUEST", "the REPLICATION listener serves follower fetches only "
                           f"(replica_id >= 0), got replica_id {request.replica_id}: consumers fetch on a client "
                           "listener")  # fmt: skip
        guard = self.ctx.guard
        if guard is not None and guard.authorizer is not None:
            check = Check(guard.authorizer.current(), self.session.principal, self.session.client_host)
            denial = BROKER_RULES[RULE](request, check)
            if denial is not None:
                return fetch.refused(request, denial.code, denial.message)
        started = fetch.begin_grpc(self.ctx, request)
        woke_ns = 0
        if isinstance(started, fetch.PendingFetch):
            if not started.op.wait(started.wait_s):
                started.op.expire()
            woke_ns = trace.now_ns() if trace.ON else 0
            started = fetch.finish_grpc(self.ctx, started)
        if trace.ON:
            fetch.trace_fetch(request, started, arrived, woke_ns)
        return started


class ReplicationListener(KafkaListener):
    """The ``REPLICATION`` listener: the Kafka listener's acceptor and thread per connection, serving the
    frames of the module docstring. ``ConfigError`` at construction for SASL_PLAINTEXT."""

    KIND = "replication"

    def __init__(self, ctx: BrokerContext, name: str, listen: str) -> None:
        protocol = ctx.security.protocol(name)
        if protocol == "SASL_PLAINTEXT":
            raise ConfigError("listener.security.protocol.map", f"listener {name} is SASL_PLAINTEXT: the replication "
                              "listener authenticates brokers by TLS certificate, so it must be PLAINTEXT, SSL or "
                              "SASL_SSL")  # fmt: skip
        super().__init__(ctx, name, listen)
        self.sendfile = False

    def _connection(self, client: socket.socket, session: Session) -> Any:
        return _ServerConnection(self.ctx, client, session, self.max_request_bytes, self.idle_timeout_s)

    def _takes_certificate_principal(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")
