"""The group state machine (broker/group/shard.py, reconcile.py, model.py), rule by rule, with a manual clock."""

from __future__ import annotations

import pytest

from broker.group.errors import GroupError
from broker.group.model import Groups, MemberState, replay
from broker.group.records import CoordinatorRecord, OffsetCommitKey
from broker.group.shard import Heartbeat, OffsetCommit
from common.clock import ManualClock
from tests.broker.group.helpers import CONFIG, Topics, beat, join, make_shard


def persisted(groups: Groups) -> dict:
    """What the records carry of each group (R1): epochs, members' metadata and assignments, offsets."""
    return {
        gid: (
            g.group_epoch,
            {mid: (m.metadata_value(), m.assignment_value()) for mid, m in g.members.items()},
            dict(g.offsets),
        )
        for gid, g in groups.items()
    }


class Recorder:
    """Runs heartbeats and keeps every record emitted, to replay them (R1)."""

    def __init__(self, clock: ManualClock | None = None) -> None:
        self.shard = make_shard(clock)
        self.topics = Topics({"t": 6})
        self.log: list[CoordinatorRecord] = []

    def hb(self, **kw: object) -> object:
        result, records = self.shard.heartbeat(Heartbeat(**kw), self.topics)  # type: ignore[arg-type]
        self.log.extend(records)
        return result

    def replayed(self) -> Groups:
        groups: Groups = {}
        for r in self.log:
            replay(groups, r)
        return groups


def test_first_member_gets_every_partition_at_epoch_1_and_the_group_is_stable() -> None:
    shard, topics = make_shard(), Topics({"t": 3})
    a = join(shard, topics, ["t"])
    assert (a.member_id, a.member_epoch) == ("m1", 1)
    assert a.assignment == {("t", 0), ("t", 1), ("t", 2)}
    assert shard.groups["g"].state().value == "Stable"


def test_revoke_before_assign_c1_c2_c3() -> None:
    shard, topics = make_shard(), Topics({"t": 4})
    a = join(shard, topics, ["t"])
    b = join(shard, topics, ["t"])
    assert b.assignment == frozenset(), "C1: every partition is still a's"
    group = shard.groups["g"]
    assert group.members["m2"].state is MemberState.UNRELEASED_PARTITIONS
    # a's next heartbeat: C2, it keeps two and must give up two; its epoch stays
    a2 = beat(shard, topics, "m1", a.member_epoch, None)
    assert a2.member_epoch == a.member_epoch
    assert a2.assignment is not None
    assert len(a2.assignment) == 2
    revoked = a.assignment - a2.assignment
    assert group.members["m1"].pending_revocation == revoked
    # b asks again before a reported: still nothing (C1)
    assert beat(shard, topics, "m2", b.member_epoch, []).assignment in (None, frozenset())
    # a reports, still owning the revoked ones: no change (C3)
    assert beat(shard, topics, "m1", a2.member_epoch, a.assignment).assignment == a2.assignment
    assert group.members["m1"].state is MemberState.UNREVOKED_PARTITIONS
    # a reports it released them: it reaches the new epoch; then b gets them
    a3 = beat(shard, topics, "m1", a2.member_epoch, a2.assignment)
    assert a3.member_epoch == b.member_epoch
    assert group.members["m1"].state is MemberState.STABLE
    b2 = beat(shard, topics, "m2", b.member_epoch, [])
    assert b2.assignment == revoked
    assert group.state().value == "Stable"


def test_leave_moves_partitions_and_bumps_the_group_epoch() -> None:
    shard, topics = make_shard(), Topics({"t": 2})
    a = join(shard, topics, ["t"])
    b = join(shard, topics, ["t"])
    epoch = shard.groups["g"].group_epoch
    left = beat(shard, topics, "m1", -1, None)
    assert left.member_epoch == -1
    assert "m1" not in shard.groups["g"].members
    assert shard.groups["g"].group_epoch == epoch + 1
    assert beat(shard, topics, "m2", b.member_epoch, []).assignment == a.assignment


