"""Fixtures of the partition tests: a manual clock and broker 0 leading an RF 3 partition over a real log."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from common.clock import ManualClock
from log.config import LogConfig
from log.log import Log
from replication.partition import Partition
from tests.broker.test_partition import Reg


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def leader(tmp_path: Path, clock: ManualClock) -> Iterator[Partition]:
    """Broker 0 leading ``t``-0 (replicas and ISR 0, 1, 2) in leader epoch 1 (a module may define its own)."""
    p = Partition("id", "t", 0, Log.open(tmp_path / "leader", LogConfig(), clock), 0, clock)
    assert p.make_leader(Reg((0, 1, 2), (0, 1, 2), 0, leader_epoch=1, partition_epoch=1))
    yield p
    p.close()
