"""``odradek groups list|describe|delete|reset-offsets``: Kafka's ``kafka-consumer-groups.sh`` verbs.

    $ odradek groups list
    billing
    $ odradek groups describe billing
    Group billing: Stable, 2 members, coordinator 1, assignor uniform, epoch 7

    GROUP    TOPIC   PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG  CONSUMER-ID  HOST        CLIENT-ID
    billing  orders  0          120             130             10   2Jm...       /127.0.0.1  c-1
    $ odradek groups reset-offsets billing --topic orders:0,1 --to-earliest            # a dry run
    $ odradek groups reset-offsets billing --topic orders --to-datetime 2026-11-26T00:00:00Z --execute

Resetting offsets needs a group without active members, as in Kafka; without ``--execute`` it only
prints the plan. ``-`` stands for an unknown value (nothing committed, or no answer).
"""

from __future__ import annotations

import argparse
import datetime as dt
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from odradek.cli_support import add_bootstrap_option, bootstrap_servers, open_admin, reaching, topic_partitions
from odradek.errors import CliError
from odradek.progress import Progress, add_progress_option, wanted

if TYPE_CHECKING:
    from odradek.types import GroupDescription, TopicPartition


def add_groups_parser(commands: Any) -> None:
    parser = commands.add_parser("groups", help="list, describe, delete consumer groups and reset their offsets",
                                 description="Consumer groups: members, committed offsets, lag.")  # fmt: skip
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    listing = actions.add_parser("list", help="list the groups", description="List the consumer groups.")
    listing.add_argument("--state", action="store_true", help="print each group's state too")
    listing.set_defaults(handler=run_list)

    describe = actions.add_parser("describe", help="describe a group",
                                  description="A group's state, members, committed offsets and lag.")  # fmt: skip
    describe.add_argument("group", metavar="GROUP")
    describe.add_argument("--members", action="store_true", help="list the members and their assignments")
    describe.set_defaults(handler=run_describe)

    delete = actions.add_parser("delete", help="delete a group without members",
                                description="Delete a group without members, and its committed offsets.")  # fmt: skip
    delete.add_argument("group", metavar="GROUP")
    delete.set_defaults(handler=run_delete)

    reset = actions.add_parser("reset-offsets", help="reset a group's committed offsets",
                               description="Reset the committed offsets of an inactive group (a dry run "
                               "without --execute).")  # fmt: skip
    reset.add_argument("group", metavar="GROUP")
    reset.add_argument("--topic", action="append", metavar="T[:P,...]", default=[],
                       help="a topic, or some of its partitions (repeatable)")  # fmt: skip
    reset.add_argument("--all-topics", action="store_true", help="every partition the group committed")
    target = reset.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_true", help="the log start offset")
    target.add_argument("--to-latest", action="store_true", help="the log end offset")
    target.add_argument("--to-datetime", metavar="ISO", help="the first record at or after this time")
    target.add_argument("--to-offset", type=int, metavar="N", help="offset N (kept within the log)")
    reset.add_argument("--execute", action="store_true", help="commit the new offsets (default: only print them)")
    add_progress_option(reset)
    reset.set_defaults(handler=run_reset)
    for sub in (listing, describe, delete, reset):
        add_bootstrap_option(sub)


def run_list(args: argparse.Namespace) -> int:
    servers = bootstrap_servers(args)
    with reaching(servers), open_admin(servers) as admin:
        groups = admin.list_groups()
    if args.state:
        print(table([["GROUP", "STATE"], *([g.group_id, g.state] for g in groups)]))
    else:
        for g in groups:
            print(g.group_id)
    return 0


def run_describe(args: argparse.Namespace) -> int:
    servers = bootstrap_servers(args)
    with reaching(servers), open_admin(servers) as admin:
        described = admin.describe_group(args.group)
    print("\n".join(format_group(described, members=args.members)))
    return 0


def run_delete(args: argparse.Namespace) -> int:
    servers = bootstrap_servers(args)
    with reaching(servers), open_admin(servers) as admin:
        admin.delete_groups([args.group])
    print(f"Deleted group {args.group}.")
    return 0


