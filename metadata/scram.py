"""SCRAM credentials as the cluster stores them (Kafka's ``UserScramCredentialRecord``): the mechanisms, their
codes, and :class:`ScramCredential` with its check (rule S1 of ``controller/security/scram.py``, which runs the
exchange with them).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384

#: Kafka's ``ScramMechanism``: name -> (hash name, type code in UserScramCredentialRecord).
MECHANISMS: dict[str, tuple[str, int]] = {"SCRAM-SHA-256": ("sha256", 1), "SCRAM-SHA-512": ("sha512", 2)}
MECHANISM_BY_CODE: dict[int, str] = {code: name for name, (_, code) in MECHANISMS.items()}


class ScramError(Exception):
    """A failed SCRAM exchange (Kafka's SASL_AUTHENTICATION_FAILED)."""

    code = "SASL_AUTHENTICATION_FAILED"


def hash_name(mechanism: str) -> str:
    """hashlib's name of ``mechanism``'s hash; :class:`ScramError` for a mechanism that is not SCRAM-SHA-256/512."""
    try:
        return MECHANISMS[mechanism][0]
    except KeyError:
        raise ScramError(f"unsupported SASL mechanism {mechanism!r}") from None


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What the cluster stores of one user's password for one mechanism (S1)."""

    mechanism: str
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def validate(self) -> None:
        hash_name(self.mechanism)
        if not MIN_ITERATIONS <= self.iterations <= MAX_ITERATIONS:
            raise ScramError(f"iterations must lie in [{MIN_ITERATIONS}, {MAX_ITERATIONS}], not {self.iterations}")
        size = hashlib.new(hash_name(self.mechanism)).digest_size
        if not self.salt or len(self.stored_key) != size or len(self.server_key) != size:
            raise ScramError(f"a {self.mechanism} credential needs a salt and {size}-byte keys")
