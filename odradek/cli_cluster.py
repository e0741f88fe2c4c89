"""``odradek cluster``: the controllers (which one is active) and the brokers (alive or fenced).

$ odradek cluster
Cluster id: 3dA9...   Active controller: 0
Controllers:
  0  127.0.0.1:9192  active
  1  127.0.0.1:9193  standby
Brokers:
  0  127.0.0.1:9092  alive
  1  127.0.0.1:9093  fenced
"""

from __future__ import annotations

import argparse
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
    parser.set_defaults(handler=run)


def format_cluster(cluster: ClusterDescription) -> list[str]:
    active = cluster.controller_id if cluster.controller_id >= 0 else "none"
    lines = [f"Cluster id: {cluster.cluster_id or '?'}   Active controller: {active}", "Controllers:"]
    width = max([len(n.address) for n in cluster.controllers] + [len(b.address) for b in cluster.brokers] + [1])
    for node in sorted(cluster.controllers, key=lambda n: n.node_id):
        role = "active" if node.node_id == cluster.controller_id else "standby"
        lines.append(f"  {node.node_id:<3} {node.address:<{width}}  {role}")
    if not cluster.controllers:
        lines.append("  (none reported)")
    lines.append("Brokers:")
    for broker in sorted(cluster.brokers, key=lambda b: b.node_id):
        lines.append(f"  {broker.node_id:<3} {broker.address:<{width}}  {'fenced' if broker.fenced else 'alive'}")
    if not cluster.brokers:
        lines.append("  (none registered)")
    return lines


def run(args: argparse.Namespace) -> int:
    servers = bootstrap_servers(args)
    with reaching(servers):
        admin = open_admin(servers)
        try:
            cluster = admin.describe_cluster()
        finally:
            admin.close()
    print("\n".join(format_cluster(cluster)))
    return 0
