"""The latency breakdown's joins (``tests/bench/breakdown.py``) on trace files written by hand: each stage is
the difference of the two events that bound it, the follower stages are those of the follower whose fetch
moved the high watermark, and a record's stages sum up to its end-to-end latency."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bench.breakdown import STAGES, TOTALS, read_traces, render, stages_of

US = 1_000  # ns


def write(path: Path, lines: list[str]) -> None:
    path.write_text("".join(line + "\n" for line in lines))


@pytest.fixture
def traces(tmp_path: Path) -> Path:
    """Record 0 of topic t: sent at 1 µs, polled at 78 µs (units of 1 µs below, written in ns)."""

    def t(us: int) -> int:
        return us * US

    write(tmp_path / "perf-e2e-10.trace", [
        f"{t(78)} e2e t 0 0 {t(1)}",
        f"{t(100)} ack t 0 0 {t(1)}",
        f"{t(95)} pb t 0 0 0 {t(1)} {t(20)} {t(90)}",  # handled at 95: created 1, call 20, answered 90
        f"{t(50)} e2e other 0 0 {t(1)}",  # another topic: ignored
    ])  # fmt: skip
    write(tmp_path / "broker-1-11.trace", [
        f"{t(30)} lp t 0 0 0 {t(35)} {t(80)}",  # arrived 30, appended 35, answered 80
        f"{t(45)} fe t 0 2 0 100 {t(5)} {t(40)}",  # follower 2 gets record 0: woken 40, answered 45
        f"{t(47)} fe t 0 3 0 100 {t(6)} {t(41)}",  # follower 3 too
        f"{t(58)} fe t 0 3 1 0 {t(57)} 0",  # follower 3 reports it first ...
        f"{t(66)} fe t 0 2 1 0 {t(60)} 0",  # ... follower 2 last: its report moves the HW
        f"{t(57)} hw t 0 0 3",  # follower 3 alone: the HW stays below record 0 ... (hw 0 is not past it)
        f"{t(62)} hw t 0 1 2",  # ... follower 2: past it
        f"{t(70)} fe t 0 -1 0 100 {t(2)} {t(66)}",  # the consumer's fetch: woken 66, answered 70
    ])  # fmt: skip
    write(tmp_path / "broker-2-12.trace", [f"{t(50)} ff t 0 0 1 {t(4)} {t(55)}"])  # received 50, appended 55
    write(tmp_path / "broker-3-13.trace", [f"{t(49)} ff t 0 0 1 {t(4)} {t(52)}"])
    return tmp_path


def test_every_stage_of_a_record(traces: Path) -> None:
    stages = stages_of(read_traces(traces, "t"))
    expected_us = [19, 10, 5, 5, 5, 5, 5, 5, 2, 18, 20, 4, 4, 8]  # the stages of STAGES, in order
    assert len(expected_us) == len(STAGES)
    for (name, _), us in zip(STAGES, expected_us, strict=True):
        assert stages[name] == [pytest.approx(us / 1000)], name
    assert stages[TOTALS[0][0]] == [pytest.approx(0.077)]
    assert stages[TOTALS[1][0]] == [pytest.approx(0.099)]
    # the path to the poll: everything but the Produce answer and the ack
    path = [us for (name, _), us in zip(STAGES, expected_us, strict=True) if "Produce answered" not in name
            and "future done" not in name]  # fmt: skip
    assert sum(path) == 77


def test_a_record_without_its_batch_counts_only_in_the_totals(tmp_path: Path) -> None:
    write(tmp_path / "perf-e2e-1.trace", [f"{9 * US} e2e t 0 5 {1 * US}"])
    stages = stages_of(read_traces(tmp_path, "t"))
    assert stages[TOTALS[0][0]] == [pytest.approx(0.008)]
    assert not any(stages.get(name) for name, _ in STAGES)


def test_render_lists_every_stage(traces: Path) -> None:
    text = render({"": stages_of(read_traces(traces, "t"))})
    for name, _ in (*STAGES, *TOTALS):
        assert name in text
