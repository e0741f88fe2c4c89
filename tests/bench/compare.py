"""Odradek side by side with NATS JetStream and Redis Streams: the same workloads on this machine, one run.

    python -m tests.bench.compare [--systems odradek-rf3,odradek-rf1,odradek-kafka-rf3,odradek-kafka-rf1,
        nats-r3,nats-r1,redis]
        [--workloads produce-100,produce-1k,consume-100,consume-1k,e2e-1k,e2e-10k,e2e-burst]
        [--repeat 3] [--scale 1.0] [--install-peers] [--json-out FILE] [--client-cpus CPU[,CPU...]]
        [--e2e-consumer-process] [--security plaintext|ssl|sasl_ssl]

In the spirit of the OpenMessaging Benchmark: every system gets the same workloads, record sizes and
rates, from a client in its own process, on the same machine in the same run. The harness starts every
server it uses (an ``odradek up`` cluster of 3 controllers and 3 brokers, 3 NATS servers with JetStream
on file storage, one Redis server) on free ports under a temporary directory, and stops them all at the
end. NATS and Redis come from Debian's packages; a system whose server is missing is skipped with the
reason (``--install-peers`` installs the packages with apt-get first).

Systems: ``odradek-rf3`` (a 1-partition topic, replication factor 3, acks=all), ``odradek-rf1`` (RF 1,
acks=all, which on RF 1 is acks=1), ``odradek-kafka-rf3`` / ``odradek-kafka-rf1`` (the same cluster and
topics, but the workloads run by a stock Kafka client, librdkafka as confluent-kafka, through the brokers'
Kafka listener over plain TCP instead of Odradek's clients over gRPC: what the client path costs; settings
in ``tests/bench/peers.py``), ``nats-r3`` / ``nats-r1`` (a JetStream stream with 3 or 1 replicas,
file storage), ``redis`` (one Redis Stream; not replicated, no persistence).

Workloads (record counts times ``--scale``):

- ``produce-100`` / ``produce-1k``: 100,000 records of 100 B / 30,000 of 1 KiB, as fast as the client goes;
  throughput, and each record's ack latency (``odradek perf produce``; NATS ``publish_async``; Redis
  pipelined ``XADD``);
- ``consume-100`` / ``consume-1k``: read those records back from the start (they need the produce
  workload of the same size, which they follow);
- ``e2e-1k`` / ``e2e-10k``: 5,000 / 50,000 records of 100 B sent one at a time at 1,000 / 10,000 a second
  while a consumer waits at the end: end-to-end latency (send to receipt) and ack latency
  (``odradek perf e2e``);
- ``e2e-burst``: ``e2e-1k`` right after 100,000 records were produced to the same topic as fast as
  possible (the tail right after load, to compare with ``e2e-1k`` on an idle topic).

``--variant NAME:KEY=VALUE,...`` starts one more Odradek cluster with those broker configs, whose systems are
named ``odradek-rf3@NAME`` / ``odradek-rf1@NAME``: an improvement measured against the code without it
(its switch off) in the same run, e.g. ``--variant before:fetch.inline.read.max.bytes=0 --systems
odradek-rf3@before,odradek-rf3``. ``--tree NAME:PATH`` does the same for a change of code: the cluster
``odradek-rf3@NAME`` and its ``odradek perf`` clients run from the checkout at PATH (its ``.venv`` when it
has one), e.g. ``git worktree add /tmp/base main~3`` then ``--tree base:/tmp/base --systems
odradek-rf3@base,odradek-rf3``. ``odradek-kafka-rf3@NAME`` runs on that cluster too, but its client is
librdkafka whatever the checkout (only the brokers' code differs). The clusters all run at once (the idle
ones cost a little CPU).

``--e2e-consumer-process`` runs Odradek's e2e workloads with ``odradek perf e2e --consumer-process`` (the
consumer in a process of its own, as a pipeline's is; the peers' clients are one thread each either way).
``--client-cpus 1`` runs every system's clients (the perf tools, the peers' clients) on CPU 1 only, the servers
on every CPU as always: the same placement for every system's client. ``--security ssl|sasl_ssl`` makes every
Odradek cluster with ``odradek up --security`` and runs its clients with the ``client.properties`` that writes
(TLS; SASL with sasl_ssl), e.g. ``--security sasl_ssl --tree base:/tmp/base --systems odradek-rf3@base,odradek-rf3``:
a change measured for SASL clients; the peers stay plaintext, and ``odradek-kafka-*`` is refused with it.

Every workload writes to a fresh topic or stream. With ``--repeat N`` the workloads run N rounds, the
systems in a rotated order each round (so a slow drift of the machine does not favour one system), and
the table shows the median of the rounds with the range. ``server µs/rec`` is the CPU the system's servers
spent per record while the measured workload's client ran (its burst not counted): every server process
(each process's CPU clock, ``systems.cpu_seconds``; for Odradek its controllers and brokers), their idle work
over the client's whole run included, so short runs overstate it. ``client µs/rec`` is the CPU the client
process spent per record beyond its start-up: its whole run's CPU less that of a second run of the same client
with 1/50 of the records, right after (``metered``): the peers' Python clients and Odradek's, the same way. On a
machine of two cores the CPU a record costs, servers' and client's, is what its tail waits for (each process of
an Odradek cluster apart: ``tests.bench.cpu``). The ratio
columns divide by the baseline system's figure of the same workload (``--baseline``, default the first system):
for throughput above 1 means faster than the baseline, for latency above 1 means slower. Other helpers may load
the machine: the load average is printed before and after; only ratios within one run mean anything. The header
also gives this machine's hop measured first (``bench.rpc_floor``'s tcp-asyncio round trip between two Python
processes): the machine's speed to wake a process changes by 2× from one session to the next, and the absolute
latencies with it (docs/LATENCY.md); and the share of the run's CPU time the hypervisor stole (``/proc/stat``'s
steal), which rose and fell within single sessions of this project's slow machines.

Figures only: nothing here asserts a speed (``tests/bench/test_bench_smoke.py`` runs it tiny and checks
that the output is complete).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import rpc_floor
from tests.bench.systems import (
    NatsCluster,
    OdradekCluster,
    RedisServer,
    children_cpu_seconds,
    cpu_seconds,
    find_binary,
    install_packages,
    peer_workload,
)

SYSTEMS = ("odradek-rf3", "odradek-rf1", "odradek-kafka-rf3", "odradek-kafka-rf1", "nats-r3", "nats-r1", "redis")
ROOT = Path(__file__).resolve().parents[2]
HOP_ROUND_TRIPS = 1000  # machine_hop(): about 1.5 s with its warm-up
STARTUP_SHARE = 50  # metered(): the client's start-up measured by a run of 1/50 of the records


@dataclass(frozen=True, slots=True)
class Workload:
    name: str
    kind: str  # produce, consume, e2e
    records: int
    record_size: int
    rate: float = -1  # records/s, -1: unthrottled
    burst: int = 0  # e2e: records produced unthrottled to the topic first
    follows: str = ""  # consume: the produce workload whose records it reads

    def scaled(self, scale: float) -> Workload:
        def n(x: int) -> int:
            return max(1, round(x * scale)) if x else 0

        return Workload(self.name, self.kind, n(self.records), self.record_size, self.rate, n(self.burst), self.follows)

    @property
    def title(self) -> str:
        size = f"{self.record_size} B" if self.record_size < 1024 else f"{self.record_size // 1024} KiB"
        if self.kind == "e2e":
            rate = f"{self.rate / 1000:g}k/s"
            return f"e2e {rate} {size}" + (" burst" if self.burst else "")
        return f"{self.kind} {size}"


WORKLOADS = {
    w.name: w
    for w in (
        Workload("produce-100", "produce", 100_000, 100),
        Workload("produce-1k", "produce", 30_000, 1024),
        Workload("consume-100", "consume", 100_000, 100, follows="produce-100"),
        Workload("consume-1k", "consume", 30_000, 1024, follows="produce-1k"),
        Workload("e2e-1k", "e2e", 5_000, 100, rate=1_000),
        Workload("e2e-10k", "e2e", 50_000, 100, rate=10_000),
        Workload("e2e-burst", "e2e", 5_000, 100, rate=1_000, burst=100_000),
    )
}


@dataclass(slots=True)
class Result:
    workload: str
    system: str
    round: int
    doc: dict[str, Any] | None = None
    error: str = ""


@dataclass(slots=True)
class Run:
    """The servers of a run and what each system needs to run a workload."""

    root: Path
    odradek: dict[str, OdradekCluster] = field(default_factory=dict)  # by variant ("": the defaults)
    nats: NatsCluster | None = None
    redis: RedisServer | None = None
    skipped: dict[str, str] = field(default_factory=dict)
    e2e_consumer_process: bool = False  # odradek perf e2e --consumer-process

    def stop(self) -> None:
        for server in (*self.odradek.values(), self.nats, self.redis):
            if server is not None:
                try:
                    server.stop()
                except Exception as exc:  # stop the others all the same
                    print(f"stopping {type(server).__name__} failed: {exc}", file=sys.stderr)


def start_servers(run: Run, systems: Sequence[str], args: argparse.Namespace) -> None:
    if args.install_peers:
        binaries = (("nats-server", "nats"), ("redis-server", "redis"))
        wanted = [binary for binary, prefix in binaries if any(s.startswith(prefix) for s in systems)]
        why = install_packages(wanted)
        if why:
            print(f"installing peers: {why}", file=sys.stderr)
    for variant in dict.fromkeys(variant_of(s) for s in systems if s.startswith("odradek")):
        config = args.variants[variant] if variant else ()
        progress(f"starting odradek up ({args.controllers} controllers, {args.brokers} brokers"
                 f"{', ' + ' '.join(config) if config else ''}"
                 f"{', the code of ' + str(args.trees[variant]) if variant in args.trees else ''})")  # fmt: skip
        directory = run.root / f"odradek{'-' + variant if variant else ''}"
        run.odradek[variant] = OdradekCluster(directory, args.controllers, args.brokers, broker_config=config,
                                              tree=args.trees.get(variant), security=args.security).start()  # fmt: skip
        if args.idle_topics:
            progress(f"creating {args.idle_topics} idle topics (1 partition, RF {min(3, args.brokers)})")
            for i in range(args.idle_topics):
                run.odradek[variant].create_topic(f"idle-{i}", 1, min(3, args.brokers))
    if any(s.startswith("nats") for s in systems):
        binary, why = find_binary("nats-server")
        if binary is None:
            run.skipped.update({s: why for s in systems if s.startswith("nats")})
        else:
            progress("starting 3 NATS servers with JetStream")
            run.nats = NatsCluster(run.root / "nats", binary, 3).start()
    if "redis" in systems:
        binary, why = find_binary("redis-server")
        if binary is None:
            run.skipped["redis"] = why
        else:
            progress("starting redis-server")
            run.redis = RedisServer(run.root / "redis", binary).start()


def variant_of(system: str) -> str:
    """``odradek-rf3@after`` -> ``after``; "" for a system without a variant."""
    return system.partition("@")[2]


def progress(line: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)


def timeout_for(w: Workload) -> float:
    seconds = w.records / w.rate if w.rate > 0 else w.records / 5_000
    return 120 + 3 * seconds + w.burst / 2_000


def last_json(stdout: bytes) -> dict[str, Any]:
    lines = stdout.decode(errors="replace").strip().splitlines()
    if not lines:
        raise ValueError("no output")
    doc: dict[str, Any] = json.loads(lines[-1])
    return doc


def topic_name(w: Workload, system: str, round_no: int) -> str:
    source = WORKLOADS[w.follows] if w.follows else w
    return f"bench-{source.name}-{system}-{round_no}".replace(".", "-").replace("@", "-")


def replication_factor(system: str) -> int:
    """An Odradek system's: ``odradek-rf3``, ``odradek-kafka-rf3@NAME`` -> 3."""
    return 3 if system.partition("@")[0].endswith("-rf3") else 1


