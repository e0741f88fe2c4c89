"""Each checker against a hand-made history holding exactly its anomaly, and against a clean one."""

from __future__ import annotations

import pytest

from chaos.checker import check, down_windows
from chaos.history import UNKNOWN
from tests.chaos.histories import Builder, clean


def kinds(h: Builder, **kwargs: float) -> dict[str, int]:
    return {a.kind: a.count for a in check(h.ops, **kwargs)}


def test_clean_history_has_no_anomaly() -> None:
    assert kinds(clean()) == {}
    assert kinds(clean(group=True)) == {}


def test_unknown_sends_never_read_are_not_anomalies() -> None:
    h = clean()
    h.send("producer-0", "a3", 0, None, 9.0, 12.0, outcome=UNKNOWN)
    assert kinds(h) == {}


def test_unknown_send_that_was_written_is_fine() -> None:
    h = clean()
    h.send("producer-1", "b2", 1, None, 9.0, 12.0, outcome=UNKNOWN)
    h.poll("reader-0", [(1, 2, "b2")], 13.0)
    h.poll("reader-1", [(1, 2, "b2")], 13.0)
    assert kinds(h) == {}


def test_lost_write_acknowledged_then_passed_over_by_every_reader() -> None:
    h = Builder()
    h.send("producer-0", "x0", 0, 0, 0.5, 1.0)
    h.send("producer-0", "x1", 0, 1, 1.5, 2.0)  # acknowledged at offset 1 ...
    h.send("producer-0", "x2", 0, 2, 2.5, 3.0)
    for reader in ("reader-0", "reader-1"):  # ... but the log went 0, 2: nobody ever read offset 1
        h.poll(reader, [(0, 0, "x0"), (0, 2, "x2")], 5.0)
    found = check(h.ops)
    assert [a.kind for a in found] == ["lost-write"]
    assert found[0].examples[0]["value"] == "x1"
    assert found[0].examples[0]["highest_offset_read"] == 2


def test_unseen_write_acknowledged_beyond_what_readers_reached() -> None:
    h = clean()
    h.send("producer-0", "a3", 0, 3, 9.0, 9.5)  # acknowledged at offset 3, never read: the log ends at 2
    found = check(h.ops)
    assert [a.kind for a in found] == ["unseen-write"]
    assert found[0].examples[0]["value"] == "a3"


def test_duplicate_value_at_two_offsets() -> None:
    h = clean()
    h.poll("reader-0", [(0, 3, "a1")], 10.0)  # a1 again, at offset 3
    h.poll("reader-1", [(0, 3, "a1")], 10.0)
    found = check(h.ops)
    assert [a.kind for a in found] == ["duplicate"]
    assert found[0].examples[0] == {"value": "a1", "offsets": [(0, 1), (0, 3)]}


def test_inconsistent_offset_two_readers_disagree() -> None:
    h = clean()
    h.send("producer-1", "b2", 1, None, 9.0, 9.5, outcome=UNKNOWN)
    h.send("producer-1", "c2", 1, None, 9.0, 9.5, outcome=UNKNOWN)
    h.poll("reader-0", [(1, 2, "b2")], 10.0)
    h.poll("reader-1", [(1, 2, "c2")], 10.0)  # offset 2 of partition 1 holds b2 for one reader, c2 for the other
    found = check(h.ops)
    assert [a.kind for a in found] == ["inconsistent-offset"]
    assert found[0].examples[0]["values"] == ["b2", "c2"]


def test_inconsistent_offset_ack_names_another_offset() -> None:
    h = Builder()
    h.send("producer-0", "x0", 0, 0, 0.5, 1.0)
    h.send("producer-0", "x1", 0, 5, 1.5, 2.0)  # acknowledged at 5, read at 1
    for reader in ("reader-0", "reader-1"):
        h.poll(reader, [(0, 0, "x0"), (0, 1, "x1")], 5.0)
    found = check(h.ops)
    assert [a.kind for a in found] == ["inconsistent-offset"]
    assert found[0].examples[0]["source"] == "ack offset"


def test_nonmonotonic_send_one_producer_reordered_in_a_partition() -> None:
    h = Builder()
    h.send("producer-0", "x0", 0, 1, 0.5, 1.0)  # sent first, landed second
    h.send("producer-0", "x1", 0, 0, 0.6, 1.1)
    for reader in ("reader-0", "reader-1"):
        h.poll(reader, [(0, 0, "x1"), (0, 1, "x0")], 5.0)
    found = check(h.ops)
    assert [a.kind for a in found] == ["nonmonotonic-send"]
    assert found[0].examples[0]["later"]["value"] == "x1"


def test_sends_of_different_producers_may_interleave() -> None:
    h = Builder()
    h.send("producer-0", "x0", 0, 1, 0.5, 1.0)
    h.send("producer-1", "y0", 0, 0, 0.6, 1.1)
    h.poll("reader-0", [(0, 0, "y0"), (0, 1, "x0")], 5.0)
    assert kinds(h) == {}


def test_nonmonotonic_poll_reader_goes_back() -> None:
    h = clean()
    h.poll("reader-0", [(0, 1, "a1")], 12.0)  # reader-0 read up to offset 2 already
    found = check(h.ops)
    assert [a.kind for a in found] == ["nonmonotonic-poll"]
    assert found[0].examples[0]["previous_offset"] == 2


def test_going_back_after_a_reset_is_legal() -> None:
    h = clean()
    h.reset("reader-0", 11.0)
    h.poll("reader-0", [(0, 0, "a0"), (0, 1, "a1")], 12.0)
    assert kinds(h) == {}