def test_heartbeat_errors_unknown_member_fenced_epoch_and_validation() -> None:
    shard, topics = make_shard(), Topics({"t": 2})
    a = join(shard, topics, ["t"])
    with pytest.raises(GroupError) as exc:
        beat(shard, topics, "ghost", 1, None)
    assert exc.value.code == "UNKNOWN_MEMBER_ID"
    with pytest.raises(GroupError) as exc:
        beat(shard, topics, "m1", a.member_epoch + 5, None)
    assert exc.value.code == "FENCED_MEMBER_EPOCH"
    bad = [
        (Heartbeat("", "", 0, subscribed_topic_names=("t",)), "INVALID_GROUP_ID"),
        (Heartbeat("g", "", 0), "INVALID_REQUEST"),  # no subscription
        (Heartbeat("g", "", 0, subscribed_topic_names=("t",), session_timeout_ms=10), "INVALID_REQUEST"),
        (Heartbeat("g", "", 0, subscribed_topic_names=("t",), server_assignor="sticky"), "UNSUPPORTED_ASSIGNOR"),
        (Heartbeat("g", "", 0, subscribed_topic_regex="("), "INVALID_REGULAR_EXPRESSION"),
        (Heartbeat("g", "", 0, subscribed_topic_regex=r"(a)\1"), "INVALID_REGULAR_EXPRESSION"),  # not RE2
        (Heartbeat("g", "m1", -2), "INVALID_REQUEST"),  # static leave without an instance id
    ]
    for hb, code in bad:
        with pytest.raises(GroupError) as exc:
            shard.heartbeat(hb, topics)
        assert exc.value.code == code, hb


def test_a_lost_answer_is_tolerated_with_the_previous_epoch_when_owned_is_a_subset() -> None:
    shard, topics = make_shard(), Topics({"t": 2})
    a = join(shard, topics, ["t"])
    join(shard, topics, ["t"])
    a2 = beat(shard, topics, "m1", a.member_epoch, None)
    a3 = beat(shard, topics, "m1", a2.member_epoch, a2.assignment)
    assert a3.member_epoch > a.member_epoch
    # the answer a3 got lost: the member heartbeats with its previous epoch and a subset of its partitions
    assert beat(shard, topics, "m1", a.member_epoch, a2.assignment).member_epoch == a3.member_epoch


def test_static_member_restart_keeps_partitions_and_the_old_instance_is_fenced() -> None:
    shard, topics = make_shard(), Topics({"t": 4})
    a = join(shard, topics, ["t"], instance_id="i-a")
    b = join(shard, topics, ["t"], instance_id="i-b")
    a2 = beat(shard, topics, "m1", a.member_epoch, None, instance_id="i-a")
    beat(shard, topics, "m1", a2.member_epoch, a2.assignment, instance_id="i-a")
    b2 = beat(shard, topics, "m2", b.member_epoch, [], instance_id="i-b")
    group = shard.groups["g"]
    assert group.state().value == "Stable"
    epoch, kept = group.group_epoch, group.members["m2"].assigned
    # "i-b" restarts (a new process, a new member id) within its session: same partitions, nothing moves
    b3 = join(shard, topics, ["t"], instance_id="i-b")
    assert b3.member_id != "m2"
    assert b3.assignment == kept == b2.assignment
    assert group.group_epoch == epoch
    assert group.state().value == "Stable"
    # the old process is still alive: it is fenced
    with pytest.raises(GroupError) as exc:
        beat(shard, topics, "m2", b2.member_epoch, kept, instance_id="i-b")
    assert exc.value.code == "FENCED_INSTANCE_ID"


def test_static_leave_keeps_partitions_for_the_session_then_they_move() -> None:
    clock = ManualClock()
    shard, topics = make_shard(clock), Topics({"t": 2})
    a = join(shard, topics, ["t"], instance_id="i-a")
    b = join(shard, topics, ["t"])
    a2 = beat(shard, topics, "m1", a.member_epoch, None, instance_id="i-a")
    beat(shard, topics, "m1", a2.member_epoch, a2.assignment, instance_id="i-a")
    assert beat(shard, topics, "m1", -2, None, instance_id="i-a").member_epoch == -2
    epoch = shard.groups["g"].group_epoch
    # the partitions stay reserved: b does not get them
    beat(shard, topics, "m2", b.member_epoch, [])
    assert shard.groups["g"].members["m2"].assigned == b.assignment | (frozenset({("t", 0), ("t", 1)}) - a2.assignment)
    # after the session timeout (S1) the static member is removed and b takes everything
    clock.advance(CONFIG.session_timeout_ms + 1)
    shard.heartbeat(Heartbeat("g", "m2", shard.groups["g"].members["m2"].member_epoch, owned=None), topics)
    for gid in shard.due_groups():
        shard.expire_group(gid)
    assert "m1" not in shard.groups["g"].members
    assert shard.groups["g"].group_epoch == epoch + 1
    m2 = shard.groups["g"].members["m2"]
    assert beat(shard, topics, "m2", m2.member_epoch, m2.assigned).assignment == {("t", 0), ("t", 1)}