def run_odradek(run: Run, system: str, w: Workload, round_no: int) -> dict[str, Any]:
    cluster = run.odradek[variant_of(system)]
    topic = topic_name(w, system, round_no)
    rf = replication_factor(system)
    timeout_s = timeout_for(w)
    make_topics(cluster, w, topic, rf)
    if w.burst:
        done = cluster.perf(["produce", "--topic", topic, "--num-records", str(w.burst), "--record-size",
                             str(w.record_size), "--acks", "all"], timeout_s)  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"the burst failed: {done.stderr.decode().strip()[-500:]}")

    def client(records: int, short: bool) -> subprocess.CompletedProcess[bytes]:
        if w.kind == "produce":
            into = startup_topic(topic) if short else topic
            args = ["produce", "--topic", into, "--num-records", str(records), "--record-size", str(w.record_size),
                    "--throughput", str(w.rate), "--acks", "all"]  # fmt: skip
        elif w.kind == "consume":
            args = ["consume", "--topic", topic, "--num-records", str(records)]
        else:
            args = ["e2e", "--topic", topic, "--num-records", str(records), "--rate", str(w.rate), "--record-size",
                    str(w.record_size), "--acks", "all"]  # fmt: skip
            if run.e2e_consumer_process:
                args.append("--consumer-process")
        return cluster.perf(args, timeout_s)

    done, cpu = metered(cluster.pids(), w.records, client)
    if done.returncode != 0:
        raise RuntimeError(done.stderr.decode().strip()[-500:] or f"exit status {done.returncode}")
    return {**last_json(done.stdout), "cpu": cpu}


