"""A local certificate authority and node and client certificates, with the ``cryptography`` package.

What ``odradek up --security`` makes and the TLS tests use: one CA (ECDSA P-256, valid ten years), and per
node or client a key and a certificate signed by it with the subject ``CN=<name>`` (the principal
``User:CN=<name>`` under the default ``ssl.principal.mapping.rules``), Subject Alternative Names for the
addresses it serves (``127.0.0.1``, ``localhost`` by default), and both server and client authentication
usages, so the one certificate serves a node's listener and its own calls to other nodes.

Files are PEM. A node's keystore file (``ssl.keystore.location``) holds its private key followed by its
certificate, as Kafka's PEM keystores do; key files are written with mode 0600.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

DEFAULT_HOSTS = ("127.0.0.1", "localhost")
_VALIDITY = datetime.timedelta(days=3650)


@dataclass(frozen=True, slots=True)
class Issued:
    """A key and its certificate, PEM-encoded."""

    key_pem: bytes
    cert_pem: bytes

    @property
    def keystore_pem(self) -> bytes:
        """Key then certificate: a Kafka PEM keystore."""
        return self.key_pem + self.cert_pem


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5)  # tolerate small clock skew


class CertificateAuthority:
    """A CA that issues node and client certificates."""

    def __init__(self, key: ec.EllipticCurvePrivateKey, cert: x509.Certificate) -> None:
        self._key = key
        self.cert = cert

    @classmethod
    def create(cls, name: str = "Odradek local CA") -> CertificateAuthority:
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(_now())
            .not_valid_after(_now() + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                              key_encipherment=False, data_encipherment=False, key_agreement=False,
                              encipher_only=False, decipher_only=False),  # fmt: skip
                critical=True,
            )
            .sign(key, hashes.SHA256())
        )
        return cls(key, cert)

    @classmethod
    def load(cls, key_pem: bytes, cert_pem: bytes) -> CertificateAuthority:
        key = serialization.load_pem_private_key(key_pem, password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ValueError("the CA key is not an EC key")
        return cls(key, x509.load_pem_x509_certificate(cert_pem))

    @property
    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    @property
    def key_pem(self) -> bytes:
        return _key_pem(self._key)

    def issue(self, common_name: str, hosts: Sequence[str] = DEFAULT_HOSTS) -> Issued:
        """A key and a certificate ``CN=<common_name>`` for ``hosts`` (IP addresses or DNS names)."""
        key = ec.generate_private_key(ec.SECP256R1())
        names: list[x509.GeneralName] = []
        for host in hosts:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                names.append(x509.DNSName(host))
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(_now())
            .not_valid_after(_now() + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                critical=False,
            )
        )
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        return Issued(_key_pem(key), cert.public_bytes(serialization.Encoding.PEM))


def write_private(path: Path, data: bytes) -> None:
    """Writes ``data`` readable by its owner only (a key, a keystore, a password)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
