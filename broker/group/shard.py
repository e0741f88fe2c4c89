"""The group state machine of one ``__consumer_offsets`` partition: a pure core (no I/O, no threads).

Every operation validates first (raising :class:`~broker.group.errors.GroupError` with nothing changed),
then emits ``__consumer_offsets`` records and replays each into the model as it goes
(:func:`broker.group.model.replay`). The caller (:mod:`broker.group.coordinator`) appends the returned
records and, when the append fails, restores the groups it saved with :meth:`GroupShard.save`.
Order that matters: *persist, then answer* (the caller answers after the records are committed).

Heartbeat, in order (KIP-848's ``consumerGroupHeartbeat``):

1. leave (-1: member removed, group epoch +1; -2: a static member keeps its partitions for its session
   timeout, no epoch change) or join (0) or check the member and its epoch;
2. a changed subscription, assignor, or partition count of a subscribed topic bumps the group epoch (G1);
3. a group epoch above the assignment epoch recomputes the target assignment with the assignor (G2);
4. the member reconciles towards its target (:mod:`broker.group.reconcile`, rules C1-C4);
5. the answer carries the full assignment when the member's partitions changed, on join, or when what it
   reported owning differs from what it should own.

Timers (:meth:`GroupShard.expire`, the caller runs it periodically): a member silent for its session
timeout is removed (S1); a member that keeps partitions to revoke past its rebalance timeout is removed
(S2); offsets of an empty group older than ``offsets.retention.ms`` are deleted, and an empty group
with no offsets left is deleted (S3); offsets of deleted topics are deleted (S4, when the metadata changed).

Thread-safety: none; one owner (the shard's lock in the coordinator).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from broker.group import errors as E
from broker.group import topic_regex
from broker.group.assignors import ASSIGNORS, MemberSubscription
from broker.group.config import OFFSETS_TOPIC, GroupConfig
from broker.group.errors import GroupError
from broker.group.model import (
    LEAVE_GROUP_EPOCH,
    LEAVE_GROUP_STATIC_EPOCH,
    NO_DEADLINE,
    ConsumerGroup,
    Groups,
    Member,
    MemberState,
    replay,
)
from broker.group.reconcile import MemberAssignment, reconcile
from broker.group.records import (
    CoordinatorRecord,
    CurrentAssignmentKey,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadataKey,
    OffsetCommitKey,
    OffsetCommitValue,
    TopicPartition,
)
from common.clock import Clock


class TopicsView(Protocol):
    """What the state machine needs of the cluster metadata."""

    def partition_count(self, topic: str) -> int | None: ...
    def topic_names(self) -> Iterable[str]: ...


@dataclass(frozen=True, slots=True)
class Heartbeat:
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str = ""
    rack_id: str = ""
    client_id: str = ""
    client_host: str = ""
    rebalance_timeout_ms: int = -1  # -1: unchanged
    session_timeout_ms: int = 0  # 0: the broker default
    subscribed_topic_names: tuple[str, ...] | None = None  # None: unchanged
    subscribed_topic_regex: str | None = None  # None: unchanged
    server_assignor: str = ""  # "": unchanged / the group default
    owned: frozenset[TopicPartition] | None = None  # None: unchanged since the last heartbeat


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    assignment: frozenset[TopicPartition] | None  # None: unchanged


@dataclass(frozen=True, slots=True)
class OffsetCommit:
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str
    offsets: Mapping[TopicPartition, tuple[int, int, str]]  # tp -> (offset, leader_epoch, metadata)


Records = list[CoordinatorRecord]
DEFAULT_REBALANCE_TIMEOUT_MS = 300_000


class GroupShard:
    """The groups whose coordinator is one ``__consumer_offsets`` partition; see the module docstring."""

    def __init__(
        self, partition: int, config: GroupConfig, clock: Clock, *, new_member_id: Callable[[], str] | None = None
    ) -> None:
        self.partition = partition
        self.config = config
        self.clock = clock
        self.groups: Groups = {}
        self._new_member_id = new_member_id or (lambda: str(uuid.uuid4()))

    # --- records ------------------------------------------------------------------------------------

    def replay(self, record: CoordinatorRecord) -> None:
        replay(self.groups, record)

    def _emit(self, out: Records, record: CoordinatorRecord) -> None:
        replay(self.groups, record)
        out.append(record)

    def on_loaded(self) -> None:
        """After the loader replayed the log: every member's timers start now (as Kafka does on load)."""
        now = self.clock.monotonic_ms()
        for group in self.groups.values():
            for m in group.members.values():
                m.session_deadline_ms = now + m.session_timeout_ms
                if m.state is MemberState.UNREVOKED_PARTITIONS:
                    m.revocation_deadline_ms = now + m.rebalance_timeout_ms

    def save(self, group_ids: Iterable[str]) -> dict[str, ConsumerGroup | None]:
        return {gid: (g.clone() if (g := self.groups.get(gid)) is not None else None) for gid in group_ids}

    def restore(self, saved: Mapping[str, ConsumerGroup | None]) -> None:
        for gid, group in saved.items():
            if group is None:
                self.groups.pop(gid, None)
            else:
                self.groups[gid] = group

    # --- heartbeat ----------------------------------------------------------------------------------

    def heartbeat(self, hb: Heartbeat, topics: TopicsView) -> tuple[HeartbeatResult, Records]:
        self._validate(hb)
        out: Records = []
        if hb.member_epoch in (LEAVE_GROUP_EPOCH, LEAVE_GROUP_STATIC_EPOCH):
            return self._leave(hb, out), out
        now = self.clock.monotonic_ms()
        joining = hb.member_epoch == 0
        member, bump = self._join(hb, out) if joining else (self._check_member(hb), False)
        group = self.groups[hb.group_id]
        member.session_deadline_ms = now + member.session_timeout_ms
        if hb.owned is not None:
            member.owned_reported = hb.owned
        if self._update_member(group, member, hb, out) or bump or self._topics_changed(group, topics):
            self._bump(group, out)
        if group.group_epoch > group.assignment_epoch:
            self._compute_target(group, topics)
        member = group.members[member.member_id]
        before = member.assigned
        self._reconcile(group, member, now, out)
        changed = member.assigned != before
        differs = hb.owned is not None and hb.owned != member.assigned
        assignment = member.assigned if joining or changed or differs else None
        return HeartbeatResult(
            member.member_id, member.member_epoch, self.config.heartbeat_interval_ms, assignment
        ), out

    def _validate(self, hb: Heartbeat) -> None:
        if not hb.group_id:
            raise GroupError(E.INVALID_GROUP_ID, "the group id must not be empty")
        if hb.member_epoch < LEAVE_GROUP_STATIC_EPOCH:
            raise GroupError(E.INVALID_REQUEST, f"member_epoch {hb.member_epoch} is invalid")
        if hb.member_epoch == LEAVE_GROUP_STATIC_EPOCH and not hb.instance_id:
            raise GroupError(E.INVALID_REQUEST, "member_epoch -2 (static leave) needs an instance_id")
        if hb.member_epoch != 0 and not hb.member_id:
            raise GroupError(E.INVALID_REQUEST, "member_id is required unless joining (member_epoch 0)")
        if hb.member_epoch == 0 and not hb.subscribed_topic_names and not hb.subscribed_topic_regex:
            raise GroupError(E.INVALID_REQUEST, "a joining member must subscribe to topic names or a regex")
        if hb.subscribed_topic_regex:
            try:
                topic_regex.check(hb.subscribed_topic_regex)
            except topic_regex.InvalidTopicRegexError as exc:
                raise GroupError(
                    E.INVALID_REGULAR_EXPRESSION,
                    f"subscribed_topic_regex {hb.subscribed_topic_regex[:200]!r} is not a valid RE2 regex: {exc}",
                ) from None
        timeout = hb.session_timeout_ms
        if timeout and not self.config.min_session_timeout_ms <= timeout <= self.config.max_session_timeout_ms:
            raise GroupError(
                E.INVALID_REQUEST,
                f"session_timeout_ms {timeout} is outside [group.consumer.min.session.timeout.ms="
                f"{self.config.min_session_timeout_ms}, group.consumer.max.session.timeout.ms="
                f"{self.config.max_session_timeout_ms}]",
            )
        if hb.server_assignor and hb.server_assignor not in self.config.assignors:
            raise GroupError(E.UNSUPPORTED_ASSIGNOR, f"assignor {hb.server_assignor!r} is not one of "
                             f"group.consumer.assignors={','.join(self.config.assignors)}")  # fmt: skip

    def _check_member(self, hb: Heartbeat) -> Member:
        """A heartbeat of an existing member: its id, instance id and epoch must match."""
        group = self.groups.get(hb.group_id)
        member = group.members.get(hb.member_id) if group is not None else None
        if member is None:
            if group is not None and group.member_by_instance(hb.instance_id) is not None:
                raise GroupError(E.FENCED_INSTANCE_ID, f"instance id {hb.instance_id} now belongs to another member")
            raise GroupError(E.UNKNOWN_MEMBER_ID, f"member {hb.member_id} is not in group {hb.group_id}")
        if member.instance_id != hb.instance_id:
            raise GroupError(E.FENCED_INSTANCE_ID, f"member {hb.member_id} has instance id {member.instance_id!r}")
        if hb.member_epoch != member.member_epoch:
            lost_answer = (
                hb.member_epoch == member.previous_member_epoch and hb.owned is not None and hb.owned <= member.assigned
            )
            if not lost_answer:
                raise GroupError(E.FENCED_MEMBER_EPOCH, f"member {hb.member_id} has epoch {member.member_epoch}, "
                                 f"the heartbeat sent {hb.member_epoch}; rejoin with epoch 0")  # fmt: skip
        return member

    def _join(self, hb: Heartbeat, out: Records) -> tuple[Member, bool]:
        """A member joins (epoch 0): ``(member, whether the group epoch must move)``."""
        group = self.groups.get(hb.group_id)
        static = group.member_by_instance(hb.instance_id) if group is not None else None
        member_id = hb.member_id or self._new_member_id()
        if group is not None and member_id in group.members and (static is None or static.member_id != member_id):
            self._remove_member(group, member_id, out)  # the same member starts over: its partitions are free
        if group is not None and static is not None:
            return self._replace_static(group, static, member_id, out), False
        if group is not None and len(group.members) >= self.config.max_size:
            raise GroupError(E.GROUP_MAX_SIZE_REACHED, f"group {hb.group_id} has reached group.consumer.max.size="
                             f"{self.config.max_size} members")  # fmt: skip
        member = Member(member_id, instance_id=hb.instance_id, session_timeout_ms=self.config.session_timeout_ms,
                        rebalance_timeout_ms=DEFAULT_REBALANCE_TIMEOUT_MS)  # fmt: skip
        _apply_request(member, hb)
        self._emit(out, CoordinatorRecord(MemberMetadataKey(hb.group_id, member_id), member.metadata_value()))
        self._emit(out, CoordinatorRecord(CurrentAssignmentKey(hb.group_id, member_id), member.assignment_value()))
        return self.groups[hb.group_id].members[member_id], True

    def _replace_static(self, group: ConsumerGroup, old: Member, member_id: str, out: Records) -> Member:
        """Static membership: the new instance takes the old member's place and partitions; nothing moves."""
        epoch = old.previous_member_epoch if old.left_static else old.member_epoch
        new = Member(member_id, instance_id=old.instance_id, session_timeout_ms=old.session_timeout_ms,
                     rebalance_timeout_ms=old.rebalance_timeout_ms, subscribed_topic_names=old.subscribed_topic_names,
                     subscribed_topic_regex=old.subscribed_topic_regex, server_assignor=old.server_assignor,
                     member_epoch=epoch, previous_member_epoch=epoch, state=old.state, assigned=old.assigned,
                     pending_revocation=old.pending_revocation)  # fmt: skip
        target = group.target.pop(old.member_id, None)
        if target is not None:
            group.target[member_id] = target
        if old.member_id != member_id:
            self._remove_member(group, old.member_id, out)
        self._emit(out, CoordinatorRecord(MemberMetadataKey(group.group_id, member_id), new.metadata_value()))
        self._emit(out, CoordinatorRecord(CurrentAssignmentKey(group.group_id, member_id), new.assignment_value()))
        return group.members[member_id]

    def _leave(self, hb: Heartbeat, out: Records) -> HeartbeatResult:
        group = self.groups.get(hb.group_id)
        member = group.members.get(hb.member_id) if group is not None else None
        if group is None or member is None:
            raise GroupError(E.UNKNOWN_MEMBER_ID, f"member {hb.member_id} is not in group {hb.group_id}")
        if member.instance_id != hb.instance_id:
            raise GroupError(E.FENCED_INSTANCE_ID, f"member {hb.member_id} has instance id {member.instance_id!r}")
        if hb.member_epoch == LEAVE_GROUP_STATIC_EPOCH:
            left = MemberAssignment(LEAVE_GROUP_STATIC_EPOCH, member.member_epoch, member.state, member.assigned,
                                    member.pending_revocation)  # fmt: skip
            if not member.left_static:
                self._write_assignment(group, member, left, out)
        else:
            self._remove_member(group, member.member_id, out)
            self._bump(group, out)
        return HeartbeatResult(hb.member_id, hb.member_epoch, self.config.heartbeat_interval_ms, None)

    def _remove_member(self, group: ConsumerGroup, member_id: str, out: Records) -> None:
        self._emit(out, CoordinatorRecord(CurrentAssignmentKey(group.group_id, member_id), None))
        self._emit(out, CoordinatorRecord(MemberMetadataKey(group.group_id, member_id), None))
        group.target.pop(member_id, None)

    def _bump(self, group: ConsumerGroup, out: Records) -> None:
        self._emit(out, CoordinatorRecord(GroupMetadataKey(group.group_id), GroupMetadataValue(group.group_epoch + 1)))

    def _update_member(self, group: ConsumerGroup, member: Member, hb: Heartbeat, out: Records) -> bool:
        """Apply the heartbeat's metadata; True when the group epoch must move (G1)."""
        before = member.metadata_value()
        _apply_request(member, hb)
        after = member.metadata_value()
        if after == before:
            return False
        self._emit(out, CoordinatorRecord(MemberMetadataKey(group.group_id, member.member_id), after))
        moved = (before.subscribed_topic_names, before.subscribed_topic_regex, before.server_assignor)
        return moved != (after.subscribed_topic_names, after.subscribed_topic_regex, after.server_assignor)

    # --- target assignment and reconciliation ------------------------------------------------------------

    def _subscribed(self, member: Member, topics: TopicsView, names: list[str] | None) -> frozenset[str]:
        result = set(member.subscribed_topic_names)
        if member.subscribed_topic_regex and names is not None:
            result.update(topic_regex.matching(member.subscribed_topic_regex, names))
        return frozenset(result)

    def _partition_counts(self, group: ConsumerGroup, topics: TopicsView) -> dict[str, int]:
        regex = any(m.subscribed_topic_regex for m in group.members.values())
        names = [n for n in topics.topic_names() if not n.startswith("__")] if regex else None
        counts: dict[str, int] = {}
        for member in group.members.values():
            for topic in self._subscribed(member, topics, names):
                count = topics.partition_count(topic)
                if count:
                    counts[topic] = count
        return counts

    def _topics_changed(self, group: ConsumerGroup, topics: TopicsView) -> bool:
        if group.assignment_epoch != group.group_epoch:
            return False  # the target is recomputed anyway
        return self._partition_counts(group, topics) != group.subscribed_partition_counts

    def _compute_target(self, group: ConsumerGroup, topics: TopicsView) -> None:
        """G2: the target assignment at the group epoch, by the members' preferred assignor (else the default)."""
        counts = self._partition_counts(group, topics)
        regex = any(m.subscribed_topic_regex for m in group.members.values())
        names = [n for n in topics.topic_names() if not n.startswith("__")] if regex else None
        subs = {
            mid: MemberSubscription(self._subscribed(m, topics, names), m.assigned | m.pending_revocation)
            for mid, m in group.members.items()
            if not m.left_static or m.assigned
        }
        group.target = ASSIGNORS[self.assignor_name(group)](subs, counts)
        group.subscribed_partition_counts = counts
        group.assignment_epoch = group.group_epoch

    def assignor_name(self, group: ConsumerGroup) -> str:
        """The assignor most members ask for (ties: the name last in order), else the first configured."""
        preferred = [m.server_assignor for m in group.members.values() if m.server_assignor]
        return max(set(preferred), key=lambda a: (preferred.count(a), a)) if preferred else self.config.assignors[0]

    def _reconcile(self, group: ConsumerGroup, member: Member, now: float, out: Records) -> None:
        target = group.target.get(member.member_id, frozenset())
        if member.left_static or (
            member.state is MemberState.STABLE
            and member.member_epoch == group.assignment_epoch
            and member.assigned == target
        ):
            return  # the steady state: nothing to reconcile
        owners = {tp: mid for tp, mid in group.owner_of().items() if mid != member.member_id}
        current = MemberAssignment(member.member_epoch, member.previous_member_epoch, member.state, member.assigned,
                                   member.pending_revocation)  # fmt: skip
        nxt = reconcile(current, member.member_id, target, group.assignment_epoch, member.owned_reported, owners)
        if nxt != current:
            if nxt.state is MemberState.UNREVOKED_PARTITIONS and current.state is not MemberState.UNREVOKED_PARTITIONS:
                member.revocation_deadline_ms = now + member.rebalance_timeout_ms
            elif nxt.state is not MemberState.UNREVOKED_PARTITIONS:
                member.revocation_deadline_ms = NO_DEADLINE
            self._write_assignment(group, member, nxt, out)

    def _write_assignment(self, group: ConsumerGroup, member: Member, a: MemberAssignment, out: Records) -> None:
        value = Member(
            member.member_id,
            member_epoch=a.member_epoch,
            previous_member_epoch=a.previous_member_epoch,
            state=a.state,
            assigned=a.assigned,
            pending_revocation=a.pending_revocation,
        ).assignment_value()
        self._emit(out, CoordinatorRecord(CurrentAssignmentKey(group.group_id, member.member_id), value))

    # --- timers ---------------------------------------------------------------------------------------

    def due_groups(self, *, retention: bool = True) -> list[str]:
        """The groups with a timer due now: S1-S2, and S3 when ``retention`` (the caller runs that check every
        ``offsets.retention.check.interval.ms``: it looks at every offset of every empty group)."""
        now, wall = self.clock.monotonic_ms(), self.clock.time_ms()
        due = []
        for gid, group in sorted(self.groups.items()):
            expired = any(self._expired(m, now) for m in group.members.values())
            empty = retention and not group.members
            if expired or (empty and (not group.offsets or self._offsets_expired(group, wall))):
                due.append(gid)
        return due

    def _expired(self, m: Member, now: float) -> bool:
        revocation_late = m.state is MemberState.UNREVOKED_PARTITIONS and m.revocation_deadline_ms <= now
        return m.session_deadline_ms <= now or (revocation_late and not m.left_static)

    def _offsets_expired(self, group: ConsumerGroup, wall: int) -> bool:
        retention = self.config.offsets_retention_ms
        return any(om.commit_timestamp_ms + retention <= wall for om in group.offsets.values())

    def expire_group(self, group_id: str, *, retention: bool = True) -> Records:
        """S1-S3 for one group: remove expired members (S1, S2: group epoch +1); with ``retention``, delete the
        offsets of an empty group older than the retention, then an empty group without offsets (S3)."""
        now, wall = self.clock.monotonic_ms(), self.clock.time_ms()
        out: Records = []
        group = self.groups.get(group_id)
        if group is None:
            return out
        for m in sorted(group.members.values(), key=lambda m: m.member_id):
            if self._expired(m, now):
                self._remove_member(group, m.member_id, out)
        if out:
            self._bump(group, out)
        if retention and not group.members:
            for tp, om in sorted(group.offsets.items()):
                if om.commit_timestamp_ms + self.config.offsets_retention_ms <= wall:
                    self._emit(out, CoordinatorRecord(OffsetCommitKey(group_id, tp[0], tp[1]), None))
            if not group.offsets:
                self._emit(out, CoordinatorRecord(GroupMetadataKey(group_id), None))
        return out

    def groups_with_deleted_topics(self, topics: TopicsView) -> list[str]:
        """S4: groups holding offsets of partitions the metadata no longer has (a deleted topic, Kafka's
        ``onPartitionsDeleted``)."""
        return sorted(gid for gid, g in self.groups.items() if any(_gone(tp, topics) for tp in g.offsets))

    def delete_offsets_of_deleted_topics(self, group_id: str, topics: TopicsView) -> Records:
        out: Records = []
        group = self.groups.get(group_id)
        for tp in sorted(group.offsets if group is not None else ()):
            if _gone(tp, topics):
                self._emit(out, CoordinatorRecord(OffsetCommitKey(group_id, tp[0], tp[1]), None))
        return out

    def next_deadline_ms(self) -> float:
        deadlines = [NO_DEADLINE]
        for group in self.groups.values():
            for m in group.members.values():
                deadlines.append(m.session_deadline_ms)
                if m.state is MemberState.UNREVOKED_PARTITIONS:
                    deadlines.append(m.revocation_deadline_ms)
        return min(deadlines)

    # --- offsets --------------------------------------------------------------------------------------

    def _check_offset_member(self, group: ConsumerGroup | None, member_id: str, epoch: int, instance_id: str) -> None:
        member = group.members.get(member_id) if group is not None and member_id else None
        if member is None:
            if group is not None and group.member_by_instance(instance_id) is not None:
                raise GroupError(E.FENCED_INSTANCE_ID, f"instance id {instance_id} now belongs to another member")
            raise GroupError(E.UNKNOWN_MEMBER_ID, f"member {member_id!r} is not in group "
                             f"{group.group_id if group else ''}")  # fmt: skip
        if instance_id and member.instance_id != instance_id:
            raise GroupError(E.FENCED_INSTANCE_ID, f"member {member_id} has instance id {member.instance_id!r}")
        if epoch != member.member_epoch:
            raise GroupError(E.STALE_MEMBER_EPOCH, f"member {member_id} is at epoch {member.member_epoch}, "
                             f"the request has {epoch}")  # fmt: skip

    def commit_offsets(self, req: OffsetCommit, topics: TopicsView) -> tuple[dict[TopicPartition, str], Records]:
        """Per-partition error codes ("" = stored) and the records; GroupError for group-level refusals."""
        if not req.group_id:
            raise GroupError(E.INVALID_GROUP_ID, "the group id must not be empty")
        group = self.groups.get(req.group_id)
        if req.member_epoch < 0 and not req.member_id:
            if group is not None and group.members:
                raise GroupError(E.UNKNOWN_MEMBER_ID, f"group {req.group_id} has members: only they may commit "
                                 "(a commit without member id needs an empty group)")  # fmt: skip
        else:
            self._check_offset_member(group, req.member_id, req.member_epoch, req.instance_id)
        errors: dict[TopicPartition, str] = {}
        out: Records = []
        wall = self.clock.time_ms()
        for (topic, number), (offset, leader_epoch, metadata) in sorted(req.offsets.items()):
            count = topics.partition_count(topic)
            if count is None or not 0 <= number < count or topic == OFFSETS_TOPIC:
                errors[(topic, number)] = E.UNKNOWN_TOPIC_OR_PARTITION
            elif len(metadata.encode("utf-8")) > self.config.offset_metadata_max_bytes:
                errors[(topic, number)] = E.OFFSET_METADATA_TOO_LARGE
            else:
                errors[(topic, number)] = ""
                key = OffsetCommitKey(req.group_id, topic, number)
                self._emit(out, CoordinatorRecord(key, OffsetCommitValue(offset, leader_epoch, metadata, wall)))
        return errors, out

    def fetch_offsets(
        self, group_id: str, member_id: str, member_epoch: int, partitions: Iterable[TopicPartition] | None
    ) -> dict[TopicPartition, tuple[int, int, str]]:
        """``tp -> (offset, leader_epoch, metadata)``; -1 offsets for nothing committed; every committed
        partition when ``partitions`` is None."""
        group = self.groups.get(group_id)
        if member_id and member_epoch >= 0:
            self._check_offset_member(group, member_id, member_epoch, "")
        offsets = group.offsets if group is not None else {}
        wanted = sorted(offsets) if partitions is None else list(partitions)
        result = {}
        for tp in wanted:
            om = offsets.get(tp)
            result[tp] = (om.offset, om.leader_epoch, om.metadata) if om is not None else (-1, -1, "")
        return result

    # --- admin ----------------------------------------------------------------------------------------

    def delete_groups(self, group_ids: Iterable[str]) -> tuple[dict[str, str], Records]:
        errors: dict[str, str] = {}
        out: Records = []
        for gid in group_ids:
            group = self.groups.get(gid)
            if group is None:
                errors[gid] = E.GROUP_ID_NOT_FOUND
            elif group.members:
                errors[gid] = E.NON_EMPTY_GROUP
            else:
                for topic, number in sorted(group.offsets):
                    self._emit(out, CoordinatorRecord(OffsetCommitKey(gid, topic, number), None))
                self._emit(out, CoordinatorRecord(GroupMetadataKey(gid), None))
                errors[gid] = ""
        return errors, out


def _apply_request(member: Member, hb: Heartbeat) -> None:
    """Copy what a heartbeat says of the member (fields it leaves empty or -1 keep their value)."""
    if hb.subscribed_topic_names is not None:
        member.subscribed_topic_names = tuple(sorted(set(hb.subscribed_topic_names)))
    if hb.subscribed_topic_regex is not None:
        member.subscribed_topic_regex = hb.subscribed_topic_regex
    member.server_assignor = hb.server_assignor or member.server_assignor
    if hb.rebalance_timeout_ms > 0:
        member.rebalance_timeout_ms = hb.rebalance_timeout_ms
    if hb.session_timeout_ms > 0:
        member.session_timeout_ms = hb.session_timeout_ms
    member.rack_id = hb.rack_id or member.rack_id
    member.client_id = hb.client_id or member.client_id
    member.client_host = hb.client_host or member.client_host


def _gone(tp: TopicPartition, topics: TopicsView) -> bool:
    count = topics.partition_count(tp[0])
    return count is None or tp[1] >= count
