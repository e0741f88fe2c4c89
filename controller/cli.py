"""``odradek controller``: run one controller node (a metadata-quorum voter with the Controller service).

    odradek controller --node-id ID --listen HOST:PORT --raft-listen HOST:PORT \\
        --quorum ID@HOST:PORT,... --data-dir DIR [--config KEY=VALUE ...] \\
        [--cluster-secret-file PATH] [--controller-addresses ID@HOST:PORT,...] [--cluster-id ID] \\
        [--metrics-listen HOST:PORT]

``--quorum`` lists every voter's Raft address (like KRaft's ``controller.quorum.voters``);
``--controller-addresses`` lists their Controller gRPC addresses, so that a node that is not active can
point callers at the one that is. The cluster secret authenticates Raft traffic: it comes from
``--cluster-secret-file`` or ``$ODRADEK_CLUSTER_SECRET``; without one the node refuses to start (there is no
loopback exception: another user of the machine could join the quorum). ``--metrics-listen`` serves the
node's metrics for Prometheus (``controller.metrics``); every node also serves the gRPC health service.

This module imports nothing heavy: the server (grpc, pysyncobj) is imported when the command runs.
"""

from __future__ import annotations

import argparse
import base64
import ipaddress
import logging
import os
import sys
import uuid
from typing import Any

from common.errors import CommandError
from common.signals import StopSignals, dump_threads_on_sigquit

SECRET_ENV_VAR = "ODRADEK_CLUSTER_SECRET"
LOG_LEVELS = ["DEBUG", "INFO", "WARNING", "ERROR"]


def add_controller_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "controller",
        help="run a controller node (metadata quorum voter)",
        description="Run one controller node: a voter of the metadata quorum serving the Controller gRPC API.",
    )
    parser.add_argument("--node-id", type=int, required=True, help="this node's id (one of --quorum)")
    parser.add_argument("--listen", required=True, metavar="HOST:PORT", help="Controller gRPC address")
    parser.add_argument("--raft-listen", required=True, metavar="HOST:PORT", help="address the Raft port binds")
    parser.add_argument(
        "--quorum", required=True, metavar="ID@HOST:PORT,...", help="every voter's Raft address (this node too)"
    )
    parser.add_argument("--data-dir", required=True, metavar="DIR", help="where the metadata log lives")
    parser.add_argument(
        "--config", action="append", metavar="KEY=VALUE", help="a controller config (repeatable), e.g. "
        "broker.session.timeout.ms=9000",
    )  # fmt: skip
    parser.add_argument("--cluster-secret-file", metavar="PATH", help=f"the cluster secret (else ${SECRET_ENV_VAR})")
    parser.add_argument(
        "--create-cluster-secret", action="store_true",
        help=f"unless ${SECRET_ENV_VAR} is set: create --cluster-secret-file with a random secret when it is missing "
        "(controllers sharing the file's volume agree on one)",
    )  # fmt: skip
    parser.add_argument(
        "--controller-addresses", metavar="ID@HOST:PORT,...", help="the voters' Controller gRPC addresses (hints)"
    )
    parser.add_argument("--cluster-id", help="reported by DescribeQuorum (default: derived from --quorum)")
    parser.add_argument(
        "--metrics-listen", metavar="HOST:PORT", help="serve Prometheus metrics at http://HOST:PORT/metrics"
    )
    parser.add_argument(
        "--log-level",
        type=str.upper,
        choices=LOG_LEVELS,
        default=os.environ.get("ODRADEK_LOG_LEVEL", "INFO").upper(),
        help="default INFO (or $ODRADEK_LOG_LEVEL)",
    )
    parser.set_defaults(handler=run)


def parse_address(text: str, what: str, *, any_host: bool = False) -> str:
    """``host:port`` checked (``[v6]:port`` too); :class:`CommandError` otherwise. With ``any_host`` the host
    may be empty (``:9092``: every address, as a broker's listener may bind)."""
    host, sep, port = text.strip().rpartition(":")
    if not sep or not (host or any_host) or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise CommandError(f"{what} must be HOST:PORT, got {text!r}")
    return text.strip()


