"""``log.trace``: off by default; on, events are kept in order and written one a line to the process's file,
bounded by ``MAX_EVENTS`` (the overflow counted in a ``dropped`` line)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from log import trace


@pytest.fixture
def on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(trace, "ON", True)
    monkeypatch.setattr(trace, "DIRECTORY", str(tmp_path / "traces"))
    monkeypatch.setattr(trace, "_events", [])
    monkeypatch.setattr(trace, "_dropped", 0)
    monkeypatch.setattr(trace, "_role", "unit")
    return tmp_path / "traces"


def test_off_unless_the_environment_names_a_directory() -> None:
    assert trace.ON is bool(os.environ.get(trace.ENV_VAR))
    if not trace.ON:
        assert trace.flush() is None


def test_events_go_to_the_process_file_in_order(on: Path) -> None:
    trace.record(5, "lp", "orders", 2, 10, 12, 7, 8)
    before = trace.now_ns()
    trace.point("hw", "orders", 2, 13, 1)
    path = trace.flush()
    assert path == str(on / f"unit-{os.getpid()}.trace")
    lines = Path(path).read_text().splitlines()
    assert lines[0] == "5 lp orders 2 10 12 7 8"
    t, rest = lines[1].split(" ", 1)
    assert int(t) >= before
    assert rest == "hw orders 2 13 1"
    trace.point("e2e", "orders", 2, 10, 3)
    trace.flush()  # appends: the earlier events stay
    assert len(Path(path).read_text().splitlines()) == 3


def test_bounded(on: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trace, "MAX_EVENTS", 2)
    for i in range(5):
        trace.record(i, "hw", "t", 0, i)
    path = trace.flush()
    assert path is not None
    lines = Path(path).read_text().splitlines()
    assert lines[:2] == ["0 hw t 0 0", "1 hw t 0 1"]
    assert lines[2].split()[1:] == ["dropped", "-", "-1", "3"]
