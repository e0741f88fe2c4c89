"""``odradek broker`` command-line errors: one sentence on stderr, a non-zero status, no traceback."""

from __future__ import annotations

import argparse

import pytest

from broker.cli import add_broker_parser, build_options
from common.errors import CommandError


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_broker_parser(parser.add_subparsers())
    return parser.parse_args(["broker", *argv])


BASE = ("--node-id", "1", "--listen", "127.0.0.1:9092", "--controllers", "127.0.0.1:9093", "--data-dir", "/tmp/x")


def test_options_from_the_command_line() -> None:
    options = build_options(parse(*BASE, "--config", "log.retention.hours=1", "--config", "num.io.threads=8"))
    assert options.node_id == 1
    assert options.advertised == "127.0.0.1:9092"
    assert options.controllers == ("127.0.0.1:9093",)
    assert options.config.log_config().retention_ms == 3_600_000
    assert options.config.get("num.io.threads") == 8


def test_an_unknown_config_key_is_an_error_naming_it() -> None:
    with pytest.raises(CommandError, match="log.retention.weeks"):
        build_options(parse(*BASE, "--config", "log.retention.weeks=2"))
    with pytest.raises(CommandError, match="message.max.bytes"):
        build_options(parse(*BASE, "--config", "message.max.bytes=big"))


def test_a_wildcard_listener_needs_an_advertised_address() -> None:
    argv = list(BASE)
    argv[3] = "0.0.0.0:9092"
    with pytest.raises(CommandError, match="--advertised"):
        build_options(parse(*argv))
    assert build_options(parse(*argv, "--advertised", "broker1:9092")).advertised == "broker1:9092"


def test_bad_addresses() -> None:
    argv = list(BASE)
    argv[5] = "nowhere"
    with pytest.raises(CommandError, match="HOST:PORT"):
        build_options(parse(*argv))
