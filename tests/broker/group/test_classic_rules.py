"""broker/group/classic.py, the classic group protocol's pure core, rule by rule (CJ1-CJ3, CS1-CS2, CH1,
CC1, CST1): an injected clock (``now`` in ms), tokens for the waiting requests, no threads."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from broker.group.classic import (
    ClassicConfig,
    ClassicGroups,
    ClassicState,
    JoinRequest,
    JoinResult,
    SyncResult,
)
from broker.group.errors import GroupError

SESSION = 10_000
REBALANCE = 30_000
DELAY = 3_000


def groups(delay: int = DELAY, max_size: int = 2**31 - 1) -> ClassicGroups:
    ids = itertools.count()
    return ClassicGroups(ClassicConfig(initial_rebalance_delay_ms=delay, max_size=max_size),
                         new_member_id=lambda client: f"{client}-{next(ids)}")  # fmt: skip


def join_req(member_id: str = "", *, protocols: tuple[tuple[str, bytes], ...] = (("range", b"m"),),
             instance_id: str = "", client: str = "c", session: int = SESSION,
             protocol_type: str = "consumer") -> JoinRequest:  # fmt: skip
    return JoinRequest("g", member_id, instance_id, protocol_type, protocols, session, REBALANCE, client_id=client)


def first_join(g: ClassicGroups, now: float, **kw: Any) -> str:
    """CJ1's first round trip: the member id the coordinator hands out."""
    answer, ready = g.join(join_req(**kw), object(), now)
    assert answer is not None
    assert answer.error == "MEMBER_ID_REQUIRED"
    assert ready == []
    return answer.member_id


def answers(ready: list[tuple[Any, Any]]) -> dict[Any, Any]:
    return dict(ready)


def error_of(call: Any) -> str:
    with pytest.raises(GroupError) as info:
        call()
    return info.value.code


def stable_pair(g: ClassicGroups) -> tuple[str, str]:
    """Two members a (leader) and b in generation 1 (after the initial delay, at DELAY), Stable, a got b"A",
    b got b"B"."""
    a = first_join(g, 0, client="a")
    assert g.join(join_req(a, client="a"), "ja", 0) == (None, [])
    b = first_join(g, 0, client="b")
    assert g.join(join_req(b, client="b"), "jb", 0) == (None, [])
    joined = answers(g.tick(DELAY))
    assert [joined["ja"].generation_id, joined["jb"].generation_id] == [1, 1]
    assert joined["ja"].leader == a
    answer, ready = g.sync("g", b, "", 1, {}, "sb", DELAY)
    assert answer is None
    answer, ready = g.sync("g", a, "", 1, {a: b"A", b: b"B"}, "sa", DELAY)
    assert answer == SyncResult(protocol_type="consumer", protocol_name="range", assignment=b"A")
    assert answers(ready)["sb"].assignment == b"B"
    assert g.groups["g"].state is ClassicState.STABLE
    return a, b


# --- CJ1 ------------------------------------------------------------------------------------------------


def test_cj1_a_join_without_member_id_gets_member_id_required_and_joins_with_it() -> None:
    g = groups(delay=0)
    member = first_join(g, 0)
    assert g.groups["g"].members == {}
    assert member in g.groups["g"].pending
    answer, _ = g.join(join_req(member), "t", 1)
    assert answer is not None
    assert answer.error == ""
    assert answer.member_id == member
    assert answer.leader == member
    assert answer.generation_id == 1
    assert [m[0] for m in answer.members] == [member], "the leader gets the member list"


def test_cj1_a_pending_member_id_expires_after_the_session_timeout() -> None:
    g = groups()
    member = first_join(g, 0)
    g.tick(SESSION + 1)
    assert "g" not in g.groups
    assert error_of(lambda: g.join(join_req(member), "t", SESSION + 2)) == "UNKNOWN_MEMBER_ID"


def test_cj1_before_v4_a_join_without_member_id_is_added_at_once() -> None:
    g = groups(delay=0)
    req = JoinRequest("g", "", "", "consumer", (("range", b""),), SESSION, REBALANCE, require_known_member=False)
    answer, _ = g.join(req, "t", 0)
    assert answer is not None
    assert answer.error == ""
    assert answer.generation_id == 1


