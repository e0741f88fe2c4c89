"""SASL PLAIN, the server side (RFC 4616), checked against the users' SCRAM credentials.

Message: ``[authzid] NUL authcid NUL passwd`` in UTF-8.

* P1. The user name and password must not be empty; an authorization id other than the user name is refused
  (Kafka's ``PlainSaslServer``).
* P2. There is no second password store: the password is checked against any of the user's SCRAM
  credentials (``scram.password_matches``), so ``odradek users add`` serves PLAIN and SCRAM alike. Kafka
  reads PLAIN users from JAAS files instead; one store kept in ``__cluster_metadata`` is the choice here.
* P3. PLAIN sends the password itself, so a listener accepts it only over TLS (SASL_SSL), as the issue asks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from controller.security.scram import AUTHENTICATION_FAILED, password_matches
from metadata.scram import ScramCredential, ScramError

MECHANISM = "PLAIN"


def parse_plain(message: bytes) -> tuple[str, str, str]:
    """-> (authzid, user name, password); ScramError (SASL_AUTHENTICATION_FAILED) when malformed (P1)."""
    try:
        text = message.decode("utf-8")
    except UnicodeDecodeError:
        raise ScramError("a PLAIN message must be UTF-8") from None
    parts = text.split("\x00")
    if len(parts) != 3:
        raise ScramError("Invalid SASL/PLAIN response: expected 3 tokens")
    authzid, username, password = parts
    if not username:
        raise ScramError("Authentication failed: username not specified")
    if not password:
        raise ScramError("Authentication failed: password not specified")
    if authzid and authzid != username:
        raise ScramError("Authentication failed: Client requested an authorization id that is different from username")
    return authzid, username, password


def authenticate_plain(message: bytes, credentials: Callable[[str], Iterable[ScramCredential]]) -> str:
    """The authenticated user name, or ScramError (P1, P2)."""
    _, username, password = parse_plain(message)
    for credential in credentials(username):
        if password_matches(credential, password):
            return username
    raise ScramError(f"{AUTHENTICATION_FAILED} {MECHANISM}")
