"""The seeded schedule, the history file format, and the report's figures (all pure, no cluster)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from chaos.checker import check
from chaos.faults import FAULT_KINDS, Timing, plan_schedule
from chaos.history import History, Op, read_history
from chaos.report import _longest_gap, episodes, render, summarize
from tests.chaos.histories import Builder, clean


def test_schedule_is_a_function_of_the_seed() -> None:
    a = plan_schedule(random.Random(7), FAULT_KINDS, 600, Timing())
    b = plan_schedule(random.Random(7), FAULT_KINDS, 600, Timing())
    c = plan_schedule(random.Random(8), FAULT_KINDS, 600, Timing())
    assert a == b
    assert a != c


def test_schedule_covers_every_kind_each_round_and_fits_the_duration() -> None:
    timing = Timing(quiet_s=(1.0, 2.0), hold_s=(1.0, 3.0), pause_s=5.0)
    episodes_ = plan_schedule(random.Random(1), FAULT_KINDS, 300, timing)
    first_round = {e.kind for e in episodes_[: len(FAULT_KINDS)]}
    assert first_round == set(FAULT_KINDS)
    assert sum(e.quiet_s + e.hold_s for e in episodes_) <= 300
    for e in episodes_:
        assert timing.quiet_s[0] <= e.quiet_s <= timing.quiet_s[1]
        if e.kind in ("pause", "kill-two"):
            assert e.hold_s >= timing.pause_s  # longer than the session timeout the runner derives it from
        else:
            assert timing.hold_s[0] <= e.hold_s <= timing.hold_s[1]


def test_schedule_rejects_unknown_kinds() -> None:
    with pytest.raises(ValueError, match="unknown fault kind 'reboot'"):
        plan_schedule(random.Random(0), ["kill-leader", "reboot"], 60, Timing())


def test_history_round_trips_through_json_lines(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    ticks = iter(range(100))
    history = History(path, clock=lambda: float(next(ticks)))
    history.add("send", "producer-0", 0.5, partition=1, value="0-0", offset=3)
    history.add("poll", "reader-0", 1.5, records=((1, 3, "0-0"),))
    history.add("fault", "nemesis", 2.0, action="kill", node="broker-1", fault="kill-leader", episode=0)
    history.close()
    ops = read_history(path)
    assert ops == history.ops()
    assert [op.seq for op in ops] == [0, 0, 0]
    assert ops[1].records == ((1, 3, "0-0"),)


def test_history_file_names_a_bad_line(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    path.write_text('{"kind": "send", "process": "p", "seq": 0, "t0": 0, "t1": 1}\n{"kind": "bogus"}\n')
    with pytest.raises(ValueError, match=r"history.jsonl:2: not a history operation"):
        read_history(path)


def test_op_rejects_unknown_outcome() -> None:
    with pytest.raises(AssertionError):
        Op("send", "p", 0, 0.0, 1.0, outcome="maybe")


def test_longest_gap() -> None:
    assert _longest_gap([1.0, 2.0, 6.0, 7.0], 0.0, 8.0) == 4.0
    assert _longest_gap([], 3.0, 5.0) == 2.0
    assert _longest_gap([0.5, 10.0], 1.0, 4.0) == 3.0  # acks outside the interval do not count


def test_episode_unavailability_and_recovery() -> None:
    h = Builder(replicas={"0": [0, 1, 2]})
    for i in range(10):  # acks every second on partition 0, except from 4 to 9
        if not 4 < i < 9:
            h.send("producer-0", f"x{i}", 0, i, i - 0.1, float(i))
    h.add("fault", "nemesis", 3.5, 3.6, action="kill", node="broker-0", fault="kill-leader", episode=0)
    h.add("fault", "nemesis", 6.0, 7.0, action="start", node="broker-0", fault="kill-leader", episode=0)
    h.add("fault", "nemesis", 7.0, 8.5, action="recovered", fault="kill-leader", episode=0)
    (e,) = episodes(h.ops)
    assert e["fault"] == "kill-leader"
    assert e["nodes"] == ["broker-0"]
    assert e["held_s"] == 2.4
    assert e["no_ack_any_partition_s"] == 5.0
    assert e["recovered_s"] == 1.5


def test_skipped_fault_is_reported_not_passed() -> None:
    h = clean()
    h.add("fault", "nemesis", 9.0, 9.0, action="skip", fault="isolate", episode=0,
          error="the LocalBackend cannot isolate nodes; isolate NOT tested")  # fmt: skip
    text = render(summarize(h.ops, check(h.ops)))
    assert "SKIPPED (not tested): episode 0 isolate" in text
    assert "Faults: 1 episodes (none run)" in text


def test_report_names_each_anomaly_and_fails() -> None:
    h = clean()
    h.send("producer-0", "a3", 0, 3, 9.0, 9.5)
    text = render(summarize(h.ops, check(h.ops)))
    assert "unseen-write: 1" in text
    assert "'value': 'a3'" in text
    assert text.rstrip().endswith("Result: FAIL")
    assert render(summarize(clean().ops, [])).rstrip().endswith("Result: PASS")
