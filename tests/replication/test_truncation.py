"""Follower truncation from OffsetsForLeaderEpoch answers (replication/truncation.py, rules TR1-TR6;
KIP-101, KIP-279)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from replication.epoch_cache import EpochEndOffset, EpochEntry, LeaderEpochCache
from replication.truncation import TruncationDecision, decide, leader_answer


def cache_of(*pairs: tuple[int, int]) -> LeaderEpochCache:
    return LeaderEpochCache([EpochEntry(e, o) for e, o in pairs])


def test_tr1_leader_answers_the_largest_epoch_at_or_below_the_question() -> None:
    leader = cache_of((0, 0), (2, 10))
    assert leader_answer(leader, 1, 30) == EpochEndOffset(0, 10)
    assert leader_answer(leader, 2, 30) == EpochEndOffset(2, 30)


def test_tr2_same_epoch_truncates_to_the_smaller_end() -> None:
    follower = cache_of((0, 0), (1, 10))
    assert decide(follower, 1, EpochEndOffset(1, 15), 0, 20) == TruncationDecision(15)
    assert decide(follower, 1, EpochEndOffset(1, 25), 0, 20) == TruncationDecision(20)  # TR6


def test_tr2_kip101_scenario_1_no_data_loss_on_restart() -> None:
    """KIP-101 scenario 1: a follower restarts with HW behind its log end; truncating by HW would drop m2,
    which the leader already counted committed. By epoch it keeps it."""
    follower = cache_of((0, 0))
    answer = leader_answer(cache_of((0, 0)), 0, 2)
    assert decide(follower, 0, answer, 0, 2).truncate_to == 2


def test_tr3_kip101_scenario_2_divergent_logs_are_cut_where_the_epochs_split() -> None:
    """KIP-101 scenario 2: both crash; B comes back first, becomes leader in epoch 1 and writes m3 at
    offset 1; A has m2 (epoch 0) at offset 1 and must drop it."""
    leader = cache_of((0, 0), (1, 1))
    follower = cache_of((0, 0))
    answer = leader_answer(leader, follower.latest_epoch, 2)
    assert answer == EpochEndOffset(0, 1)
    assert decide(follower, 0, answer, 0, 2) == TruncationDecision(1)


def test_tr3_follower_with_a_newer_epoch_than_the_leader_knows() -> None:
    follower = cache_of((0, 0), (1, 5), (3, 12))
    answer = EpochEndOffset(1, 9)
    assert decide(follower, 3, answer, 0, 20) == TruncationDecision(9)


def test_tr4_follower_lacking_the_leaders_epoch_asks_again() -> None:
    follower = cache_of((0, 0), (3, 12))
    answer = EpochEndOffset(2, 15)
    decision = decide(follower, 3, answer, 0, 20)
    assert decision == TruncationDecision(12, ask_epoch=0)
    assert not decision.done


def test_tr5_undefined_answer_drops_the_log_to_its_start() -> None:
    follower = cache_of((4, 100))
    assert decide(follower, 4, EpochEndOffset(-1, -1), 100, 120) == TruncationDecision(100)
    assert decide(LeaderEpochCache(), -1, EpochEndOffset(0, 5), 0, 0) == TruncationDecision(0)


@st.composite
def diverged_logs(draw: st.DrawFn) -> tuple[list[int], list[int]]:
    """Two logs (one epoch per offset) that share a prefix and then diverge with increasing epochs."""
    common = sorted(draw(st.lists(st.integers(0, 5), max_size=8)))
    top = common[-1] if common else 0
    a = common + sorted(draw(st.lists(st.integers(top + 1, top + 4), max_size=6)))
    b = common + sorted(draw(st.lists(st.integers(top + 5, top + 8), max_size=6)))
    return a, b


def cache_from(epochs: list[int]) -> LeaderEpochCache:
    cache = LeaderEpochCache()
    for offset, epoch in enumerate(epochs):
        cache.assign(epoch, offset)
    return cache


@given(diverged_logs())
def test_tr1_to_tr6_truncation_reaches_the_common_prefix(logs: tuple[list[int], list[int]]) -> None:
    """Asking until done leaves the follower a prefix of the leader's log (both directions)."""
    for follower_log, leader_log in (logs, logs[::-1]):
        follower, leader = cache_from(follower_log), cache_from(leader_log)
        end = len(follower_log)
        asked = follower.latest_epoch
        for _ in range(20):
            decision = decide(follower, asked, leader_answer(leader, asked, len(leader_log)), 0, end)
            assert decision.truncate_to <= end  # TR6
            end = decision.truncate_to
            follower.truncate_from_end(end)
            if decision.done:
                break
            assert decision.ask_epoch is not None
            asked = decision.ask_epoch
        assert follower_log[:end] == leader_log[:end]
