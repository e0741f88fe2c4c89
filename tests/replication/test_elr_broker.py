"""The broker's part of eligible leader replicas (KIP-966, issue 16 item 6): the high watermark stops while
the ISR is below min.insync.replicas (HW8), and the clean-shutdown epoch it names when it registers again."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker import clean_shutdown
from common.clock import ManualClock
from log.config import LogConfig
from log.log import Log
from log.record import build_batch
from replication.high_watermark import HighWatermark
from replication.partition import Partition
from tests.broker.test_partition import Reg

START_MS = 1_700_000_000_000


def test_hw8_no_move_below_min_isr() -> None:
    hw = HighWatermark.start(1, replicas=[1, 2, 3], isr=[1], high_watermark=0, leader_leo=5, min_isr=2)
    assert hw.high_watermark == 0  # the ISR {1} is below 2
    hw.update_isr([1, 2], [1, 2, 3])
    hw.on_follower_fetch(2, 5, now_ms=0)
    assert hw.high_watermark == 5


@pytest.mark.parametrize(("elr", "moved"), [(True, 0), (False, 3)])
def test_hw8_a_leader_alone_below_min_isr_keeps_its_high_watermark(tmp_path: Path, elr: bool, moved: int) -> None:
    clock = ManualClock()
    log = Log.open(tmp_path / "t-0", LogConfig(min_insync_replicas=2), clock)
    p = Partition("id", "t", 0, log, 0, clock, eligible_leader_replicas=elr)
    assert p.make_leader(Reg((0, 1, 2), (0,), 0, leader_epoch=1))
    p.append_as_leader(build_batch([b"x"] * 3, timestamp_ms=START_MS), acks=1)  # acks=1 is still taken
    assert p.high_watermark == moved  # with ELR the fenced 1 and 2 hold every committed record (HW8)
    p.close()


def test_the_clean_shutdown_epoch_is_read_once(tmp_path: Path) -> None:
    assert clean_shutdown.take_previous_epoch(tmp_path) is None
    clean_shutdown.record(tmp_path, 42)
    assert clean_shutdown.take_previous_epoch(tmp_path) == 42
    assert clean_shutdown.take_previous_epoch(tmp_path) is None  # a crash of the next life finds nothing
    (tmp_path / clean_shutdown.FILE_NAME).write_text("garbage")
    assert clean_shutdown.take_previous_epoch(tmp_path) is None
    assert not (tmp_path / clean_shutdown.FILE_NAME).exists()
