"""``odradek console``: serve the web console for the cluster at ``--bootstrap-servers``.

    odradek console [--port 8080] [--host 127.0.0.1] [--bootstrap-servers HOST:PORT,...]
                    [--command-config FILE] [--lag-interval SECONDS] [--threads N]

``--command-config`` is a Kafka-style properties file of client keys (``key=value`` lines, ``#`` comments),
passed to every client the console makes: how it will authenticate once the cluster asks it to.
The console binds 127.0.0.1 by default (it has no login of its own: whoever reaches it can create topics
and change configs); ``--host 0.0.0.0`` serves every interface. It stops on Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from pathlib import Path
from typing import Any

from odradek.cli_support import add_bootstrap_option, bootstrap_servers
from odradek.errors import CliError, ConfigError

DEFAULT_PORT = 8080


def add_console_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "console",
        help="serve the web console (cluster, topics, consumer groups, messages)",
        description="Serve a web console for the cluster: its controllers and brokers, topics and partitions, "
        "consumer groups and their lag, and a message browser; create topics and change their configs.",
    )
    add_bootstrap_option(parser)
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"HTTP port (default {DEFAULT_PORT})")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--lag-interval", type=float, default=10.0, metavar="SECONDS",
                        help="how often consumer group lag is sampled for the charts (default 10)")  # fmt: skip
    parser.add_argument("--threads", type=int, default=8, help="HTTP worker threads (default 8)")
    parser.set_defaults(handler=run)


def read_properties(path: str) -> dict[str, str]:
    """A Kafka-style properties file as a dict; :class:`CliError` naming the file and line when it is bad."""
    from odradek.console.model import parse_configs

    try:
        return parse_configs(Path(path).read_text())
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise CliError(f"{path} {exc}") from None


def run(args: argparse.Namespace) -> int:
    from waitress import create_server

    from odradek.console.app import create_app
    from odradek.console.lag import LagSampler
    from odradek.console.model import ClusterView

    if not 0 < args.port < 65536:
        raise CliError(f"--port must be between 1 and 65535, got {args.port}")
    if args.lag_interval <= 0:
        raise CliError(f"--lag-interval must be positive, got {args.lag_interval}")
    servers = bootstrap_servers(args)
    config: dict[str, object] = {**(read_properties(args.command_config) if args.command_config else {}),
                                 "bootstrap.servers": servers}  # fmt: skip
    try:
        view = ClusterView(config)
    except ConfigError as exc:
        raise CliError(str(exc)) from None
    sampler = LagSampler(view.admin.list_groups, view.admin.describe_group, interval_s=args.lag_interval)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    try:
        server = create_server(create_app(view, sampler), host=args.host, port=args.port, threads=args.threads)
    except OSError as exc:
        view.close()
        raise CliError(f"cannot serve on {args.host}:{args.port}: {exc.strerror or exc}") from None

    def stop(*_: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    sampler.start()
    host = f"[{args.host}]" if ":" in args.host else args.host
    print(f"odradek console on http://{host}:{args.port}/ (cluster {servers})", flush=True)
    try:
        server.run()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
        sampler.stop()
        view.close()
    return 0
