"""The ``odradek`` command line.

Every command prints errors to stderr as one clear sentence and exits non-zero; no bare tracebacks.
Subcommands are added by the issues that build them (docs/INTERFACE.md lists the full set).
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from common.errors import CommandError
from odradek.dump_log import add_dump_log_parser
from odradek.errors import OdradekError
from odradek.launcher.children import die_with_parent
from odradek.version import __version__

Handler = Callable[[argparse.Namespace], int]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="odradek", description="Odradek, a replicated commit log.")
    parser.add_argument("--version", action="version", version=f"odradek {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_client_parsers(commands)
    add_dump_log_parser(commands)
    _add_server_parsers(commands)
    return parser


def _add_client_parsers(commands: Any) -> None:
    """The user-facing commands; their modules import the client library only when a handler runs."""
    from odradek.cli_acls import add_acls_parser
    from odradek.cli_cluster import add_cluster_parser
    from odradek.cli_consume import add_consume_parser
    from odradek.cli_groups import add_groups_parser
    from odradek.cli_produce import add_produce_parser
    from odradek.cli_top import add_top_parser
    from odradek.cli_topics import add_topics_parser
    from odradek.cli_transactions import add_transactions_parser
    from odradek.cli_users import add_users_parser
    from odradek.console.cli import add_console_parser
    from odradek.health import add_health_parser
    from odradek.launcher.secure import add_security_parser
    from odradek.launcher.up import add_up_parser
    from odradek.perf.cli import add_perf_parser

    add_up_parser(commands)
    add_cluster_parser(commands)
    add_topics_parser(commands)
    add_produce_parser(commands)
    add_consume_parser(commands)
    add_groups_parser(commands)
    add_transactions_parser(commands)
    add_users_parser(commands)
    add_acls_parser(commands)
    add_perf_parser(commands)
    add_top_parser(commands)
    add_health_parser(commands)
    add_console_parser(commands)
    add_security_parser(commands)


def _add_server_parsers(commands: Any) -> None:
    """Server commands, imported here so that importing ``odradek`` never imports them; their modules
    import nothing heavy until their handler runs."""
    from broker.cli import add_broker_parser
    from controller.cli import add_controller_parser

    add_controller_parser(commands)
    add_broker_parser(commands)


def main(argv: Sequence[str] | None = None) -> int:
    die_with_parent()  # a server started by ``odradek up``: it goes when ``up`` goes
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Handler | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        if hasattr(args, "command_config"):  # every client command (odradek.cli_support.add_bootstrap_option)
            from odradek.cli_support import load_command_config

            load_command_config(args.command_config)
        return handler(args)
    except CommandError as exc:  # a CliError, or a server command's error
        print(f"odradek: {exc}", file=sys.stderr)
        return exc.status
    except OdradekError as exc:  # a client error the command did not word itself: Kafka's name ends the sentence
        from odradek.cli_support import error_sentence

        print(f"odradek: {error_sentence(exc)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    except OSError as exc:
        print(f"odradek: {exc.strerror or exc}: {exc.filename or ''}".rstrip(": "), file=sys.stderr)
        return 1


def entry() -> NoReturn:
    """The process's entry point (the ``odradek`` script and ``python -m odradek.cli``): :func:`main`, then the
    exit handlers (logging, trace files), then the process ends at once.

    Once a command is done its clients are closed and it has said everything it will say, so the interpreter's
    finalization is skipped: it tears down grpcio's native state (its event-engine threads, a last
    ``grpc_shutdown``), which can deadlock against the GIL (grpc/grpc#42247, open in grpcio 1.85). A CI run saw
    ``odradek consume`` print its last line and then never exit, with no Python thread and no channel left."""
    try:
        code: object = main()
    except SystemExit as exc:  # argparse: --help, --version, a usage error
        code = exc.code
    except BaseException:  # not a command error: the traceback, as the interpreter would print it
        traceback.print_exc()
        code = 1
    if code is None:
        code = 0
    elif not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a reader that went away, a closed stream
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    entry()
