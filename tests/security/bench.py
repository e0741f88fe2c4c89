"""What security costs: throughput over SSL as a ratio of PLAINTEXT, and the latency authorization adds.

    .venv/bin/python -m tests.security.bench [--rounds 3] [--num-records 100000] [--record-size 1000] [--json]

Three clusters of one controller and one broker (``tests.broker.cluster.Cluster``, free ports), started once
and measured in turns, round after round, so that load from elsewhere on the machine falls on all three:

* ``plaintext``: no TLS, no authorizer;
* ``ssl``: every listener TLS with client certificates required (nodes too), no authorizer;
* ``ssl+acl``: the same, with the StandardAuthorizer on and the client a principal that is not a super user,
  allowed by ACLs (WRITE and READ on the topic), so each request goes through the ACL lookup.

Per round and cluster: ``odradek perf produce`` (acks=all, unthrottled) and ``odradek perf consume`` of the
same records (throughput), then a throttled ``perf produce`` (``--latency-rate`` records/s) whose p50 latency
shows what a request costs rather than what batching hides. Prints each round and the medians: produce and
consume throughput of ssl / plaintext (goal >= 0.8), also as the median of each round's ratio, and the p50
latency of ssl+acl minus ssl. On a shared machine single rounds swing by several times: read the medians.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import grpc

from tests.broker.cluster import Cluster
from tests.cli.helpers import cli_env
from tests.security.tls_files import TlsFiles, make_tls_files

ACL_PRINCIPAL = "User:CN=alice"


def perf(env: dict[str, str], servers: str, props: Path | None, *args: str) -> dict[str, Any]:
    extra = ["--command-config", str(props)] if props is not None else []
    done = subprocess.run(
        [sys.executable, "-m", "odradek.cli", "perf", *args, "--json", "--no-progress", "--bootstrap-servers",
         servers, *extra],
        capture_output=True, text=True, env=env, timeout=900, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"odradek perf {' '.join(args)} failed: {done.stderr.strip()[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


def start(root: Path, name: str, files: TlsFiles) -> tuple[Cluster, Path | None]:
    if name == "plaintext":
        (root / name).mkdir()
        cluster = Cluster(root / name, brokers=1, broker_config={"offsets.topic.replication.factor": "1"})
        return cluster, None
    config = files.node_config("PLAINTEXT:SSL,CONTROLLER:SSL")
    if name == "ssl+acl":
        config |= {"authorizer.class.name": "odradek.StandardAuthorizer", "super.users": "User:CN=node;User:CN=admin"}
    credentials = grpc.ssl_channel_credentials(files.ca.read_bytes(), files.admin_key.read_bytes(),
                                               files.admin_cert.read_bytes())  # fmt: skip
    authz = {k: v for k, v in config.items() if k.startswith(("authorizer", "super"))}
    (root / name).mkdir()
    cluster = Cluster(root / name, brokers=1, channel_credentials=credentials,
                      controller_config=files.node_config("CONTROLLER:SSL") | authz,
                      broker_config={**config, "offsets.topic.replication.factor": "1"})  # fmt: skip
    props = root / f"{name}.properties"
    props.write_text("".join(f"{k}={v}\n" for k, v in files.client_config().items()))
    return cluster, props


def grant(cluster: Cluster, topic: str) -> None:
    """ACLs for alice (the benchmark's client in ``ssl+acl``): WRITE and READ on the topic, IdempotentWrite."""
    from proto import security_pb2

    acls = [security_pb2.AclBinding(resource_type=2, resource_name=topic, pattern_type=3, principal=ACL_PRINCIPAL,
                                    host="*", operation=op, permission_type=3) for op in (3, 4)]  # fmt: skip
    acls.append(security_pb2.AclBinding(resource_type=4, resource_name="kafka-cluster", pattern_type=3,
                                        principal=ACL_PRINCIPAL, host="*", operation=12, permission_type=3))
    response = cluster.broker_stub(0).CreateAcls(security_pb2.CreateAclsRequest(creations=acls), timeout=30)
    assert not response.error.code, response
    assert not any(r.code for r in response.results), response


def micro_authorize_us(iterations: int = 20_000) -> float:
    """Microseconds of one Authorizer.authorize (a produce's WRITE check) among 1000 ACLs of 100 principals."""
    import time as clock

    from controller.security.authorizer import Authorizer
    from metadata.acl import AccessControlEntry, AclBinding, AclPermissionType, PatternType
    from metadata.acl import AclOperation as Op
    from metadata.acl import ResourcePattern as Pattern
    from metadata.acl import ResourceType as Rt

    bindings = {
        AclBinding(Pattern(Rt.TOPIC, f"team{i % 100}-" if i % 2 else f"topic-{i}",
                           PatternType.PREFIXED if i % 2 else PatternType.LITERAL),
                   AccessControlEntry(f"User:u{i % 100}", "*", Op.WRITE, AclPermissionType.ALLOW))
        for i in range(1000)
    }  # fmt: skip
    authorizer = Authorizer(frozenset(bindings))
    started = clock.perf_counter()
    for _ in range(iterations):
        assert authorizer.authorize("User:u7", "10.0.0.1", Op.WRITE, Rt.TOPIC, "team7-orders")
    return (clock.perf_counter() - started) / iterations * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--num-records", type=int, default=100_000)
    parser.add_argument("--record-size", type=int, default=1000)
    parser.add_argument("--latency-rate", type=int, default=500, help="records/s of the latency runs")
    parser.add_argument("--latency-records", type=int, default=5000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    names = ("plaintext", "ssl", "ssl+acl")
    results: dict[str, list[dict[str, float]]] = {n: [] for n in names}
    with tempfile.TemporaryDirectory(prefix="odradek-security-bench-") as tmp:
        root = Path(tmp)
        files = make_tls_files(root / "tls")
        env = cli_env(root / "state")
        clusters: dict[str, tuple[Cluster, Path | None]] = {}
        try:
            for name in names:
                clusters[name] = start(root, name, files)
                cluster, _ = clusters[name]
                cluster.create_topic("bench", partitions=1, replication_factor=1)
                cluster.create_topic("latency", partitions=1, replication_factor=1)
                if name == "ssl+acl":
                    grant(cluster, "bench")
                    grant(cluster, "latency")
            for round_no in range(args.rounds):
                for name in names:
                    cluster, props = clusters[name]
                    servers = cluster.bootstrap_servers
                    produced = perf(env, servers, props, "produce", "--topic", "bench", "--num-records",
                                    str(args.num_records), "--record-size", str(args.record_size), "--acks", "all")
                    consumed = perf(env, servers, props, "consume", "--topic", "bench", "--num-records",
                                    str(args.num_records * (round_no + 1)))
                    latency = perf(env, servers, props, "produce", "--topic", "latency", "--num-records",
                                   str(args.latency_records), "--record-size", "100", "--acks", "all",
                                   "--throughput", str(args.latency_rate))  # fmt: skip
                    row = {"produce_rps": produced["records_per_sec"], "consume_rps": consumed["records_per_sec"],
                           "p50_ms": latency["latency_ms"]["p50"], "p99_ms": latency["latency_ms"]["p99"]}
                    results[name].append(row)
                    print(f"round {round_no + 1} {name:<10} produce {row['produce_rps']:>9.0f} rec/s  consume "
                          f"{row['consume_rps']:>9.0f} rec/s  throttled p50 {row['p50_ms']:.2f} ms p99 "
                          f"{row['p99_ms']:.2f} ms", flush=True)  # fmt: skip
        finally:
            for cluster, _ in clusters.values():
                cluster.stop()

    def median(name: str, key: str) -> float:
        return statistics.median(r[key] for r in results[name])

    def paired(key: str) -> float:
        """The median over rounds of each round's ssl / plaintext ratio (rounds ran back to back)."""
        return statistics.median(s[key] / p[key] for s, p in zip(results["ssl"], results["plaintext"], strict=True))

    def paired_p50_ms() -> float:
        """The median over rounds of each round's p50 of ssl+acl minus ssl's."""
        return statistics.median(a["p50_ms"] - s["p50_ms"] for a, s in zip(results["ssl+acl"], results["ssl"],
                                                                          strict=True))

    summary = {
        "paired_authorization_added_p50_ms": paired_p50_ms(),
        "authorize_us": micro_authorize_us(),
        "paired_ssl_over_plaintext_produce": paired("produce_rps"),
        "paired_ssl_over_plaintext_consume": paired("consume_rps"),
        "ssl_over_plaintext_produce": median("ssl", "produce_rps") / median("plaintext", "produce_rps"),
        "ssl_over_plaintext_consume": median("ssl", "consume_rps") / median("plaintext", "consume_rps"),
        "authorization_added_p50_ms": median("ssl+acl", "p50_ms") - median("ssl", "p50_ms"),
        "medians": {n: {k: median(n, k) for k in results[n][0]} for n in names},
        "rounds": args.rounds, "num_records": args.num_records, "record_size": args.record_size,
    }  # fmt: skip
    print(f"SSL / PLAINTEXT: produce {summary['ssl_over_plaintext_produce']:.2f}, consume "
          f"{summary['ssl_over_plaintext_consume']:.2f} (medians of {args.rounds} rounds); authorization adds "
          f"{summary['authorization_added_p50_ms']:.2f} ms to a throttled produce's p50; per-round ratios' medians: "
          f"produce {summary['paired_ssl_over_plaintext_produce']:.2f}, "
          f"consume {summary['paired_ssl_over_plaintext_consume']:.2f}, authorization "
          f"{summary['paired_authorization_added_p50_ms']:+.2f} ms; one authorize() among 1000 ACLs: "
          f"{summary['authorize_us']:.1f} us")  # fmt: skip
    if args.json:
        print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