def startup_topic(topic: str) -> str:
    """Where a produce workload's short run (``metered``) writes: not the topic its consume workload reads."""
    return f"{topic}-startup"


def make_topics(cluster: OdradekCluster, w: Workload, topic: str, rf: int) -> None:
    """The workload's topic (a consume workload reads its produce workload's), and a produce workload's
    ``startup_topic``."""
    if w.kind != "consume":
        cluster.create_topic(topic, 1, rf)
    if w.kind == "produce":
        cluster.create_topic(startup_topic(topic), 1, rf)


def metered(
    servers: Sequence[int], records: int, client: Callable[[int, bool], subprocess.CompletedProcess[bytes]]
) -> tuple[subprocess.CompletedProcess[bytes], dict[str, float]]:
    """``client(records, False)`` (one client process, waited for), and the CPU per record, in microseconds, that the
    system's servers (every process of ``servers``) spent while it ran, ``server_us``, and that the client
    spent beyond its start-up, ``client_us``: its CPU (``getrusage`` of the finished child, its own children
    included) less that of a second, short run of the same client (``client(records // STARTUP_SHARE, True)``,
    after the measured one, not metered on the servers), divided by the records the long run had more. The
    start-up (imports, connections, a warm-up record) costs an Odradek client ~0.7 s of CPU here, ~140 µs a
    record of a 5,000-record run; what a client spends per record while it runs is what the servers' CPU
    competes with. No ``client_us`` for a run too short to have a short run."""
    before, client_before = sum(cpu_seconds(pid) for pid in servers), children_cpu_seconds()
    done = client(records, False)
    client_cpu = children_cpu_seconds() - client_before
    cpu = {"server_us": (sum(cpu_seconds(pid) for pid in servers) - before) * 1e6 / max(1, records)}
    short = records // STARTUP_SHARE
    if done.returncode != 0 or short < 1:
        return done, cpu
    client_before = children_cpu_seconds()
    started = client(short, True)
    if started.returncode != 0:
        raise RuntimeError(f"the short run of {short} records (the client's start-up) failed: "
                           f"{started.stderr.decode().strip()[-500:] or started.returncode}")  # fmt: skip
    cpu["client_us"] = (client_cpu - (children_cpu_seconds() - client_before)) * 1e6 / (records - short)
    return done, cpu


