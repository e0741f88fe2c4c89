"""``odradek acls add|list|remove``, with the options and output of Kafka's ``kafka-acls.sh``.

    $ odradek acls add --allow-principal User:alice --operation Read --operation Describe --topic orders
    Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)`:
        (principal=User:alice, host=*, operation=READ, permissionType=ALLOW)
        (principal=User:alice, host=*, operation=DESCRIBE, permissionType=ALLOW)
    $ odradek acls list --topic orders
    $ odradek acls remove --allow-principal User:alice --operation Read --topic orders --force

Kafka's rules kept here: every combination of resource x principal x host x operation is one ACL; hosts
default to ``*``; ``--operation`` defaults to All; ``--producer`` is WRITE, DESCRIBE and CREATE on the topics
(and WRITE, DESCRIBE on ``--transactional-id``), ``--consumer`` is READ and DESCRIBE on the topics and READ on
the group; ``--resource-pattern-type`` defaults to literal (``any`` and ``match`` only for list and remove);
``remove`` without principals removes every ACL of the resources and asks for ``--force``.
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import TYPE_CHECKING, Any

from odradek.cli_support import add_bootstrap_option, bootstrap_servers, open_admin, reaching
from odradek.errors import CliError

if TYPE_CHECKING:
    from odradek.security.acls import AclBinding, AclBindingFilter, AclOperation, PatternType, ResourceType

PATTERN_TYPES = ("literal", "prefixed", "any", "match")


def add_acls_parser(commands: Any) -> None:
    parser = commands.add_parser("acls", help="add, list and remove ACLs (like kafka-acls)",
                                 description="Add, list and remove ACLs, with kafka-acls' options.")  # fmt: skip
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    add = actions.add_parser("add", help="add ACLs", description="Add ACLs.")
    listing = actions.add_parser("list", help="list ACLs", description="List ACLs (every ACL without a resource).")
    remove = actions.add_parser("remove", help="remove ACLs", description="Remove ACLs.")
    for sub, handler in ((add, run_add), (listing, run_list), (remove, run_remove)):
        add_bootstrap_option(sub)
        sub.add_argument("--topic", action="append", default=[], metavar="T", help="a topic (repeatable)")
        sub.add_argument("--group", action="append", default=[], metavar="G", help="a consumer group (repeatable)")
        sub.add_argument("--transactional-id", action="append", default=[], metavar="ID", help="(repeatable)")
        sub.add_argument("--cluster", action="store_true", help="the cluster resource")
        sub.add_argument("--resource-pattern-type", default="literal", choices=PATTERN_TYPES, type=str.lower,
                         help="default: literal (any and match select patterns for list and remove)")  # fmt: skip
        sub.set_defaults(handler=handler)
    for sub in (add, remove):
        sub.add_argument("--allow-principal", action="append", default=[], metavar="P", help="e.g. User:alice")
        sub.add_argument("--deny-principal", action="append", default=[], metavar="P")
        sub.add_argument("--allow-host", action="append", default=[], metavar="H", help="default: *")
        sub.add_argument("--deny-host", action="append", default=[], metavar="H", help="default: *")
        sub.add_argument("--operation", action="append", default=[], metavar="OP",
                         help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, "
                         "AlterConfigs, IdempotentWrite, All (repeatable; default: All)")  # fmt: skip
        sub.add_argument("--producer", action="store_true", help="the producer role's ACLs")
        sub.add_argument("--consumer", action="store_true", help="the consumer role's ACLs (needs --group)")
        sub.add_argument("--idempotent", action="store_true", help="with --producer: IdempotentWrite on the cluster")
    remove.add_argument("--force", action="store_true", help="do not ask for confirmation")
    listing.add_argument("--principal", action="append", default=[], metavar="P", help="only this principal's ACLs")


def _operation(text: str) -> AclOperation:
    from odradek.security.acls import AclOperation

    key = re.sub(r"[^a-z]", "", text.lower())
    for op in AclOperation:
        if op.name.replace("_", "").lower() == key and op not in (AclOperation.UNKNOWN, AclOperation.ANY):
            return op
    raise CliError(f"--operation: unknown operation {text!r} (Read, Write, Create, Delete, Alter, Describe, "
                   "ClusterAction, DescribeConfigs, AlterConfigs, IdempotentWrite, All)")  # fmt: skip


def _principal(text: str) -> str:
    kind, sep, name = text.partition(":")
    if not sep or not kind or not name:
        raise CliError(f"principal {text!r} is not of the form Type:name (for example User:alice)")
    return text


def _pattern_type(args: argparse.Namespace, action: str) -> PatternType:
    from odradek.security.acls import PatternType

    pattern = PatternType[args.resource_pattern_type.upper()]
    if action == "add" and pattern not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise CliError("--resource-pattern-type must be literal or prefixed when adding ACLs")
    return pattern


def _resources(args: argparse.Namespace, action: str) -> list[tuple[ResourceType, str, PatternType]]:
    from common.acls import CLUSTER_RESOURCE_NAME
    from odradek.security.acls import PatternType, ResourceType

    pattern = _pattern_type(args, action)
    found = [(ResourceType.TOPIC, t, pattern) for t in args.topic]
    found += [(ResourceType.GROUP, g, pattern) for g in args.group]
    found += [(ResourceType.TRANSACTIONAL_ID, t, pattern) for t in args.transactional_id]
    if args.cluster:
        found.append((ResourceType.CLUSTER, CLUSTER_RESOURCE_NAME, PatternType.LITERAL if action == "add" else pattern))
    for _, name, _ in found:
        if not name:
            raise CliError("a resource name must not be empty")
    return found


def _role_operations(args: argparse.Namespace, resource_type: ResourceType) -> list[AclOperation]:
    """Kafka's --producer and --consumer: the operations of the role on one resource type."""
    from odradek.security.acls import AclOperation as Op
    from odradek.security.acls import ResourceType as Rt

    ops: list[AclOperation] = []
    if args.producer:
        ops += {Rt.TOPIC: [Op.WRITE, Op.DESCRIBE, Op.CREATE], Rt.TRANSACTIONAL_ID: [Op.WRITE, Op.DESCRIBE],
                Rt.CLUSTER: [Op.IDEMPOTENT_WRITE] if args.idempotent else []}.get(resource_type, [])  # fmt: skip
    if args.consumer:
        ops += {Rt.TOPIC: [Op.READ, Op.DESCRIBE], Rt.GROUP: [Op.READ]}.get(resource_type, [])
    return list(dict.fromkeys(ops))


