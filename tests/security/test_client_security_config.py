"""Clients' security keys (``odradek/security/config.py`` K1-K4) and ``.properties`` files."""

from __future__ import annotations

from pathlib import Path

import pytest

from odradek.errors import ConfigError
from odradek.security.config import SecurityConfig, load_properties, parse_jaas_config, parse_properties


def test_defaults_and_ssl() -> None:
    assert SecurityConfig.from_mapping({}) == SecurityConfig()
    cfg = SecurityConfig.from_mapping({"security.protocol": "ssl", "ssl.ca.location": "/ca.pem"})
    assert cfg.tls
    assert not cfg.sasl
    assert cfg.protocol == "SSL"
    assert cfg.ca_location == "/ca.pem"


def test_k1_k2_sasl_needs_mechanism_credentials_and_plain_needs_tls() -> None:
    base = {"security.protocol": "SASL_SSL", "sasl.username": "u", "sasl.password": "p"}
    with pytest.raises(ConfigError, match="sasl.mechanism"):
        SecurityConfig.from_mapping(base)
    with pytest.raises(ConfigError, match="sasl.username"):
        SecurityConfig.from_mapping({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"})
    with pytest.raises(ConfigError, match="SASL_SSL"):
        SecurityConfig.from_mapping({**base, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"})
    with pytest.raises(ConfigError, match="GSSAPI"):
        SecurityConfig.from_mapping({**base, "sasl.mechanism": "GSSAPI"})
    cfg = SecurityConfig.from_mapping({**base, "sasl.mechanism": "scram-sha-512"})
    assert cfg.sasl
    assert cfg.tls
    assert cfg.sasl_mechanism == "SCRAM-SHA-512"
    plain_sasl = SecurityConfig.from_mapping({**base, "security.protocol": "SASL_PLAINTEXT",
                                              "sasl.mechanism": "SCRAM-SHA-256"})
    assert plain_sasl.sasl
    assert not plain_sasl.tls


def test_k3_k4_certificate_pairs_and_bad_values() -> None:
    with pytest.raises(ConfigError, match="together"):
        SecurityConfig.from_mapping({"security.protocol": "SSL", "ssl.certificate.location": "/c.pem"})
    with pytest.raises(ConfigError, match="security.protocol"):
        SecurityConfig.from_mapping({"security.protocol": "TLS"})
    with pytest.raises(ConfigError, match="ssl.endpoint.identification.algorithm"):
        SecurityConfig.from_mapping({"ssl.endpoint.identification.algorithm": ""})
    with pytest.raises(ConfigError, match="must be a string"):
        SecurityConfig.from_mapping({"ssl.ca.location": 3})


def test_jaas_config() -> None:
    line = ('org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" '
            'password="p\\"w";')
    assert parse_jaas_config(line) == ("alice", 'p"w')
    cfg = SecurityConfig.from_mapping({"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256",
                                       "sasl.jaas.config": line})
    assert (cfg.sasl_username, cfg.sasl_password) == ("alice", 'p"w')
    with pytest.raises(ConfigError):
        parse_jaas_config("nonsense")


def test_properties_syntax() -> None:
    text = (
        "# a comment\n"
        "! another\n"
        "security.protocol=SASL_SSL\n"
        "  sasl.mechanism : SCRAM-SHA-256\n"
        "sasl.username alice\n"
        "sasl.password=p\\=w\\u0041 \n"
        "ssl.ca.location=/a/\\\n"
        "    b.pem\n"
        "empty=\n"
        "key\\ with\\ space=v\n"
    )
    assert parse_properties(text) == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": "alice",
        "sasl.password": "p=wA ",
        "ssl.ca.location": "/a/b.pem",
        "empty": "",
        "key with space": "v",
    }


def test_load_properties_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_properties(tmp_path / "missing.properties")
    path = tmp_path / "client.properties"
    path.write_text("security.protocol=SSL\n")
    assert load_properties(path) == {"security.protocol": "SSL"}


def test_spark_passes_the_security_keys_through(tmp_path: Path) -> None:
    """Spark's source and sink take ``kafka.<key>`` as Spark's Kafka source does; the security keys reach the
    consumer, the producer and the admin client, and a bad combination fails on the driver."""
    from spark import clients
    from spark.options import parse_sink_options, parse_source_options

    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n")
    options = {"bootstrap.servers": "127.0.0.1:9092", "subscribe": "orders", "kafka.security.protocol": "SASL_SSL",
               "kafka.ssl.ca.location": str(ca), "kafka.sasl.mechanism": "SCRAM-SHA-256",
               "kafka.sasl.username": "bob", "kafka.sasl.password": "pw"}  # fmt: skip
    source = parse_source_options(options, streaming=False)
    assert source.client["security.protocol"] == "SASL_SSL"
    assert source.client["sasl.username"] == "bob"
    clients.validate_consumer_config(source.client)
    sink = parse_sink_options({k: v for k, v in options.items() if k != "subscribe"})
    clients.validate_producer_config(sink.client)
    admin_keys = {k for k in source.client if k in clients._ADMIN_KEYS}
    assert {"security.protocol", "ssl.ca.location", "sasl.mechanism", "sasl.username", "sasl.password"} <= admin_keys
    with pytest.raises(ConfigError, match="SASL_SSL"):
        clients.validate_consumer_config({**source.client, "security.protocol": "SASL_PLAINTEXT",
                                          "sasl.mechanism": "PLAIN"})  # fmt: skip
