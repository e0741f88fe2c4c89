"""gRPC health checks of Odradek nodes (the standard ``grpc.health.v1.Health`` service every broker and
controller serves), and ``odradek health HOST:PORT``.

A node answers SERVING once it can do its job (a broker: unfenced by the controller; a controller: the
quorum has a leader) and NOT_SERVING while it cannot or once it is shutting down. :func:`check` says
``UNREACHABLE`` when nothing answers in time. ``odradek up`` waits for every node to be SERVING, ``odradek
cluster`` shows each node's status, and the compose file's health checks run ``odradek health``.

    $ odradek health 127.0.0.1:9092
    127.0.0.1:9092 SERVING                      (exit status 0; 1 for anything else)
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

SERVING = "SERVING"
UNREACHABLE = "UNREACHABLE"
DEFAULT_TIMEOUT_S = 3.0


def check(
    address: str, service: str = "", timeout_s: float = DEFAULT_TIMEOUT_S,
    credentials: grpc.ChannelCredentials | None = None,
) -> str:  # fmt: skip
    """The health status of ``service`` ("" = the whole node) at ``address``: SERVING, NOT_SERVING,
    SERVICE_UNKNOWN, UNKNOWN, or UNREACHABLE when nothing answered within ``timeout_s``. ``credentials``: TLS
    (the health service needs no authentication, but a TLS listener needs TLS, and maybe a certificate)."""
    channel = grpc.insecure_channel(address) if credentials is None else grpc.secure_channel(address, credentials)
    with channel:
        stub: Any = health_pb2_grpc.HealthStub(channel)
        try:
            answer = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout_s)
        except grpc.RpcError as exc:
            code = exc.code() if isinstance(exc, grpc.Call) else None
            return "SERVICE_UNKNOWN" if code == grpc.StatusCode.NOT_FOUND else UNREACHABLE
    return str(health_pb2.HealthCheckResponse.ServingStatus.Name(answer.status))


def check_all(
    addresses: Iterable[str], timeout_s: float = DEFAULT_TIMEOUT_S, credentials: grpc.ChannelCredentials | None = None
) -> dict[str, str]:
    """:func:`check` of every address, in parallel: ``{address: status}``."""
    unique = list(dict.fromkeys(addresses))
    if not unique:
        return {}
    with ThreadPoolExecutor(max_workers=min(16, len(unique))) as pool:
        statuses = pool.map(lambda a: check(a, timeout_s=timeout_s, credentials=credentials), unique)
        return dict(zip(unique, statuses, strict=True))


def add_health_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "health",
        help="check a broker's or controller's gRPC health service",
        description="Ask a node's gRPC health service whether it is SERVING; exit 0 if it is, 1 otherwise.",
    )
    parser.add_argument("address", metavar="HOST:PORT", help="a broker listener or a controller")
    parser.add_argument("--service", default="", help="a service name (default: the whole node)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
                        help=f"how long to wait for an answer (default {DEFAULT_TIMEOUT_S:g})")  # fmt: skip
    parser.add_argument("--command-config", metavar="FILE",
                        help="client properties: the TLS keys (ssl.ca.location, ssl.certificate.location, ...)")
    parser.set_defaults(handler=run)


def credentials_of(properties: str | None) -> grpc.ChannelCredentials | None:
    """The TLS credentials of a ``--command-config`` file (None: plaintext)."""
    if properties is None:
        return None
    from odradek.security.channels import channel_credentials
    from odradek.security.config import SecurityConfig, load_properties

    return channel_credentials(SecurityConfig.from_mapping(load_properties(properties)))


def run(args: argparse.Namespace) -> int:
    status = check(args.address, args.service, args.timeout, credentials_of(args.command_config))
    print(f"{args.address} {status}", file=sys.stdout)
    return 0 if status == SERVING else 1
