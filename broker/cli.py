"""``odradek broker``: run one broker.

    odradek broker --node-id ID --listen HOST:PORT [--advertised HOST:PORT] \\
        --controllers HOST:PORT,... --data-dir DIR [--config KEY=VALUE ...] [--metrics-listen HOST:PORT]

``--controllers`` lists Controller gRPC addresses (any subset works: NOT_CONTROLLER hints lead to the
active one). ``--advertised`` is what clients are told to connect to (default: ``--listen``; required when
``--listen`` binds a wildcard address).

Named listeners, as Kafka's ``listeners`` / ``advertised.listeners``: both options also take a list
``NAME://HOST:PORT,...`` (a bare ``HOST:PORT`` is ``PLAINTEXT://HOST:PORT``), e.g.::

    --listen PLAINTEXT://0.0.0.0:19092,EXTERNAL://0.0.0.0:9092 \\
    --advertised PLAINTEXT://broker-1:19092,EXTERNAL://localhost:9092

Each listener is served on its own address, and Metadata answers with every broker's endpoint of the
listener the request came in on. ``PLAINTEXT`` is the inter-broker listener (Kafka's default
``inter.broker.listener.name``): followers fetch from leaders through it, so it must be listed. A listener
missing from ``--advertised`` advertises its ``--listen`` address.

``--metrics-listen`` serves the broker's metrics for Prometheus at ``http://HOST:PORT/metrics``
(``broker/metrics/README.md``); without it the broker does no metrics work. Every listener also serves the
standard gRPC health service (SERVING once the controller unfenced the broker).

``--config`` takes Kafka's broker config names (``broker.config`` lists them); an unknown key is an error
that names it.

Once the controller has unfenced the broker it prints one line, ``odradek broker ID ready on ...``; it
stops cleanly on SIGTERM or SIGINT (controlled shutdown, then every log flushed and closed) and exits 0.
Launchers should set ``MALLOC_MMAP_THRESHOLD_=67108864`` in the broker's environment (see
``broker.server``: it doubles large-RPC throughput).

This module imports nothing heavy: the server (grpc, the storage engine) is imported when the command runs.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import re
import sys
from typing import Any

from common.errors import CommandError
from common.signals import StopSignals, dump_threads_on_sigquit
from controller.cli import parse_address

WILDCARD_HOSTS = ("", "0.0.0.0", "::", "[::]")
LISTENER = "PLAINTEXT"  # broker.lifecycle.LISTENER, the inter-broker listener (not imported: it pulls in grpc)
LISTENER_NAME = re.compile(r"[A-Z0-9_]+")


def add_broker_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "broker",
        help="run a broker",
        description="Run one broker: partition logs served over the Broker gRPC API.",
    )
    parser.add_argument("--node-id", type=int, required=True, help="this broker's id (>= 0)")
    parser.add_argument(
        "--listen", required=True, metavar="HOST:PORT", help="Broker gRPC address to bind, or NAME://HOST:PORT,..."
    )
    parser.add_argument(
        "--advertised", metavar="HOST:PORT", help="address clients connect to (default: --listen), or NAME://..."
    )
    parser.add_argument("--controllers", required=True, metavar="HOST:PORT,...", help="Controller gRPC addresses")
    parser.add_argument("--data-dir", required=True, metavar="DIR", help="where partition logs live")
    parser.add_argument(
        "--config", action="append", metavar="KEY=VALUE", help="a broker config (repeatable), e.g. num.io.threads=16"
    )
    parser.add_argument(
        "--metrics-listen", metavar="HOST:PORT", help="serve Prometheus metrics at http://HOST:PORT/metrics"
    )
    parser.add_argument("--log-level", default=os.environ.get("ODRADEK_LOG_LEVEL", "INFO"), help="default INFO")
    parser.set_defaults(handler=run)


def parse_listeners(text: str, option: str) -> dict[str, str]:
    """``NAME://HOST:PORT,...`` (or a bare ``HOST:PORT``, the PLAINTEXT listener) as ``{NAME: HOST:PORT}``."""
    result: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, address = item.rpartition("://")
        name = name.upper() if sep else LISTENER
        if not LISTENER_NAME.fullmatch(name):
            raise CommandError(f"{option}: listener name {name!r} must be letters, digits and _ (in {item!r})")
        if name in result:
            raise CommandError(f"{option} names listener {name} twice")
        result[name] = parse_address(address, f"{option} listener {name}", any_host=True)
    if not result:
        raise CommandError(f"{option} lists no address")
    return result


