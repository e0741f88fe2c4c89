"""``odradek produce TOPIC``: one record per stdin line, like Kafka's console producer.

    $ printf 'k1:hello\\nk2:world\\n' | odradek produce orders --key-separator :

The line ending (``\\n`` or ``\\r\\n``) is not part of the record. With ``--key-separator SEP`` each line is
``key<SEP>value`` (split at the first SEP); a line without SEP stops the command with an error naming
the line number (the lines before it are delivered). At end of input everything is flushed; the exit
status is non-zero when any record could not be delivered.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Iterator
from concurrent.futures import Future
from typing import IO, TYPE_CHECKING, Any

from odradek.cli_support import (
    add_bootstrap_option,
    bootstrap_servers,
    error_sentence,
    parse_key_values,
    reaching,
    topic_partitions,
    with_command_config,
)
from odradek.errors import CliError, ConfigError, OdradekError

if TYPE_CHECKING:
    from odradek.types import RecordMetadata

COMPRESSIONS = ("none", "gzip", "snappy", "lz4", "zstd")


def add_produce_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "produce",
        help="send stdin lines as records",
        description="Send one record per stdin line to TOPIC (key<SEP>value lines with --key-separator).",
    )
    parser.add_argument("topic", metavar="TOPIC")
    parser.add_argument("--key-separator", metavar="SEP", help="split each line into key and value at SEP")
    parser.add_argument("--acks", choices=("0", "1", "all", "-1"), default="all", help="default all")
    parser.add_argument("--compression", choices=COMPRESSIONS, default="none", help="default none")
    parser.add_argument("--producer-config", action="append", metavar="KEY=VALUE",
                        help="any producer config (repeatable; wins over the options above)")  # fmt: skip
    add_bootstrap_option(parser)
    parser.set_defaults(handler=run)


def split_lines(lines: Iterable[bytes], separator: bytes | None) -> Iterator[tuple[bytes | None, bytes]]:
    """``(key, value)`` per line, line endings stripped; :class:`CliError` naming the first line that
    lacks the separator."""
    for number, line in enumerate(lines, start=1):
        if line.endswith(b"\n"):
            line = line[:-2] if line.endswith(b"\r\n") else line[:-1]
        if separator is None:
            yield None, line
            continue
        key, found, value = line.partition(separator)
        if not found:
            shown = line[:60].decode(errors="replace")
            raise CliError(f"line {number} has no key separator {separator.decode()!r}: {shown!r}")
        yield key, value


class Deliveries:
    """Counts delivery outcomes (callbacks run on the producer's sender thread; ints under the GIL)."""

    def __init__(self) -> None:
        self.sent = 0
        self.failed = 0
        self.first_error: BaseException | None = None

    def done(self, future: Future[RecordMetadata]) -> None:
        error = future.exception()
        if error is not None:
            self.failed += 1
            if self.first_error is None:
                self.first_error = error


def producer_config(args: argparse.Namespace, servers: str) -> dict[str, object]:
    config: dict[str, object] = {"bootstrap.servers": servers, "acks": args.acks,
                                 "compression.type": args.compression}  # fmt: skip
    if args.acks != "all" and args.acks != "-1":
        config["enable.idempotence"] = False
    config.update(parse_key_values(args.producer_config, "--producer-config"))
    return with_command_config("producer", config)


def run(args: argparse.Namespace, stdin: IO[bytes] | None = None) -> int:
    from odradek import Producer

    separator = args.key_separator.encode() if args.key_separator is not None else None
    if separator == b"":
        raise CliError("--key-separator must not be empty")
    servers = bootstrap_servers(args)
    try:
        config = producer_config(args, servers)
        with reaching(servers):
            topic_partitions(servers, args.topic)  # fail at once on a missing topic, not after max.block.ms
        producer = Producer(config)
    except ConfigError as exc:
        raise CliError(str(exc)) from None
    deliveries = Deliveries()
    try:
        with reaching(servers):
            _send_lines(producer, args.topic, split_lines(stdin or sys.stdin.buffer, separator), deliveries)
    finally:
        producer.close()
    if deliveries.failed:
        assert deliveries.first_error is not None
        error = deliveries.first_error
        reason = error_sentence(error) if isinstance(error, OdradekError) else str(error)
        raise CliError(f"{deliveries.failed} of {deliveries.sent} records were not delivered to {args.topic!r}: "
                       f"{reason}")  # fmt: skip
    return 0


def _send_lines(producer: Any, topic: str, records: Iterable[tuple[bytes | None, bytes]], into: Deliveries) -> None:
    try:
        for key, value in records:
            producer.send(topic, value=value, key=key).add_done_callback(into.done)
            into.sent += 1
    finally:
        producer.flush()
