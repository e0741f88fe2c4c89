"""The pure planning rules of the source: rate limits, trigger pacing, data loss, task splitting."""

from __future__ import annotations

from operator import attrgetter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from common.clock import ManualClock
from odradek.types import TopicPartition
from spark.planning import (
    DataLoss,
    OffsetRange,
    TriggerPacer,
    find_data_loss,
    pack_ranges,
    plan_ranges,
    rate_limit,
    repair,
)
from spark.reading import DataLossError, report_data_loss

A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)
BY_PARTITION = attrgetter("topic", "partition", "start")

backlogs = st.dictionaries(
    st.builds(TopicPartition, st.sampled_from(["a", "b", "c"]), st.integers(0, 5)),
    st.tuples(st.integers(0, 1000), st.integers(0, 5000)),
    max_size=10,
)


@given(backlogs, st.integers(0, 6000))
def test_rate_limit_never_exceeds_the_limit_nor_the_latest_offsets(spans: dict, limit: int) -> None:
    start = {tp: s for tp, (s, _) in spans.items()}
    latest = {tp: s + n for tp, (s, n) in spans.items()}
    ends = rate_limit(start, latest, limit)
    assert set(ends) == set(latest)
    assert all(start[tp] <= ends[tp] <= latest[tp] for tp in latest)
    total = sum(latest[tp] - start[tp] for tp in latest)
    assert sum(ends[tp] - start[tp] for tp in latest) == min(limit, total)  # the whole limit is used


@given(backlogs, st.integers(0, 100))
def test_rate_limit_starves_no_partition_when_the_limit_allows(spans: dict, limit: int) -> None:
    start = {tp: s for tp, (s, _) in spans.items()}
    latest = {tp: s + n for tp, (s, n) in spans.items()}
    with_data = [tp for tp in latest if latest[tp] > start[tp]]
    ends = rate_limit(start, latest, limit)
    if limit >= len(with_data):
        assert all(ends[tp] > start[tp] for tp in with_data)


def test_rate_limit_shares_in_proportion_to_the_backlog() -> None:
    ends = rate_limit({A0: 0, A1: 100}, {A0: 900, A1: 200}, 100)
    assert ends == {A0: 90, A1: 110}


def test_pacer_waits_for_min_offsets_until_the_max_delay() -> None:
    clock = ManualClock()
    pacer = TriggerPacer(min_offsets=100, max_delay_ms=60_000, clock=clock)
    assert pacer.should_run(1)  # the first trigger of a query is never delayed
    clock.advance(1_000)
    assert not pacer.should_run(99)
    assert pacer.should_run(100)
    clock.advance(59_999)
    assert not pacer.should_run(5)
    clock.advance(1)
    assert pacer.should_run(5)  # maxTriggerDelay passed since the last batch


def test_data_loss_is_found_and_named() -> None:
    losses = find_data_loss({A0: 5, A1: 50, B0: 3}, {A0: 10, A1: 0}, {A0: 20, A1: 40})
    assert losses == [
        DataLoss(A0, 5, 10, "deleted by retention before they were read"),
        DataLoss(A1, 40, 50, losses[1].reason),
        DataLoss(B0, 3, -1, losses[2].reason),
    ]
    assert losses[0].message() == "a-0: offsets 5 to 9 were lost (deleted by retention before they were read)"
    assert repair({A0: 5, A1: 50, B0: 3}, {A0: 10, A1: 0}, {A0: 20, A1: 40}) == {A0: 10, A1: 40}
    with pytest.raises(DataLossError, match=r"a-0: offsets 5 to 9 were lost .* set the source option failOnDataLoss"):
        report_data_loss(losses, fail=True)


def test_data_loss_is_a_warning_when_not_failing(caplog: pytest.LogCaptureFixture) -> None:
    report_data_loss([DataLoss(A0, 5, 10, "deleted by retention")], fail=False)
    assert "a-0: offsets 5 to 9 were lost" in caplog.text


def test_plan_ranges_one_task_per_partition_with_data() -> None:
    ranges = plan_ranges({A0: 0, A1: 5, B0: 7}, {A0: 10, A1: 5, B0: 9})
    assert ranges == [OffsetRange("a", 0, 0, 10), OffsetRange("b", 0, 7, 9)]


def test_plan_ranges_splits_for_min_partitions_and_max_records() -> None:
    ranges = plan_ranges({A0: 0, B0: 0}, {A0: 90, B0: 10}, min_partitions=5)
    assert len(ranges) >= 5
    assert [r for r in ranges if r.topic == "b"] == [OffsetRange("b", 0, 0, 10)]
    pieces = [r for r in ranges if r.topic == "a"]
    assert pieces[0].start == 0
    assert pieces[-1].end == 90
    assert all(x.end == y.start for x, y in zip(pieces, pieces[1:], strict=False))
    capped = plan_ranges({A0: 0}, {A0: 95}, max_records_per_partition=10)
    assert len(capped) == 10
    assert max(r.size for r in capped) <= 10
    assert sum(r.size for r in capped) == 95


def test_pack_ranges_balances_at_most_max_tasks_groups() -> None:
    ranges = [OffsetRange("a", p, 0, size) for p, size in enumerate([50, 10, 40, 30, 5])]
    assert pack_ranges(ranges, 5) == [(r,) for r in ranges]  # no more ranges than tasks: one each
    groups = pack_ranges(ranges, 2)
    assert len(groups) == 2
    assert sorted((r for g in groups for r in g), key=BY_PARTITION) == ranges  # every range once
    assert sorted(sum(r.size for r in g) for g in groups) == [65, 70]  # largest first into the smaller group
    assert all(list(g) == sorted(g, key=BY_PARTITION) for g in groups)
    assert pack_ranges(ranges, 1) == [tuple(ranges)]


def test_pack_ranges_never_lets_a_group_exceed_max_records() -> None:
    ranges = [OffsetRange("a", p, 0, 10) for p in range(5)]
    groups = pack_ranges(ranges, 2, max_records=20)
    assert len(groups) == 3  # maxRecordsPerPartition wins over maxPartitions
    assert max(sum(r.size for r in g) for g in groups) <= 20
    assert sorted((r for g in groups for r in g), key=BY_PARTITION) == ranges


@given(
    st.lists(st.integers(1, 1000), min_size=1, max_size=12),
    st.integers(1, 6),
    st.one_of(st.none(), st.integers(1000, 3000)),
)
def test_pack_ranges_keeps_every_range_once_within_the_limits(sizes: list[int], tasks: int, cap: int | None) -> None:
    ranges = [OffsetRange("t", p, 7, 7 + size) for p, size in enumerate(sizes)]
    groups = pack_ranges(ranges, tasks, cap)
    assert sorted((r for g in groups for r in g), key=BY_PARTITION) == ranges
    assert len(groups) == min(tasks, len(ranges)) if cap is None else len(groups) >= min(tasks, len(ranges))
    if cap is not None:
        assert all(len(g) == 1 or sum(r.size for r in g) <= cap for g in groups)