def test_poll_skip_reader_jumps_over_what_another_read() -> None:
    h = Builder()
    for offset, value in enumerate(["x0", "x1", "x2"]):
        h.send("producer-0", value, 0, offset, offset + 0.5, offset + 1.0)
    h.poll("reader-0", [(0, 0, "x0"), (0, 1, "x1"), (0, 2, "x2")], 5.0)
    h.poll("reader-1", [(0, 0, "x0")], 5.0)
    h.poll("reader-1", [(0, 2, "x2")], 6.0)  # skipped offset 1, which reader-0 read
    found = check(h.ops)
    assert [a.kind for a in found] == ["poll-skip"]
    assert found[0].examples[0]["skipped_offsets"] == [1]


def kill_two(h: Builder) -> None:
    """Brokers 1 and 2 down from 10.2 (second kill seen complete) until 20.0 (first restart begins)."""
    h.fault("kill", "broker-1", 10.0, 10.1)
    h.fault("kill", "broker-2", 10.1, 10.2)
    h.fault("start", "broker-1", 20.0, 23.0)
    h.fault("start", "broker-2", 23.0, 26.0)


def test_down_windows_from_fault_actions() -> None:
    h = Builder()
    kill_two(h)
    h.fault("pause", "broker-0", 30.0, 30.1)
    h.fault("resume", "broker-0", 40.0, 40.0)
    assert down_windows(h.ops, ["broker-0", "broker-1", "broker-2"], 2, 50.0) == [(10.2, 20.0)]
    assert down_windows(h.ops, ["broker-0", "broker-1", "broker-2"], 3, 50.0) == [(10.1, 23.0), (30.1, 40.0)]
    h.fault("kill", "broker-0", 45.0, 45.5)  # never restarted: the window runs to the end
    h.fault("kill", "broker-1", 46.0, 46.5)
    assert down_windows(h.ops, ["broker-0", "broker-1", "broker-2"], 2, 50.0)[-1] == (46.5, 50.0)


def test_acked_below_min_isr_inside_a_kill_two_window() -> None:
    h = Builder(replicas={"0": [0, 1, 2]})
    kill_two(h)
    h.send("producer-0", "x0", 0, 0, 12.0, 15.0)  # invoked and acknowledged while only broker-0 ran
    h.poll("reader-0", [(0, 0, "x0")], 30.0)
    found = check(h.ops)
    assert [a.kind for a in found] == ["acked-below-min-isr"]
    assert found[0].examples[0]["window"] == [10.2, 20.0]


@pytest.mark.parametrize(
    ("t0", "t1", "why"),
    [
        (9.0, 11.0, "in flight across the kill: may have been replicated before it"),
        (12.0, 24.0, "acknowledged after a restart began: may be on the restarted replica"),
        (21.0, 22.0, "invoked after the window"),
    ],
)
def test_acks_around_a_kill_two_window_are_legal(t0: float, t1: float, why: str) -> None:
    h = Builder(replicas={"0": [0, 1, 2]})
    kill_two(h)
    h.send("producer-0", "x0", 0, 0, t0, t1)
    h.poll("reader-0", [(0, 0, "x0")], 30.0)
    assert kinds(h) == {}, why


def test_min_isr_counts_only_the_partitions_replicas() -> None:
    h = Builder(replicas={"0": [0, 3, 4]})  # brokers 1 and 2 are not replicas of partition 0
    kill_two(h)
    h.send("producer-0", "x0", 0, 0, 12.0, 15.0)
    h.poll("reader-0", [(0, 0, "x0")], 30.0)
    assert kinds(h) == {}


def test_group_stall_acknowledged_value_waits_too_long() -> None:
    h = clean(group=True)
    h.send("producer-0", "a3", 0, 3, 9.0, 10.0)
    for reader in ("reader-0", "reader-1"):
        h.poll(reader, [(0, 3, "a3")], 11.0)
    h.poll("group-0", [(0, 3, "a3")], 100.0)  # the group took 90 s to get to it
    found = check(h.ops, group_stall_s=30.0)
    assert [a.kind for a in found] == ["group-stall"]
    assert found[0].examples[0]["from"] == 10.0
    assert found[0].examples[0]["seconds"] == 90.0
    assert kinds(h, group_stall_s=120.0) == {}


def test_group_idle_without_backlog_is_not_a_stall() -> None:
    h = clean(group=True)
    h.poll("reader-0", [], 200.0)  # the run goes on long after the group read everything
    assert kinds(h, group_stall_s=30.0) == {}


def test_group_unseen_acknowledged_value_the_group_never_read() -> None:
    h = clean(group=True)
    h.send("producer-0", "a3", 0, 3, 9.0, 10.0)
    for reader in ("reader-0", "reader-1"):
        h.poll(reader, [(0, 3, "a3")], 11.0)
    found = check(h.ops, group_stall_s=30.0)
    assert [a.kind for a in found] == ["group-unseen"]
    assert found[0].examples[0]["value"] == "a3"


def test_group_may_read_twice_after_a_rebalance() -> None:
    h = clean(group=True)
    h.reset("group-0", 9.0)
    h.poll("group-0", [(1, 0, "b0"), (1, 1, "b1")], 10.0)
    assert kinds(h) == {}


def test_group_checks_need_a_group_in_the_meta() -> None:
    h = clean(group=False)
    h.send("producer-0", "a3", 0, 3, 9.0, 10.0)
    for reader in ("reader-0", "reader-1"):
        h.poll(reader, [(0, 3, "a3")], 11.0)
    assert kinds(h) == {}
