"""Certificates and keystores on disk for the TLS tests (``odradek/security/certs.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from odradek.security.certs import CertificateAuthority, write_private


@dataclass(frozen=True)
class TlsFiles:
    ca: Path  # the CA certificate (truststore)
    node_keystore: Path  # key + certificate of every node (CN=node)
    client_cert: Path  # CN=alice, signed by the CA
    client_key: Path
    other_ca: Path  # a CA nobody trusts
    stranger_cert: Path  # CN=mallory, signed by the other CA
    stranger_key: Path
    eve_cert: Path  # CN=eve, signed by the CA: a valid certificate of no special standing
    eve_key: Path
    admin_cert: Path  # CN=admin, signed by the CA
    admin_key: Path

    def node_config(self, protocol_map: str, client_auth: str = "required") -> dict[str, str]:
        return {
            "listener.security.protocol.map": protocol_map,
            "ssl.keystore.location": str(self.node_keystore),
            "ssl.truststore.location": str(self.ca),
            "ssl.client.auth": client_auth,
        }

    def client_config(self, *, cert: bool = True, ca: Path | None = None) -> dict[str, object]:
        config: dict[str, object] = {"security.protocol": "SSL", "ssl.ca.location": str(ca or self.ca)}
        if cert:
            config["ssl.certificate.location"] = str(self.client_cert)
            config["ssl.key.location"] = str(self.client_key)
        return config


def make_tls_files(root: Path) -> TlsFiles:
    root.mkdir(parents=True, exist_ok=True)
    ca, other = CertificateAuthority.create(), CertificateAuthority.create("Another CA")
    node, alice, mallory, eve = ca.issue("node"), ca.issue("alice"), other.issue("mallory"), ca.issue("eve")
    admin = ca.issue("admin")
    (root / "admin.pem").write_bytes(admin.cert_pem)
    write_private(root / "admin.key", admin.key_pem)
    (root / "eve.pem").write_bytes(eve.cert_pem)
    write_private(root / "eve.key", eve.key_pem)
    (root / "ca.pem").write_bytes(ca.cert_pem)
    (root / "other-ca.pem").write_bytes(other.cert_pem)
    write_private(root / "node.keystore.pem", node.keystore_pem)
    (root / "alice.pem").write_bytes(alice.cert_pem)
    write_private(root / "alice.key", alice.key_pem)
    (root / "mallory.pem").write_bytes(mallory.cert_pem)
    write_private(root / "mallory.key", mallory.key_pem)
    return TlsFiles(root / "ca.pem", root / "node.keystore.pem", root / "alice.pem", root / "alice.key",
                    root / "other-ca.pem", root / "mallory.pem", root / "mallory.key", root / "eve.pem",
                    root / "eve.key", root / "admin.pem", root / "admin.key")  # fmt: skip
