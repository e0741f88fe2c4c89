"""``odradek users add|remove|list``: SCRAM credentials, as ``kafka-configs --entity-type users`` manages them.

    $ odradek users add alice --mechanism SCRAM-SHA-512 --password-file alice.pw
    Set the SCRAM-SHA-512 credential of user alice (8192 iterations).
    $ odradek users list
    alice  SCRAM-SHA-512 (iterations=8192)
    $ odradek users remove alice
    Removed the SCRAM-SHA-512 credential of user alice.

The password comes from ``--password-file`` (its first line), else a prompt on a terminal, else the first line of
standard input; never from the command line, where other users of the machine could read it. It is salted
on this machine (KIP-554): only the salt and the salted password travel.
"""

from __future__ import annotations

import argparse
import getpass
import sys
from pathlib import Path
from typing import Any

from odradek.cli_support import add_bootstrap_option, bootstrap_servers, open_admin, reaching
from odradek.errors import CliError

MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


def add_users_parser(commands: Any) -> None:
    parser = commands.add_parser("users", help="add, remove and list SCRAM users",
                                 description="Add, remove and list users' SCRAM credentials.")  # fmt: skip
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    add = actions.add_parser("add", help="set a user's SCRAM credential", description="Set a user's credential.")
    add.add_argument("name", metavar="NAME")
    add.add_argument("--mechanism", default="SCRAM-SHA-256", type=str.upper, choices=MECHANISMS)
    add.add_argument("--password-file", metavar="F", help="the password is the file's first line")
    add.add_argument("--iterations", type=int, default=8192, metavar="N", help="4096 to 16384 (default 8192)")
    add.set_defaults(handler=run_add)
    remove = actions.add_parser("remove", help="remove a user's SCRAM credentials",
                                description="Remove a user's credential (every mechanism without --mechanism).")
    remove.add_argument("name", metavar="NAME")
    remove.add_argument("--mechanism", type=str.upper, choices=MECHANISMS)
    remove.set_defaults(handler=run_remove)
    listing = actions.add_parser("list", help="list users and their mechanisms", description="List SCRAM users.")
    listing.add_argument("name", metavar="NAME", nargs="?")
    listing.set_defaults(handler=run_list)
    for sub in (add, remove, listing):
        add_bootstrap_option(sub)


def read_password(path: str | None) -> str:
    if path is not None:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise CliError(f"cannot read the password file {path!r}: {exc}") from None
        password = text.splitlines()[0] if text else ""
    elif sys.stdin.isatty():
        password = getpass.getpass("Password: ")
    else:
        password = sys.stdin.readline().rstrip("\r\n")
    if not password:
        raise CliError("the password must not be empty")
    return password


def run_add(args: argparse.Namespace) -> int:
    if not args.name:
        raise CliError("a user name must not be empty")
    if not 4096 <= args.iterations <= 16384:
        raise CliError(f"--iterations must lie in [4096, 16384], got {args.iterations}")
    password = read_password(args.password_file)
    servers = bootstrap_servers(args)
    with reaching(servers), open_admin(servers) as admin:
        admin.upsert_scram_credential(args.name, args.mechanism, password, args.iterations)
    print(f"Set the {args.mechanism} credential of user {args.name} ({args.iterations} iterations).")
    return 0


def run_remove(args: argparse.Namespace) -> int:
    servers = bootstrap_servers(args)
    with reaching(servers), open_admin(servers) as admin:
        if args.mechanism is not None:
            mechanisms = [args.mechanism]
        else:
            mechanisms = [c.mechanism for c in admin.describe_user_scram_credentials([args.name])[args.name]]
        for mechanism in mechanisms:
            admin.delete_scram_credential(args.name, mechanism)
            print(f"Removed the {mechanism} credential of user {args.name}.")
    return 0


def run_list(args: argparse.Namespace) -> int:
    servers = bootstrap_servers(args)
    with reaching(servers), open_admin(servers) as admin:
        users = admin.describe_user_scram_credentials([args.name] if args.name else [])
    width = max([len(u) for u in users] + [1])
    for user in sorted(users):
        creds = "  ".join(f"{c.mechanism} (iterations={c.iterations})" for c in users[user])
        print(f"{user:<{width}}  {creds}")
    return 0
