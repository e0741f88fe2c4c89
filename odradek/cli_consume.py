"""``odradek consume TOPIC``: print record values one per line, like Kafka's console consumer.

    $ odradek consume orders --from-beginning --max-messages 2 --print-key --print-offset
    Offset:0	k1	hello
    Offset:1	k2	world

Fields are tab-separated in Kafka's order (partition, offset, key, value); a null key or value prints
as ``null``. Without ``--group`` the consumer is assigned every partition of the topic and commits
nothing; with ``--group`` it subscribes in that group, starts from the group's committed offsets, and
commits what it printed as it goes (and once more, waiting, when it stops). It stops after
``--max-messages`` records, or after ``--timeout-ms`` without a record, or on Ctrl-C, and reports
"Processed a total of N messages" on stderr. Consuming to a file or a pipe with stderr on a terminal (or
with ``--progress``), a live progress line on stderr counts the records (of ``--max-messages``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import IO, TYPE_CHECKING, Any

from odradek.cli_support import (
    add_bootstrap_option,
    bootstrap_servers,
    parse_key_values,
    reaching,
    topic_partitions,
    with_command_config,
)
from odradek.errors import CliError, ConfigError
from odradek.progress import Progress, add_progress_option, wanted

if TYPE_CHECKING:
    from odradek.types import ConsumerRecord

POLL_MS = 500


def add_consume_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "consume",
        help="print records of a topic",
        description="Print the values of TOPIC's records, one per line (tab-separated fields when asked).",
    )
    parser.add_argument("topic", metavar="TOPIC")
    parser.add_argument("--group", metavar="G", help="consume as a member of group G (commits its offsets)")
    parser.add_argument("--from-beginning", action="store_true",
                        help="start at the earliest offset (default: only new records)")  # fmt: skip
    parser.add_argument("--max-messages", type=int, metavar="N", help="exit after N records")
    parser.add_argument("--timeout-ms", type=int, metavar="T", help="exit after T ms without a record")
    parser.add_argument("--print-key", action="store_true", help="print each record's key before its value")
    parser.add_argument("--print-offset", action="store_true", help="print each record's offset")
    parser.add_argument("--print-partition", action="store_true", help="print each record's partition")
    parser.add_argument("--isolation-level", choices=("read_uncommitted", "read_committed"),
                        help="read_committed: only records of committed transactions (and non-transactional "
                        "ones), up to the last stable offset")  # fmt: skip
    parser.add_argument("--consumer-config", action="append", metavar="KEY=VALUE",
                        help="any consumer config (repeatable)")  # fmt: skip
    add_bootstrap_option(parser)
    add_progress_option(parser)
    parser.set_defaults(handler=run)


def format_record(record: ConsumerRecord, key: bool, offset: bool, partition: bool) -> bytes:
    """One output line (with its newline): Kafka's DefaultMessageFormatter fields, tab-separated."""
    fields: list[bytes] = []
    if partition:
        fields.append(b"Partition:%d" % record.partition)
    if offset:
        fields.append(b"Offset:%d" % record.offset)
    if key:
        fields.append(b"null" if record.key is None else record.key)
    fields.append(b"null" if record.value is None else record.value)
    return b"\t".join(fields) + b"\n"


def consumer_config(args: argparse.Namespace, servers: str) -> dict[str, object]:
    config: dict[str, object] = {
        "bootstrap.servers": servers,
        "auto.offset.reset": "earliest" if args.from_beginning else "latest",
        "enable.auto.commit": False,
    }
    if args.group:
        config["group.id"] = args.group
    if getattr(args, "isolation_level", None):
        config["isolation.level"] = args.isolation_level
    config.update(parse_key_values(args.consumer_config, "--consumer-config"))
    return with_command_config("consumer", config)


def run(args: argparse.Namespace, out: IO[bytes] | None = None) -> int:
    from odradek import Consumer

    for value, option in ((args.max_messages, "--max-messages"), (args.timeout_ms, "--timeout-ms")):
        if value is not None and value < 0:
            raise CliError(f"{option} must not be negative, got {value}")
    servers = bootstrap_servers(args)
    with reaching(servers):
        try:
            consumer = Consumer(consumer_config(args, servers))
        except ConfigError as exc:
            raise CliError(str(exc)) from None
        count = 0
        progress = Progress("consumed", args.max_messages,
                            enabled=wanted(getattr(args, "progress", None), quiet_stdout_tty=True))  # fmt: skip
        try:
            _attach(consumer, args, servers)
            count = _print_records(consumer, args, out or sys.stdout.buffer, progress)
        except BrokenPipeError:  # the reader went away (| head): stop quietly
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        finally:
            progress.close()
            consumer.close()
    print(f"Processed a total of {count} messages", file=sys.stderr)
    return 0


def _attach(consumer: Any, args: argparse.Namespace, servers: str) -> None:
    if not args.group:
        consumer.assign(topic_partitions(servers, args.topic))
        return
    consumer.subscribe([args.topic])


def _print_records(consumer: Any, args: argparse.Namespace, out: IO[bytes], progress: Progress | None = None) -> int:
    """Poll and print until ``--max-messages`` or ``--timeout-ms`` says stop; the number printed."""
    limit = args.max_messages
    idle_limit_s = None if args.timeout_ms is None else args.timeout_ms / 1000
    count = 0
    last_record = time.monotonic()
    flags = (args.print_key, args.print_offset, args.print_partition)
    committed: dict[Any, int] = {}
    try:
        while limit is None or count < limit:
            wait_ms = POLL_MS
            if idle_limit_s is not None:
                left_s = idle_limit_s - (time.monotonic() - last_record)
                if left_s <= 0:
                    break
                wait_ms = max(1, min(POLL_MS, int(left_s * 1000)))
            records = consumer.poll(timeout_ms=wait_ms)
            if not records:
                continue
            last_record = time.monotonic()
            if limit is not None:
                records = records[: limit - count]
            out.write(b"".join(format_record(r, *flags) for r in records))
            out.flush()
            count += len(records)
            if progress is not None:
                progress.update(count)
            if args.group:  # commit what was printed, as it goes (the final commit below waits)
                printed = {r.topic_partition: r.offset + 1 for r in records}
                committed.update(printed)
                consumer.commit_async(printed)
    finally:
        owned = consumer.assignment() if args.group else set()
        final = {tp: offset for tp, offset in committed.items() if tp in owned}  # moved ones are someone else's
        if final:
            consumer.commit(final)
    return count
