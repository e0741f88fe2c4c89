"""SASL for the clients: one session per node address, its token sent with every call (docs/SECURITY.md section 3).

:class:`SaslSession` runs SaslHandshake and SaslAuthenticate (PLAIN, or SCRAM's two rounds with the server's
signature checked, C1-C3) on the node's channel and keeps the token. :class:`SaslClientInterceptor` adds
``authorization: Bearer <token>`` to every call on that channel.

* CS1. Re-authentication (KIP-368): a session is renewed once 85-95% of its lifetime has passed (a random
  point in Kafka's window, so that many clients do not renew at once).
* CS2. A call refused because the node no longer knows the session (it restarted, or the session expired)
  drops the token; the next call authenticates again. The refusal itself is retriable (NetworkError).
* CS3. Credentials the node refuses fail the call at once with SASL_AUTHENTICATION_FAILED and the node's
  reason, without sending it; a new attempt is made at most once per second.

Thread-safety: a session is shared by every thread using the channel; one lock guards its token.
"""

from __future__ import annotations

import random
import secrets
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import grpc

from odradek.errors import KafkaError, SaslAuthenticationFailedError, error_from_code
from odradek.rpc_errors import REAUTHENTICATE, rpc_error
from odradek.security.config import SecurityConfig
from odradek.security.scram import ScramClient, plain_message
from proto import security_pb2 as pb
from proto import security_pb2_grpc

HANDSHAKE_TIMEOUT_S = 10.0
RETRY_AFTER_FAILURE_S = 1.0


class SaslSession:
    """The SASL session with one node (CS1-CS3)."""

    def __init__(self, channel: grpc.Channel, security: SecurityConfig, rng: random.Random | None = None) -> None:
        assert security.sasl_mechanism is not None
        assert security.sasl_username is not None
        assert security.sasl_password is not None
        self._stub: Any = security_pb2_grpc.SaslStub(channel)  # type: ignore[no-untyped-call]
        self._mechanism = security.sasl_mechanism
        self._username = security.sasl_username
        self._password = security.sasl_password
        self._rng = rng or random.Random()
        self._lock = threading.Lock()
        self._token: str | None = None
        self._renew_at = 0.0
        self._failure: KafkaError | None = None
        self._failed_at = -1e9

    def token(self) -> str:
        """A current token (CS1); raises the node's refusal (CS3) or a network error."""
        with self._lock:
            now = time.monotonic()
            if self._token is not None and now < self._renew_at:
                return self._token
            if self._failure is not None and now - self._failed_at < RETRY_AFTER_FAILURE_S:
                raise self._failure
            try:
                token, lifetime_ms = self._authenticate()
            except SaslAuthenticationFailedError as exc:
                self._failure, self._failed_at = exc, now
                raise
            except KafkaError as exc:
                self._failure, self._failed_at = exc, now
                raise
            self._failure = None
            self._token = token
            self._renew_at = now + lifetime_ms / 1000.0 * self._rng.uniform(0.85, 0.95)
            return token

    def forget(self, token: str) -> None:
        """CS2: the node refused ``token``."""
        with self._lock:
            if self._token == token:
                self._token = None

    def _call(self, method: str, request: Any) -> Any:
        try:
            response = getattr(self._stub, method)(request, timeout=HANDSHAKE_TIMEOUT_S)
        except grpc.RpcError as exc:
            raise rpc_error(exc, method, "the node") from None
        if response.error.code:
            raise error_from_code(response.error.code, f"{method}: {response.error.message or response.error.code}")
        return response

    def _authenticate(self) -> tuple[str, int]:
        mechanism = self._mechanism
        self._call("SaslHandshake", pb.SaslHandshakeRequest(mechanism=mechanism))
        if mechanism == "PLAIN":
            done = self._call("SaslAuthenticate", pb.SaslAuthenticateRequest(
                mechanism=mechanism, auth_bytes=plain_message(self._username, self._password)))  # fmt: skip
        else:
            client = ScramClient(mechanism, self._username, self._password, secrets.token_urlsafe(18))
            first = self._call("SaslAuthenticate", pb.SaslAuthenticateRequest(mechanism=mechanism,
                                                                              auth_bytes=client.first()))
            done = self._call("SaslAuthenticate", pb.SaslAuthenticateRequest(
                mechanism=mechanism, auth_bytes=client.final(first.auth_bytes), exchange_id=first.exchange_id))
            client.verify(done.auth_bytes)  # C3
        if not done.session_token or done.session_lifetime_ms <= 0:
            raise SaslAuthenticationFailedError("the node ended the SASL exchange without a session")
        return done.session_token, done.session_lifetime_ms


