"""What the client commands (``cluster``, ``topics``, ``produce``, ``consume``, ``perf``) share: the
``--bootstrap-servers`` option, ``KEY=VALUE`` lists, and turning client errors into one sentence.

Imports nothing heavy: the client library is imported by the command handlers when they run.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from odradek.bootstrap import ENV_VAR, resolve_bootstrap_servers
from odradek.errors import CliError, ConfigError, KafkaError, KafkaTimeoutError, NetworkError, OdradekError

if TYPE_CHECKING:
    from odradek import Admin
    from odradek.types import TopicPartition


def add_bootstrap_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bootstrap-servers",
        metavar="HOST:PORT[,...]",
        help=f"brokers to connect to (default: ${ENV_VAR}, else the address 'odradek up' wrote last)",
    )
    parser.add_argument(
        "--command-config",
        metavar="FILE",
        help="a Kafka .properties file of client configs (security.protocol, ssl.*, sasl.*, ...), as Kafka's tools",
    )


_COMMAND_CONFIG: dict[str, str] = {}  # the --command-config file of this command (one command per process)


def load_command_config(path: str | None) -> None:
    """Reads ``--command-config``: every key must be a client config (:class:`CliError` otherwise)."""
    from odradek.config import ADMIN_KEYS, CONSUMER_KEYS, PRODUCER_KEYS
    from odradek.security.config import load_properties

    _COMMAND_CONFIG.clear()
    if path is None:
        return
    try:
        props = load_properties(path)
    except ConfigError as exc:
        raise CliError(f"--command-config: {exc}") from None
    unknown = sorted(k for k in props if k not in PRODUCER_KEYS and k not in CONSUMER_KEYS and k not in ADMIN_KEYS)
    if unknown:
        raise CliError(f"--command-config {path}: unknown client config {', '.join(map(repr, unknown))}")
    _COMMAND_CONFIG.update(props)


def with_command_config(kind: str, config: dict[str, object]) -> dict[str, object]:
    """``config`` over the ``--command-config`` keys that a ``kind`` client ("producer", "consumer", "admin")
    takes: the file is the base and the command's own options win, as in Kafka's tools."""
    from odradek.config import ADMIN_KEYS, CONSUMER_KEYS, PRODUCER_KEYS

    keys = {"producer": PRODUCER_KEYS, "consumer": CONSUMER_KEYS, "admin": ADMIN_KEYS}[kind]
    return {**{k: v for k, v in _COMMAND_CONFIG.items() if k in keys}, **config}


def bootstrap_servers(args: argparse.Namespace) -> str:
    return resolve_bootstrap_servers(getattr(args, "bootstrap_servers", None))


def parse_key_values(items: Sequence[str] | None, option: str) -> dict[str, str]:
    """``["k=v", ...]`` as a dict (later items win); :class:`CliError` for an item without ``=``."""
    result: dict[str, str] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise CliError(f"{option} expects KEY=VALUE, got {item!r}")
        result[key.strip()] = value.strip()
    return result


def error_sentence(exc: OdradekError) -> str:
    """One sentence for a client error: Kafka errors end with their code, e.g.
    ``topic 'x' already exists (TOPIC_ALREADY_EXISTS)``."""
    text = str(exc).strip().rstrip(".") or type(exc).__name__
    if isinstance(exc, KafkaError) and exc.code and exc.code not in text:
        text = f"{text} ({exc.code})"
    return text


@contextlib.contextmanager
def reaching(servers: str) -> Iterator[None]:
    """Name the bootstrap servers in connection failures and timeouts raised inside the block."""
    try:
        yield
    except (NetworkError, KafkaTimeoutError) as exc:
        raise CliError(f"cannot get an answer from the cluster at {servers}: {error_sentence(exc)}") from None
    except KafkaError as exc:
        raise CliError(error_sentence(exc)) from None


def format_size(value: int | None) -> str:
    """Bytes for people: ``512 B``, ``2.0 KiB``, ``118.0 MiB``; ``?`` when unknown."""
    if value is None:
        return "?"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"


ADMIN_TIMEOUT_MS = 30000  # a command against a cluster that does not answer gives up after this


def open_admin(servers: str) -> Admin:
    """An :class:`odradek.Admin` on ``servers`` (close it); a bad config is a :class:`CliError`."""
    from odradek import Admin

    try:
        return Admin(with_command_config("admin", {"bootstrap.servers": servers,
                                                   "default.api.timeout.ms": ADMIN_TIMEOUT_MS}))  # fmt: skip
    except ConfigError as exc:
        raise CliError(str(exc)) from None


def topic_partitions(servers: str, topic: str) -> list[TopicPartition]:
    """Every partition of ``topic``, from Admin.describe_topics (:class:`CliError` when it has none)."""
    from odradek import TopicPartition

    with open_admin(servers) as admin:
        description = admin.describe_topics([topic])[topic]
    if not description.partitions:
        raise CliError(f"topic {topic!r} has no partitions")
    return [TopicPartition(topic, p.partition) for p in sorted(description.partitions, key=lambda p: p.partition)]
