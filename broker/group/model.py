"""The state of consumer groups, and how ``__consumer_offsets`` records rebuild it (``replay``).

Records are the only way persisted state changes: the state machine (:mod:`broker.group.shard`) emits
records and replays them into this model at once; the loader replays the same records read from the log.
So a loaded group equals the group that wrote the log (rule R1, checked in
``tests/broker/group/test_shard.py``). What is *not* persisted is derived or volatile: the target
assignment (recomputed from the members at the next heartbeat) and the timers (restarted on load, as
Kafka does).

Thread-safety: none; a group is owned by its shard (see :mod:`broker.group.coordinator`).
"""

from __future__ import annotations

import copy
import enum
from dataclasses import dataclass, field

from broker.group.records import (
    CoordinatorRecord,
    CurrentAssignmentKey,
    CurrentAssignmentValue,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadataKey,
    MemberMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    TopicPartition,
)

LEAVE_GROUP_EPOCH = -1
LEAVE_GROUP_STATIC_EPOCH = -2
NO_DEADLINE = float("inf")


class MemberState(enum.IntEnum):
    """Kafka's ``MemberState`` (KIP-848), as describe shows it."""

    STABLE = 0  # owns exactly its target assignment, at the assignment epoch
    UNREVOKED_PARTITIONS = 1  # must give up ``pending_revocation`` first; its epoch does not move meanwhile
    UNRELEASED_PARTITIONS = 2  # at the target epoch, waiting for other members to release some of its target
    UNKNOWN = 3

    @property
    def label(self) -> str:
        return self.name


class GroupState(enum.StrEnum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(slots=True)
class Member:
    member_id: str
    instance_id: str = ""
    rack_id: str = ""
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str = ""
    rebalance_timeout_ms: int = 300_000
    session_timeout_ms: int = 45_000
    server_assignor: str = ""
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned: frozenset[TopicPartition] = frozenset()
    pending_revocation: frozenset[TopicPartition] = frozenset()
    # volatile (not persisted): monotonic deadlines, what the member last said it owns
    session_deadline_ms: float = NO_DEADLINE
    revocation_deadline_ms: float = NO_DEADLINE
    owned_reported: frozenset[TopicPartition] | None = None

    @property
    def left_static(self) -> bool:
        return self.member_epoch == LEAVE_GROUP_STATIC_EPOCH

    def metadata_value(self) -> MemberMetadataValue:
        return MemberMetadataValue(
            self.instance_id, self.rack_id, self.client_id, self.client_host, self.subscribed_topic_names,
            self.subscribed_topic_regex, self.rebalance_timeout_ms, self.session_timeout_ms, self.server_assignor,
        )  # fmt: skip

    def assignment_value(self) -> CurrentAssignmentValue:
        return CurrentAssignmentValue(
            self.member_epoch, self.previous_member_epoch, int(self.state), self.assigned, self.pending_revocation
        )


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int


@dataclass(slots=True)
class ConsumerGroup:
    group_id: str
    group_epoch: int = 0
    members: dict[str, Member] = field(default_factory=dict)
    offsets: dict[TopicPartition, OffsetAndMetadata] = field(default_factory=dict)
    # derived, not persisted
    assignment_epoch: int = -1  # the group epoch the target assignment was computed at (-1: none yet)
    target: dict[str, frozenset[TopicPartition]] = field(default_factory=dict)
    subscribed_partition_counts: dict[str, int] = field(default_factory=dict)  # what the target was computed on

    def clone(self) -> ConsumerGroup:
        """A deep copy, to restore when a write fails (the members are small; offsets are frozen values)."""
        twin = copy.copy(self)
        twin.members = {mid: copy.copy(m) for mid, m in self.members.items()}
        twin.offsets = dict(self.offsets)
        twin.target = dict(self.target)
        twin.subscribed_partition_counts = dict(self.subscribed_partition_counts)
        return twin

    def state(self) -> GroupState:
        if not self.members:
            return GroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return GroupState.ASSIGNING
        for m in self.members.values():
            if m.member_epoch != self.assignment_epoch or m.state is not MemberState.STABLE:
                return GroupState.RECONCILING
        return GroupState.STABLE

    def member_by_instance(self, instance_id: str) -> Member | None:
        if not instance_id:
            return None
        for m in self.members.values():
            if m.instance_id == instance_id:
                return m
        return None

    def owner_of(self) -> dict[TopicPartition, str]:
        """Which member owns (has assigned or still has to revoke) each partition."""
        owners: dict[TopicPartition, str] = {}
        for m in self.members.values():
            for tp in m.assigned | m.pending_revocation:
                owners[tp] = m.member_id
        return owners

    def subscribed_topics(self) -> set[str]:
        return {t for m in self.members.values() for t in m.subscribed_topic_names}


Groups = dict[str, ConsumerGroup]


def replay(groups: Groups, record: CoordinatorRecord) -> None:
    """Apply one record to ``groups`` (live writes and the loader alike)."""
    key, value = record.key, record.value
    group = groups.get(key.group_id)
    if isinstance(key, GroupMetadataKey):
        if value is None:
            groups.pop(key.group_id, None)
            return
        assert isinstance(value, GroupMetadataValue)
        group = group or groups.setdefault(key.group_id, ConsumerGroup(key.group_id))
        group.group_epoch = value.group_epoch
        return
    if value is None and group is None:
        return  # a tombstone for something already gone
    group = group or groups.setdefault(key.group_id, ConsumerGroup(key.group_id))
    if isinstance(key, OffsetCommitKey):
        tp = (key.topic, key.partition)
        if value is None:
            group.offsets.pop(tp, None)
        else:
            assert isinstance(value, OffsetCommitValue)
            group.offsets[tp] = OffsetAndMetadata(value.offset, value.leader_epoch, value.metadata,
                                                  value.commit_timestamp_ms)  # fmt: skip
    elif isinstance(key, MemberMetadataKey):
        if value is None:
            group.members.pop(key.member_id, None)
            return
        assert isinstance(value, MemberMetadataValue)
        member = group.members.setdefault(key.member_id, Member(key.member_id))
        member.instance_id, member.rack_id = value.instance_id, value.rack_id
        member.client_id, member.client_host = value.client_id, value.client_host
        member.subscribed_topic_names = value.subscribed_topic_names
        member.subscribed_topic_regex = value.subscribed_topic_regex
        member.rebalance_timeout_ms, member.session_timeout_ms = value.rebalance_timeout_ms, value.session_timeout_ms
        member.server_assignor = value.server_assignor
    else:
        assert isinstance(key, CurrentAssignmentKey)
        if value is None:
            member_or_none = group.members.get(key.member_id)
            if member_or_none is not None:
                member_or_none.assigned = member_or_none.pending_revocation = frozenset()
            return
        assert isinstance(value, CurrentAssignmentValue)
        member = group.members.setdefault(key.member_id, Member(key.member_id))
        member.member_epoch, member.previous_member_epoch = value.member_epoch, value.previous_member_epoch
        member.state = MemberState(value.state)
        member.assigned, member.pending_revocation = value.assigned, value.pending_revocation