def parse_id_map(text: str, option: str) -> dict[int, str]:
    """``ID@HOST:PORT,...`` as a dict; :class:`CommandError` for anything else."""
    result: dict[int, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        node, sep, address = item.partition("@")
        if not sep or not node.strip().isdigit():
            raise CommandError(f"{option} expects ID@HOST:PORT items, got {item!r}")
        node_id = int(node)
        if node_id in result:
            raise CommandError(f"{option} lists node {node_id} twice")
        result[node_id] = parse_address(address, f"{option} item {item!r}")
    if not result:
        raise CommandError(f"{option} lists no node")
    return result


def is_loopback(address: str) -> bool:
    host = address.rpartition(":")[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def default_cluster_id(voters: dict[int, str]) -> str:
    """A stable id for a quorum (Kafka's are random base64 UUIDs made at format time; ours derive from
    the voter list, so that every voter reports the same one without a format step)."""
    seed = ",".join(f"{k}@{v}" for k, v in sorted(voters.items()))
    raw = uuid.uuid5(uuid.NAMESPACE_URL, "odradek-cluster:" + seed).bytes
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def create_secret_file(path: str) -> None:
    """Creates ``path`` with a random secret unless it exists; atomic, so that controllers starting together on
    one shared volume all read the same secret (the first ``link`` wins, the others find the file)."""
    import contextlib
    import secrets

    if os.path.exists(path):
        return
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_urlsafe(32) + "\n")
            out.flush()
            os.fsync(out.fileno())
        with contextlib.suppress(FileExistsError):  # another controller made it first: use theirs
            os.link(tmp, path)
    finally:
        os.unlink(tmp)


def load_secret(path: str | None, addresses: list[str]) -> tuple[str | None, bool]:
    """``(secret, allow_insecure)``; :class:`CommandError` when there is no secret (``addresses`` are named in
    no exception: the Raft transport always needs the secret)."""
    from controller.raft.errors import InsecureConfigError
    from controller.raft.tuning import load_cluster_secret

    try:
        secret = load_cluster_secret(path, env_var=SECRET_ENV_VAR)
    except OSError as exc:
        raise CommandError(f"cannot read the cluster secret file {path}: {exc.strerror}") from None
    except InsecureConfigError as exc:
        raise CommandError(str(exc)) from None
    if secret is None:
        # Issue 17: always, loopback included (another local user could otherwise join the quorum)
        raise CommandError(
            f"no cluster secret: set --cluster-secret-file or ${SECRET_ENV_VAR}; the Raft transport always needs "
            "one (odradek up makes DIR/cluster.secret)"
        )
    return secret, False


def build_options(args: argparse.Namespace) -> Any:
    """The :class:`~controller.server.ServerOptions` of the command line; :class:`CommandError` when invalid."""
    from controller.server import ServerOptions
    from metadata.configs import ConfigError, ControllerConfig, parse_key_values

    voters = parse_id_map(args.quorum, "--quorum")
    if args.node_id not in voters:
        raise CommandError(f"--node-id {args.node_id} is not one of the --quorum voters {sorted(voters)}")
    listen = parse_address(args.listen, "--listen")
    raft_listen = parse_address(args.raft_listen, "--raft-listen")
    metrics_listen = parse_address(args.metrics_listen, "--metrics-listen") if args.metrics_listen else ""
    if raft_listen.rpartition(":")[2] != voters[args.node_id].rpartition(":")[2]:
        raise CommandError(f"--raft-listen {raft_listen} and --quorum's {voters[args.node_id]} name different ports")
    from controller.security.settings import SECURITY_KEY_NAMES, NodeSecurity

    try:
        props = parse_key_values(args.config)
        security = NodeSecurity.from_props(props)
        config = ControllerConfig.from_props({k: v for k, v in props.items() if k not in SECURITY_KEY_NAMES})
        security.check_listener(security.controller_listener)
    except ConfigError as exc:
        raise CommandError(str(exc)) from None
    addresses = parse_id_map(args.controller_addresses, "--controller-addresses") if args.controller_addresses else {}
    secret_file = args.cluster_secret_file
    if args.create_cluster_secret:
        if secret_file is None:
            raise CommandError("--create-cluster-secret needs --cluster-secret-file")
        if os.environ.get(SECRET_ENV_VAR, "").strip():
            secret_file = None  # the variable wins over the generated file
        else:
            create_secret_file(secret_file)
    secret, insecure = load_secret(secret_file, [*voters.values(), raft_listen])
    return ServerOptions(
        node_id=args.node_id,
        listen=listen,
        raft_listen=raft_listen,
        voters=voters,
        data_dir=args.data_dir,
        config=config,
        secret=secret,
        allow_insecure=insecure,
        controller_addresses=addresses,
        cluster_id=args.cluster_id or default_cluster_id(voters),
        metrics_listen=metrics_listen,
        security=security,
    )


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=args.log_level if args.log_level in LOG_LEVELS else "INFO",  # $ODRADEK_LOG_LEVEL may be anything
        format="%(asctime)s.%(msecs)03d %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
        stream=sys.stderr,
    )
    logging.getLogger("pysyncobj").setLevel(max(logging.WARNING, logging.getLogger().level))
    options = build_options(args)
    from controller.quorum import QuorumError
    from controller.server import ControllerServer

    stop = StopSignals()  # SIGTERM / SIGINT (common.signals: the handler takes no lock)
    dump_threads_on_sigquit()  # kill -QUIT: every thread's stack to stderr (a JVM's thread dump)
    try:
        server = ControllerServer(options)
        server.start()
    except (QuorumError, RuntimeError, ValueError) as exc:
        raise CommandError(f"controller {options.node_id} cannot start: {exc}") from None
    quorum = ",".join(f"{k}@{v}" for k, v in sorted(options.voters.items()))
    metrics = f", metrics http://{server.metrics.address}/metrics" if server.metrics is not None else ""
    print(
        f"odradek controller {options.node_id} listening on {options.listen} (raft {options.raft_listen}, "
        f"quorum {quorum}, cluster {options.cluster_id}{metrics})",
        flush=True,
    )
    failure = None
    try:
        while not stop.wait(0.2):
            failure = server.failure
            if failure is not None:
                break
    finally:
        server.stop()
    if failure is not None:
        raise CommandError(f"controller {options.node_id} halted: {failure}")
    logging.getLogger("odradek.controller").info("controller %d stopped", options.node_id)
    return 0
