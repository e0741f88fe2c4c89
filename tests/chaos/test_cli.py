"""``python -m chaos``: argument parsing and ``check`` on recorded histories (no cluster)."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.cli import main, parser
from chaos.faults import FAULT_KINDS
from chaos.history import write_history
from tests.chaos.histories import clean, txn_clean


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


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["--txn-producers", "1"], "--txn-producers needs --rc-readers"),
        (["--faults", "kill-txn-coordinator", "--rc-readers", "1"], "kill-txn-coordinator needs --txn-producers"),
    ],
)
def test_transactional_options_that_cannot_run_are_refused(
    argv: list[str], error: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Refused before any cluster starts (no data dir is created)."""
    assert main(["run", "--out", str(tmp_path / "out"), *argv]) == 2
    assert error in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_check_of_a_transactional_history(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "txn.jsonl"
    h = txn_clean()
    h.poll("rc-reader-0", [(1, 2, "t0-1-1")], 9.0)  # transaction 1 was aborted
    write_history(h.ops, path)
    assert main(["check", str(path)]) == 1
    out = capsys.readouterr().out
    assert "transactions: committed 1, aborted 1, unknown outcome 2" in out
    assert "aborted-read: 1" in out
