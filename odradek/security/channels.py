"""gRPC channel credentials from a client's security keys (TLS; the SASL session is added per call elsewhere).

Files are read when the client is built: a missing or unreadable file is a ConfigError naming its key (K4).
An encrypted key file (``ssl.key.password``) is decrypted here with the ``cryptography`` package, since
gRPC takes unencrypted PEM only.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import TYPE_CHECKING

from common.tls import client_tls_context
from odradek.errors import ConfigError
from odradek.security.config import SecurityConfig

if TYPE_CHECKING:
    import grpc


def _read(key: str, path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"{key}: cannot read {path!r}: {exc.strerror or exc}") from None


def _key_pem(path: str, password: str | None) -> bytes:
    data = _read("ssl.key.location", path)
    if password is None:
        return data
    from cryptography.hazmat.primitives import serialization

    try:
        key = serialization.load_pem_private_key(data, password=password.encode("utf-8"))
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"ssl.key.location: cannot decrypt {path!r} with ssl.key.password: {exc}") from None
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())  # fmt: skip


def channel_credentials(security: SecurityConfig) -> grpc.ChannelCredentials | None:
    """TLS credentials for SSL and SASL_SSL (None: plaintext): the CA to trust (default: the system's) and
    the client certificate when one is configured."""
    if not security.tls:
        return None
    import grpc

    ca = _read("ssl.ca.location", security.ca_location) if security.ca_location else None
    key = cert = None
    if security.certificate_location and security.key_location:
        cert = _read("ssl.certificate.location", security.certificate_location)
        key = _key_pem(security.key_location, security.key_password)
    return grpc.ssl_channel_credentials(ca, key, cert)


def tls_context(security: SecurityConfig) -> ssl.SSLContext | None:
    """The same trust and client certificate as :func:`channel_credentials`, for the plain sockets of a DATA
    listener (``odradek.net.data_link``); None: plaintext. The server's name is checked, as gRPC does."""
    if not security.tls:
        return None
    ca = _read("ssl.ca.location", security.ca_location) if security.ca_location else None
    key = cert = None
    if security.certificate_location and security.key_location:
        key = _key_pem(security.key_location, security.key_password)
        cert = _read("ssl.certificate.location", security.certificate_location)
    return client_tls_context(ca, key, cert)