def build_listeners(listen_text: str, advertised_text: str | None) -> Any:
    """The :class:`~broker.server.Listener` tuple of ``--listen`` / ``--advertised``; :class:`CommandError`
    when invalid (see the module docstring)."""
    from broker.server import Listener

    listen = parse_listeners(listen_text, "--listen")
    advertised = parse_listeners(advertised_text, "--advertised") if advertised_text is not None else {}
    if LISTENER not in listen:
        raise CommandError(f"--listen must include the inter-broker listener {LISTENER} (got {', '.join(listen)})")
    unknown = sorted(set(advertised) - set(listen))
    if unknown:
        raise CommandError(f"--advertised names listeners that --listen does not: {', '.join(unknown)}")
    bound = [address.replace("localhost", "127.0.0.1") for address in listen.values()]
    if len(set(bound)) != len(bound):
        raise CommandError(f"--listen binds one address twice: {listen_text}")
    listeners = []
    for name, address in listen.items():
        if name not in advertised and address.rpartition(":")[0] in WILDCARD_HOSTS:
            what = address if len(listen) == 1 and "://" not in listen_text else f"{name}://{address}"
            hint = "HOST:PORT" if what == address else f"{name}://HOST:PORT"
            raise CommandError(f"--listen {what} binds every address: give --advertised {hint} for clients")
        listeners.append(Listener(name, address, advertised.get(name, address)))
    return tuple(listeners)


def build_options(args: argparse.Namespace) -> Any:
    """The :class:`~broker.server.BrokerOptions` of the command line; :class:`CommandError` when invalid."""
    from broker.config import BrokerConfig
    from broker.server import BrokerOptions
    from metadata.configs import ConfigError, parse_key_values

    if args.node_id < 0 or args.node_id > 2**31 - 1:
        raise CommandError(f"--node-id must be a non-negative int32, got {args.node_id}")
    listeners = build_listeners(args.listen, args.advertised)
    inter_broker = next(lis for lis in listeners if lis.name == LISTENER)
    items = [a for a in args.controllers.split(",") if a.strip()]
    controllers = tuple(parse_address(a, "--controllers item", any_host=True) for a in items)
    if not controllers:
        raise CommandError("--controllers lists no address")
    try:
        config = BrokerConfig.from_props(parse_key_values(args.config))
    except ConfigError as exc:
        raise CommandError(str(exc)) from None
    metrics_listen = ""
    if args.metrics_listen:
        metrics_listen = parse_address(args.metrics_listen, "--metrics-listen", any_host=True)
    return BrokerOptions(
        args.node_id, inter_broker.listen, inter_broker.advertised, controllers, args.data_dir, config, listeners,
        metrics_listen,
    )


def describe_listeners(options: Any) -> tuple[str, str]:
    """``(listen, advertised)`` for the ready line: bare addresses for a lone PLAINTEXT listener, else
    ``NAME://HOST:PORT,...``."""
    listeners = options.all_listeners()
    if len(listeners) == 1 and listeners[0].name == LISTENER:
        return options.listen, options.advertised
    return (
        ",".join(f"{lis.name}://{lis.listen}" for lis in listeners),
        ",".join(f"{lis.name}://{lis.advertised}" for lis in listeners),
    )


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s.%(msecs)03d %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
        stream=sys.stderr,
    )
    options = build_options(args)
    from broker.handlers.describe_cluster import refresh_quorum
    from broker.resources import keep_freed_heap, raise_open_files_limit
    from broker.server import BrokerServer
    from log import trace
    from log.errors import LogError

    raise_open_files_limit()
    keep_freed_heap()

    stop = StopSignals()  # SIGTERM / SIGINT (common.signals: the handler takes no lock)
    dump_threads_on_sigquit()  # kill -QUIT: every thread's stack to stderr (a JVM's thread dump)
    from metadata.configs import ConfigError

    try:
        server = BrokerServer(options)
    except ConfigError as exc:  # a security setting (listener protocols, key material) that cannot work
        raise CommandError(f"broker {options.node_id} cannot start: {exc}") from None
    trace.set_role(f"broker-{options.node_id}")  # log.trace, with ODRADEK_LATENCY_TRACE set
    # a request thread woken by an append waits for the GIL up to this long while another thread computes
    sys.setswitchinterval(float(options.config.get("python.switch.interval.ms")) / 1000.0)
    try:
        server.start()
    except (LogError, RuntimeError, OSError) as exc:
        raise CommandError(f"broker {options.node_id} cannot start: {exc}") from None
    try:
        announced = False
        while not stop.wait(0.1):
            if server.failure is not None:
                break
            if not announced and server.lifecycle.unfenced.is_set():
                announced = True
                gc.freeze()  # what startup built stays out of the collector's scans (shorter GC pauses)
                refresh_quorum(server.ctx, 1.0)  # the cluster id, for Metadata and DescribeCluster answers
                listen, advertised = describe_listeners(options)
                metrics = f", metrics http://{server.metrics.endpoint.address}/metrics" if server.metrics else ""
                print(
                    f"odradek broker {options.node_id} ready on {listen} (advertised {advertised}, "
                    f"broker epoch {server.broker_epoch}, controllers {','.join(options.controllers)}{metrics})",
                    flush=True,
                )
    finally:
        server.stop(controlled=server.failure is None)
    if server.failure is not None:
        raise CommandError(f"broker {options.node_id} halted: {server.failure}")
    return 0