class _Details(NamedTuple):
    method: str
    timeout: float | None
    metadata: Any
    credentials: Any
    wait_for_ready: Any
    compression: Any


class _CallDetails(_Details, grpc.ClientCallDetails):  # type: ignore[misc]
    pass


class FailedCall(grpc.RpcError, grpc.Future, grpc.Call):  # type: ignore[misc]
    """A call that was never sent: its credentials were refused (CS3). Behaves as a failed gRPC call."""

    def __init__(self, error: KafkaError) -> None:
        super().__init__()
        self._error = error
        code = grpc.StatusCode.UNAUTHENTICATED if isinstance(error, SaslAuthenticationFailedError) else None
        self._code = code or grpc.StatusCode.UNAVAILABLE
        self._details = f"{error.code}: {error}" if code else str(error)

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def initial_metadata(self) -> Any:
        return ()

    def trailing_metadata(self) -> Any:
        return ()

    def is_active(self) -> bool:
        return False

    def time_remaining(self) -> float | None:
        return None

    def add_callback(self, callback: Callable[[], None]) -> bool:
        return False

    def cancel(self) -> bool:
        return False

    def cancelled(self) -> bool:
        return False

    def running(self) -> bool:
        return False

    def done(self) -> bool:
        return True

    def result(self, timeout: float | None = None) -> Any:
        raise self

    def exception(self, timeout: float | None = None) -> BaseException:
        return self

    def traceback(self, timeout: float | None = None) -> Any:
        return None

    def add_done_callback(self, fn: Callable[[Any], None]) -> None:
        fn(self)

    def __iter__(self) -> FailedCall:  # as a stream's answers: the first one fails
        return self

    def __next__(self) -> Any:
        raise self


class SaslClientInterceptor(grpc.UnaryUnaryClientInterceptor, grpc.StreamStreamClientInterceptor):  # type: ignore[misc]
    """Adds the session token to every call of one channel (CS1-CS3), and to every stream when it opens (the
    node checks each of its messages with that token: one that expired ends the stream, which the client
    opens again after authenticating again, ``common.streams``)."""

    def __init__(self, session: SaslSession) -> None:
        self._session = session

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return self._intercept(continuation, details, request)

    def intercept_stream_stream(self, continuation: Any, details: Any, request_iterator: Any) -> Any:
        return self._intercept(continuation, details, request_iterator)

    def _intercept(self, continuation: Any, details: Any, request: Any) -> Any:
        try:
            token = self._session.token()
        except KafkaError as exc:
            return FailedCall(exc)
        metadata = [*(details.metadata or ()), ("authorization", f"Bearer {token}")]
        outcome = continuation(
            _CallDetails(details.method, details.timeout, metadata, details.credentials, details.wait_for_ready,
                         details.compression), request)  # fmt: skip

        def after(call: Any) -> None:
            try:
                refused = call.code() is grpc.StatusCode.UNAUTHENTICATED
                trailing = call.trailing_metadata() or () if refused else ()
            except Exception:  # a call that ended otherwise (cancelled): nothing to learn
                return
            if refused and any(k == REAUTHENTICATE for k, _ in trailing):
                self._session.forget(token)  # CS2

        outcome.add_done_callback(after)
        return outcome


def sasl_channel(channel: grpc.Channel, security: SecurityConfig) -> tuple[grpc.Channel, SaslSession | None]:
    """``channel`` with a SASL session when ``security`` asks for SASL, and the session (its tokens also
    authenticate the node's DATA connections, ``odradek.net.data_link``); else ``channel`` itself and None."""
    if not security.sasl:
        return channel, None
    session = SaslSession(channel, security)
    return grpc.intercept_channel(channel, SaslClientInterceptor(session)), session
