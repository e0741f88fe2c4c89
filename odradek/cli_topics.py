"""``odradek topics create|list|describe|delete``, worded like Kafka's ``kafka-topics.sh``.

    $ odradek topics create orders --partitions 3 --replication-factor 3 --config min.insync.replicas=2
    Created topic orders.
    $ odradek topics describe orders
    Topic: orders  TopicId: ...  PartitionCount: 3  ReplicationFactor: 3  Configs: min.insync.replicas=2
        Topic: orders  Partition: 0  Leader: 1  Replicas: 1,2,0  Isr: 1,2,0
    ...

(fields are separated by tabs, and partition lines start with one, as in Kafka's output)
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from odradek.cli_support import add_bootstrap_option, bootstrap_servers, open_admin, parse_key_values, reaching
from odradek.errors import CliError

if TYPE_CHECKING:
    from odradek import Admin
    from odradek.types import TopicDescription


def add_topics_parser(commands: Any) -> None:
    parser = commands.add_parser("topics", help="create, list, describe and delete topics",
                                 description="Create, list, describe and delete topics.")  # fmt: skip
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    create = actions.add_parser("create", help="create a topic", description="Create a topic.")
    create.add_argument("name", metavar="NAME")
    create.add_argument("--partitions", type=int, default=-1, metavar="N", help="default: the cluster's")
    create.add_argument("--replication-factor", type=int, default=-1, metavar="R", help="default: the cluster's")
    create.add_argument("--config", action="append", metavar="KEY=VALUE", help="a topic config (repeatable)")
    create.set_defaults(handler=run_create)

    listing = actions.add_parser("list", help="list the topics", description="List the topics, one per line.")
    listing.set_defaults(handler=run_list)

    describe = actions.add_parser("describe", help="describe topics and their partitions",
                                  description="Describe a topic (every topic without NAME): partitions, "
                                  "leaders, replicas, in-sync replicas, configs.")  # fmt: skip
    describe.add_argument("name", metavar="NAME", nargs="?")
    describe.set_defaults(handler=run_describe)

    delete = actions.add_parser("delete", help="delete a topic", description="Delete a topic and its data.")
    delete.add_argument("name", metavar="NAME")
    delete.set_defaults(handler=run_delete)
    for sub in (create, listing, describe, delete):
        add_bootstrap_option(sub)


def run_create(args: argparse.Namespace) -> int:
    from odradek import NewTopic

    if args.partitions == 0 or args.partitions < -1:
        raise CliError(f"--partitions must be at least 1, got {args.partitions}")
    if args.replication_factor == 0 or args.replication_factor < -1:
        raise CliError(f"--replication-factor must be at least 1, got {args.replication_factor}")
    config = parse_key_values(args.config, "--config")
    servers = bootstrap_servers(args)
    topic = NewTopic(args.name, num_partitions=args.partitions, replication_factor=args.replication_factor,
                     config=config)  # fmt: skip
    with reaching(servers), open_admin(servers) as admin:
        admin.create_topics([topic])
    print(f"Created topic {args.name}.")
    return 0


def run_list(args: argparse.Namespace) -> int:
    servers = bootstrap_servers(args)
    with reaching(servers), open_admin(servers) as admin:
        names = admin.list_topics()
    for name in sorted(names):
        print(name)
    return 0


def run_delete(args: argparse.Namespace) -> int:
    servers = bootstrap_servers(args)
    with reaching(servers), open_admin(servers) as admin:
        admin.delete_topics([args.name])
    print(f"Deleted topic {args.name}.")
    return 0


def run_describe(args: argparse.Namespace) -> int:
    servers = bootstrap_servers(args)
    with reaching(servers), open_admin(servers) as admin:
        names = [args.name] if args.name else sorted(admin.list_topics())
        descriptions = admin.describe_topics(names) if names else {}
        configs = {name: topic_configs(admin, name) for name in names}
    for name in names:
        print("\n".join(format_topic(descriptions[name], configs.get(name, {}))))
    return 0


def topic_configs(admin: Admin, name: str) -> dict[str, str]:
    """The topic's configs that differ from the defaults (what Kafka's ``Configs:`` shows)."""
    from odradek import ConfigResource

    resource = ConfigResource("topic", name)
    entries = admin.describe_configs([resource]).get(resource, {})
    return {key: e.value for key, e in sorted(entries.items()) if not e.is_default and e.value is not None}


def _ids(ids: Iterable[int]) -> str:
    return ",".join(str(i) for i in ids)


def format_topic(topic: TopicDescription, configs: Mapping[str, str]) -> list[str]:
    """Kafka's describe layout: a topic line, then one tab-indented line per partition."""
    partitions = sorted(topic.partitions, key=lambda p: p.partition)
    replication = len(partitions[0].replicas) if partitions else 0
    head = [f"Topic: {topic.name}"]
    if topic.topic_id:
        head.append(f"TopicId: {topic.topic_id}")
    head += [
        f"PartitionCount: {len(partitions)}",
        f"ReplicationFactor: {replication}",
        "Configs: " + ",".join(f"{k}={v}" for k, v in sorted(configs.items())),
    ]
    lines = ["\t".join(head)]
    for p in partitions:
        leader = str(p.leader) if p.leader >= 0 else "none"
        line = f"\tTopic: {topic.name}\tPartition: {p.partition}\tLeader: {leader}\tReplicas: {_ids(p.replicas)}"
        line += f"\tIsr: {_ids(p.isr)}"
        if p.offline_replicas:
            line += f"\tOffline: {_ids(p.offline_replicas)}"
        lines.append(line)
    return lines
