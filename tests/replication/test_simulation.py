"""The seeded simulation of one partition's replicas and the controller (tests/replication/sim.py): after every
step the high watermark never goes back (S1), no acknowledged record is lost (S2), replicas agree below the
high watermark (S3) and at most one leader writes per leader epoch (S4); after healing, the ISR recovers.

``ODRADEK_SIM_SEEDS=N`` runs N seeds (default 400); ``ODRADEK_SIM_SEED=S`` runs seed S alone. A failure
names its seed: rerun it with ``ODRADEK_SIM_SEED``.
"""

from __future__ import annotations

import os

import pytest

from replication.truncation import TruncationDecision
from tests.replication import sim_replica
from tests.replication.sim import Violation
from tests.replication.sim_run import Simulation

STEPS = 300
SETTLE_STEPS = 300


def _seeds() -> list[int]:
    if "ODRADEK_SIM_SEED" in os.environ:
        return [int(os.environ["ODRADEK_SIM_SEED"])]
    return list(range(int(os.environ.get("ODRADEK_SIM_SEEDS", "400"))))


@pytest.mark.parametrize("seed", _seeds())
def test_seeded_simulation_keeps_s1_to_s4_and_recovers(seed: int) -> None:
    sim = Simulation(seed)
    try:
        sim.run(STEPS, SETTLE_STEPS)
    except Violation as e:
        pytest.fail(f"seed {seed} (ODRADEK_SIM_SEED={seed}): {e}\n{sim.summary()}")


def test_the_simulation_exercises_leader_changes_crashes_and_rejections() -> None:
    """The faults happen: without them S1-S4 would hold trivially."""
    sims = [Simulation(seed) for seed in range(40)]
    for sim in sims:
        sim.run(STEPS, SETTLE_STEPS)
    assert sum(sim.controller.leader_epoch > 0 for sim in sims) >= 10
    assert sum(sim.crashes for sim in sims) >= 10
    assert sum(len(sim.acked) for sim in sims) >= 40 * 20
    assert sum(sim.rejected for sim in sims) > 0


def test_a_broken_rule_is_caught_without_truncation(monkeypatch: pytest.MonkeyPatch) -> None:
    """The simulation's teeth: followers that never truncate (no TR rules) diverge, and some seed says so."""
    monkeypatch.setattr(sim_replica, "decide", lambda cache, asked, answer, start, end: TruncationDecision(end))
    caught = 0
    for seed in range(60):
        try:
            Simulation(seed).run(STEPS, SETTLE_STEPS)
        except Violation:
            caught += 1
    assert caught > 0
