"""Where the milliseconds of an acks=all record go: a per-stage latency breakdown from trace points.

    python -m tests.bench.breakdown [--rate 1000] [--num-records 5000] [--replication-factor 3]
        [--controllers 3] [--brokers 3] [--broker-config KEY=VALUE ...] [--repeat N]
        [--variant NAME:KEY=VALUE,... ...] [--keep] [--analyze DIR]

Starts ``odradek up`` with ``ODRADEK_LATENCY_TRACE`` set (``log.trace``), creates a 1-partition topic,
runs ``odradek perf e2e`` against it at ``--rate``, stops the cluster (every process writes its trace
file as it exits), joins the events of every process by (topic, partition, offset), and prints, for each
stage of a record's way, the median and the 99th percentile of the time spent in it. The runs' directories
are removed at the end unless ``--keep``; with ``--analyze DIR`` it only reads the trace files of an earlier
(kept) run: the directory ``run-<round>-<variant number>/trace`` of one. Each ``--variant`` is a run with more
broker configs (``--variant before:fetch.inline.read.max.bytes=0 --variant after:``: a change measured
with its switch off and on), the variants in alternation ``--repeat`` times, each variant's records pooled
into one column pair.

The events (``docs/LATENCY.md`` shows where each is taken), on one ``perf_counter`` clock shared by the
processes of the machine:

- ``e2e``/``ack`` (the perf tool): a record's send time, its ack (future completed) and its poll;
- ``pb`` (producer sender thread): its batch's creation, Produce call start, gRPC answer, answer handled;
- ``lp`` (leader): the Produce's arrival on the event loop, appends done, answer ready;
- ``fe`` (leader): every fetch answered (follower or consumer): from which offset, its arrival, its wake-up;
- ``ff`` (follower): a fetch sent, its answer received, its records appended;
- ``hw`` (leader): the high watermark moved (and which follower's fetch moved it).

A stage is the difference of two events of one record; the followers' stages are those of the follower
whose report moved the high watermark past the record (the later of the two). Stages that a record did not
pass (a follower fetch that was not parked has no wake-up) are left out of that stage's figures.
"""

from __future__ import annotations

import argparse
import bisect
import os
import shutil
import sys
import tempfile
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from odradek.perf.stats import percentile

ROOT = Path(__file__).resolve().parents[2]


Fetch = tuple[int, int, int, int, int]  # (answered, fetch offset, bytes, arrived, woken or 0)
FollowerFetch = tuple[int, int, int, int, int]  # (received, log end before, log end after, sent, appended)


@dataclass(slots=True)
class Traces:
    """Every event of one partition, by kind, sorted by time (or by first offset)."""

    e2e: dict[int, tuple[int, int]] = field(default_factory=dict)  # offset -> (sent, polled)
    acks: dict[int, int] = field(default_factory=dict)  # offset -> acked
    batches: list[tuple[int, int, int, int, int, int]] = field(default_factory=list)  # base, last, created, call
    # sent, call done, answer handled
    produces: list[tuple[int, int, int, int, int]] = field(default_factory=list)  # first, last, arrived,
    # appended, answered
    fetches: dict[int, list[Fetch]] = field(default_factory=dict)  # by replica id (-1: consumers)
    follower: dict[int, list[FollowerFetch]] = field(default_factory=dict)  # by follower node id
    hw: list[tuple[int, int, int]] = field(default_factory=list)  # (t, high watermark, replica that moved it)


def read_traces(directory: Path, topic: str, partition: int = 0) -> Traces:
    traces = Traces()
    for path in sorted(directory.glob("*.trace")):
        node = _node_of(path.name)
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) < 4 or parts[2] != topic or int(parts[3]) != partition:
                continue
            t, kind, values = int(parts[0]), parts[1], [int(v) for v in parts[4:]]
            if kind == "e2e":
                traces.e2e[values[0]] = (values[1], t)
            elif kind == "ack":
                traces.acks[values[0]] = t
            elif kind == "pb":
                base, last, created, sent, done = values
                traces.batches.append((base, last, created, sent, done, t))
            elif kind == "lp":
                first, last, appended, answered = values
                traces.produces.append((first, last, t, appended, answered))
            elif kind == "fe":
                replica, offset, nbytes, arrived, woke = values
                traces.fetches.setdefault(replica, []).append((t, offset, nbytes, arrived, woke))
            elif kind == "ff":
                start, end, sent, appended = values
                traces.follower.setdefault(node, []).append((t, start, end, sent, appended))
            elif kind == "hw":
                traces.hw.append((t, values[0], values[1]))
    for fetches in (*traces.fetches.values(), *traces.follower.values()):
        fetches.sort()
    traces.hw.sort()
    traces.batches.sort()
    traces.produces.sort()
    return traces


def _node_of(name: str) -> int:
    """``broker-2-1234.trace`` -> 2; -1 for other processes."""
    parts = name.split("-")
    return int(parts[1]) if parts[0] == "broker" and len(parts) > 2 and parts[1].isdigit() else -1