def run_kafka(run: Run, system: str, w: Workload, round_no: int) -> dict[str, Any]:
    """``odradek-kafka-rf3``: the Odradek cluster of ``odradek-rf3``, its topic made the same way, the workload
    run by the Kafka peer (librdkafka) through the brokers' Kafka listener."""
    cluster = run.odradek[variant_of(system)]
    topic = topic_name(w, system, round_no)
    make_topics(cluster, w, topic, replication_factor(system))
    return run_peer_workload("kafka", cluster.kafka_bootstrap, topic, w, replication_factor(system), cluster.pids())


def run_peer(run: Run, system: str, w: Workload, round_no: int) -> dict[str, Any]:
    server: NatsCluster | RedisServer | None = run.redis if system == "redis" else run.nats
    assert server is not None
    replicas = 3 if system == "nats-r3" else 1
    return run_peer_workload(
        "redis" if system == "redis" else "nats", server.servers, topic_name(w, system, round_no), w, replicas,
        server.pids(),
    )


def run_peer_workload(
    kind: str, servers: str, stream: str, w: Workload, replicas: int, pids: Sequence[int]
) -> dict[str, Any]:
    """The workload (after its burst, if it has one) by ``tests.bench.peers``, metered (:func:`metered`, the
    servers' processes ``pids``); its JSON document."""
    timeout_s = timeout_for(w)
    if w.burst:
        done = peer_workload(kind, "produce", servers, stream, w.burst, w.record_size, -1, replicas, timeout_s)
        if done.returncode != 0:
            raise RuntimeError(f"the burst failed: {done.stderr.decode().strip()[-500:]}")

    def client(records: int, short: bool) -> subprocess.CompletedProcess[bytes]:
        into = startup_topic(stream) if short and w.kind == "produce" else stream  # NATS, Redis: made on first use
        return peer_workload(kind, w.kind, servers, into, records, w.record_size, w.rate, replicas, timeout_s)

    done, cpu = metered(pids, w.records, client)
    if done.returncode != 0:
        raise RuntimeError(done.stderr.decode().strip()[-500:] or f"exit status {done.returncode}")
    return {**last_json(done.stdout), "cpu": cpu}


