"""A node's security settings (brokers and controllers), with Kafka's keys, and the gRPC credentials they make.

=======================================  ===========================  ==============================================
key                                      default                      what
=======================================  ===========================  ==============================================
``listener.security.protocol.map``      the four protocols by name,  ``NAME:PROTOCOL,...``: each listener's protocol
                                         and ``CONTROLLER:PLAINTEXT``
``controller.listener.names``            ``CONTROLLER``               the controllers' listener (its protocol is how
                                                                      brokers call controllers)
``ssl.keystore.location``                ""                           PEM: the node's private key and certificate chain
``ssl.keystore.type``                    ``PEM``                      only PEM
``ssl.truststore.location``              ""                           PEM: the CA certificates to trust
``ssl.truststore.type``                  ``PEM``                      only PEM
``ssl.client.auth``                      ``none``                     ``required`` (mutual TLS) or ``none``
``ssl.principal.mapping.rules``          ``DEFAULT``                  certificate DN -> principal name
``sasl.enabled.mechanisms``              ``SCRAM-SHA-256,SCRAM-SHA-512,PLAIN``
``connections.max.reauth.ms``            ``3600000``                  SASL session lifetime (KIP-368)
``authorizer.class.name``                ""                           set: ACLs are enforced (StandardAuthorizer)
``super.users``                          ""                           ``User:a;User:b``
``allow.everyone.if.no.acl.found``       ``false``
=======================================  ===========================  ==============================================

Rules the tests cite:

* N1. A listener's protocol is the map's entry for its name; a listener missing from a map that was given is a
  config error at start (Kafka's rule), as is a protocol that is not one of the four. Without the key, every
  listener the default map does not name is PLAINTEXT (so clusters that predate security start as before).
* N2. An SSL or SASL_SSL listener needs ``ssl.keystore.location``; ``ssl.client.auth=required`` needs
  ``ssl.truststore.location``. Files are read at start: a missing or malformed file stops the node with an
  error naming the key.
* N3. ``ssl.client.auth=requested`` (Kafka: ask for a certificate, accept a client without one) is refused:
  gRPC's Python TLS can only require a client certificate or not ask for one.
* N4. A node's own calls (broker to controller, follower to leader) use the protocol of the listener they
  call; over TLS they trust ``ssl.truststore.location`` and present the keystore's certificate, so nodes
  authenticate to each other by certificate.
* N5. PLAIN is accepted only on SASL_SSL listeners (it sends the password itself).
* N6. Kafka's per-listener override ``listener.name.<name>.ssl.client.auth`` (the name lower-cased) sets one
  listener's client authentication, e.g. ``required`` between nodes and ``none`` on a SASL_SSL client listener.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from controller.security.authorizer import parse_super_users
from controller.security.principal_rules import PrincipalMapper, PrincipalMappingError
from metadata.configs import ConfigError, ConfigKey, ConfigSchema, ConfigType

if TYPE_CHECKING:
    import grpc  # imported where credentials are made: importing the settings needs no gRPC

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN")
DEFAULT_PROTOCOL_MAP = (
    "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT"
)
AUTHORIZER_CLASSES = ("odradek.StandardAuthorizer", "org.apache.kafka.metadata.authorizer.StandardAuthorizer")

_S, _L, _B = ConfigType.STRING, ConfigType.LONG, ConfigType.BOOLEAN
SECURITY_KEYS = [
    ConfigKey("listener.security.protocol.map", _S, DEFAULT_PROTOCOL_MAP),
    ConfigKey("controller.listener.names", _S, "CONTROLLER"),
    ConfigKey("ssl.keystore.location", _S, ""),
    ConfigKey("ssl.keystore.type", _S, "PEM", choices=("PEM",)),
    ConfigKey("ssl.truststore.location", _S, ""),
    ConfigKey("ssl.truststore.type", _S, "PEM", choices=("PEM",)),
    ConfigKey("ssl.client.auth", _S, "none", choices=("none", "required", "requested")),
    ConfigKey("ssl.principal.mapping.rules", _S, "DEFAULT"),
    ConfigKey("sasl.enabled.mechanisms", _S, ",".join(SASL_MECHANISMS)),
    ConfigKey("connections.max.reauth.ms", _L, "3600000", 1),
    ConfigKey("authorizer.class.name", _S, ""),
    ConfigKey("super.users", _S, ""),
    ConfigKey("allow.everyone.if.no.acl.found", _B, "false"),
]
SECURITY_SCHEMA = ConfigSchema("security", SECURITY_KEYS)
SECURITY_KEY_NAMES = frozenset(k.name for k in SECURITY_KEYS)

_OVERRIDE = re.compile(r"listener\.name\.([a-z0-9_]+)\.ssl\.client\.auth")


def is_listener_override(key: str) -> bool:
    """N6: ``listener.name.<name>.ssl.client.auth``."""
    return _OVERRIDE.fullmatch(key) is not None


_PEM_BLOCK = re.compile(rb"-----BEGIN ([A-Z ]+)-----.*?-----END \1-----\s*", re.DOTALL)


def _read(key: str, path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(key, f"{key}: cannot read {path!r}: {exc.strerror or exc}") from None


def split_keystore(key: str, data: bytes) -> tuple[bytes, bytes]:
    """A PEM keystore -> (private key PEM, certificate chain PEM); ConfigError naming ``key`` if either is missing."""
    keys, certs = [], []
    for match in _PEM_BLOCK.finditer(data):
        kind = match.group(1)
        if kind.endswith(b"PRIVATE KEY"):
            keys.append(match.group(0))
        elif kind == b"CERTIFICATE":
            certs.append(match.group(0))
    if kind_missing := ("a private key" if len(keys) != 1 else "a certificate" if not certs else ""):
        raise ConfigError(key, f"{key}: the PEM keystore needs exactly one unencrypted private key and a "
                               f"certificate chain; {kind_missing} is missing or repeated")  # fmt: skip
    return keys[0], b"".join(certs)


def _truststore(key: str, data: bytes) -> bytes:
    if not any(m.group(1) == b"CERTIFICATE" for m in _PEM_BLOCK.finditer(data)):
        raise ConfigError(key, f"{key}: no PEM certificate in the truststore")
    return data


def parse_protocol_map(text: str) -> dict[str, str]:
    key = "listener.security.protocol.map"
    result: dict[str, str] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, sep, protocol = item.partition(":")
        name, protocol = name.strip(), protocol.strip().upper()
        if not sep or not name:
            raise ConfigError(key, f"{key}: expected NAME:PROTOCOL, got {item!r}")
        if protocol not in PROTOCOLS:
            raise ConfigError(key, f"{key}: {protocol!r} is not one of {', '.join(PROTOCOLS)}")
        if name in result:
            raise ConfigError(key, f"{key}: listener {name} appears twice")
        result[name] = protocol
    return result


@dataclass(frozen=True, slots=True)
class NodeSecurity:
    """Parsed security settings of one node, with its key material loaded (N1-N5). Immutable; thread-safe."""

    protocol_map: Mapping[str, str] = field(default_factory=lambda: parse_protocol_map(DEFAULT_PROTOCOL_MAP))
    protocol_map_given: bool = False
    controller_listener: str = "CONTROLLER"
    key_pem: bytes | None = None
    cert_chain_pem: bytes | None = None
    truststore_pem: bytes | None = None
    client_auth_required: bool = False
    client_auth_by_listener: Mapping[str, bool] = field(default_factory=dict)  # N6, by upper-case listener name
    principal_mapper: PrincipalMapper = field(default_factory=PrincipalMapper)
    sasl_mechanisms: tuple[str, ...] = SASL_MECHANISMS
    reauth_ms: int = 3_600_000
    authorizer_enabled: bool = False
    super_users: frozenset[str] = frozenset()
    allow_everyone_if_no_acl_found: bool = False

    @classmethod
    def from_props(cls, props: Mapping[str, str]) -> NodeSecurity:
        """The settings of the security keys in ``props`` (others ignored); ConfigError naming the key."""
        values = SECURITY_SCHEMA.validate_all({k: v for k, v in props.items() if k in SECURITY_KEY_NAMES})
        overrides: dict[str, bool] = {}
        for key, text in props.items():
            match = _OVERRIDE.fullmatch(key)
            if match is not None:
                value = text.strip().lower()
                if value not in ("required", "none"):
                    raise ConfigError(key, f"{key}: {text!r} is not required or none")
                overrides[match.group(1).upper()] = value == "required"
        merged = {k.name: SECURITY_SCHEMA.validate(k.name, k.default) for k in SECURITY_KEYS} | values
        if merged["ssl.client.auth"] == "requested":
            raise ConfigError("ssl.client.auth", "ssl.client.auth=requested is not supported (gRPC's TLS can "
                              "require a client certificate or not ask for one): use required or none")  # fmt: skip
        key_pem = chain = trust = None
        if merged["ssl.keystore.location"]:
            key_pem, chain = split_keystore(
                "ssl.keystore.location", _read("ssl.keystore.location", merged["ssl.keystore.location"])
            )
        if merged["ssl.truststore.location"]:
            trust = _truststore(
                "ssl.truststore.location", _read("ssl.truststore.location", merged["ssl.truststore.location"])
            )
        required = merged["ssl.client.auth"] == "required"
        if (required or any(overrides.values())) and trust is None:
            raise ConfigError("ssl.client.auth", "ssl.client.auth=required needs ssl.truststore.location")
        try:
            mapper = PrincipalMapper.from_config(merged["ssl.principal.mapping.rules"])
        except PrincipalMappingError as exc:
            raise ConfigError("ssl.principal.mapping.rules", f"ssl.principal.mapping.rules: {exc}") from None
        mechanisms = tuple(m.strip().upper() for m in merged["sasl.enabled.mechanisms"].split(",") if m.strip())
        unknown = [m for m in mechanisms if m not in SASL_MECHANISMS]
        if unknown:
            raise ConfigError("sasl.enabled.mechanisms", f"sasl.enabled.mechanisms: unsupported {', '.join(unknown)}"
                              f" (supported: {', '.join(SASL_MECHANISMS)})")  # fmt: skip
        authorizer = merged["authorizer.class.name"]
        if authorizer and authorizer not in AUTHORIZER_CLASSES:
            raise ConfigError("authorizer.class.name", f"authorizer.class.name: {authorizer!r} is not one of "
                              f"{', '.join(AUTHORIZER_CLASSES)}")  # fmt: skip
        try:
            supers = parse_super_users(merged["super.users"])
        except ValueError as exc:
            raise ConfigError("super.users", f"super.users: {exc}") from None
        names = [n.strip() for n in merged["controller.listener.names"].split(",") if n.strip()]
        if not names:
            raise ConfigError("controller.listener.names", "controller.listener.names must name a listener")
        return cls(
            protocol_map=parse_protocol_map(merged["listener.security.protocol.map"]),
            protocol_map_given="listener.security.protocol.map" in values,
            controller_listener=names[0],
            key_pem=key_pem,
            cert_chain_pem=chain,
            truststore_pem=trust,
            client_auth_required=required,
            client_auth_by_listener=overrides,
            principal_mapper=mapper,
            sasl_mechanisms=mechanisms,
            reauth_ms=int(merged["connections.max.reauth.ms"]),
            authorizer_enabled=bool(authorizer),
            super_users=supers,
            allow_everyone_if_no_acl_found=bool(merged["allow.everyone.if.no.acl.found"]),
        )

    def protocol(self, listener: str) -> str:
        """N1: the protocol of ``listener``."""
        protocol = self.protocol_map.get(listener)
        if protocol is None and not self.protocol_map_given:
            return "PLAINTEXT"
        if protocol is None:
            raise ConfigError(
                "listener.security.protocol.map",
                f"listener.security.protocol.map has no entry for listener {listener} "
                f"(it has {', '.join(sorted(self.protocol_map)) or 'none'})",
            )
        return protocol

    def check_listener(self, listener: str) -> None:
        """N1, N2: the listener's protocol is known and its TLS material is there (at start)."""
        protocol = self.protocol(listener)
        if protocol in ("SSL", "SASL_SSL") and self.key_pem is None:
            raise ConfigError("ssl.keystore.location", f"listener {listener} is {protocol}: set ssl.keystore.location")

    def server_credentials(self, listener: str) -> grpc.ServerCredentials | None:
        """The TLS credentials of ``listener`` (None: it is not TLS)."""
        self.check_listener(listener)
        if self.protocol(listener) not in ("SSL", "SASL_SSL"):
            return None
        import grpc

        assert self.key_pem is not None
        assert self.cert_chain_pem is not None
        required = self.client_auth_by_listener.get(listener.upper(), self.client_auth_required)
        return grpc.ssl_server_credentials(
            [(self.key_pem, self.cert_chain_pem)],
            root_certificates=self.truststore_pem if required else None,
            require_client_auth=required,
        )

    def channel_credentials(self, protocol: str) -> grpc.ChannelCredentials | None:
        """N4: credentials for this node's calls to a listener of ``protocol`` (None: plaintext)."""
        if protocol not in ("SSL", "SASL_SSL"):
            return None
        import grpc

        return grpc.ssl_channel_credentials(self.truststore_pem, self.key_pem, self.cert_chain_pem)

    def controller_channel_credentials(self) -> grpc.ChannelCredentials | None:
        return self.channel_credentials(self.protocol(self.controller_listener))


def open_channel(
    address: str, credentials: grpc.ChannelCredentials | None, options: Sequence[tuple[str, Any]] | None = None
) -> grpc.Channel:
    """A channel to ``address``: TLS with ``credentials``, plaintext without."""
    import grpc

    if credentials is None:
        return grpc.insecure_channel(address, options=options)
    return grpc.secure_channel(address, credentials, options=options)
