"""The ISR rules (replication/isr.py, ISR1-ISR6, Kafka's ``maybeShrinkIsr``/``maybeExpandIsr``/
``PendingPartitionChange``), and the high watermark over the maximal ISR (HW1 with ISR4)."""

from __future__ import annotations

from replication.high_watermark import HighWatermark, ReplicaProgress
from replication.isr import AlterPartitionRequest, IsrState, may_join, out_of_sync

LAG_MS = 10_000.0


def progress(leo: int, caught_up_ms: float) -> ReplicaProgress:
    return ReplicaProgress(log_end_offset=leo, last_fetch_ms=caught_up_ms, last_caught_up_ms=caught_up_ms)


def state(isr: set[int]) -> IsrState:
    return IsrState(leader_id=1, leader_epoch=3, partition_epoch=7, isr=frozenset(isr))


def test_isr1_a_follower_lagging_longer_than_the_max_is_out_of_sync() -> None:
    followers = {2: progress(5, 0.0), 3: progress(5, 5_000.0)}
    assert out_of_sync({1, 2, 3}, 1, followers, 10, 12_000.0, LAG_MS, 0.0) == {2}


def test_isr1_a_follower_at_the_leaders_end_is_never_out_of_sync() -> None:
    followers = {2: progress(10, 0.0)}
    assert out_of_sync({1, 2}, 1, followers, 10, 1e9, LAG_MS, 0.0) == frozenset()


def test_isr1_a_silent_follower_counts_from_when_the_leader_began() -> None:
    followers = {2: ReplicaProgress()}
    assert out_of_sync({1, 2}, 1, followers, 10, 15_000.0, LAG_MS, 8_000.0) == frozenset()
    assert out_of_sync({1, 2}, 1, followers, 10, 18_001.0, LAG_MS, 8_000.0) == {2}


def test_isr2_joins_only_at_the_high_watermark_and_the_epoch_start() -> None:
    assert may_join(progress(10, 0.0), high_watermark=10, leader_epoch_start_offset=8)
    assert not may_join(progress(9, 0.0), high_watermark=10, leader_epoch_start_offset=8)
    assert not may_join(progress(10, 0.0), high_watermark=10, leader_epoch_start_offset=12)
    assert not may_join(ReplicaProgress(), high_watermark=0, leader_epoch_start_offset=0)


def test_isr3_one_change_in_flight() -> None:
    isr = state({1, 2, 3})
    first = isr.propose_shrink({3})
    assert first == AlterPartitionRequest(1, 3, 7, (1, 2))
    assert isr.propose_shrink({2}) is None
    assert isr.propose_expand(4) is None


def test_isr4_pending_shrink_keeps_the_larger_isr_for_the_high_watermark() -> None:
    isr = state({1, 2, 3})
    isr.propose_shrink({3})
    assert isr.maximal_isr == {1, 2, 3}
    hw = HighWatermark.start(1, (1, 2, 3), isr.maximal_isr, 0, 10)
    hw.on_follower_fetch(2, 10, 0.0)
    hw.on_follower_fetch(3, 4, 0.0)
    assert hw.high_watermark == 4  # 3 still counts until the controller commits the shrink


def test_isr4_pending_expand_counts_the_new_member_at_once() -> None:
    isr = state({1, 2})
    isr.propose_expand(3)
    assert isr.maximal_isr == {1, 2, 3}


def test_isr5_the_leader_never_removes_itself() -> None:
    isr = state({1, 2})
    request = isr.propose_shrink({1, 2})
    assert request is not None
    assert request.new_isr == (1,)


def test_isr6_an_accepted_answer_commits_the_controllers_isr() -> None:
    isr = state({1, 2, 3})
    request = isr.propose_shrink({3})
    assert request is not None
    assert isr.on_response(request, True, (1, 2), 8)
    assert isr.isr == {1, 2}
    assert isr.partition_epoch == 8
    assert isr.pending is None


def test_isr6_a_rejected_answer_keeps_the_committed_isr() -> None:
    isr = state({1, 2, 3})
    request = isr.propose_shrink({3})
    assert request is not None
    assert not isr.on_response(request, False, (), -1)
    assert isr.isr == {1, 2, 3}
    assert isr.pending is None


def test_isr6_a_newer_metadata_image_ends_the_pending_change() -> None:
    isr = state({1, 2, 3})
    isr.propose_shrink({3})
    assert isr.on_metadata((1, 2), 8)
    assert isr.pending is None
    assert not isr.on_metadata((1, 2, 3), 6)  # older than what we have
    assert isr.isr == {1, 2}


def test_isr6_a_late_answer_to_a_superseded_request_is_ignored() -> None:
    isr = state({1, 2, 3})
    old = isr.propose_shrink({3})
    assert old is not None
    isr.on_metadata((1, 2), 8)
    assert not isr.on_response(old, True, (1, 2), 8)


def test_isr6_a_stale_view_or_no_answer_keeps_the_change_pending() -> None:
    """The change may have been applied with its answer lost: the larger ISR keeps counting (ISR4) until the
    metadata settles it; a settling refusal (INELIGIBLE_REPLICA) ends it."""
    isr = state({1, 2})
    request = isr.propose_expand(3, broker_epoch=5)
    assert request is not None
    assert request.joining_broker_epochs == ((3, 5),)  # ISR7
    assert not isr.on_response(request, False, (), -1, settled=False)
    assert isr.pending == request
    assert isr.maximal_isr == {1, 2, 3}
    assert isr.on_metadata((1, 2, 3), 8)
    assert isr.pending is None
    again = state({1, 2})
    request = again.propose_expand(3)
    assert request is not None
    assert not again.on_response(request, False, (), -1, settled=True)
    assert again.pending is None
    assert again.maximal_isr == {1, 2}
