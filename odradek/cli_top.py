"""``odradek top``: a live view of the cluster's throughput per topic and lag per consumer group.

    $ odradek top --interval 2
    odradek top  127.0.0.1:9092  09:12:04  every 2 s   brokers 3/3 alive  controller 0  under-replicated 0

    TOPIC     PARTITIONS  RECORDS/S  BYTES/S     END OFFSETS  SIZE
    orders             6     12,410  1.2 MiB/s     1,204,332  118.0 MiB

    GROUP     STATE   MEMBERS  LAG    CONSUMED/S
    billing   Stable        3  2,210      12,104

Everything comes through the client library: records/s per topic from the change of its partitions' end
offsets (ListOffsets), bytes/s from the change of its leaders' sizes on disk (DescribeLogDirs; retention
deleting segments shows as 0), lag and records consumed per second per group from its committed offsets
(the group's coordinator). Rates need two samples, so the first frame shows ``-`` for them.

On a terminal the screen is redrawn every ``--interval`` seconds until Ctrl-C; otherwise frames follow each
other, separated by a blank line. ``--once`` prints one frame with rates (two samples ``--interval`` apart),
``--iterations N`` N frames; ``--json`` prints each frame as one JSON object a line instead.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from odradek.cli_support import add_bootstrap_option, bootstrap_servers, format_size, open_admin, reaching
from odradek.errors import CliError, OdradekError

if TYPE_CHECKING:
    from odradek import Admin

CLEAR_SCREEN = "\033[H\033[2J"


def add_top_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "top",
        help="live throughput per topic and lag per consumer group",
        description="Show the cluster's throughput per topic and lag per consumer group, refreshed every "
        "--interval seconds (until Ctrl-C, --once or --iterations N).",
    )
    add_bootstrap_option(parser)
    parser.add_argument("--interval", type=float, default=2.0, metavar="SECONDS", help="refresh period (default 2)")
    parser.add_argument("--once", action="store_true", help="print one frame (two samples --interval apart)")
    parser.add_argument("--iterations", type=int, metavar="N", help="print N frames, then exit")
    parser.add_argument("--internal", action="store_true", help="show internal topics too (__consumer_offsets)")
    parser.add_argument("--json", action="store_true", help="one JSON object a frame instead of the table")
    parser.set_defaults(handler=run)


@dataclass(frozen=True, slots=True)
class Sample:
    """What one look at the cluster saw."""

    time_s: float
    header: dict[str, Any]
    partitions: dict[str, int]  # topic -> partition count
    end_offsets: dict[str, int]  # topic -> sum of its partitions' end offsets
    sizes: dict[str, int]  # topic -> bytes of its leader replicas (absent: unknown)
    groups: dict[str, dict[str, Any]] = field(default_factory=dict)  # id -> state, members, lag, committed


def take_sample(
    admin: Admin, servers: str, *, internal: bool, clock: Callable[[], float] = time.monotonic
) -> Sample:
    cluster = admin.describe_cluster()
    topics = {n: t for n, t in admin.describe_topics().items() if internal or not t.is_internal}
    from odradek.types import TopicPartition

    offsets = admin.list_offsets({TopicPartition(n, p.partition): "latest" for n, t in topics.items()
                                  for p in t.partitions}) if topics else {}  # fmt: skip
    end_offsets = {n: 0 for n in topics}
    for tp, offset in offsets.items():
        end_offsets[tp.topic] += max(offset, 0)
    sizes: dict[str, int] = {}
    for broker in cluster.brokers:
        if broker.fenced:
            continue
        try:
            held = admin.describe_log_dirs([broker.node_id], list(topics))[broker.node_id]
        except OdradekError:
            continue
        for replica in held:
            if replica.is_leader:
                sizes[replica.topic] = sizes.get(replica.topic, 0) + replica.size_bytes
    groups: dict[str, dict[str, Any]] = {}
    for listing in admin.list_groups():
        try:
            group = admin.describe_group(listing.group_id)
        except OdradekError:
            continue
        known = [p for p in group.offsets if p.lag is not None]
        groups[group.group_id] = {
            "state": group.state, "members": len(group.members),
            "lag": sum(p.lag or 0 for p in known) if known else None,
            "committed": sum(p.committed_offset or 0 for p in group.offsets),
        }  # fmt: skip
    partitions = [p for t in topics.values() for p in t.partitions]
    header = {
        "bootstrap": servers, "controller_id": cluster.controller_id,
        "brokers": len(cluster.brokers), "brokers_alive": sum(1 for b in cluster.brokers if not b.fenced),
        "under_replicated": sum(1 for p in partitions if len(p.isr) < len(p.replicas)),
        "offline": sum(1 for p in partitions if p.leader < 0),
    }  # fmt: skip
    return Sample(clock(), header, {n: len(t.partitions) for n, t in topics.items()}, end_offsets, sizes, groups)


def frame(previous: Sample | None, current: Sample) -> dict[str, Any]:
    """The frame of ``current``, with rates against ``previous`` (None: no rates yet)."""
    elapsed = current.time_s - previous.time_s if previous is not None else 0.0

    def rate(now: int | None, before: int | None) -> float | None:
        if previous is None or elapsed <= 0 or now is None or before is None:
            return None
        return max(0.0, (now - before) / elapsed)

    topics = [
        {"topic": name, "partitions": current.partitions[name], "end_offsets": current.end_offsets[name],
         "size_bytes": current.sizes.get(name),
         "records_per_sec": rate(current.end_offsets[name], previous.end_offsets.get(name) if previous else None),
         "bytes_per_sec": rate(current.sizes.get(name), previous.sizes.get(name) if previous else None)}
        for name in sorted(current.partitions)
    ]  # fmt: skip
    groups = []
    for group_id, g in sorted(current.groups.items()):
        before = previous.groups.get(group_id) if previous is not None else None
        groups.append({"group": group_id, "state": g["state"], "members": g["members"], "lag": g["lag"],
                       "consumed_per_sec": rate(g["committed"], before["committed"] if before else None)})  # fmt: skip
    return {**current.header, "interval_s": round(elapsed, 3), "topics": topics, "groups": groups}


def render(doc: dict[str, Any], clock_text: str) -> str:
    urp = doc["under_replicated"]
    lines = [
        f"odradek top  {doc['bootstrap']}  {clock_text}   brokers {doc['brokers_alive']}/{doc['brokers']} alive  "
        f"controller {doc['controller_id'] if doc['controller_id'] >= 0 else 'none'}  under-replicated {urp}"
        + (f"  offline {doc['offline']}" if doc["offline"] else ""),
        "",
    ]
    rows = [["TOPIC", "PARTITIONS", "RECORDS/S", "BYTES/S", "END OFFSETS", "SIZE"]]
    rows += [[t["topic"], str(t["partitions"]), _rate(t["records_per_sec"]), _bytes_rate(t["bytes_per_sec"]),
              f"{t['end_offsets']:,}", format_size(t["size_bytes"])] for t in doc["topics"]]  # fmt: skip
    lines.append(_table(rows) if doc["topics"] else "(no topics)")
    lines.append("")
    rows = [["GROUP", "STATE", "MEMBERS", "LAG", "CONSUMED/S"]]
    rows += [[g["group"], g["state"], str(g["members"]), "-" if g["lag"] is None else f"{g['lag']:,}",
              _rate(g["consumed_per_sec"])] for g in doc["groups"]]  # fmt: skip
    lines.append(_table(rows) if doc["groups"] else "(no consumer groups)")
    return "\n".join(lines)


def _table(rows: list[list[str]]) -> str:
    """The first column left-aligned, the others (numbers) right-aligned, two spaces apart."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join([row[0].ljust(widths[0]), *(c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True))]).rstrip()
        for row in rows
    )


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _bytes_rate(value: float | None) -> str:
    return "-" if value is None else format_size(int(value)) + "/s"


def run(args: argparse.Namespace) -> int:
    if args.interval <= 0:
        raise CliError(f"--interval must be positive, got {args.interval}")
    if args.iterations is not None and args.iterations < 1:
        raise CliError(f"--iterations must be at least 1, got {args.iterations}")
    frames = 1 if args.once else args.iterations
    live = sys.stdout.isatty() and not args.json
    servers = bootstrap_servers(args)
    with reaching(servers), open_admin(servers) as admin:
        previous = take_sample(admin, servers, internal=args.internal) if args.once else None
        if previous is not None:
            time.sleep(args.interval)
        shown = 0
        try:
            while frames is None or shown < frames:
                current = take_sample(admin, servers, internal=args.internal)
                doc = frame(previous, current)
                if args.json:
                    print(json.dumps(doc), flush=True)
                else:
                    text = render(doc, time.strftime("%H:%M:%S") + f"  every {args.interval:g} s")
                    print((CLEAR_SCREEN if live else ("\n" if shown else "")) + text, flush=True)
                shown += 1
                previous = current
                if frames is None or shown < frames:
                    time.sleep(args.interval)
        except KeyboardInterrupt:
            pass
    return 0