def run_one(run: Run, system: str, w: Workload, round_no: int) -> Result:
    result = Result(w.name, system, round_no)
    if system in run.skipped:
        result.error = f"skipped: {run.skipped[system]}"
        return result
    try:
        if system.startswith("odradek-kafka"):
            runner = run_kafka
        else:
            runner = run_odradek if system.startswith("odradek") else run_peer
        result.doc = runner(run, system, w, round_no)
    except Exception as exc:
        result.error = f"failed: {exc}"
    return result


def run_rounds(run: Run, systems: Sequence[str], workloads: Sequence[Workload], repeat: int) -> list[Result]:
    results = []
    for round_no in range(repeat):
        order = list(systems[round_no % len(systems) :]) + list(systems[: round_no % len(systems)])
        for w in workloads:
            for system in order:
                progress(f"round {round_no + 1}/{repeat}: {w.name} on {system}")
                result = run_one(run, system, w, round_no)
                if result.error:
                    progress(f"  {result.error}")
                results.append(result)
    return results


# ----------------------------------------------------------------------------------------------- the table

FIGURES = (  # (column, path in the document)
    ("rec/s", ("records_per_sec",)),
    ("MB/s", ("mb_per_sec",)),
    ("ack p50", ("ack", "p50")),
    ("ack p99", ("ack", "p99")),
    ("ack p999", ("ack", "p999")),
    ("e2e p50", ("e2e", "p50")),
    ("e2e p99", ("e2e", "p99")),
    ("e2e p999", ("e2e", "p999")),
    ("server µs/rec", ("cpu", "server_us")),
    ("client µs/rec", ("cpu", "client_us")),
)


