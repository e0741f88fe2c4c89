"""The Sasl gRPC service (``proto/security.proto``): SaslHandshake and SaslAuthenticate, ending in a session token.

One :class:`SaslAuthority` per node holds the node's token key (T1: random, never stored), the SCRAM exchanges
between their two rounds, and where credentials come from (the node's metadata image); one
:class:`SaslService` per listener serves it with the listener's protocol.

* SS1. SASL is served only on SASL_PLAINTEXT and SASL_SSL listeners (elsewhere ILLEGAL_SASL_STATE); PLAIN
  only on SASL_SSL (``plain.py`` P3); a mechanism not in ``sasl.enabled.mechanisms`` is
  UNSUPPORTED_SASL_MECHANISM.
* SS2. A SCRAM exchange is kept between its rounds under a random id, at most :data:`EXCHANGE_TTL_S` seconds and
  at most :data:`MAX_EXCHANGES` at once (the oldest goes first); each id serves one final round.
* SS3. Every failure of the credentials is SASL_AUTHENTICATION_FAILED with the same message (``scram.py`` S4).
"""

from __future__ import annotations

import collections
import secrets
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from controller.security.plain import MECHANISM as PLAIN
from controller.security.plain import authenticate_plain
from controller.security.scram import ScramExchange, server_final, server_first
from controller.security.token import TokenSigner
from metadata.scram import ScramCredential, ScramError
from proto import security_pb2 as pb
from proto import security_pb2_grpc

EXCHANGE_TTL_S = 10.0
MAX_EXCHANGES = 10_000

Credentials = Callable[[str], Iterable[ScramCredential]]  # user -> its credentials (from the metadata image)


class SaslAuthority:
    """A node's SASL state. Thread-safe: the exchange table is guarded by a lock; the rest is immutable."""

    def __init__(self, credentials: Credentials, mechanisms: Iterable[str], lifetime_ms: int) -> None:
        self.signer = TokenSigner(secrets.token_bytes(32))  # T1: per node, per start
        self._secret = secrets.token_bytes(32)  # S4: salts of unknown users
        self._credentials = credentials
        self.mechanisms = tuple(mechanisms)
        self.lifetime_ms = lifetime_ms
        self._lock = threading.Lock()
        self._exchanges: collections.OrderedDict[str, tuple[float, ScramExchange]] = collections.OrderedDict()

    def credential(self, user: str, mechanism: str) -> ScramCredential | None:
        return next((c for c in self._credentials(user) if c.mechanism == mechanism), None)

    def keep(self, exchange: ScramExchange) -> str:
        """SS2: stores the exchange; returns its id."""
        exchange_id = secrets.token_hex(16)
        now = time.monotonic()
        with self._lock:
            while self._exchanges:
                oldest_id, (started, _) = next(iter(self._exchanges.items()))
                if now - started <= EXCHANGE_TTL_S and len(self._exchanges) < MAX_EXCHANGES:
                    break
                del self._exchanges[oldest_id]
            self._exchanges[exchange_id] = (now, exchange)
        return exchange_id

    def take(self, exchange_id: str) -> ScramExchange | None:
        """SS2: the exchange, once; None when unknown or expired."""
        with self._lock:
            found = self._exchanges.pop(exchange_id, None)
        if found is None or time.monotonic() - found[0] > EXCHANGE_TTL_S:
            return None
        return found[1]

    def session(self, user: str, mechanism: str) -> tuple[str, int]:
        token, _ = self.signer.issue(f"User:{user}", mechanism, int(time.time() * 1000), self.lifetime_ms)
        return token, self.lifetime_ms

    def plain(self, message: bytes) -> str:
        return authenticate_plain(message, self._credentials)

    def scram_first(self, mechanism: str, message: bytes) -> ScramExchange:
        return server_first(
            mechanism, message, lambda user: self.credential(user, mechanism), secrets.token_urlsafe(18), self._secret
        )

    def scram_final(self, exchange: ScramExchange, message: bytes) -> bytes:
        return server_final(exchange, message, lambda user: self.credential(user, exchange.mechanism))


R = TypeVar("R", pb.SaslHandshakeResponse, pb.SaslAuthenticateResponse)


def _error(response: R, code: str, message: str) -> R:
    response.error.code, response.error.message = code, message
    return response


class SaslService(security_pb2_grpc.SaslServicer):
    """The Sasl service on one listener (SS1-SS3)."""

    def __init__(self, authority: SaslAuthority, protocol: str) -> None:
        self._authority = authority
        self._protocol = protocol

    def _enabled(self) -> tuple[str, ...]:
        return tuple(m for m in self._authority.mechanisms if m != PLAIN or self._protocol == "SASL_SSL")

    def _refusal(self, mechanism: str) -> tuple[str, str] | None:
        if not self._protocol.startswith("SASL_"):
            return "ILLEGAL_SASL_STATE", f"this listener is {self._protocol}: it does not take SASL"
        if mechanism not in self._enabled():
            return ("UNSUPPORTED_SASL_MECHANISM",
                    f"SASL mechanism {mechanism!r} is not enabled here (enabled: {', '.join(self._enabled())})")
        return None

    def SaslHandshake(self, request: pb.SaslHandshakeRequest, context: Any) -> pb.SaslHandshakeResponse:
        response = pb.SaslHandshakeResponse(mechanisms=self._enabled())
        refusal = self._refusal(request.mechanism)
        return _error(response, *refusal) if refusal else response

    def SaslAuthenticate(self, request: pb.SaslAuthenticateRequest, context: Any) -> pb.SaslAuthenticateResponse:
        response = pb.SaslAuthenticateResponse()
        refusal = self._refusal(request.mechanism)
        if refusal is not None:
            return _error(response, *refusal)
        authority = self._authority
        try:
            if request.mechanism == PLAIN:
                user = authority.plain(request.auth_bytes)
            elif not request.exchange_id:
                exchange = authority.scram_first(request.mechanism, request.auth_bytes)
                response.auth_bytes = exchange.server_first.encode()
                response.exchange_id = authority.keep(exchange)
                return response
            else:
                found = authority.take(request.exchange_id)
                if found is None or found.mechanism != request.mechanism:
                    return _error(response, "ILLEGAL_SASL_STATE", "no such SCRAM exchange (expired or used)")
                response.auth_bytes = authority.scram_final(found, request.auth_bytes)
                user = found.username
        except ScramError as exc:
            return _error(response, exc.code, str(exc))
        response.session_token, response.session_lifetime_ms = authority.session(user, request.mechanism)
        return response