def _containing(ranges: Sequence[tuple[int, ...]], offset: int) -> tuple[int, ...] | None:
    """The range (first two fields: first, last offsets, sorted by first) holding ``offset``."""
    i = bisect.bisect_right(ranges, (offset, sys.maxsize)) - 1
    if i >= 0 and ranges[i][0] <= offset <= ranges[i][1]:
        return ranges[i]
    return None


def _carrying_fetch(fetches: Sequence[Fetch], offset: int, after_ns: int) -> tuple[Fetch | None, Fetch | None]:
    """For one reader: the fetch answered after ``after_ns`` that carried ``offset`` (from at or below it,
    with bytes), and the reader's first fetch after that from beyond it (its report of having it)."""
    carried = reported = None
    for event in fetches:
        answered, start, nbytes, arrived, _ = event
        if answered < after_ns:
            continue
        if carried is None and start <= offset and nbytes > 0:
            carried = event
        elif start > offset:
            reported = event
            break
    return carried, reported


STAGES = (
    ("producer: send() to Produce call started", "linger, the sender thread's wake-up, building the batch"),
    ("Produce call to the leader's event loop", "gRPC client and server, the request's decoding"),
    ("leader: append", "validation, offsets, the write to the page cache"),
    ("leader: append to follower fetch woken", "the parked follower fetch's wake-up on the event loop"),
    ("leader: follower fetch woken to answered", "its read (on the loop; a large one on a worker), the answer"),
    ("follower: answer received", "the REPLICATION connection (or gRPC) back to the follower"),
    ("follower: append", ""),
    ("follower: appended to next fetch at the leader", "the follower's next Fetch, to its arrival"),
    ("leader: follower fetch arrived to HW moved", "the read that takes the follower's position"),
    ("leader: HW moved to Produce answered", "purgatory completion, the event loop's wake-up, the answer"),
    ("producer: answer to future done", "gRPC, the sender thread's hand-off, the future's callback"),
    ("consumer: HW moved to consumer fetch woken", "the parked consumer fetch's wake-up"),
    ("consumer: fetch woken to answered", "its read (on the loop; a large one on a worker), the answer"),
    ("consumer: fetch answered to poll() returned", "gRPC, the consumer's fetcher thread, poll()"),
)
TOTALS = (("end to end (send to poll)", ""), ("ack (send to future done)", ""))


def stages_of(traces: Traces) -> dict[str, list[float]]:
    """Per stage, the milliseconds of every record that passed it (see the module docstring)."""
    out: dict[str, list[float]] = defaultdict(list)
    names = [name for name, _ in STAGES]
    hw_times = [t for t, _, _ in traces.hw]
    hw_values = [hw for _, hw, _ in traces.hw]
    consumer = traces.fetches.get(-1, [])
    for offset, (sent, polled) in traces.e2e.items():
        out[TOTALS[0][0]].append((polled - sent) / 1e6)
        if offset in traces.acks:
            out[TOTALS[1][0]].append((traces.acks[offset] - sent) / 1e6)
        batch = _containing(traces.batches, offset)
        produce = _containing(traces.produces, offset)
        if batch is None or produce is None:
            continue
        _, _, _, call_sent, call_done, handled = batch
        _, _, arrived, appended, answered = produce
        stage = dict.fromkeys(names, -1.0)
        stage[names[0]] = call_sent - sent
        stage[names[1]] = arrived - call_sent
        stage[names[2]] = appended - arrived
        # the high watermark passing the record, and the follower whose fetch moved it
        i = next((j for j, hw in enumerate(hw_values) if hw > offset and hw_times[j] >= appended), None)
        if i is None:
            continue
        hw_at, _, mover = traces.hw[i]
        fetches = traces.fetches.get(mover, [])
        carried, reported = _carrying_fetch(fetches, offset, appended)
        received = next((e for e in traces.follower.get(mover, []) if e[1] <= offset < e[2]), None)
        if carried is not None and reported is not None and received is not None:
            woke = carried[4]
            if woke:  # it was parked when the record came (else it found the record at once: no wake-up)
                stage[names[3]] = woke - appended
                stage[names[4]] = carried[0] - woke
            stage[names[5]] = received[0] - carried[0]
            stage[names[6]] = received[4] - received[0]
            stage[names[7]] = reported[3] - received[4]
            stage[names[8]] = hw_at - reported[3]
        stage[names[9]] = answered - hw_at
        if offset in traces.acks:
            stage[names[10]] = traces.acks[offset] - answered
        c_carried, _ = _carrying_fetch(consumer, offset, hw_at)
        if c_carried is not None:
            if c_carried[4]:
                stage[names[11]] = c_carried[4] - hw_at
                stage[names[12]] = c_carried[0] - c_carried[4]
            stage[names[13]] = polled - c_carried[0]
        for name, ns in stage.items():
            if ns >= 0:
                out[name].append(ns / 1e6)
    return out