def figure(doc: dict[str, Any], kind: str, path: tuple[str, ...]) -> float | None:
    """One figure of a workload's document: ``ack`` is ``latency_ms`` of produce, ``ack_latency_ms`` of e2e;
    ``e2e`` is ``latency_ms`` of e2e."""
    if path == ("records_per_sec",) or path == ("mb_per_sec",):
        return float(doc[path[0]])
    group, name = path
    if group == "cpu":
        return float(doc["cpu"][name]) if name in doc.get("cpu", {}) else None
    if group == "ack":
        source = doc.get("latency_ms") if kind == "produce" else doc.get("ack_latency_ms") if kind == "e2e" else None
    else:
        source = doc.get("latency_ms") if kind == "e2e" else None
    return None if source is None else float(source[name])


def summarize(results: Sequence[Result], w: Workload, system: str) -> tuple[dict[str, tuple[float, float, float]], str]:
    """Per column: (median, min, max) over the rounds; and the error, when no round succeeded."""
    mine = [r for r in results if r.workload == w.name and r.system == system]
    docs = [r.doc for r in mine if r.doc is not None]
    if not docs:
        return {}, (mine[0].error if mine else "not run")
    out = {}
    for column, path in FIGURES:
        values = [v for v in (figure(d, w.kind, path) for d in docs) if v is not None]
        if values:
            out[column] = (statistics.median(values), min(values), max(values))
    return out, ""


def fmt(value: float, column: str) -> str:
    if column == "rec/s":
        return f"{value:,.0f}"
    if column == "MB/s":
        return f"{value:.2f}"
    if column in ("server µs/rec", "client µs/rec"):
        return f"{value:,.0f}"
    return f"{value:.2f}"