def test_join_checks_the_session_timeout_bounds_and_the_group_size() -> None:
    g = groups(delay=0, max_size=1)
    assert error_of(lambda: g.join(join_req(session=5_999), "t", 0)) == "INVALID_SESSION_TIMEOUT"
    a = first_join(g, 0)
    g.join(join_req(a), "t", 0)
    assert error_of(lambda: g.join(join_req(), "t2", 0)) == "GROUP_MAX_SIZE_REACHED"


# --- CJ2 ------------------------------------------------------------------------------------------------


def test_cj2_from_empty_the_first_generation_waits_the_initial_delay_pushed_back_by_new_members() -> None:
    g = groups(delay=DELAY)
    a = first_join(g, 0, client="a")
    assert g.join(join_req(a, client="a"), "ja", 0) == (None, [])
    b = first_join(g, 2_000, client="b")
    assert g.join(join_req(b, client="b"), "jb", 2_000) == (None, [])
    assert g.tick(4_999) == [], "b pushed the deadline to 2000 + 3000"
    ready = answers(g.tick(5_000))
    assert {ready["ja"].generation_id, ready["jb"].generation_id} == {1}
    assert ready["ja"].leader == a
    assert len(ready["ja"].members) == 2
    assert ready["jb"].members == ()


def test_cj2_a_rebalance_completes_when_every_member_rejoined() -> None:
    g = groups()
    a, b = stable_pair(g)
    assert g.join(join_req(a, client="a"), "ja2", 100) == (None, [])
    assert g.groups["g"].state is ClassicState.PREPARING_REBALANCE
    assert error_of(lambda: g.heartbeat("g", b, "", 1, 200)) == "REBALANCE_IN_PROGRESS"
    answer, ready = g.join(join_req(b, client="b"), "jb2", 300)
    assert answer is not None
    assert answer.generation_id == 2
    assert answers(ready)["ja2"].generation_id == 2


def test_cj2_members_that_do_not_rejoin_by_the_rebalance_deadline_are_removed() -> None:
    g = groups()
    a, b = stable_pair(g)
    g.join(join_req(a, client="a"), "ja2", 100)
    for now in range(5_000, REBALANCE, 5_000):  # b keeps its session alive but does not join again
        assert error_of(lambda now=now: g.heartbeat("g", b, "", 1, now)) == "REBALANCE_IN_PROGRESS"
        assert g.tick(now) == []
    assert g.tick(100 + REBALANCE - 1) == []
    ready = answers(g.tick(100 + REBALANCE))
    assert ready["ja2"].generation_id == 2
    assert [m[0] for m in ready["ja2"].members] == [a]
    assert list(g.groups["g"].members) == [a]


# --- CJ3 ------------------------------------------------------------------------------------------------


def test_cj3_the_protocol_every_member_supports_most_members_prefer() -> None:
    g = groups()
    protocols = [(("cooperative-sticky", b""), ("range", b"")), (("range", b""), ("cooperative-sticky", b"")),
                 (("cooperative-sticky", b""), ("roundrobin", b""), ("range", b""))]  # fmt: skip
    ids = [first_join(g, 0, client=f"m{i}") for i in range(3)]
    for i, (member, offered) in enumerate(zip(ids, protocols, strict=True)):
        assert g.join(join_req(member, client=f"m{i}", protocols=offered), f"j{i}", 0) == (None, [])
    ready = answers(g.tick(DELAY))
    assert {r.protocol_name for r in ready.values()} == {"cooperative-sticky"}
    assert [m[2] for m in ready["j0"].members] == [b"", b"", b""], "the chosen protocol's metadata"


def test_cj3_a_member_sharing_no_protocol_is_refused() -> None:
    g = groups()
    a = first_join(g, 0)
    g.join(join_req(a), "ja", 0)
    g.tick(DELAY)
    refused = join_req(protocols=(("roundrobin", b""),))
    assert error_of(lambda: g.join(refused, "t", 0)) == "INCONSISTENT_GROUP_PROTOCOL"
    other_type = join_req(protocol_type="connect")
    assert error_of(lambda: g.join(other_type, "t", 0)) == "INCONSISTENT_GROUP_PROTOCOL"
    assert list(g.groups["g"].members) == [a], "a refused join changes nothing"