def _bindings(args: argparse.Namespace) -> dict[tuple[Any, str, Any], list[AclBinding]]:
    """Every ACL ``add`` means, by resource (Kafka's combinations)."""
    from common.acls import CLUSTER_RESOURCE_NAME
    from odradek.security.acls import AclBinding, AclPermissionType, PatternType, ResourceType

    if not args.allow_principal and not args.deny_principal:
        raise CliError("give --allow-principal or --deny-principal")
    if args.consumer and not args.group:
        raise CliError("--consumer needs --group")
    resources = _resources(args, "add")
    roles = args.producer or args.consumer
    if roles and args.operation:
        raise CliError("--operation cannot be combined with --producer or --consumer")
    if args.producer and args.idempotent:
        resources.append((ResourceType.CLUSTER, CLUSTER_RESOURCE_NAME, PatternType.LITERAL))
    if not resources:
        raise CliError("give a resource: --topic, --group, --transactional-id or --cluster")
    explicit = [_operation(op) for op in args.operation] or [_operation("All")]
    out: dict[tuple[Any, str, Any], list[AclBinding]] = {}
    for rtype, name, pattern in resources:
        ops = _role_operations(args, rtype) if roles else explicit
        for permission, principals, hosts in (
            (AclPermissionType.ALLOW, args.allow_principal, args.allow_host or ["*"]),
            (AclPermissionType.DENY, args.deny_principal, args.deny_host or ["*"]),
        ):
            for principal in principals:
                for host in hosts:
                    for op in ops:
                        binding = AclBinding(rtype, name, pattern, _principal(principal), host, op, permission)
                        out.setdefault((rtype, name, pattern), []).append(binding)
    return out