def render(results: Sequence[Result], systems: Sequence[str], workloads: Sequence[Workload], baseline: str,
           repeat: int) -> str:  # fmt: skip
    """One row per workload and system: the figures (median, and range over the rounds), then the ratios
    of throughput and latency (e2e for e2e workloads, ack for produce) to the baseline's."""
    columns = [c for c, _ in FIGURES]
    ratio_columns = ["rec/s ×base", "p50 ×base", "p99 ×base"]
    rows: list[list[str]] = [["workload", "system", *columns, *ratio_columns]]
    for w in workloads:
        base, _ = summarize(results, w, baseline)
        for system in systems:
            figures, error = summarize(results, w, system)
            if error:
                rows.append([w.title, system, error])
                continue
            row = [w.title, system]
            for column in columns:
                if column not in figures:
                    row.append("")
                    continue
                mid, lo, hi = figures[column]
                spread = f" ({fmt(lo, column)}-{fmt(hi, column)})" if repeat > 1 else ""
                row.append(fmt(mid, column) + spread)
            latency = "e2e" if w.kind == "e2e" else "ack"
            for column in ("rec/s", f"{latency} p50", f"{latency} p99"):
                ok = column in figures and column in base and base[column][0] > 0
                row.append(f"{figures[column][0] / base[column][0]:.2f}×" if ok else "")
            rows.append(row)
    widths = [max(len(r[i]) for r in rows if i < len(r) and len(r) > 3) for i in range(len(rows[0]))]
    lines = []
    for n, row in enumerate(rows):
        if len(row) == 3:  # an error: the rest of the line says why
            lines.append(f"{row[0]:<{widths[0]}}  {row[1]:<{widths[1]}}  {row[2]}")
            continue
        cells = [f"{row[0]:<{widths[0]}}", f"{row[1]:<{widths[1]}}"]
        cells += [f"{cell:>{width}}" for cell, width in zip(row[2:], widths[2:], strict=True)]
        lines.append("  ".join(cells))
        if n == 0:
            lines.append("-" * len(lines[0]))
    return "\n".join(lines)


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def cpu_ticks() -> tuple[int, int] | None:
    """(all, stolen) CPU ticks since boot from /proc/stat (Linux), or None: steal is the time a virtual
    machine's CPUs were ready to run but the hypervisor ran something else."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    except OSError:
        return None
    if fields[0] != "cpu" or len(fields) < 9:
        return None
    ticks = [int(f) for f in fields[1:9]]  # user nice system idle iowait irq softirq steal
    return sum(ticks), ticks[7]


def steal_share(before: tuple[int, int] | None, after: tuple[int, int] | None) -> float | None:
    if before is None or after is None or after[0] <= before[0]:
        return None
    return (after[1] - before[1]) / (after[0] - before[0])


def machine_hop() -> dict[str, float]:
    """One message round trip between two Python processes here (``bench.rpc_floor``'s tcp-asyncio): the floor
    under every hop of a record, and what moves most between sessions on a shared machine (docs/LATENCY.md)."""
    return rpc_floor.measure("tcp-asyncio", HOP_ROUND_TRIPS, 200, 0.001)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.compare", description=__doc__.split("\n")[0])
    parser.add_argument("--systems", default=",".join(SYSTEMS), help=f"comma-separated, of {', '.join(SYSTEMS)}")
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help=f"comma-separated, of {', '.join(WORKLOADS)}")
    parser.add_argument("--baseline", help="the system the ratio columns divide by (default: the first)")
    parser.add_argument("--variant", action="append", metavar="NAME:KEY=VALUE[,KEY=VALUE...]",
                        help="an Odradek cluster with these broker configs, its own, named in --systems as "
                        "odradek-rf3@NAME (a before/after comparison in one run)")  # fmt: skip
    parser.add_argument("--tree", action="append", metavar="NAME:PATH",
                        help="an Odradek cluster (and its clients) running the code of the checkout at PATH, named "
                        "in --systems as odradek-rf3@NAME (a change of code measured in one run)")  # fmt: skip
    parser.add_argument("--repeat", type=int, default=1, help="rounds (the table shows medians and ranges)")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every record count (0.01: a smoke run)")
    parser.add_argument("--controllers", type=int, default=3, help="odradek up's controllers (default 3)")
    parser.add_argument("--brokers", type=int, default=3, help="odradek up's brokers (default 3)")
    parser.add_argument("--idle-topics", type=int, default=0, metavar="N",
                        help="create N idle topics (1 partition, RF 3) on each Odradek cluster first: what every "
                        "follower fetch has to account for besides the measured topic")  # fmt: skip
    parser.add_argument("--install-peers", action="store_true", help="apt-get install nats-server and redis-server")
    parser.add_argument("--json-out", help="write every run's document to this file")
    parser.add_argument("--keep", action="store_true", help="keep the servers' directory (logs, data)")
    parser.add_argument("--e2e-consumer-process", action="store_true",
                        help="Odradek's e2e workloads with the consumer in a process of its own (odradek perf e2e "
                        "--consumer-process); the peers' clients are one thread each either way")  # fmt: skip
    parser.add_argument("--security", choices=("plaintext", "ssl", "sasl_ssl"), default="plaintext",
                        help="every Odradek cluster made by odradek up --security this, its clients with the "
                        "client.properties it writes (not with odradek-kafka-*; the peers stay plaintext)")  # fmt: skip
    parser.add_argument("--client-cpus", metavar="CPU[,CPU...]",
                        help="run every system's clients on these CPUs only (the servers keep every CPU): what a "
                        "client's threads spread over cores cost (docs/LATENCY.md)")  # fmt: skip
    args = parser.parse_args(argv)
    client_cpus: set[int] | None = None
    if args.client_cpus:
        try:
            client_cpus = {int(c) for c in args.client_cpus.split(",")}
        except ValueError:
            parser.error(f"--client-cpus {args.client_cpus}: CPU numbers, comma-separated")
        if not client_cpus <= os.sched_getaffinity(0):
            parser.error(f"--client-cpus {args.client_cpus}: not all of them are this process's CPUs")

    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    names = [w.strip() for w in args.workloads.split(",") if w.strip()]
    args.variants = {}
    for item in args.variant or ():
        name, _, config = item.partition(":")
        args.variants[name] = tuple(c for c in config.split(",") if c)
    args.trees = {}
    for item in args.tree or ():
        name, _, path = item.partition(":")
        tree = Path(path).resolve()
        if not name or not (tree / "odradek" / "cli.py").exists():
            parser.error(f"--tree {item}: NAME:PATH, PATH a checkout of this repository")
        args.trees[name] = tree
        args.variants.setdefault(name, ())
    unknown = [s for s in systems if s.partition("@")[0] not in SYSTEMS or
               (variant_of(s) and (not s.startswith("odradek") or variant_of(s) not in args.variants))]  # fmt: skip
    unknown += [w for w in names if w not in WORKLOADS]
    if unknown or not systems or not names or args.repeat < 1 or args.scale <= 0:
        parser.error(f"unknown or missing systems/workloads {unknown}, or a bad --repeat/--scale")
    if args.security != "plaintext" and any(s.startswith("odradek-kafka") for s in systems):
        parser.error("--security: the Kafka peer (odradek-kafka-*) has no secured settings here")
    if any(replication_factor(s) == 3 for s in systems if s.startswith("odradek")) and args.brokers < 3:
        parser.error("odradek-rf3 and odradek-kafka-rf3 need --brokers 3 or more")
    for name in list(names):  # a consume workload reads what its produce workload wrote
        follows = WORKLOADS[name].follows
        if follows and follows not in names:
            names.insert(names.index(name), follows)
    workloads = [WORKLOADS[n].scaled(args.scale) for n in names]
    baseline = args.baseline or systems[0]

    os.chdir(ROOT)  # the workers run as python -m tests.bench.peers
    directory = tempfile.mkdtemp(prefix="odradek-compare-")
    run = Run(Path(directory), e2e_consumer_process=args.e2e_consumer_process)
    started_at, load_before, ticks_before = time.strftime("%Y-%m-%d %H:%M:%S %Z"), load(), cpu_ticks()
    hop = machine_hop()
    try:
        start_servers(run, systems, args)
        if client_cpus is not None:  # the servers run already, on every CPU; the clients start from here
            os.sched_setaffinity(0, client_cpus)
        results = run_rounds(run, systems, workloads, args.repeat)
    finally:
        run.stop()
    load_after, steal = load(), steal_share(ticks_before, cpu_ticks())
    print(f"Comparison of {started_at}: {os.cpu_count()} cores, load average {load_before} before, {load_after} "
          f"after; {args.repeat} round(s){', medians (min-max)' if args.repeat > 1 else ''}; "
          f"latencies in ms; ratios against {baseline}"
          + (f"; every client on CPU {args.client_cpus} only" if client_cpus else "")
          + (f"; Odradek with odradek up --security {args.security}" if args.security != "plaintext" else "")
          + ("; Odradek's e2e consumer in a process of its own." if args.e2e_consumer_process else "."))  # fmt: skip
    print(f"This machine's hop (python -m bench.rpc_floor's tcp-asyncio, {HOP_ROUND_TRIPS} round trips 1 ms apart, "
          f"before the servers started): p50 {hop['p50_ms']:.3f} ms, p99 {hop['p99_ms']:.3f} ms; absolute latencies "
          "compare across runs only as far as this does.")  # fmt: skip
    if steal is not None:
        print(f"CPU time stolen by the hypervisor during the run (/proc/stat): {steal:.1%} (0 on an idle host; "
              "above a few percent, every latency here waited for a CPU that was not given)")  # fmt: skip
    for system, why in run.skipped.items():
        print(f"{system}: {why}")
    print(render(results, systems, workloads, baseline, args.repeat))
    if args.json_out:
        doc = {"started": started_at, "load_before": load_before, "load_after": load_after, "machine_hop": hop,
               "steal": steal,
               "repeat": args.repeat,
               "scale": args.scale, "baseline": baseline, "skipped": run.skipped,
               "results": [{"workload": r.workload, "system": r.system, "round": r.round, "doc": r.doc,
                            "error": r.error} for r in results]}  # fmt: skip
        Path(args.json_out).write_text(json.dumps(doc, indent=1))
    if not args.keep:
        import shutil

        shutil.rmtree(directory, ignore_errors=True)
    else:
        print(f"servers' directory kept: {directory}", file=sys.stderr)
    failed = [r for r in results if r.error.startswith("failed")]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
