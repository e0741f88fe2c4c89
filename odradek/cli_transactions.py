"""``odradek transactions list|describe ID``: Kafka's ``kafka-transactions.sh`` verbs.

    $ odradek transactions list
    TRANSACTIONAL-ID  COORDINATOR  PRODUCER-ID  STATE
    copier-0          1            4001         Ongoing
    $ odradek transactions describe copier-0
    TRANSACTIONAL-ID  COORDINATOR  PRODUCER-ID  EPOCH  STATE    TIMEOUT-MS  START-TIME               PARTITIONS
    copier-0          1            4001         3      Ongoing  60000       2026-11-26T13:30:00.123Z  out-0,out-1
"""

from __future__ import annotations

import argparse
import datetime as dt
from typing import Any

from odradek.cli_support import add_bootstrap_option, bootstrap_servers, open_admin, reaching


def add_transactions_parser(commands: Any) -> None:
    parser = commands.add_parser("transactions", help="list and describe transactions",
                                 description="Transactional producers' state at their coordinators.")  # fmt: skip
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="list the transactional ids", description="List the "
                                 "transactional ids the coordinators know, with their state.")  # fmt: skip
    listing.set_defaults(handler=run_list)
    add_bootstrap_option(listing)
    describe = actions.add_parser("describe", help="describe a transactional id",
                                  description="A transactional id's producer, epoch, state and partitions.")
    describe.add_argument("transactional_id", metavar="ID")
    describe.set_defaults(handler=run_describe)
    add_bootstrap_option(describe)


def table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows)


def run_list(args: argparse.Namespace) -> int:
    servers = bootstrap_servers(args)
    with reaching(servers), open_admin(servers) as admin:
        listed = admin.list_transactions()
    rows = [["TRANSACTIONAL-ID", "COORDINATOR", "PRODUCER-ID", "STATE"]]
    rows += [[t.transactional_id, str(t.coordinator_id), str(t.producer_id), t.state] for t in listed]
    print(table(rows))
    return 0


def run_describe(args: argparse.Namespace) -> int:
    servers = bootstrap_servers(args)
    with reaching(servers), open_admin(servers) as admin:
        d = admin.describe_transactions([args.transactional_id])[args.transactional_id]
    start = "-"
    if d.transaction_start_time_ms >= 0:
        moment = dt.datetime.fromtimestamp(d.transaction_start_time_ms / 1000, tz=dt.UTC)
        start = moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    partitions = ",".join(f"{tp.topic}-{tp.partition}" for tp in d.partitions) or "-"
    rows = [["TRANSACTIONAL-ID", "COORDINATOR", "PRODUCER-ID", "EPOCH", "STATE", "TIMEOUT-MS", "START-TIME",
             "PARTITIONS"],
            [d.transactional_id, str(d.coordinator_id), str(d.producer_id), str(d.producer_epoch), d.state,
             str(d.transaction_timeout_ms), start, partitions]]  # fmt: skip
    print(table(rows))
    return 0