def render(columns: dict[str, dict[str, list[float]]]) -> str:
    """The stages' p50 and p99 (ms), one pair of columns per variant (``""``: the only one)."""
    names = list(columns)
    head = f"{'stage':<50}" + "".join(f" {(n + ': ' if n else '') + 'records':>16} {'p50 ms':>8} {'p99 ms':>8}"
                                      for n in names)  # fmt: skip
    lines = [head + "  what it holds", "-" * (len(head) + 40)]
    for name, what in (*STAGES, *TOTALS):
        row = f"{name:<50}"
        for variant in names:
            values = sorted(columns[variant].get(name, []))
            if not values:
                row += f" {0:>16} {'':>8} {'':>8}"
                continue
            row += f" {len(values):>16} {percentile(values, 0.5):>8.3f} {percentile(values, 0.99):>8.3f}"
        lines.append(f"{row}  {what}".rstrip())
    return "\n".join(lines)


def run_traced(args: argparse.Namespace, directory: Path, broker_config: Sequence[str]) -> tuple[Path, str]:
    """One traced run: ``(its trace directory, perf e2e's summary line)``."""
    from tests.bench.systems import OdradekCluster

    trace_dir = directory / "trace"
    cluster = OdradekCluster(directory, args.controllers, args.brokers, {"ODRADEK_LATENCY_TRACE": str(trace_dir)},
                             broker_config)  # fmt: skip
    try:
        cluster.start()
        cluster.create_topic(args.topic, 1, args.replication_factor)
        done = cluster.perf(["e2e", "--topic", args.topic, "--num-records", str(args.num_records), "--rate",
                             str(args.rate), "--acks", "all"], 600)  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"odradek perf e2e failed: {done.stderr.decode().strip()[-800:]}")
    finally:
        cluster.stop()  # the processes write their traces as they exit
    return trace_dir, done.stdout.decode().strip().splitlines()[0]


def variants(args: argparse.Namespace) -> dict[str, tuple[str, ...]]:
    """``--variant NAME:KEY=VALUE,...`` (each with the common ``--broker-config``), or the one unnamed run."""
    common = tuple(args.broker_config or ())
    if not args.variant:
        return {"": common}
    out = {}
    for item in args.variant:
        name, _, config = item.partition(":")
        out[name] = common + tuple(c for c in config.split(",") if c)
    return out


def run_requests(traces: Traces) -> int:
    """The Produce requests at the leader that carried the run's records (not the tool's warm-up record's)."""
    return sum(1 for first, last, *_ in traces.produces if any(o in traces.e2e for o in range(first, last + 1)))


def requests_line(name: str, produces: int, records: int) -> str:
    """How many records a Produce request carried: the producer's hold sends the records that came while its
    request was in flight together, so this follows the acknowledgement's round trip (docs/LATENCY.md, "Why
    single stages no longer move the figures")."""
    each = f"{records / produces:.2f} records a request" if produces else "no request traced"
    return f"{name}: {produces} Produce requests at the leader for {records} records received ({each})"


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.breakdown", description=__doc__.split("\n")[0])
    parser.add_argument("--rate", type=float, default=1000)
    parser.add_argument("--num-records", type=int, default=5000)
    parser.add_argument("--replication-factor", type=int, default=3)
    parser.add_argument("--controllers", type=int, default=3)
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--broker-config", action="append", metavar="KEY=VALUE", help="for every run")
    parser.add_argument("--variant", action="append", metavar="NAME:KEY=VALUE[,KEY=VALUE...]",
                        help="runs with these broker configs too, in alternation (before/after in one run)")
    parser.add_argument("--repeat", type=int, default=1, help="runs per variant (their records pooled)")
    parser.add_argument("--topic", default="breakdown")
    parser.add_argument("--analyze", metavar="DIR", help="only read the trace files of an earlier run")
    parser.add_argument("--keep", action="store_true", help="keep the runs' directories (traces, logs, data)")
    args = parser.parse_args(list(argv) if argv is not None else None)
    if args.analyze:
        traces = read_traces(Path(args.analyze), args.topic)
        print(requests_line("run", run_requests(traces), len(traces.e2e)))
        print(render({"": stages_of(traces)}))
        return 0
    os.chdir(ROOT)
    root = Path(tempfile.mkdtemp(prefix="odradek-breakdown-"))
    load_before = " ".join(f"{x:.2f}" for x in os.getloadavg())
    columns: dict[str, dict[str, list[float]]] = {name: defaultdict(list) for name in variants(args)}
    counts = {name: [0, 0] for name in variants(args)}  # Produce requests, records received
    for round_no in range(args.repeat):
        for n, (name, config) in enumerate(variants(args).items()):
            trace_dir, summary = run_traced(args, root / f"run-{round_no}-{n}", config)
            print(f"{name or 'run'} {round_no + 1}: {summary}", flush=True)
            traces = read_traces(trace_dir, args.topic)
            counts[name][0] += run_requests(traces)
            counts[name][1] += len(traces.e2e)
            for stage, values in stages_of(traces).items():
                columns[name][stage].extend(values)
    load_after = " ".join(f"{x:.2f}" for x in os.getloadavg())
    kept = f"; traces under {root}" if args.keep else ""
    print(f"load average {load_before} before, {load_after} after{kept}")
    for name, (produces, records) in counts.items():
        print(requests_line(name or "run", produces, records))
    print(render(columns))
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
