"""``RaftNode.next_wait``: how long the Raft thread's tick may wait for a message, from pysyncobj's timers.

Unit level: the node is not started; its pysyncobj state is set by hand (the real thing runs in
test_quorum_cluster's idle-follower test).
"""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import pytest

from controller.raft.node import RaftNode

FOLLOWER, LEADER = 0, 2
DUE_S, LONGEST_S, PERIOD_S = 0.01, 0.05, 0.03


def node(state: int, *, deadline_in_s: float = 0.0, heartbeat_in_s: float = 0.0) -> Any:
    raft: Any = RaftNode.__new__(RaftNode)
    now = time.monotonic()
    raft._SyncObj__raftState = state
    raft._SyncObj__raftElectionDeadline = now + deadline_in_s
    raft._SyncObj__newAppendEntriesTime = now + heartbeat_in_s
    raft._SyncObj__conf = SimpleNamespace(appendEntriesPeriod=PERIOD_S)
    return raft


@pytest.mark.parametrize("state", [FOLLOWER, 1])  # a candidate waits for its deadline too
def test_a_follower_waits_until_its_election_deadline(state: int) -> None:
    wait = node(state, deadline_in_s=0.02).next_wait(DUE_S, LONGEST_S)
    assert 0.015 < wait <= 0.02


def test_a_far_deadline_is_waited_for_at_most_longest() -> None:
    assert node(FOLLOWER, deadline_in_s=0.4).next_wait(DUE_S, LONGEST_S) == LONGEST_S


def test_a_passed_deadline_without_an_election_is_looked_at_again_after_due() -> None:
    assert node(FOLLOWER, deadline_in_s=-0.1).next_wait(DUE_S, LONGEST_S) == DUE_S


def test_a_leader_waits_until_its_next_heartbeat() -> None:
    wait = node(LEADER, deadline_in_s=-5, heartbeat_in_s=0.02).next_wait(DUE_S, LONGEST_S)
    assert 0.015 < wait <= 0.02


def test_a_leader_whose_heartbeat_is_due_waits_a_period_after_sending_it() -> None:
    assert node(LEADER, heartbeat_in_s=-0.01).next_wait(DUE_S, LONGEST_S) == PERIOD_S
    assert node(LEADER, heartbeat_in_s=-0.01).next_wait(DUE_S, 0.02) == 0.02
