"""``odradek broker``: run one broker.

    odradek broker --node-id ID --listen HOST:PORT [--advertised HOST:PORT] \\
        --controllers HOST:PORT,... --data-dir DIR [--config KEY=VALUE ...]

``--controllers`` lists Controller gRPC addresses (any subset works: NOT_CONTROLLER hints lead to the
active one). ``--advertised`` is what clients are told to connect to (default: ``--listen``; required when
``--listen`` binds a wildcard address). ``--config`` takes Kafka's broker config names (``broker.config``
lists them); an unknown key is an error that names it.

Once the controller has unfenced the broker it prints one line, ``odradek broker ID ready on ...``; it
stops cleanly on SIGTERM or SIGINT (controlled shutdown, then every log flushed and closed) and exits 0.
Launchers should set ``MALLOC_MMAP_THRESHOLD_=67108864`` in the broker's environment (see
``broker.server``: it doubles large-RPC throughput).

This module imports nothing heavy: the server (grpc, the storage engine) is imported when the command runs.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from typing import Any

from odradek.errors import CliError

WILDCARD_HOSTS = ("", "0.0.0.0", "::", "[::]")


def add_broker_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "broker",
        help="run a broker",
        description="Run one broker: partition logs served over the Broker gRPC API.",
    )
    parser.add_argument("--node-id", type=int, required=True, help="this broker's id (>= 0)")
    parser.add_argument("--listen", required=True, metavar="HOST:PORT", help="Broker gRPC address to bind")
    parser.add_argument("--advertised", metavar="HOST:PORT", help="address clients connect to (default: --listen)")
    parser.add_argument("--controllers", required=True, metavar="HOST:PORT,...", help="Controller gRPC addresses")
    parser.add_argument("--data-dir", required=True, metavar="DIR", help="where partition logs live")
    parser.add_argument(
        "--config", action="append", metavar="KEY=VALUE", help="a broker config (repeatable), e.g. num.io.threads=16"
    )
    parser.add_argument("--log-level", default=os.environ.get("ODRADEK_LOG_LEVEL", "INFO"), help="default INFO")
    parser.set_defaults(handler=run)


def parse_address(text: str, what: str) -> str:
    host, sep, port = text.strip().rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise CliError(f"{what} must be HOST:PORT, got {text!r}")
    return text.strip()


def build_options(args: argparse.Namespace) -> Any:
    """The :class:`~broker.server.BrokerOptions` of the command line; :class:`CliError` when invalid."""
    from broker.config import BrokerConfig
    from broker.server import BrokerOptions
    from controller.configs import ConfigError, parse_key_values

    if args.node_id < 0 or args.node_id > 2**31 - 1:
        raise CliError(f"--node-id must be a non-negative int32, got {args.node_id}")
    listen = parse_address(args.listen, "--listen")
    if args.advertised is not None:
        advertised = parse_address(args.advertised, "--advertised")
    elif listen.rpartition(":")[0] in WILDCARD_HOSTS:
        raise CliError(f"--listen {listen} binds every address: give --advertised HOST:PORT for clients")
    else:
        advertised = listen
    controllers = tuple(parse_address(a, "--controllers item") for a in args.controllers.split(",") if a.strip())
    if not controllers:
        raise CliError("--controllers lists no address")
    try:
        config = BrokerConfig.from_props(parse_key_values(args.config))
    except ConfigError as exc:
        raise CliError(str(exc)) from None
    return BrokerOptions(args.node_id, listen, advertised, controllers, args.data_dir, config)


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s.%(msecs)03d %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
        stream=sys.stderr,
    )
    options = build_options(args)
    from broker.handlers.describe_cluster import refresh_quorum
    from broker.server import BrokerServer
    from log.errors import LogError

    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    server = BrokerServer(options)
    try:
        server.start()
    except (LogError, RuntimeError, OSError) as exc:
        raise CliError(f"broker {options.node_id} cannot start: {exc}") from None
    try:
        announced = False
        while not stop.wait(0.1):
            if server.failure is not None:
                break
            if not announced and server.lifecycle.unfenced.is_set():
                announced = True
                refresh_quorum(server.ctx, 1.0)  # the cluster id, for Metadata and DescribeCluster answers
                print(
                    f"odradek broker {options.node_id} ready on {options.listen} (advertised {options.advertised}, "
                    f"broker epoch {server.broker_epoch}, controllers {','.join(options.controllers)})",
                    flush=True,
                )
    finally:
        server.stop(controlled=server.failure is None)
    if server.failure is not None:
        raise CliError(f"broker {options.node_id} halted: {server.failure}")
    return 0
