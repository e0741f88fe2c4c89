"""Session tokens: what a successful SASL exchange yields, sent as ``authorization: Bearer <token>`` metadata.

A token is ``base64url(payload) "." base64url(HMAC-SHA256(key, payload))`` where the payload is compact JSON
``{"p": principal, "m": mechanism, "i": issued_ms, "e": expires_ms}``.

* T1. A token is valid only with the key that signed it. Each node signs with its own key, made at start and
  never written down: a token authenticates to the node that issued it, as a SASL session in Kafka belongs
  to one connection. After a restart every session re-authenticates.
* T2. A token is valid until ``expires_ms`` (exclusive): ``issued_ms + connections.max.reauth.ms``; the client
  re-authenticates before that (KIP-368), and a call carrying an expired token is refused with
  SASL_AUTHENTICATION_FAILED ("session expired"), which tells the client to re-authenticate once.
* T3. Any change to a token (payload or signature) makes it invalid; signatures are compared in constant
  time; a malformed token is an error, never an exception of another kind.

Pure: the key and ``now_ms`` are passed in.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from dataclasses import dataclass

MAX_TOKEN_CHARS = 4096


class TokenError(Exception):
    """A token that is malformed, forged, from another node, or expired (SASL_AUTHENTICATION_FAILED)."""

    code = "SASL_AUTHENTICATION_FAILED"

    def __init__(self, message: str, expired: bool = False) -> None:
        super().__init__(message)
        self.expired = expired


@dataclass(frozen=True, slots=True)
class Session:
    """An authenticated session: who, how, and until when."""

    principal: str
    mechanism: str
    issued_ms: int
    expires_ms: int


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class TokenSigner:
    """Issues and verifies session tokens with one node's key (T1-T3). Immutable; thread-safe."""

    __slots__ = ("_key",)

    def __init__(self, key: bytes) -> None:
        if len(key) < 32:
            raise ValueError("a token key needs at least 32 bytes")
        self._key = key

    def _sign(self, payload: bytes) -> bytes:
        return hmac.new(self._key, payload, hashlib.sha256).digest()

    def issue(self, principal: str, mechanism: str, now_ms: int, lifetime_ms: int) -> tuple[str, Session]:
        """A new token and the session it stands for (T2)."""
        if lifetime_ms <= 0:
            raise ValueError("a session lifetime must be positive")
        session = Session(principal, mechanism, now_ms, now_ms + lifetime_ms)
        payload = json.dumps(
            {"p": principal, "m": mechanism, "i": now_ms, "e": session.expires_ms}, separators=(",", ":")
        ).encode("utf-8")
        return f"{_b64(payload)}.{_b64(self._sign(payload))}", session

    def verify(self, token: str, now_ms: int) -> Session:
        """The session of a valid token; TokenError otherwise (T1-T3)."""
        if len(token) > MAX_TOKEN_CHARS or token.count(".") != 1:
            raise TokenError("malformed session token")
        payload_text, signature_text = token.split(".")
        try:
            payload = _unb64(payload_text)
            signature = _unb64(signature_text)
        except (binascii.Error, ValueError):
            raise TokenError("malformed session token") from None
        if _b64(payload) != payload_text or _b64(signature) != signature_text:
            raise TokenError("malformed session token")  # T3: one spelling only (base64's spare bits are zero)
        if not hmac.compare_digest(signature, self._sign(payload)):
            raise TokenError("invalid session token (signed by another node or altered): authenticate again")
        try:
            fields = json.loads(payload)
            session = Session(str(fields["p"]), str(fields["m"]), int(fields["i"]), int(fields["e"]))
        except (ValueError, KeyError, TypeError):
            raise TokenError("malformed session token") from None
        if now_ms >= session.expires_ms:
            raise TokenError("session expired: authenticate again", expired=True)
        return session
