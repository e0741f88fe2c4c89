"""A node's security settings (``controller/security/settings.py`` N1-N3)."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.security.settings import NodeSecurity, parse_protocol_map
from metadata.configs import ConfigError
from tests.security.tls_files import make_tls_files


def test_defaults_are_plaintext_everywhere() -> None:
    settings = NodeSecurity.from_props({})
    assert settings.protocol("PLAINTEXT") == "PLAINTEXT"
    assert settings.protocol("CONTROLLER") == "PLAINTEXT"
    assert settings.server_credentials("PLAINTEXT") is None
    assert settings.controller_channel_credentials() is None
    assert not settings.authorizer_enabled


def test_n1_listeners_need_an_entry_and_a_known_protocol() -> None:
    assert parse_protocol_map("A:ssl, B:SASL_SSL") == {"A": "SSL", "B": "SASL_SSL"}
    for bad in ("A", "A:TLS", "A:SSL,A:PLAINTEXT", ":SSL"):
        with pytest.raises(ConfigError, match="listener.security.protocol.map"):
            NodeSecurity.from_props({"listener.security.protocol.map": bad})
    settings = NodeSecurity.from_props({"listener.security.protocol.map": "CLIENT:PLAINTEXT"})
    with pytest.raises(ConfigError, match="no entry for listener PLAINTEXT"):
        settings.check_listener("PLAINTEXT")


def test_n2_tls_needs_key_material_read_at_start(tmp_path: Path) -> None:
    files = make_tls_files(tmp_path)
    with pytest.raises(ConfigError, match="ssl.keystore.location"):
        NodeSecurity.from_props({"listener.security.protocol.map": "PLAINTEXT:SSL"}).check_listener("PLAINTEXT")
    with pytest.raises(ConfigError, match="ssl.truststore.location"):
        NodeSecurity.from_props({"ssl.client.auth": "required", "ssl.keystore.location": str(files.node_keystore)})
    with pytest.raises(ConfigError, match="cannot read"):
        NodeSecurity.from_props({"ssl.keystore.location": str(tmp_path / "missing.pem")})
    with pytest.raises(ConfigError, match="private key"):
        NodeSecurity.from_props({"ssl.keystore.location": str(files.ca)})  # a certificate, no key
    with pytest.raises(ConfigError, match="no PEM certificate"):
        NodeSecurity.from_props({"ssl.truststore.location": str(files.client_key)})
    settings = NodeSecurity.from_props(files.node_config("PLAINTEXT:SSL"))
    assert settings.client_auth_required
    assert settings.server_credentials("PLAINTEXT") is not None
    assert settings.channel_credentials("SSL") is not None


def test_n3_requested_client_auth_is_refused_and_other_keys_checked() -> None:
    with pytest.raises(ConfigError, match="requested is not supported"):
        NodeSecurity.from_props({"ssl.client.auth": "requested"})
    with pytest.raises(ConfigError, match="GSSAPI"):
        NodeSecurity.from_props({"sasl.enabled.mechanisms": "GSSAPI"})
    with pytest.raises(ConfigError, match="authorizer.class.name"):
        NodeSecurity.from_props({"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"})
    with pytest.raises(ConfigError, match="super.users"):
        NodeSecurity.from_props({"super.users": "admin"})
    with pytest.raises(ConfigError, match="ssl.principal.mapping.rules"):
        NodeSecurity.from_props({"ssl.principal.mapping.rules": "RULE:oops"})
    settings = NodeSecurity.from_props({
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin;User:CN=node", "sasl.enabled.mechanisms": "scram-sha-512",
    })  # fmt: skip
    assert settings.authorizer_enabled
    assert settings.super_users == {"User:admin", "User:CN=node"}
    assert settings.sasl_mechanisms == ("SCRAM-SHA-512",)


def test_cluster_secret_file_is_made_once_and_shared(tmp_path: Path) -> None:
    """Controllers starting together on one volume (compose) agree on the secret the first one made."""
    import threading

    from controller.cli import create_secret_file

    path = tmp_path / "secret-volume" / "cluster.secret"
    threads = [threading.Thread(target=create_secret_file, args=(str(path),)) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    secret = path.read_text()
    assert len(secret.strip()) >= 32
    assert path.stat().st_mode & 0o777 == 0o600
    create_secret_file(str(path))
    assert path.read_text() == secret  # never replaced
    assert [p.name for p in path.parent.iterdir()] == ["cluster.secret"]  # no temporary files left
