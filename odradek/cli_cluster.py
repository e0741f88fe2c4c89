"""``odradek cluster``: the controllers (which one is active) and the brokers (alive or fenced), each with
what its gRPC health service answers (``odradek.health``; ``--no-health`` skips the checks).

$ odradek cluster
Cluster id: 3dA9...   Active controller: 0
Controllers:
  0  127.0.0.1:9192  active   SERVING
  1  127.0.0.1:9193  standby  SERVING
Brokers:
  0  127.0.0.1:9092  alive    SERVING
  1  127.0.0.1:9093  fenced   UNREACHABLE
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from odradek.cli_support import add_bootstrap_option, bootstrap_servers, open_admin, reaching

if TYPE_CHECKING:
    from odradek.types import ClusterDescription


def add_cluster_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "cluster",
        help="show the controllers (which one is active) and the brokers (alive/fenced)",
        description="Show the cluster: its controllers, which one is active, and its brokers, alive or fenced.",
    )
    add_bootstrap_option(parser)
    parser.add_argument("--no-health", dest="health", action="store_false",
                        help="do not ask each node's gRPC health service")  # fmt: skip
    parser.set_defaults(handler=run)


def format_cluster(cluster: ClusterDescription, health: Mapping[str, str] | None = None) -> list[str]:
    """The lines of ``odradek cluster``; with ``health`` (address -> status) a last column of statuses."""
    active = cluster.controller_id if cluster.controller_id >= 0 else "none"
    lines = [f"Cluster id: {cluster.cluster_id or '?'}   Active controller: {active}", "Controllers:"]
    width = max([len(n.address) for n in cluster.controllers] + [len(b.address) for b in cluster.brokers] + [1])
    for node in sorted(cluster.controllers, key=lambda n: n.node_id):
        role = "active" if node.node_id == cluster.controller_id else "standby"
        lines.append(_row(node.node_id, node.address, width, role, health))
    if not cluster.controllers:
        lines.append("  (none reported)")
    lines.append("Brokers:")
    for broker in sorted(cluster.brokers, key=lambda b: b.node_id):
        lines.append(_row(broker.node_id, broker.address, width, "fenced" if broker.fenced else "alive", health))
    if not cluster.brokers:
        lines.append("  (none registered)")
    return lines


def _row(node_id: int, address: str, width: int, status: str, health: Mapping[str, str] | None) -> str:
    if health is None:
        return f"  {node_id:<3} {address:<{width}}  {status}"
    return f"  {node_id:<3} {address:<{width}}  {status:<7}  {health.get(address, 'UNKNOWN')}"


def run(args: argparse.Namespace) -> int:
    from odradek.health import check_all, credentials_of

    servers = bootstrap_servers(args)
    with reaching(servers):
        admin = open_admin(servers)
        try:
            cluster = admin.describe_cluster()
        finally:
            admin.close()
    health = None
    if getattr(args, "health", True):
        health = check_all([n.address for n in cluster.controllers] + [b.address for b in cluster.brokers],
                           timeout_s=2.0, credentials=credentials_of(args.command_config))  # fmt: skip
    print("\n".join(format_cluster(cluster, health)))
    return 0
