"""The Kafka listener: an acceptor thread and one thread per connection (see README.md, "I/O model").

Thread-safety: ``start`` and ``stop`` from one thread (the broker's); connection threads own their
connections; the set of live connections is guarded by ``_lock``.
"""

from __future__ import annotations

import logging
import socket
import threading

from broker.context import BrokerContext
from broker.kafka import security
from broker.kafka.api import Session
from broker.kafka.apis import API_TABLE
from broker.kafka.connection import Connection
from common.framing import split_host_port

logger = logging.getLogger(__name__)

ACCEPT_POLL_S = 0.5
BACKLOG = 128


class KafkaListener:
    """Kafka's binary protocol on ``listen`` for the listener named ``name``; see the module docstring."""

    def __init__(self, ctx: BrokerContext, name: str, listen: str) -> None:
        self.ctx = ctx
        self.name = name
        self.listen = listen
        config = ctx.config
        self.max_connections = int(config.get("max.connections"))
        self.max_request_bytes = int(config.get("socket.request.max.bytes"))
        self.idle_timeout_s = int(config.get("connections.max.idle.ms")) / 1000.0
        self.protocol = ctx.security.protocol(name)  # docs/SECURITY.md; broker/kafka/security.py
        self.tls = security.listener_context(ctx.security, name) if self.protocol in ("SSL", "SASL_SSL") else None
        self.sendfile = bool(config.get("socket.sendfile.enable")) and self.tls is None  # TLS: bytes go through it
        self._lock = threading.Lock()
        self._connections: set[Connection] = set()
        self._stopping = threading.Event()
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    def start(self) -> None:
        """Bind and start accepting; ``RuntimeError`` when the address cannot be bound."""
        host, port = split_host_port(self.listen)
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            sock.close()
            raise RuntimeError(f"cannot listen on {self.listen}: {exc}") from None
        sock.listen(BACKLOG)
        sock.settimeout(ACCEPT_POLL_S)
        self._sock, self.port = sock, sock.getsockname()[1]
        self._thread = threading.Thread(
            target=self._accept_loop, name=f"broker-{self.ctx.broker_id}-kafka-acceptor", daemon=True
        )
        self._thread.start()

    def _accept_loop(self) -> None:
        assert self._sock is not None
        while not self._stopping.is_set():
            try:
                client, address = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                if self._stopping.is_set():
                    return
                raise
            self._open(client, address)

    def _open(self, client: socket.socket, address: tuple[str, int] | tuple[str, int, int, int]) -> None:
        with self._lock:
            if len(self._connections) >= self.max_connections:
                logger.warning("broker %d: %s at max.connections=%d, refusing %s", self.ctx.broker_id, self.name,
                               self.max_connections, address[0])  # fmt: skip
                client.close()
                return
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            session = Session(self.name, address[0], address[1], sendfile=self.sendfile)
            security.open_session(session, self.protocol)
            conn = Connection(self.ctx, client, session, API_TABLE, self.max_request_bytes, self.idle_timeout_s)
            self._connections.add(conn)
        thread = threading.Thread(
            target=self._serve, args=(conn,), name=f"broker-{self.ctx.broker_id}-kafka-{address[0]}:{address[1]}",
            daemon=True,
        )  # fmt: skip
        thread.start()

    def _serve(self, conn: Connection) -> None:
        try:
            if self.tls is not None:
                try:
                    conn.sock = security.secure_socket(conn.sock, self.tls, self.idle_timeout_s)
                    if self.protocol == "SSL":
                        conn.session.principal = security.certificate_principal(conn.sock, self.ctx.security
                                                                                .principal_mapper)  # fmt: skip
                except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
                    logger.info("kafka listener %s: TLS with %s failed: %s", self.name, conn.session.client_host, exc)
                    conn.sock.close()
                    return
            conn.serve()
        finally:
            with self._lock:
                self._connections.discard(conn)

    def stop(self) -> None:
        """Stop accepting and close every connection (a request being handled finishes first: its thread
        notices the closed socket when it answers)."""
        self._stopping.set()
        if self._sock is not None:
            self._sock.close()
        if self._thread is not None:
            self._thread.join(ACCEPT_POLL_S * 4)
        with self._lock:
            connections = list(self._connections)
        for conn in connections:
            conn.close()