def test_session_timeout_s1_and_rebalance_timeout_s2_remove_members() -> None:
    clock = ManualClock()
    shard, topics = make_shard(clock), Topics({"t": 2})
    a = join(shard, topics, ["t"])
    join(shard, topics, ["t"])
    beat(shard, topics, "m1", a.member_epoch, None)  # a must revoke one partition, within 5 s (rebalance timeout)
    assert shard.groups["g"].members["m1"].state is MemberState.UNREVOKED_PARTITIONS
    clock.advance(5_001)
    beat(shard, topics, "m2", shard.groups["g"].members["m2"].member_epoch, [])
    assert shard.due_groups() == ["g"]
    shard.expire_group("g")
    assert list(shard.groups["g"].members) == ["m2"], "S2"
    clock.advance(CONFIG.session_timeout_ms + 1)
    shard.expire_group("g")
    assert "g" not in shard.groups, "S1 (then S3: an empty group without offsets is deleted)"


def test_commit_checks_member_epochs_and_fetch_answers_minus_one_for_nothing() -> None:
    shard, topics = make_shard(), Topics({"t": 2})
    a = join(shard, topics, ["t"])

    def commit(member_id: str, epoch: int, offsets: dict) -> dict:
        errors, _ = shard.commit_offsets(OffsetCommit("g", member_id, epoch, "", offsets), topics)
        return errors

    with pytest.raises(GroupError) as exc:
        commit("m1", a.member_epoch - 1, {("t", 0): (5, -1, "")})
    assert exc.value.code == "STALE_MEMBER_EPOCH"
    with pytest.raises(GroupError) as exc:
        commit("", -1, {("t", 0): (5, -1, "")})
    assert exc.value.code == "UNKNOWN_MEMBER_ID", "a member-less commit needs an empty group"
    errors = commit("m1", a.member_epoch, {("t", 0): (5, 3, "meta"), ("t", 9): (1, -1, ""), ("x", 0): (1, -1, "")})
    assert errors == {("t", 0): "", ("t", 9): "UNKNOWN_TOPIC_OR_PARTITION", ("x", 0): "UNKNOWN_TOPIC_OR_PARTITION"}
    assert shard.fetch_offsets("g", "", -1, [("t", 0), ("t", 1)]) == {("t", 0): (5, 3, "meta"), ("t", 1): (-1, -1, "")}
    assert shard.fetch_offsets("g", "", -1, None) == {("t", 0): (5, 3, "meta")}
    with pytest.raises(GroupError) as exc:
        shard.fetch_offsets("g", "m1", a.member_epoch + 1, None)
    assert exc.value.code == "STALE_MEMBER_EPOCH"
    too_long = "x" * (CONFIG.offset_metadata_max_bytes + 1)
    assert commit("m1", a.member_epoch, {("t", 1): (1, -1, too_long)}) == {("t", 1): "OFFSET_METADATA_TOO_LARGE"}


def test_delete_and_offset_retention_s3() -> None:
    clock = ManualClock()
    shard, topics = make_shard(clock), Topics({"t": 2})
    join(shard, topics, ["t"])
    shard.commit_offsets(OffsetCommit("g", "m1", 1, "", {("t", 0): (5, -1, "")}), topics)
    errors, _ = shard.delete_groups(["g", "nope"])
    assert errors == {"g": "NON_EMPTY_GROUP", "nope": "GROUP_ID_NOT_FOUND"}
    beat(shard, topics, "m1", -1, None)
    assert shard.due_groups() == [], "offsets younger than the retention keep the empty group"
    clock.advance(CONFIG.offsets_retention_ms)
    assert shard.due_groups(retention=False) == [], "S3 runs only on the retention check"
    assert shard.due_groups() == ["g"]
    records = shard.expire_group("g")
    assert [r.value for r in records] == [None, None], "S3: the offset and the group are tombstoned"
    assert "g" not in shard.groups
    # a member-less commit (admin, reset-offsets) into an empty group creates it; delete removes it
    shard.commit_offsets(OffsetCommit("h", "", -1, "", {("t", 1): (7, -1, "")}), topics)
    errors, records = shard.delete_groups(["h"])
    assert errors == {"h": ""}
    assert all(r.value is None for r in records)
    assert "h" not in shard.groups