# --- CS1, CS2 -------------------------------------------------------------------------------------------


def test_cs1_sync_checks_generation_member_and_rebalance() -> None:
    g = groups()
    a, b = stable_pair(g)
    assert error_of(lambda: g.sync("g", b, "", 0, {}, "s", 0)) == "ILLEGAL_GENERATION"
    assert error_of(lambda: g.sync("g", "nobody", "", 1, {}, "s", 0)) == "UNKNOWN_MEMBER_ID"
    answer, _ = g.sync("g", b, "", 1, {}, "s", 0)
    assert answer is not None
    assert answer.assignment == b"B", "in Stable a sync gets its stored assignment"
    g.join(join_req(a, client="a"), "ja2", 10)
    assert error_of(lambda: g.sync("g", b, "", 1, {}, "s", 10)) == "REBALANCE_IN_PROGRESS"


def test_cs1_a_member_the_leader_gave_nothing_gets_empty_bytes() -> None:
    g = groups()
    a = first_join(g, 0, client="a")
    g.join(join_req(a, client="a"), "ja", 0)
    b = first_join(g, 0, client="b")
    g.join(join_req(b, client="b"), "jb", 0)
    g.tick(DELAY)
    g.sync("g", b, "", 1, {}, "sb", 0)
    _, ready = g.sync("g", a, "", 1, {a: b"A"}, "sa", 0)
    assert answers(ready)["sb"].assignment == b""


def test_cs2_no_leader_sync_by_the_rebalance_timeout_rebalances_again() -> None:
    g = groups()
    long = 2 * REBALANCE  # sessions outlive the rebalance timeout: CS2 alone removes the leader
    a = first_join(g, 0, client="a", session=long)
    g.join(join_req(a, client="a", session=long), "ja", 0)
    b = first_join(g, 0, client="b", session=long)
    g.join(join_req(b, client="b", session=long), "jb", 0)
    g.tick(DELAY)
    g.sync("g", b, "", 1, {}, "sb", 0)
    assert g.groups["g"].state is ClassicState.COMPLETING_REBALANCE
    assert g.tick(DELAY + REBALANCE - 1) == []
    ready = answers(g.tick(DELAY + REBALANCE))
    assert ready["sb"] == SyncResult(error="REBALANCE_IN_PROGRESS")
    assert list(g.groups["g"].members) == [b], "the leader that never synced is removed"
    assert g.groups["g"].state is ClassicState.PREPARING_REBALANCE


# --- CH1 ------------------------------------------------------------------------------------------------


def test_ch1_heartbeat_errors_and_session_timeout() -> None:
    g = groups()
    a, b = stable_pair(g)
    assert error_of(lambda: g.heartbeat("g", "x", "", 1, 0)) == "UNKNOWN_MEMBER_ID"
    assert error_of(lambda: g.heartbeat("g", a, "", 2, 0)) == "ILLEGAL_GENERATION"
    g.heartbeat("g", a, "", 1, DELAY + SESSION - 1)
    assert g.tick(DELAY + SESSION - 1) == []
    ready = g.tick(DELAY + SESSION)
    assert list(g.groups["g"].members) == [a], "b was silent for its session timeout"
    assert ready == []
    assert g.groups["g"].state is ClassicState.PREPARING_REBALANCE
    assert error_of(lambda: g.heartbeat("g", a, "", 1, DELAY + SESSION)) == "REBALANCE_IN_PROGRESS"


def test_ch1_a_waiting_join_keeps_its_member() -> None:
    g = groups(delay=DELAY)
    a = first_join(g, 0)
    g.join(join_req(a), "ja", 0)
    g.groups["g"].rebalance_deadline_ms = g.groups["g"].max_rebalance_deadline_ms = 10 * SESSION
    assert g.tick(2 * SESSION) == []
    assert list(g.groups["g"].members) == [a]


