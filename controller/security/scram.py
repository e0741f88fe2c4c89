"""SCRAM-SHA-256 and SCRAM-SHA-512, the server side (RFC 5802, RFC 7677), as Kafka runs them.

The exchange, with the messages' grammar (RFC 5802 section 7)::

    client-first  = gs2-header client-first-bare          gs2-header = "n,," | "n,a=<authzid>,"
    client-first-bare = "n=" saslname ",r=" c-nonce [",e..." extensions]
    server-first  = "r=" c-nonce s-nonce ",s=" base64(salt) ",i=" iterations
    client-final  = "c=" base64(gs2-header) ",r=" c-nonce s-nonce ",p=" base64(ClientProof)
    server-final  = "v=" base64(ServerSignature)

    SaltedPassword  = PBKDF2-HMAC-H(password, salt, iterations)     (Hi in RFC 5802)
    ClientKey       = HMAC(SaltedPassword, "Client Key")            StoredKey = H(ClientKey)
    ServerKey       = HMAC(SaltedPassword, "Server Key")
    AuthMessage     = client-first-bare "," server-first "," client-final-without-proof
    ClientProof     = ClientKey XOR HMAC(StoredKey, AuthMessage)
    ServerSignature = HMAC(ServerKey, AuthMessage)

Rules the tests cite:

* S1. The server keeps only (salt, StoredKey, ServerKey, iterations) of a password: :class:`ScramCredential`,
  Kafka's ``UserScramCredentialRecord``. Iterations lie in [4096, 16384] as Kafka requires.
* S2. The proof is checked by recovering ClientKey and comparing H(ClientKey) with StoredKey in constant time.
* S3. The combined nonce of client-final must be the server-first's; the channel binding ``c=`` must be the
  base64 of the client's gs2 header; no channel binding (``p=``) is offered, so a client asking for it fails.
* S4. An unknown user goes through the same exchange with a salt derived from the user name and a server
  secret, and fails only at the proof with the same error as a wrong password: the exchange does not tell
  which user names exist (RFC 5802 section 9).
* S5. An authorization id other than the user name is refused (Kafka: "Authentication failed: Client
  requested an authorization id that is different from username").
* S6. Passwords are used as UTF-8 bytes without SASLprep, as Kafka's ``ScramFormatter`` does.

Pure: nonces and salts are passed in; no clock, no randomness, no I/O.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from collections.abc import Callable
from dataclasses import dataclass

from metadata.scram import (
    MIN_ITERATIONS,
    ScramCredential,
    ScramError,
    hash_name,
)

AUTHENTICATION_FAILED = "Authentication failed during authentication due to invalid credentials with SASL mechanism"

_PRINTABLE_NONCE = re.compile(r"[\x21-\x2b\x2d-\x7e]+")  # RFC 5802 "printable": no comma


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """RFC 5802 Hi(): PBKDF2 with HMAC-H (S6: UTF-8 without SASLprep)."""
    return hashlib.pbkdf2_hmac(hash_name(mechanism), password.encode("utf-8"), salt, iterations)


def hmac_digest(mechanism: str, key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, hash_name(mechanism)).digest()


def digest(mechanism: str, data: bytes) -> bytes:
    return hashlib.new(hash_name(mechanism), data).digest()


def make_credential(mechanism: str, password: str, salt: bytes, iterations: int = MIN_ITERATIONS) -> ScramCredential:
    """The credential for ``password`` (what ``odradek users add`` stores; S1)."""
    if not password:
        raise ScramError("a password must not be empty")
    salted = salted_password(mechanism, password, salt, iterations)
    client_key = hmac_digest(mechanism, salted, b"Client Key")
    credential = ScramCredential(
        mechanism=mechanism,
        salt=salt,
        stored_key=digest(mechanism, client_key),
        server_key=hmac_digest(mechanism, salted, b"Server Key"),
        iterations=iterations,
    )
    credential.validate()
    return credential


def credential_from_salted_password(
    mechanism: str, salted: bytes, salt: bytes, iterations: int
) -> ScramCredential:
    """The credential for a salted password a client computed (Kafka's AlterUserScramCredentials, KIP-554)."""
    size = hashlib.new(hash_name(mechanism)).digest_size
    if len(salted) != size:
        raise ScramError(f"a {mechanism} salted password is {size} bytes, not {len(salted)}")
    if not salt:
        raise ScramError("a salt must not be empty")
    client_key = hmac_digest(mechanism, salted, b"Client Key")
    credential = ScramCredential(
        mechanism, salt, digest(mechanism, client_key), hmac_digest(mechanism, salted, b"Server Key"), iterations
    )
    credential.validate()
    return credential


def password_matches(credential: ScramCredential, password: str) -> bool:
    """Whether ``password`` is the one ``credential`` was made from (what PLAIN checks; S2's comparison)."""
    salted = salted_password(credential.mechanism, password, credential.salt, credential.iterations)
    client_key = hmac_digest(credential.mechanism, salted, b"Client Key")
    return hmac.compare_digest(digest(credential.mechanism, client_key), credential.stored_key)


def decode_saslname(name: str) -> str:
    """RFC 5802 saslname: ``=2C`` is ``,`` and ``=3D`` is ``=``; any other ``=`` is an error."""
    if re.search(r"=(?!2C|3D)", name):
        raise ScramError(f"invalid user name encoding {name!r}")
    return name.replace("=2C", ",").replace("=3D", "=")


def _attributes(message: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for part in message.split(","):
        if len(part) < 2 or part[1] != "=":
            raise ScramError(f"malformed SCRAM message {message!r}")
        out.append((part[0], part[2:]))
    return out


@dataclass(frozen=True, slots=True)
class ScramExchange:
    """The server's state between server-first and client-final. Holds no secret (S4's salt is not one)."""

    mechanism: str
    username: str
    gs2_header: str
    client_first_bare: str
    server_first: str
    nonce: str


def parse_client_first(mechanism: str, message: bytes) -> tuple[str, str, str, str]:
    """client-first -> (gs2 header, client-first-bare, user name, client nonce); S3, S5."""
    hash_name(mechanism)
    try:
        text = message.decode("utf-8")
    except UnicodeDecodeError:
        raise ScramError("a SCRAM message must be UTF-8") from None
    parts = text.split(",", 2)
    if len(parts) != 3:
        raise ScramError("malformed SCRAM client-first message")
    cbind, authzid, bare = parts
    if cbind not in ("n", "y"):
        raise ScramError("channel binding is not supported: send the gs2 header 'n,,'")
    attrs = _attributes(bare)
    if len(attrs) < 2 or attrs[0][0] != "n" or attrs[1][0] != "r":
        raise ScramError("malformed SCRAM client-first message: expected n=<user>,r=<nonce>")
    username = decode_saslname(attrs[0][1])
    nonce = attrs[1][1]
    if not username or not _PRINTABLE_NONCE.fullmatch(nonce):
        raise ScramError("malformed SCRAM client-first message: empty user name or invalid nonce")
    if authzid and (not authzid.startswith("a=") or decode_saslname(authzid[2:]) != username):
        raise ScramError(
            "Authentication failed: Client requested an authorization id that is different from username"
        )
    return f"{cbind},{authzid},", bare, username, nonce


def server_first(
    mechanism: str,
    client_first: bytes,
    lookup: Callable[[str], ScramCredential | None],
    server_nonce: str,
    unknown_user_secret: bytes,
) -> ScramExchange:
    """Answers client-first (S4 for an unknown user); the exchange's ``server_first`` is the reply."""
    if not _PRINTABLE_NONCE.fullmatch(server_nonce):
        raise ValueError("the server nonce must be printable ASCII without commas")
    gs2_header, bare, username, client_nonce = parse_client_first(mechanism, client_first)
    credential = lookup(username)
    if credential is not None and credential.mechanism == mechanism:
        salt, iterations = credential.salt, credential.iterations
    else:
        salt = hmac_digest(mechanism, unknown_user_secret, username.encode("utf-8"))[:16]  # S4
        iterations = MIN_ITERATIONS
    nonce = client_nonce + server_nonce
    reply = f"r={nonce},s={base64.b64encode(salt).decode('ascii')},i={iterations}"
    return ScramExchange(mechanism, username, gs2_header, bare, reply, nonce)


def server_final(
    exchange: ScramExchange, client_final: bytes, lookup: Callable[[str], ScramCredential | None]
) -> bytes:
    """Checks client-final (S2, S3) and returns server-final; ScramError when the proof is wrong (S4)."""
    try:
        text = client_final.decode("utf-8")
    except UnicodeDecodeError:
        raise ScramError("a SCRAM message must be UTF-8") from None
    without_proof, sep, proof_part = text.rpartition(",p=")
    if not sep:
        raise ScramError("malformed SCRAM client-final message: no proof")
    attrs = _attributes(without_proof)
    if len(attrs) < 2 or attrs[0][0] != "c" or attrs[1][0] != "r":
        raise ScramError("malformed SCRAM client-final message: expected c=...,r=...")
    try:
        binding = base64.b64decode(attrs[0][1], validate=True)
        proof = base64.b64decode(proof_part, validate=True)
    except (binascii.Error, ValueError):
        raise ScramError("malformed SCRAM client-final message: invalid base64") from None
    if binding != exchange.gs2_header.encode("utf-8"):
        raise ScramError("SCRAM channel binding does not match the client-first message")  # S3
    if attrs[1][1] != exchange.nonce:
        raise ScramError("SCRAM nonce does not match the server-first message")  # S3
    mechanism = exchange.mechanism
    credential = lookup(exchange.username)
    failed = ScramError(f"{AUTHENTICATION_FAILED} {mechanism}")
    if credential is None or credential.mechanism != mechanism or len(proof) != len(credential.stored_key):
        raise failed  # S4: the same error as a wrong password
    auth_message = f"{exchange.client_first_bare},{exchange.server_first},{without_proof}".encode()
    client_signature = hmac_digest(mechanism, credential.stored_key, auth_message)
    client_key = bytes(a ^ b for a, b in zip(proof, client_signature, strict=True))
    if not hmac.compare_digest(digest(mechanism, client_key), credential.stored_key):
        raise failed  # S2
    server_signature = hmac_digest(mechanism, credential.server_key, auth_message)
    return b"v=" + base64.b64encode(server_signature)
