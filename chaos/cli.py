"""``python -m chaos``: run a chaos test, or check a recorded history again.

    python -m chaos run --duration 60 --seed 7 --faults kill-leader,kill-controller,pause
    python -m chaos run --cluster-json odradek-data/cluster.json --duration 600 --seed 1 --faults all
    python -m chaos check chaos-runs/7-20261126T010203/history.jsonl

Exit status: 0 when the run found no anomaly and had no problem, 1 when it found any, 2 when it could not
run (bad arguments, the cluster did not start).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from chaos.backends import Backend, BackendError
from chaos.backends.local import LocalBackend
from chaos.checker import check
from chaos.faults import FAULT_KINDS, KNOWN_KINDS, TXN_FAULT_KINDS, Timing
from chaos.history import read_history
from chaos.report import render, summarize
from chaos.runner import SESSION_TIMEOUT_S, RunConfig, cluster_configs, run


def _faults(text: str) -> tuple[str, ...]:
    kinds = tuple(FAULT_KINDS) if text == "all" else tuple(k.strip() for k in text.split(",") if k.strip())
    unknown = [k for k in kinds if k not in KNOWN_KINDS]
    if unknown or not kinds:
        problem = f"unknown fault kind {unknown[0]!r}" if unknown else "no fault kind given"
        raise argparse.ArgumentTypeError(f"{problem} (kinds: {', '.join(KNOWN_KINDS)}, or all)")
    return kinds


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="python -m chaos", description=__doc__.split("\n\n")[0])
    commands = top.add_subparsers(dest="command", required=True)
    p = commands.add_parser("run", help="run a workload under faults and check its history")
    p.add_argument("--duration", type=float, default=60.0, metavar="SECONDS", help="fault phase length (default 60)")
    p.add_argument("--seed", type=int, default=0, help="seeds the fault schedule (default 0)")
    p.add_argument("--faults", type=_faults, default=FAULT_KINDS, metavar="KIND,...",
                   help=f"comma-separated: {', '.join(KNOWN_KINDS)}; or all (the default: all but "
                        f"{', '.join(TXN_FAULT_KINDS)}, which needs --txn-producers)")  # fmt: skip
    p.add_argument(
        "--backend",
        choices=("local", "compose"),
        default="local",
        help="local: processes on 127.0.0.1 (default); compose: deploy/docker-compose.yml (can isolate)",
    )
    p.add_argument("--cluster-json", metavar="PATH", help="local: attach to the cluster of a running 'odradek up'")
    p.add_argument(
        "--compose-project",
        metavar="NAME",
        help="compose: attach to this running project (brokers published on 9092-9094)",
    )
    p.add_argument("--data-dir", metavar="DIR", help="where to start a new cluster (default OUT/cluster)")
    p.add_argument("--out", metavar="DIR", help="history and report (default chaos-runs/<seed>-<time>)")
    p.add_argument("--brokers", type=int, default=3, help="brokers of a started cluster (default 3)")
    p.add_argument("--controllers", type=int, default=3, help="controllers of a started cluster (default 3)")
    p.add_argument("--base-port", type=int, help="first broker port of a started cluster (default: a free range)")
    p.add_argument("--partitions", type=int, default=6, help="partitions of the test topic (default 6)")
    p.add_argument("--rate", type=float, default=150.0, help="records per second, all producers (default 150)")
    p.add_argument("--producers", type=int, default=3, help="producer threads (default 3)")
    p.add_argument("--readers", type=int, default=2, help="assign-and-poll readers (default 2)")
    p.add_argument(
        "--txn-producers",
        type=int,
        default=0,
        help="transactional producers, committing and aborting (default 0; needs --rc-readers)",
    )
    p.add_argument("--rc-readers", type=int, default=0, help="read_committed assign-and-poll readers (default 0)")
    p.add_argument("--group-members", type=int, default=2,
                   help="group consumers, when Consumer.subscribe works (default 2; 0: none)")  # fmt: skip
    p.add_argument("--hold", type=float, nargs=2, default=(4.0, 10.0), metavar=("MIN", "MAX"),
                   help="seconds a node stays killed or isolated (default 4 10)")  # fmt: skip
    p.add_argument("--quiet", type=float, nargs=2, default=(4.0, 8.0), metavar=("MIN", "MAX"),
                   help="seconds between episodes (default 4 8)")  # fmt: skip
    p.add_argument("--broker-config", type=_key_value, action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--controller-config", type=_key_value, action="append", default=[], metavar="KEY=VALUE")
    p.set_defaults(handler=_run)
    c = commands.add_parser("check", help="check a recorded history.jsonl again and print its report")
    c.add_argument("history", type=Path)
    c.set_defaults(handler=_check)
    return top


def _run(args: argparse.Namespace) -> int:
    out_dir = Path(args.out or f"chaos-runs/{args.seed}-{time.strftime('%Y%m%dT%H%M%S')}").absolute()
    broker_config, controller_config = cluster_configs(dict(args.broker_config), dict(args.controller_config))
    session_s = float(controller_config.get("broker.session.timeout.ms", SESSION_TIMEOUT_S * 1000)) / 1000
    if args.txn_producers > 0 and args.rc_readers <= 0:
        print("chaos: --txn-producers needs --rc-readers 1 or more: the transaction checkers read what the "
              "read_committed readers read", file=sys.stderr)  # fmt: skip
        return 2
    if set(args.faults) & set(TXN_FAULT_KINDS) and args.txn_producers <= 0:
        print(f"chaos: {', '.join(TXN_FAULT_KINDS)} needs --txn-producers 1 or more", file=sys.stderr)
        return 2
    config = RunConfig(
        duration_s=args.duration, seed=args.seed, faults=args.faults, out_dir=out_dir, partitions=args.partitions,
        producers=args.producers, readers=args.readers, group_members=args.group_members, rate=args.rate,
        txn_producers=args.txn_producers, rc_readers=args.rc_readers,
        timing=Timing(quiet_s=tuple(args.quiet), hold_s=tuple(args.hold), pause_s=session_s * 1.5),
    )  # fmt: skip
    try:
        backend = _backend(args, out_dir, broker_config, controller_config)
    except BackendError as exc:
        print(f"chaos: {exc}", file=sys.stderr)
        return 2
    try:
        result = run(config, backend, out=lambda line: print(line, flush=True))
    finally:
        backend.close()
    print()
    print(result.report, end="")
    print(f"Files: {out_dir}/history.jsonl, report.txt, summary.json")
    return 0 if result.passed else 1


def _backend(args: argparse.Namespace, out_dir: Path, broker_config: dict[str, str],
             controller_config: dict[str, str]) -> Backend:  # fmt: skip
    if args.backend == "compose":
        from chaos.backends.compose import ComposeBackend

        if args.compose_project:
            return ComposeBackend.attach(args.compose_project)
        print("chaos: starting the docker compose cluster ...", flush=True)
        return ComposeBackend.start(broker_config=broker_config, controller_config=controller_config)
    if args.cluster_json:
        return LocalBackend.attach(args.cluster_json, broker_config=dict(args.broker_config),
                                   controller_config=dict(args.controller_config))  # fmt: skip
    data_dir = args.data_dir or str(out_dir / "cluster")
    print(f"chaos: starting {args.controllers} controllers and {args.brokers} brokers in {data_dir} ...", flush=True)
    return LocalBackend.start(data_dir, controllers=args.controllers, brokers=args.brokers, base_port=args.base_port,
                              broker_config=broker_config, controller_config=controller_config)  # fmt: skip


def _check(args: argparse.Namespace) -> int:
    try:
        ops = read_history(args.history)
    except (OSError, ValueError) as exc:
        print(f"chaos: cannot read {args.history}: {exc}", file=sys.stderr)
        return 2
    anomalies = check(ops)
    print(render(summarize(ops, anomalies)), end="")
    return 1 if anomalies else 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    status: int = args.handler(args)
    return status
