"""SCRAM-SHA-256 and SCRAM-SHA-512, the client side (RFC 5802, RFC 7677), and the PLAIN message.

The message grammar and key derivations are in ``controller/security/scram.py`` (the server side); the client
cannot import it (clients depend on ``proto`` and ``log.record`` only), so the few formulas are written again
here and ``tests/security/test_scram.py`` runs each side against the other and against RFC 7677's example.

* C1. The client sends ``n,,n=<user>,r=<nonce>`` (no channel binding, no authorization id).
* C2. The server's nonce must start with the client's, the salt must decode and the iteration count must be
  at least 4096, or the client stops before computing a proof.
* C3. The client checks the server's signature: a server that does not know the password cannot pass
  (mutual authentication); a mismatch is SASL_AUTHENTICATION_FAILED.

Pure: the nonce is passed in.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac

from odradek.errors import SaslAuthenticationFailedError

MECHANISMS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384  # Kafka's ceiling: a higher count from a server is refused rather than computed


def encode_saslname(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def plain_message(username: str, password: str) -> bytes:
    """RFC 4616: ``NUL user NUL password`` (no authorization id)."""
    return f"\x00{username}\x00{password}".encode()


class ScramClient:
    """One SCRAM exchange from the client's side: :meth:`first`, :meth:`final`, :meth:`verify` in order."""

    def __init__(self, mechanism: str, username: str, password: str, nonce: str) -> None:
        if mechanism not in MECHANISMS:
            raise ValueError(f"unsupported SCRAM mechanism {mechanism!r}")
        self._hash = MECHANISMS[mechanism]
        self._mechanism = mechanism
        self._username = username
        self._password = password
        self._nonce = nonce
        self._client_first_bare = f"n={encode_saslname(username)},r={nonce}"
        self._expected_server_signature: bytes | None = None

    def _hmac(self, key: bytes, message: bytes) -> bytes:
        return hmac.new(key, message, self._hash).digest()

    def first(self) -> bytes:
        """client-first (C1)."""
        return f"n,,{self._client_first_bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        """client-final for the server's server-first (C2)."""
        failed = SaslAuthenticationFailedError(f"invalid SCRAM server-first message ({self._mechanism})")
        try:
            text = server_first.decode("utf-8")
            fields = dict(part.split("=", 1) for part in text.split(",")[:3])
            nonce, salt, iterations = fields["r"], base64.b64decode(fields["s"], validate=True), int(fields["i"])
        except (UnicodeDecodeError, ValueError, KeyError, binascii.Error):
            raise failed from None
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce) or not salt:
            raise failed
        if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
            raise failed
        salted = hashlib.pbkdf2_hmac(self._hash, self._password.encode("utf-8"), salt, iterations)
        client_key = self._hmac(salted, b"Client Key")
        stored_key = hashlib.new(self._hash, client_key).digest()
        without_proof = f"c={base64.b64encode(b'n,,').decode('ascii')},r={nonce}"
        auth_message = f"{self._client_first_bare},{text},{without_proof}".encode()
        signature = self._hmac(stored_key, auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        self._expected_server_signature = self._hmac(self._hmac(salted, b"Server Key"), auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode('ascii')}".encode()

    def verify(self, server_final: bytes) -> None:
        """Checks the server's signature (C3)."""
        if self._expected_server_signature is None:
            raise RuntimeError("verify() before final()")
        expected = b"v=" + base64.b64encode(self._expected_server_signature)
        if not hmac.compare_digest(server_final, expected):
            raise SaslAuthenticationFailedError(
                f"the server's SCRAM signature is wrong: it does not know this user's credential ({self._mechanism})"
            )
