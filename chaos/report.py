"""The figures of a run (operations, faults, anomalies, unavailability per fault) as JSON and as text. Pure.

Unavailability of an episode: from the episode's first action (the kill, pause or isolate) until the next
episode's first action (or the drain), the longest time without any acknowledgement, per partition (the
worst partition is reported) and for the topic as a whole. ``recovered_s`` is the time from the end of the
episode's last undo action (start, resume, heal) until every partition had a leader and its full ISR again.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from chaos.checker import Anomaly, Index, down_windows
from chaos.history import FAILED, OK, Op

UNDO_ACTIONS = ("start", "resume", "heal", "heal-network")


def _longest_gap(times: Sequence[float], start: float, end: float) -> float:
    """The longest interval in [start, end] that holds none of ``times`` (sorted)."""
    previous, longest = start, 0.0
    for t in times:
        if t < start:
            continue
        if t > end:
            break
        longest = max(longest, t - previous)
        previous = t
    return max(longest, end - previous)


def episodes(ops: Sequence[Op]) -> list[dict[str, Any]]:
    faults = [op for op in ops if op.kind == "fault" and op.episode is not None and op.fault != "heal-all"]
    by_episode: dict[int, list[Op]] = defaultdict(list)
    for op in faults:
        assert op.episode is not None
        by_episode[op.episode].append(op)
    drain = next((op.t0 for op in ops if op.kind == "phase" and op.info.get("name") == "drain"), None)
    end = drain if drain is not None else max((op.t1 for op in ops), default=0.0)
    acks_by_partition: dict[int, list[float]] = defaultdict(list)
    for op in ops:
        if op.kind == "send" and op.outcome == OK and op.partition is not None:
            acks_by_partition[op.partition].append(op.t1)
    all_acks = sorted(t for times in acks_by_partition.values() for t in times)
    for times in acks_by_partition.values():
        times.sort()
    starts = sorted((min(op.t0 for op in actions), index) for index, actions in by_episode.items())
    found: list[dict[str, Any]] = []
    for position, (start, index) in enumerate(starts):
        actions = sorted(by_episode[index], key=lambda op: op.t0)
        stop = starts[position + 1][0] if position + 1 < len(starts) else end
        injected = [op for op in actions if op.action in ("kill", "pause", "isolate", "partition") and op.outcome == OK]
        undone = [op for op in actions if op.action in UNDO_ACTIONS]
        recovered = next((op for op in actions if op.action == "recovered"), None)
        worst_partition, worst_gap = -1, 0.0
        for partition, times in sorted(acks_by_partition.items()):
            gap = _longest_gap(times, start, stop)
            if gap > worst_gap:
                worst_partition, worst_gap = partition, gap
        summary: dict[str, Any] = {
            "episode": index,
            "fault": actions[0].fault,
            "nodes": [op.node for op in injected],
            "skipped": next((op.error for op in actions if op.action == "skip"), None),
            "failed_actions": [f"{op.action} {op.node}: {op.error}" for op in actions if op.outcome == FAILED
                               and op.action != "recovered"],  # fmt: skip
            "start": round(start, 3),
            "held_s": round(undone[0].t0 - injected[-1].t1, 3) if injected and undone else None,
            "no_ack_any_partition_s": round(worst_gap, 3),
            "worst_partition": worst_partition,
            "no_ack_topic_s": round(_longest_gap(all_acks, start, stop), 3),
            "recovered_s": round(recovered.t1 - undone[-1].t1, 3) if recovered and undone
            and recovered.outcome == OK else None,
            "recovery_failed": recovered.error if recovered and recovered.outcome != OK else None,
        }  # fmt: skip
        found.append(summary)
    return found


def below_min_isr_sends(index: Index) -> dict[str, Any]:
    """The sends invoked inside a below-min.insync.replicas window of their partition, by outcome and error."""
    minimum = int(index.meta.get("min_insync_replicas", 0))
    replicas: dict[str, list[int]] = index.meta.get("replicas", {})
    end = max((op.t1 for op in index.ops), default=0.0)
    outcomes: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    windows_total = 0.0
    for key, broker_ids in replicas.items():
        windows = down_windows(index.ops, [f"broker-{b}" for b in broker_ids], minimum, end)
        windows_total = max(windows_total, sum(b - a for a, b in windows))
        for op in index.ops:
            if op.kind != "send" or op.partition != int(key):
                continue
            if any(a <= op.t0 <= b for a, b in windows):
                outcomes[op.outcome] += 1
                if op.error:
                    errors[op.error] += 1
    return {"seconds": round(windows_total, 3), "outcomes": dict(outcomes), "errors": dict(errors)}


def summarize(
    ops: Sequence[Op], anomalies: Iterable[Anomaly], *, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    index = Index(ops)
    sends = Counter(op.outcome for op in ops if op.kind == "send")
    send_errors = Counter(op.error for op in ops if op.kind == "send" and op.error)
    polls = Counter(op.outcome for op in ops if op.kind == "poll")
    txns = Counter(op.outcome for op in ops if op.kind == "txn" and "values" in op.info)
    records_read = sum(len(op.records) for op in ops if op.kind == "poll")
    eps = episodes(ops)
    anomaly_list = [a.to_json() for a in anomalies]
    return {
        "meta": index.meta,
        "duration_s": round(max((op.t1 for op in ops), default=0.0), 3),
        "operations": {
            "sends": dict(sends),
            "transactions": dict(txns),
            "send_errors": dict(send_errors.most_common(10)),
            "polls": dict(polls),
            "records_read": records_read,
            "distinct_values_read": len(index.reads_of),
            "resets": sum(1 for op in ops if op.kind == "reset"),
        },
        "faults": {
            "episodes": len(eps),
            "by_kind": dict(Counter(e["fault"] for e in eps if not e["skipped"])),
            "skipped": [f"episode {e['episode']} {e['fault']}: {e['skipped']}" for e in eps if e["skipped"]],
            "failed_actions": [a for e in eps for a in e["failed_actions"]],
        },
        "below_min_isr": below_min_isr_sends(index),
        "episodes": eps,
        "anomalies": anomaly_list,
        "anomaly_count": sum(a["count"] for a in anomaly_list),
        **(extra or {}),
    }


def render(summary: dict[str, Any]) -> str:
    meta = summary["meta"]
    ops = summary["operations"]
    lines = [
        f"Chaos run: seed {meta.get('seed')}, faults {','.join(meta.get('faults', []))}, "
        f"{summary['duration_s']:.0f} s, topic {meta.get('topic')} ({meta.get('partitions')} partitions, "
        f"RF {meta.get('replication_factor')}, min.insync.replicas {meta.get('min_insync_replicas')})",
        "",
        "Operations",
        f"  sends: {_counts(ops['sends'])}"
        + (f"; errors of unknown/failed sends: {_counts(ops['send_errors'])}" if ops["send_errors"] else ""),
        f"  polls: {_counts(ops['polls'])}, {ops['records_read']} records read "
        f"({ops['distinct_values_read']} distinct values), {ops['resets']} consumer resets",
    ]
    if ops.get("transactions"):
        txns = ops["transactions"]
        lines.append(f"  transactions: committed {txns.get(OK, 0)}, aborted {txns.get(FAILED, 0)}, "
                     f"unknown outcome {txns.get('unknown', 0)}")  # fmt: skip
    group = meta.get("group")
    lines.append(f"  group consumers: {'on (group ' + str(group) + ')' if group else 'off'}")
    for note in summary.get("notes", []):
        lines.append(f"  note: {note}")
    faults = summary["faults"]
    lines += ["", f"Faults: {faults['episodes']} episodes ({_counts(faults['by_kind']) or 'none run'})"]
    lines += [f"  SKIPPED (not tested): {s}" for s in faults["skipped"]]
    lines += [f"  action failed: {a}" for a in faults["failed_actions"]]
    below = summary["below_min_isr"]
    if below["seconds"]:
        lines.append(f"  below min.insync.replicas for {below['seconds']:.1f} s: sends invoked then: "
                     f"{_counts(below['outcomes']) or 'none'}"
                     + (f" (errors: {_counts(below['errors'])})" if below["errors"] else ""))  # fmt: skip
    lines += ["", "Unavailability per episode (longest time without an acknowledgement)"]
    for e in summary["episodes"]:
        if e["skipped"]:
            continue
        held = f"held {e['held_s']:.1f} s, " if e["held_s"] is not None else ""
        recovered = (f", full ISR {e['recovered_s']:.1f} s after the undo" if e["recovered_s"] is not None
                     else f", NOT RECOVERED: {e['recovery_failed']}" if e["recovery_failed"] else "")  # fmt: skip
        lines.append(f"  #{e['episode']:<3} {e['fault']:<16} {','.join(e['nodes']) or '-':<20} at {e['start']:7.1f} s: "
                     f"{held}worst partition {e['no_ack_any_partition_s']:.1f} s (p{e['worst_partition']}), "
                     f"whole topic {e['no_ack_topic_s']:.1f} s{recovered}")  # fmt: skip
    per_kind: dict[str, list[float]] = defaultdict(list)
    for e in summary["episodes"]:
        if not e["skipped"]:
            per_kind[e["fault"]].append(e["no_ack_any_partition_s"])
    for kind, gaps in sorted(per_kind.items()):
        lines.append(f"  {kind}: worst-partition unavailability mean {sum(gaps) / len(gaps):.1f} s, "
                     f"max {max(gaps):.1f} s over {len(gaps)} episode(s)")  # fmt: skip
    lines += ["", f"Anomalies: {summary['anomaly_count']}"]
    for anomaly in summary["anomalies"]:
        lines.append(f"  {anomaly['kind']}: {anomaly['count']}")
        lines += [f"    e.g. {example}" for example in anomaly["examples"]]
    for problem in summary.get("problems", []):
        lines.append(f"  run problem: {problem}")
    verdict = "FAIL" if summary["anomaly_count"] or summary.get("problems") else "PASS"
    lines += ["", f"Result: {verdict}"]
    return "\n".join(lines) + "\n"


def _counts(counter: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counter.items(), key=lambda kv: -kv[1]))
