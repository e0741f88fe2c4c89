"""Crash safety of the cleaner's swap (``log.cleaner.swap``): a crash after any step, then recovery.

Each test copies one prepared partition directory, runs a cleaning pass that "crashes" (an exception
from the step hook; the Log closes its files as a dying process would) right after a given step, and
reopens the log. Rule checked: a crash before the commit step (``.log.cleaned`` -> ``.log.swap``)
gives back the old segments exactly; a crash at or after it gives the new segment exactly, the same as
a crash just after the swap finished. Never a mix, never a lost latest value.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from common.clock import ManualClock
from log.config import LogConfig
from log.log import Log
from log.logdir import SWAP_SUFFIX
from log.segment import LOG_SUFFIX, file_stem
from tests.log.conftest import START_MS, small_config
from tests.log.test_cleaner_support import Rec, clean, keyed_batch, read_all

CONFIG = small_config(cleanup_policy=frozenset({"compact"}))


class Crash(Exception):
    """Raised from the swap hook: the process dies here."""


def prepare(directory: Path, clock: ManualClock) -> None:
    """A log cleaned once (small cleaned segments) then grown: its next pass merges several segments."""
    log = Log.open(directory, CONFIG, clock)
    for i in range(20):  # keys written once: the first cleaned segment is never empty
        log.append(keyed_batch([Rec(b"s%d" % i, b"once", START_MS)]))
    for i in range(500):
        log.append(keyed_batch([Rec(b"k%d" % (i % 9), b"v%d" % i, START_MS + i)]))
    clean(log, clock.time_ms())
    for i in range(500, 800):
        log.append(keyed_batch([Rec(b"k%d" % (i % 9), b"v%d" % i, START_MS + i)]))
    log.close()


def run_with_crash(directory: Path, clock: ManualClock, config: LogConfig, crash_at: str | None) -> list[str]:
    """One pass on ``directory``, crashing after the first step named ``crash_at``; returns the steps run."""
    steps: list[str] = []

    def hook(step: str) -> None:
        steps.append(step)
        if step == crash_at:
            raise Crash(step)

    log = Log.open(directory, config, clock)
    try:
        clean(log, clock.time_ms(), on_step=hook)
    except Crash:
        assert log.closed, "a failed swap leaves the log closed"
    else:
        log.close()
    return steps


def contents(directory: Path, clock: ManualClock) -> list[tuple[int, Rec]]:
    log = Log.open(directory, CONFIG, clock)
    try:
        return read_all(log)
    finally:
        log.close()


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("prepared") / "p0"
    prepare(directory, ManualClock(START_MS))
    return directory


def copy(prepared: Path, tmp_path: Path, name: str) -> Path:
    target = tmp_path / name
    shutil.copytree(prepared, target)
    return target


def first_group_steps(prepared: Path, tmp_path: Path) -> list[str]:
    steps = run_with_crash(copy(prepared, tmp_path, "dry"), ManualClock(START_MS), CONFIG, crash_at="rename")
    assert steps[:2] == ["index-swap", "commit"]
    assert steps[-1] == "rename"
    assert len([s for s in steps if s.startswith("delete-")]) > 1, "the first group merges several segments"
    return steps


def test_a_crash_at_every_step_recovers_old_or_new(prepared: Path, tmp_path: Path) -> None:
    clock = ManualClock(START_MS)
    old = contents(copy(prepared, tmp_path, "old"), clock)
    new_dir = copy(prepared, tmp_path, "new")
    run_with_crash(new_dir, clock, CONFIG, crash_at="rename")  # the first group swapped, then death
    new = contents(new_dir, clock)
    assert new != old
    assert {r.key: r.value for _, r in new} == {r.key: r.value for _, r in old}, "latest values survive"
    for step in first_group_steps(prepared, tmp_path):
        directory = copy(prepared, tmp_path, f"crash-{step}")
        run_with_crash(directory, clock, CONFIG, crash_at=step)
        recovered = contents(directory, clock)
        expected = old if step == "index-swap" else new
        assert recovered == expected, f"crash after {step}"
        leftovers = [p.name for p in directory.iterdir() if p.name.endswith((".cleaned", SWAP_SUFFIX))]
        assert not leftovers, f"crash after {step} left {leftovers}"


def test_a_crash_before_any_step_leaves_only_strays(prepared: Path, tmp_path: Path) -> None:
    clock = ManualClock(START_MS)
    directory = copy(prepared, tmp_path, "strays")
    old = contents(copy(prepared, tmp_path, "old"), clock)
    log = Log.open(directory, CONFIG, clock)
    first = log.segments[0].base_offset
    log.close()
    (directory / (file_stem(first) + LOG_SUFFIX + ".cleaned")).write_bytes(b"half a segment")
    assert contents(directory, clock) == old
    assert not list(directory.glob("*.cleaned"))


def test_an_empty_swap_is_dropped_and_the_rest_stays(prepared: Path, tmp_path: Path) -> None:
    clock = ManualClock(START_MS)
    directory = copy(prepared, tmp_path, "empty-swap")
    old = contents(copy(prepared, tmp_path, "old"), clock)
    (directory / (file_stem(0) + LOG_SUFFIX + SWAP_SUFFIX)).write_bytes(b"")
    assert contents(directory, clock) == old