def _pattern_text(rtype: Any, name: str, pattern: Any) -> str:
    return f"ResourcePattern(resourceType={rtype.name}, name={name}, patternType={pattern.name})"


def run_add(args: argparse.Namespace) -> int:
    by_resource = _bindings(args)
    servers = bootstrap_servers(args)
    with reaching(servers), open_admin(servers) as admin:
        for key, bindings in by_resource.items():
            print(f"Adding ACLs for resource `{_pattern_text(*key)}`: ")
            for binding in bindings:
                print(f" \t{binding} ")
            print()
        admin.create_acls([b for bindings in by_resource.values() for b in bindings])
    return 0


def _filters(args: argparse.Namespace, action: str) -> list[AclBindingFilter]:
    from odradek.security.acls import AclBindingFilter, AclOperation, AclPermissionType

    resources = _resources(args, action)
    def option(name: str) -> list[str]:
        return list(getattr(args, name, []))  # ``list`` has no principal, host or operation options

    any_host: list[str | None] = [None]
    principals = [(AclPermissionType.ALLOW, p, option("allow_host") or any_host) for p in option("allow_principal")]
    principals += [(AclPermissionType.DENY, p, option("deny_host") or any_host) for p in option("deny_principal")]
    ops: list[AclOperation] = [_operation(op) for op in option("operation")] or [AclOperation.ANY]
    filters = []
    for rtype, name, pattern in resources:
        if not principals:
            filters.append(AclBindingFilter(rtype, name, pattern))
            continue
        for permission, principal, hosts in principals:
            for host in hosts:
                for op in ops:
                    filters.append(AclBindingFilter(
                        rtype, name, pattern, _principal(principal), host, op, permission,
                    ))  # fmt: skip
    return filters


def run_remove(args: argparse.Namespace) -> int:
    filters = _filters(args, "remove")
    if not filters:
        raise CliError("give a resource: --topic, --group, --transactional-id or --cluster")
    if not args.force:
        if not sys.stdin.isatty():
            raise CliError("removing ACLs asks for confirmation: pass --force")
        answer = input("Are you sure you want to remove the ACLs matching these options? (y/n) ")
        if answer.strip().lower() not in ("y", "yes"):
            return 1
    servers = bootstrap_servers(args)
    with reaching(servers), open_admin(servers) as admin:
        removed = admin.delete_acls(filters)
    _print_grouped("Removed ACLs", removed)
    return 0


def run_list(args: argparse.Namespace) -> int:
    from odradek.security.acls import AclBindingFilter

    principals: list[str | None] = [_principal(p) for p in args.principal] or [None]
    filters = [
        AclBindingFilter(f.resource_type, f.name, f.pattern_type, principal)
        for f in (_filters(args, "list") or [AclBindingFilter()])
        for principal in principals
    ]
    servers = bootstrap_servers(args)
    found: list[AclBinding] = []
    with reaching(servers), open_admin(servers) as admin:
        for acl_filter in filters:
            found.extend(admin.describe_acls(acl_filter))
    _print_grouped("Current ACLs", list(dict.fromkeys(found)))
    return 0


def _print_grouped(title: str, bindings: list[AclBinding]) -> None:
    groups: dict[tuple[Any, str, Any], list[AclBinding]] = {}
    for b in bindings:
        groups.setdefault((b.resource_type, b.name, b.pattern_type), []).append(b)
    for key in sorted(groups, key=lambda k: (k[0], k[1], k[2])):
        print(f"{title} for resource `{_pattern_text(*key)}`: ")
        for binding in groups[key]:
            print(f" \t{binding} ")
        print()