def run_reset(args: argparse.Namespace) -> int:
    if not args.topic and not args.all_topics:
        raise CliError("name the partitions to reset: --topic T[:P,...] (repeatable) or --all-topics")
    spec: str | int | dt.datetime
    if args.to_earliest:
        spec = "earliest"
    elif args.to_latest:
        spec = "latest"
    elif args.to_offset is not None:
        if args.to_offset < 0:
            raise CliError(f"--to-offset must not be negative, got {args.to_offset}")
        spec = args.to_offset
    else:
        spec = parse_datetime(args.to_datetime)
    servers = bootstrap_servers(args)
    progress = Progress("reset-offsets", enabled=wanted(args.progress))
    with reaching(servers), open_admin(servers) as admin:
        partitions = []
        for item in args.topic:
            progress.stage(f"finding the partitions of {item}")
            partitions += parse_topic(item, servers)
        if args.all_topics:
            progress.stage(f"reading the committed offsets of {args.group}")
            partitions += list(admin.list_group_offsets(args.group))
        if not partitions:
            raise CliError(f"group {args.group!r} has no committed offsets: name the partitions with --topic")
        progress.stage(f"planning the offsets of {len(partitions)} partitions")
        plan = admin.reset_group_offsets(args.group, partitions, spec, execute=False)  # refused while active
        if args.execute:
            progress.stage(f"committing {len(plan)} offsets")
            admin.alter_group_offsets(args.group, plan)
        progress.stage(f"{'committed' if args.execute else 'planned'} {len(plan)} offsets")
        progress.close()
    rows = [["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]]
    rows += [[args.group, tp.topic, str(tp.partition), str(offset)] for tp, offset in sorted(plan.items())]
    print(table(rows))
    if not args.execute:
        print("\nDry run: nothing was changed (add --execute to commit these offsets).")
    return 0


def parse_topic(item: str, servers: str) -> list[TopicPartition]:
    """``T`` (every partition) or ``T:0,2``."""
    from odradek.types import TopicPartition

    topic, sep, parts = item.partition(":")
    if not topic:
        raise CliError(f"--topic expects T or T:P[,P...], got {item!r}")
    if not sep:
        return topic_partitions(servers, topic)
    try:
        numbers = [int(p) for p in parts.split(",") if p.strip()]
    except ValueError:
        raise CliError(f"--topic expects T:P[,P...] with partition numbers, got {item!r}") from None
    if not numbers or min(numbers) < 0:
        raise CliError(f"--topic expects T:P[,P...] with partition numbers, got {item!r}")
    return [TopicPartition(topic, p) for p in numbers]


def parse_datetime(text: str) -> dt.datetime:
    """An ISO 8601 time; without a zone it is UTC (``Z`` accepted)."""
    try:
        when = dt.datetime.fromisoformat(text.replace("Z", "+00:00") if text.endswith("Z") else text)
    except ValueError:
        raise CliError(f"--to-datetime expects an ISO 8601 time like 2026-11-26T08:00:00Z, got {text!r}") from None
    return when if when.tzinfo is not None else when.replace(tzinfo=dt.UTC)


def _value(value: int | None) -> str:
    return "-" if value is None else str(value)


def format_group(group: GroupDescription, *, members: bool = False) -> list[str]:
    """Kafka's describe layout: one row per partition (offsets, lag, owner), then the members if asked."""
    count = len(group.members)
    lines = [
        f"Group {group.group_id}: {group.state}, {count} member{'s' if count != 1 else ''}, coordinator "
        f"{group.coordinator_id}, assignor {group.assignor or '-'}, epoch {group.group_epoch}",
        "",
    ]
    by_id = {m.member_id: m for m in group.members}
    rows = [["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST",
             "CLIENT-ID"]]  # fmt: skip
    for p in group.offsets:
        owner = by_id.get(p.member_id or "")
        rows.append(
            [group.group_id, p.partition.topic, str(p.partition.partition), _value(p.committed_offset),
             _value(p.log_end_offset), _value(p.lag), owner.member_id if owner else "-",
             owner.client_host or "-" if owner else "-", owner.client_id or "-" if owner else "-"]
        )  # fmt: skip
    lines.append(table(rows) if len(rows) > 1 else f"Group {group.group_id} has no committed offsets.")
    if members:
        lines.append("")
        member_rows = [["CONSUMER-ID", "INSTANCE-ID", "EPOCH", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"]]
        for m in group.members:
            assignment = ",".join(str(tp) for tp in m.assignment) or "-"
            member_rows.append([m.member_id, m.instance_id or "-", str(m.member_epoch), m.client_host or "-",
                                m.client_id or "-", str(len(m.assignment)), assignment])  # fmt: skip
        lines.append(table(member_rows) if group.members else f"Group {group.group_id} has no active members.")
    return lines


def table(rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns separated by two spaces."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows)