# --- LeaveGroup -----------------------------------------------------------------------------------------


def test_leave_rebalances_the_rest_and_the_last_leave_empties_the_group() -> None:
    g = groups()
    a, b = stable_pair(g)
    errors, _ = g.leave("g", [(b, ""), ("ghost", "")], 0)
    assert errors == ["", "UNKNOWN_MEMBER_ID"]
    assert g.groups["g"].state is ClassicState.PREPARING_REBALANCE
    answer, _ = g.join(join_req(a, client="a"), "ja2", 1)
    assert answer is not None
    assert answer.generation_id == 2
    errors, _ = g.leave("g", [(a, "")], 2)
    assert errors == [""]
    assert g.groups["g"].state is ClassicState.EMPTY
    assert g.groups["g"].members == {}


# --- CC1 ------------------------------------------------------------------------------------------------


def test_cc1_commits_allowed_in_stable_and_preparing_rebalance_refused_in_completing_rebalance() -> None:
    g = groups()
    assert g.check_commit("g", "", "", -1) is False, "no classic group: a simple commit"
    a, b = stable_pair(g)
    assert g.check_commit("g", a, "", 1) is True
    assert error_of(lambda: g.check_commit("g", "", "", -1)) == "UNKNOWN_MEMBER_ID"
    assert error_of(lambda: g.check_commit("g", "x", "", 1)) == "UNKNOWN_MEMBER_ID"
    assert error_of(lambda: g.check_commit("g", a, "", 0)) == "ILLEGAL_GENERATION"
    g.join(join_req(a, client="a"), "ja2", 10)
    assert g.groups["g"].state is ClassicState.PREPARING_REBALANCE
    assert g.check_commit("g", b, "", 1) is True, "b commits while its partitions are revoked"
    g.join(join_req(b, client="b"), "jb2", 20)
    assert g.groups["g"].state is ClassicState.COMPLETING_REBALANCE
    assert error_of(lambda: g.check_commit("g", b, "", 2)) == "REBALANCE_IN_PROGRESS"


# --- CST1 -----------------------------------------------------------------------------------------------


def test_cst1_a_static_member_rejoining_in_stable_keeps_generation_and_assignment_and_fences_the_old_id() -> None:
    g = groups(delay=0)
    a, _ = g.join(join_req(instance_id="i-a", client="a"), "ja", 0)
    assert a is not None
    assert a.generation_id == 1
    g.sync("g", a.member_id, "i-a", 1, {a.member_id: b"A"}, "sa", 0)
    again, ready = g.join(join_req(instance_id="i-a", client="a"), "ja2", 100)
    assert again is not None
    assert ready == []
    assert again.generation_id == 1
    assert again.member_id != a.member_id
    assert again.leader == again.member_id
    assert g.groups["g"].state is ClassicState.STABLE, "no rebalance for a restarted static member"
    synced, _ = g.sync("g", again.member_id, "i-a", 1, {}, "s2", 100)
    assert synced is not None
    assert synced.assignment == b"A"
    assert error_of(lambda: g.heartbeat("g", a.member_id, "i-a", 1, 100)) == "FENCED_INSTANCE_ID"
    assert error_of(lambda: g.join(join_req(a.member_id, instance_id="i-a"), "t", 100)) == "FENCED_INSTANCE_ID"


def test_cst1_a_static_member_leaves_by_its_instance_id() -> None:
    g = groups(delay=0)
    a, _ = g.join(join_req(instance_id="i-a"), "ja", 0)
    assert a is not None
    errors, _ = g.leave("g", [("", "i-a")], 1)
    assert errors == [""]
    assert g.groups["g"].members == {}
    assert g.groups["g"].static == {}


def test_a_retried_join_replaces_the_waiting_one() -> None:
    g = groups(delay=DELAY)
    a = first_join(g, 0)
    g.join(join_req(a), "first", 0)
    answer, ready = g.join(join_req(a), "second", 10)
    assert answer is None
    assert ready == [("first", JoinResult(error="UNKNOWN_MEMBER_ID", member_id=a))]
