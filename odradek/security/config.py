"""Clients' security keys (Kafka's names) and Kafka-style ``.properties`` files for ``--command-config``.

Keys (those of Kafka's Java client and librdkafka):

==================================  ========================================================================
``security.protocol``               PLAINTEXT (default), SSL, SASL_PLAINTEXT or SASL_SSL
``ssl.ca.location``                 PEM file of the CA that signed the servers' certificates
``ssl.certificate.location``        PEM file of the client's certificate (mutual TLS), with ``ssl.key.location``
``ssl.key.location``                PEM file of the client's private key
``ssl.key.password``                the key file's password when it is encrypted
``ssl.endpoint.identification.algorithm``  ``https`` (default: the server certificate must name the host)
``sasl.mechanism``                  PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512
``sasl.username``, ``sasl.password``  the SASL credentials (librdkafka's keys)
``sasl.jaas.config``                the Java client's form: ``...LoginModule required username="u" password="p";``
==================================  ========================================================================

Rules the tests cite:

* K1. SASL protocols need a mechanism, a user name and a password (from the two keys or the JAAS line).
* K2. PLAIN sends the password itself: it is accepted only with SASL_SSL.
* K3. A client certificate and its key come together or not at all.
* K4. Values are checked when the client is built: a bad value is a ConfigError naming the key.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from odradek.errors import ConfigError

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")

SECURITY_KEYS = (
    "security.protocol",
    "ssl.ca.location",
    "ssl.certificate.location",
    "ssl.key.location",
    "ssl.key.password",
    "ssl.endpoint.identification.algorithm",
    "sasl.mechanism",
    "sasl.username",
    "sasl.password",
    "sasl.jaas.config",
)

_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')


def parse_jaas_config(value: str) -> tuple[str, str]:
    """``sasl.jaas.config`` -> (username, password) of a PLAIN or SCRAM login module line."""
    match = re.fullmatch(r"\s*[\w.$]+\s+(required|requisite|sufficient|optional)\s+(.*?);?\s*", value, re.DOTALL)
    if match is None:
        raise ConfigError("sasl.jaas.config: expected '<LoginModule> required username=\"...\" password=\"...\";'")
    options = {key: re.sub(r"\\(.)", r"\1", raw) for key, raw in _JAAS_OPTION.findall(match.group(2))}
    if "username" not in options or "password" not in options:
        raise ConfigError("sasl.jaas.config: needs username=\"...\" and password=\"...\"")
    return options["username"], options["password"]


@dataclass(frozen=True, slots=True)
class SecurityConfig:
    """A client's parsed security settings (K1-K4)."""

    protocol: str = "PLAINTEXT"
    ca_location: str | None = None
    certificate_location: str | None = None
    key_location: str | None = None
    key_password: str | None = None
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = None

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @classmethod
    def from_mapping(cls, raw: Mapping[str, object]) -> SecurityConfig:
        """Reads the security keys of a client config (other keys are ignored here)."""
        values: dict[str, str] = {}
        for key in SECURITY_KEYS:
            if key in raw and raw[key] is not None:
                value = raw[key]
                if not isinstance(value, str):
                    raise ConfigError(f"{key} must be a string, not {type(value).__name__}")
                values[key] = value
        protocol = values.get("security.protocol", "PLAINTEXT").upper()
        if protocol not in PROTOCOLS:
            raise ConfigError(f"security.protocol must be one of {', '.join(PROTOCOLS)}, not {protocol!r}")
        algorithm = values.get("ssl.endpoint.identification.algorithm", "https")
        if algorithm.lower() != "https":
            raise ConfigError(
                "ssl.endpoint.identification.algorithm: only 'https' is supported (gRPC always checks that the "
                "server certificate names the host)"
            )
        username, password = values.get("sasl.username"), values.get("sasl.password")
        if "sasl.jaas.config" in values and username is None and password is None:
            username, password = parse_jaas_config(values["sasl.jaas.config"])
        mechanism = values.get("sasl.mechanism")
        if mechanism is not None:
            mechanism = mechanism.upper()
            if mechanism not in SASL_MECHANISMS:
                raise ConfigError(f"sasl.mechanism must be one of {', '.join(SASL_MECHANISMS)}, not {mechanism!r}")
        if protocol.startswith("SASL_"):
            if mechanism is None:
                raise ConfigError(f"security.protocol={protocol} needs sasl.mechanism ({', '.join(SASL_MECHANISMS)})")
            if not username or not password:
                raise ConfigError(f"security.protocol={protocol} needs sasl.username and sasl.password")
            if mechanism == "PLAIN" and protocol != "SASL_SSL":
                raise ConfigError(
                    "sasl.mechanism=PLAIN sends the password itself: use it with security.protocol=SASL_SSL"
                )
        if ("ssl.certificate.location" in values) != ("ssl.key.location" in values):
            raise ConfigError("ssl.certificate.location and ssl.key.location must be given together")
        return cls(
            protocol=protocol,
            ca_location=values.get("ssl.ca.location"),
            certificate_location=values.get("ssl.certificate.location"),
            key_location=values.get("ssl.key.location"),
            key_password=values.get("ssl.key.password"),
            sasl_mechanism=mechanism,
            sasl_username=username,
            sasl_password=password,
        )


_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(text: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", text[i + 2 : i + 6]):
                out.append(chr(int(text[i + 2 : i + 6], 16)))
                i += 6
                continue
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _logical_lines(text: str) -> list[str]:
    """Joins continuation lines (an odd number of trailing backslashes) as ``java.util.Properties`` does."""
    lines: list[str] = []
    pending: str | None = None
    for raw in text.splitlines():
        line = raw.lstrip() if pending is not None else raw
        if pending is None and (not line.strip() or line.lstrip()[:1] in ("#", "!")):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            pending = (pending or "") + line[:-1]
            continue
        lines.append((pending or "") + line)
        pending = None
    if pending is not None:
        lines.append(pending)
    return lines


def parse_properties(text: str) -> dict[str, str]:
    """A ``.properties`` text -> {key: value} (``key=value``, ``key: value``, ``key value``; ``#``/``!`` comments)."""
    out: dict[str, str] = {}
    for line in _logical_lines(text):
        line = line.lstrip()
        i = 0
        while i < len(line):
            if line[i] == "\\":
                i += 2
                continue
            if line[i] in "=: \t\f":
                break
            i += 1
        key = line[:i]
        rest = line[i:].lstrip(" \t\f")  # the separator: whitespace, then at most one '=' or ':'
        if rest[:1] in ("=", ":"):
            rest = rest[1:].lstrip(" \t\f")
        out[_unescape(key)] = _unescape(rest)
    return out


def load_properties(path: str | Path) -> dict[str, str]:
    """Reads a ``--command-config`` file; a missing or unreadable file is a ConfigError naming it."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the properties file {str(path)!r}: {exc}") from exc
    return parse_properties(text)
