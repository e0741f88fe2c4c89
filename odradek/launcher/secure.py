"""``odradek up --security ssl|sasl_ssl``: a local CA, node certificates, an admin, and the nodes' settings.

Under ``DIR/security/`` (made on the first run, reused by restarts; keys mode 0600)::

    ca.pem, ca.key                    the local CA
    <node>.keystore.pem               each node's key and certificate (CN=<node name>, SAN 127.0.0.1, localhost)
    admin.pem, admin.key              the admin's client certificate (CN=admin)
    admin.password                    the admin's SCRAM password (sasl_ssl)
    DIR/client.properties             Kafka's client keys for --command-config and for clients

Every listener is TLS and every node calls the others with its certificate; the authorizer is on
(``odradek.StandardAuthorizer``, no ACL: nobody but the super users may do anything), with ``super.users``
the nodes and the admin. With ``ssl``, each broker keeps its one gRPC listener (SSL, client certificates
required) and clients use certificates. With ``sasl_ssl``, each broker's client listener (the bootstrap
servers) is SASL_SSL without client certificates, and the brokers talk to each other on a second listener
(SSL, certificates required: ``broker i, internal`` at the base port + 400 + i); the admin's SCRAM-SHA-512
credential is made by ``up`` through that listener with the admin's certificate.

The brokers' Kafka-protocol listeners take the same protocol as their gRPC client listeners (SSL with client
certificates, or SASL_SSL), so any Kafka client connects with the keys of ``client.properties``.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path

from odradek.launcher.plan import ClusterPlan, NodePlan
from odradek.security.certs import CertificateAuthority, write_private

MODES = ("plaintext", "ssl", "sasl_ssl")
SECURITY_DIR = "security"
CLIENT_PROPERTIES = "client.properties"
ADMIN = "admin"
ADMIN_MECHANISM = "SCRAM-SHA-512"
AUTHORIZER = "odradek.StandardAuthorizer"


@dataclass(frozen=True, slots=True)
class Secured:
    """The files of one secured cluster and the settings they make."""

    mode: str
    directory: Path
    node_names: tuple[str, ...]
    client_properties: Path

    @property
    def ca(self) -> Path:
        return self.directory / "ca.pem"

    def keystore(self, node: NodePlan) -> Path:
        return self.directory / f"{node.name}.keystore.pem"

    @property
    def admin_cert(self) -> Path:
        return self.directory / "admin.pem"

    @property
    def admin_key(self) -> Path:
        return self.directory / "admin.key"

    @property
    def admin_password(self) -> str:
        return (self.directory / "admin.password").read_text().strip()

    def super_users(self) -> str:
        return ";".join([f"User:CN={name}" for name in self.node_names] + [f"User:CN={ADMIN}", f"User:{ADMIN}"])

    def node_config(self, node: NodePlan) -> list[str]:
        """The ``--config`` items of ``node``."""
        common = [
            f"ssl.keystore.location={self.keystore(node)}",
            f"ssl.truststore.location={self.ca}",
            "ssl.client.auth=required",
            f"authorizer.class.name={AUTHORIZER}",
            f"super.users={self.super_users()}",
        ]
        if node.role == "controller":
            return [*common, "listener.security.protocol.map=CONTROLLER:SSL"]
        if self.mode == "ssl":
            return [*common, "listener.security.protocol.map=PLAINTEXT:SSL,KAFKA:SSL,CONTROLLER:SSL"]
        return [*common, "listener.security.protocol.map=PLAINTEXT:SSL,CLIENT:SASL_SSL,KAFKA:SASL_SSL,CONTROLLER:SSL",
                "listener.name.client.ssl.client.auth=none", "listener.name.kafka.ssl.client.auth=none"]  # fmt: skip

    def admin_certificate_config(self) -> dict[str, object]:
        """The admin's client config by certificate (what ``up`` itself uses)."""
        return {"security.protocol": "SSL", "ssl.ca.location": str(self.ca),
                "ssl.certificate.location": str(self.admin_cert), "ssl.key.location": str(self.admin_key)}  # fmt: skip

    def client_config(self) -> dict[str, str]:
        """What ``client.properties`` holds."""
        if self.mode == "ssl":
            return {k: str(v) for k, v in self.admin_certificate_config().items()}
        # the certificate too: controllers (``odradek cluster``'s health checks) take certificates only
        return {"security.protocol": "SASL_SSL", "ssl.ca.location": str(self.ca), "sasl.mechanism": ADMIN_MECHANISM,
                "sasl.username": ADMIN, "sasl.password": self.admin_password,
                "ssl.certificate.location": str(self.admin_cert), "ssl.key.location": str(self.admin_key)}  # fmt: skip


def prepare(plan: ClusterPlan, mode: str) -> Secured:
    """Makes (or reuses) ``DIR/security/`` and ``DIR/client.properties`` for ``plan`` in ``mode``."""
    directory = Path(plan.root) / SECURITY_DIR
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    ca_pem, ca_key = directory / "ca.pem", directory / "ca.key"
    if ca_pem.exists() and ca_key.exists():
        ca = CertificateAuthority.load(ca_key.read_bytes(), ca_pem.read_bytes())
    else:
        ca = CertificateAuthority.create(f"Odradek local CA {secrets.token_hex(4)}")  # a CN has at most 64 chars
        write_private(ca_key, ca.key_pem)
        ca_pem.write_bytes(ca.cert_pem)
    secured = Secured(mode, directory, tuple(n.name for n in plan.nodes), Path(plan.root) / CLIENT_PROPERTIES)
    for node in plan.nodes:
        keystore = secured.keystore(node)
        if not keystore.exists():
            host = node.listen.rpartition(":")[0].strip("[]")
            write_private(keystore, ca.issue(node.name, hosts=tuple(dict.fromkeys([host, "127.0.0.1", "localhost"])))
                          .keystore_pem)  # fmt: skip
    if not secured.admin_cert.exists() or not secured.admin_key.exists():
        admin = ca.issue(ADMIN)
        write_private(secured.admin_key, admin.key_pem)
        secured.admin_cert.write_bytes(admin.cert_pem)
    password = directory / "admin.password"
    if mode == "sasl_ssl" and not password.exists():
        write_private(password, (secrets.token_urlsafe(24) + "\n").encode())
    lines = [f"# odradek up --security {mode}: the admin's client settings (Kafka's keys)"]
    lines += [f"{key}={_escape(value)}" for key, value in secured.client_config().items()]
    write_private(secured.client_properties, ("\n".join(lines) + "\n").encode())
    return secured


def _escape(value: str) -> str:
    """A ``.properties`` value: backslashes and leading blanks escaped."""
    text = value.replace("\\", "\\\\")
    return "\\" + text if text[:1] in (" ", "\t") else text