def test_partition_count_change_bumps_the_epoch_g1_and_new_partitions_are_assigned() -> None:
    shard, topics = make_shard(), Topics({"t": 2})
    a = join(shard, topics, ["t"])
    epoch = shard.groups["g"].group_epoch
    topics.counts["t"] = 3
    a2 = beat(shard, topics, "m1", a.member_epoch, a.assignment)
    assert shard.groups["g"].group_epoch == epoch + 1
    assert a2.assignment == {("t", 0), ("t", 1), ("t", 2)}
    assert a2.member_epoch == epoch + 1


def test_regex_subscription_follows_new_topics() -> None:
    shard, topics = make_shard(), Topics({"orders-eu": 1, "other": 1})
    result, _ = shard.heartbeat(Heartbeat("g", "", 0, subscribed_topic_regex=r"orders-.*", owned=frozenset()), topics)
    assert result.assignment == {("orders-eu", 0)}
    topics.counts["orders-us"] = 1
    assert beat(shard, topics, "m1", result.member_epoch, result.assignment).assignment == {
        ("orders-eu", 0),
        ("orders-us", 0),
    }


def test_group_max_size() -> None:
    shard = make_shard()
    shard.config = CONFIG.__class__(max_size=1, min_session_timeout_ms=1)
    topics = Topics({"t": 1})
    join(shard, topics, ["t"])
    with pytest.raises(GroupError) as exc:
        join(shard, topics, ["t"])
    assert exc.value.code == "GROUP_MAX_SIZE_REACHED"


def test_replaying_the_emitted_records_rebuilds_the_groups_r1() -> None:
    rec = Recorder()
    a = rec.hb(group_id="g", member_id="", member_epoch=0, subscribed_topic_names=("t",), owned=frozenset())
    b = rec.hb(group_id="g", member_id="", member_epoch=0, subscribed_topic_names=("t",), instance_id="s")
    rec.hb(group_id="g", member_id=a.member_id, member_epoch=a.member_epoch, owned=None)  # type: ignore[attr-defined]
    rec.hb(group_id="g", member_id=b.member_id, member_epoch=-2, instance_id="s")  # type: ignore[attr-defined]
    commit = OffsetCommit("g", a.member_id, a.member_epoch, "", {("t", 1): (9, 2, "m")})  # type: ignore[attr-defined]
    _, records = rec.shard.commit_offsets(commit, rec.topics)
    rec.log.extend(records)
    assert persisted(rec.replayed()) == persisted(rec.shard.groups)


def test_a_failed_write_is_undone_with_save_and_restore() -> None:
    shard, topics = make_shard(), Topics({"t": 2})
    join(shard, topics, ["t"])
    saved = shard.save(["g", "h"])
    before = persisted(shard.groups)
    join(shard, topics, ["t"])
    join(shard, topics, ["t"], group="h")
    shard.restore(saved)
    assert persisted(shard.groups) == before


def test_offsets_of_deleted_topics_are_deleted_s4() -> None:
    shard, topics = make_shard(), Topics({"t": 2, "u": 1})
    shard.commit_offsets(OffsetCommit("g", "", -1, "", {("t", 1): (3, -1, ""), ("u", 0): (4, -1, "")}), topics)
    assert shard.groups_with_deleted_topics(topics) == []
    del topics.counts["u"]
    assert shard.groups_with_deleted_topics(topics) == ["g"]
    records = shard.delete_offsets_of_deleted_topics("g", topics)
    assert [(r.key, r.value) for r in records] == [(OffsetCommitKey("g", "u", 0), None)]
    assert shard.fetch_offsets("g", "", -1, None) == {("t", 1): (3, -1, "")}
