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
from typing import Any

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
    def admin_cert_properties(self) -> Path:
        return self.directory / "admin-cert.properties"

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
            return [*common, "listener.security.protocol.map=PLAINTEXT:SSL,KAFKA:SSL,REPLICATION:SSL,DATA:SSL,"
                    "CONTROLLER:SSL"]  # fmt: skip
        return [*common, "listener.security.protocol.map=PLAINTEXT:SSL,CLIENT:SASL_SSL,KAFKA:SASL_SSL,REPLICATION:SSL,"
                "DATA:SASL_SSL,CONTROLLER:SSL",
                "listener.name.client.ssl.client.auth=none", "listener.name.kafka.ssl.client.auth=none",
                "listener.name.data.ssl.client.auth=none"]  # fmt: skip

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
    hosts = {n.name: [n.listen.rpartition(":")[0].strip("[]")] for n in plan.nodes}
    return prepare_files(Path(plan.root) / SECURITY_DIR, hosts, mode, Path(plan.root) / CLIENT_PROPERTIES)


def prepare_files(directory: Path, hosts: dict[str, list[str]], mode: str, client_properties: Path) -> Secured:
    """The CA, a keystore per node of ``hosts`` (node name -> the names and addresses it serves, to which
    ``127.0.0.1`` and ``localhost`` are added), the admin's certificate (and password for sasl_ssl), the admin's
    ``client.properties`` and ``admin-cert.properties`` (the admin by certificate). Existing files are kept."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    ca_pem, ca_key = directory / "ca.pem", directory / "ca.key"
    if ca_pem.exists() and ca_key.exists():
        ca = CertificateAuthority.load(ca_key.read_bytes(), ca_pem.read_bytes())
    else:
        ca = CertificateAuthority.create(f"Odradek local CA {secrets.token_hex(4)}")  # a CN has at most 64 chars
        write_private(ca_key, ca.key_pem)
        ca_pem.write_bytes(ca.cert_pem)
    secured = Secured(mode, directory, tuple(hosts), client_properties)
    for name, names in hosts.items():
        keystore = directory / f"{name}.keystore.pem"
        if not keystore.exists():
            sans = tuple(dict.fromkeys([*names, "127.0.0.1", "localhost"]))
            write_private(keystore, ca.issue(name, hosts=sans).keystore_pem)
    if not secured.admin_cert.exists() or not secured.admin_key.exists():
        admin = ca.issue(ADMIN)
        write_private(secured.admin_key, admin.key_pem)
        secured.admin_cert.write_bytes(admin.cert_pem)
    password = directory / "admin.password"
    if mode == "sasl_ssl" and not password.exists():
        write_private(password, (secrets.token_urlsafe(24) + "\n").encode())
    for path, config, what in ((secured.client_properties, secured.client_config(), "the admin's client settings"),
                               (directory / "admin-cert.properties", secured.admin_certificate_config(),
                                "the admin by certificate (SSL)")):  # fmt: skip
        lines = [f"# {mode}: {what} (Kafka's keys)"]
        lines += [f"{key}={_escape(str(value))}" for key, value in config.items()]
        write_private(path, ("\n".join(lines) + "\n").encode())
    return secured


def add_security_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "security", help="make the certificates and settings of a secured cluster (the compose file's init)",
        description="Make a CA, a keystore per node, an admin certificate (and SCRAM password with sasl_ssl) and "
        "the admin's client.properties in DIR; files that exist are kept.",
    )  # fmt: skip
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    init = actions.add_parser("init", help="make the files (keeping those that exist)")
    init.add_argument("--dir", required=True, metavar="DIR")
    init.add_argument("--mode", choices=("ssl", "sasl_ssl"), default="sasl_ssl")
    init.add_argument("--node", action="append", required=True, metavar="NAME[=HOST,...]",
                      help="a node (its certificate's CN) and the names it serves (repeatable)")  # fmt: skip
    init.set_defaults(handler=run_init)


def run_init(args: Any) -> int:
    from odradek.errors import CliError

    hosts: dict[str, list[str]] = {}
    for item in args.node:
        name, _, names = item.partition("=")
        if not name:
            raise CliError(f"--node {item!r}: a node needs a name")
        hosts[name] = [name, *(n for n in names.split(",") if n)]
    directory = Path(args.dir)
    try:
        secured = prepare_files(directory, hosts, args.mode, directory / CLIENT_PROPERTIES)
    except OSError as exc:
        raise CliError(f"cannot write the security files in {directory}: {exc}") from None
    print(f"security files in {directory}: CA, {len(hosts)} node keystores, the admin; super users: "
          f"{secured.super_users()}")  # fmt: skip
    return 0


def _escape(value: str) -> str:
    """A ``.properties`` value: backslashes and leading blanks escaped."""
    text = value.replace("\\", "\\\\")
    return "\\" + text if text[:1] in (" ", "\t") else text
