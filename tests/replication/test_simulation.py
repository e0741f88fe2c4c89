"""The seeded simulation of one partition's replicas and the controller (tests/replication/sim.py): after every
step the high watermark never goes back (S1), no acknowledged record is lost (S2), replicas agree below the
high watermark (S3), at most one leader writes per leader epoch (S4) and a restarted replica's epoch cache
covers its log (S5); after every episode (random faults, two failures in a row, a lost tail, a crash
between an append and its epoch checkpoint, an unclean election) the replicas converge to the leader's log.

``ODRADEK_SIM_SEEDS=N`` runs N seeds (default 400); ``ODRADEK_SIM_SEED=S`` runs seed S alone. A failure
names its seed: rerun it with ``ODRADEK_SIM_SEED``.
"""

from __future__ import annotations

import os
from collections import Counter

import pytest

from replication.truncation import TruncationDecision
from tests.replication import sim_replica
from tests.replication.sim import Violation
from tests.replication.sim_run import Simulation

EPISODES = 3
STEPS = 150
SETTLE_STEPS = 250


def _seeds() -> list[int]:
    if "ODRADEK_SIM_SEED" in os.environ:
        return [int(os.environ["ODRADEK_SIM_SEED"])]
    return list(range(int(os.environ.get("ODRADEK_SIM_SEEDS", "400"))))


def run(seed: int, **options: bool) -> Simulation:
    sim = Simulation(seed, **options)
    sim.run(EPISODES, STEPS, SETTLE_STEPS)
    return sim


@pytest.mark.parametrize("seed", _seeds())
def test_seeded_simulation_keeps_s1_to_s5_and_converges(seed: int) -> None:
    sim = Simulation(seed)
    try:
        sim.run(EPISODES, STEPS, SETTLE_STEPS)
    except Violation as e:
        pytest.fail(f"seed {seed} (ODRADEK_SIM_SEED={seed}): {e}\n{sim.summary()}")


def test_the_simulation_exercises_every_scenario() -> None:
    """The faults happen: without them S1-S5 would hold trivially."""
    sims = [run(seed) for seed in range(60)]
    assert sum(sim.controller.leader_epoch > 0 for sim in sims) >= 30
    assert sum(sim.crashes for sim in sims) >= 30
    assert sum(len(sim.acked) for sim in sims) >= 60 * 20
    assert sum(sim.rejected for sim in sims) > 0
    completed = sum((Counter(sim.completed) for sim in sims), Counter())
    for scenario in ("two-in-a-row", "lost-tail", "mid-append-crash", "unclean"):
        assert completed[scenario] >= 3, completed
    assert sum(sim.lost for sim in sims) > 0  # unclean elections did lose records (and the replicas converged)


def _caught(seeds: range, **options: bool) -> int:
    caught = 0
    for seed in seeds:
        try:
            run(seed, **options)
        except Violation:
            caught += 1
    return caught


def test_a_broken_rule_is_caught_without_truncation(monkeypatch: pytest.MonkeyPatch) -> None:
    """The simulation's teeth: followers that never truncate (no TR rules) diverge, and some seed says so."""
    monkeypatch.setattr(sim_replica, "decide", lambda cache, asked, answer, start, end: TruncationDecision(end))
    assert _caught(range(40)) > 0


def test_truncation_capped_at_the_high_watermark_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 16 item 1: the old cap (no TR7) leaves followers of an unclean leader diverged."""
    monkeypatch.setattr(sim_replica, "TRUNCATE_BELOW_HW", False)
    assert _caught(range(3, 160, 4)) > 0  # the seeds with unclean elections


def test_appending_before_the_epoch_checkpoint_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 16 item 2: without EC4 and EC5 a crash between the entry and the checkpoint loses an epoch."""
    monkeypatch.setattr(sim_replica, "EPOCH_SAVE_FIRST", False)
    monkeypatch.setattr(sim_replica, "RECOVER_EPOCHS", False)
    assert _caught(range(80)) > 0


def test_without_eligible_leader_replicas_two_failures_in_a_row_lose_records() -> None:
    """Issue 16 item 6: without ELR (and HW8) the last ISR member that lost its tail is elected."""
    assert _caught(range(80), elr=False) > 0
