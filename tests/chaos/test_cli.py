"""``python -m chaos``: argument parsing and ``check`` on recorded histories (no cluster)."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.cli import main, parser
from chaos.faults import FAULT_KINDS
from chaos.history import write_history
from tests.chaos.histories import clean


def test_faults_all_and_lists() -> None:
    assert parser().parse_args(["run", "--faults", "all"]).faults == FAULT_KINDS
    assert parser().parse_args(["run", "--faults", "pause, kill-two"]).faults == ("pause", "kill-two")


def test_unknown_fault_kind_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        parser().parse_args(["run", "--faults", "kill-leader,reboot"])
    assert exit_info.value.code == 2
    assert "unknown fault kind 'reboot'" in capsys.readouterr().err


def test_check_exit_status_follows_the_anomalies(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good, bad = tmp_path / "good.jsonl", tmp_path / "bad.jsonl"
    write_history(clean().ops, good)
    h = clean()
    h.send("producer-0", "a3", 0, 3, 9.0, 9.5)
    write_history(h.ops, bad)
    assert main(["check", str(good)]) == 0
    assert "Result: PASS" in capsys.readouterr().out
    assert main(["check", str(bad)]) == 1
    assert "unseen-write: 1" in capsys.readouterr().out
    assert main(["check", str(tmp_path / "missing.jsonl")]) == 2
