"""The classic group protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup): a pure core, no I/O, no threads.

Kafka's ``GroupMetadata`` states and moves (clients assign: range, roundrobin, sticky, cooperative-sticky
all run in the leader member; the coordinator only collects and hands out opaque bytes)::

    Empty --join--> PreparingRebalance --all known members joined, or the rebalance deadline-->
        CompletingRebalance (generation + 1, a leader chosen, every join answered)
        --the leader's SyncGroup--> Stable (every sync answered with its member's assignment)
    Stable / CompletingRebalance --a join that changes the group, a leave, a session timeout--> PreparingRebalance
    any --last member gone--> Empty

Rules (the tests cite them):

* CJ1: a JoinGroup without member id (v4+) gets MEMBER_ID_REQUIRED and a new id, and must join again with
  it (KIP-394); such pending ids expire after the session timeout.
* CJ2: a rebalance completes when every member of the previous generation has joined again, or at the
  rebalance deadline (the largest rebalance timeout of the members); members that did not rejoin are
  removed. From Empty it waits ``group.initial.rebalance.delay.ms`` (pushed back by each new member, up
  to the rebalance timeout) so that a starting fleet lands in one generation.
* CJ3: the protocol is one every member supports, chosen by the members' preference votes; a member
  whose protocols share none with the group is refused with INCONSISTENT_GROUP_PROTOCOL.
* CS1: SyncGroup needs the current generation (ILLEGAL_GENERATION) and a known member (UNKNOWN_MEMBER_ID);
  during PreparingRebalance it answers REBALANCE_IN_PROGRESS; the leader's assignment completes every
  waiting sync; a member the leader gave nothing gets empty bytes.
* CS2: a group stuck in CompletingRebalance (no leader sync) past the rebalance timeout rebalances again.
* CH1: Heartbeat: UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS (the member must rejoin),
  else it keeps the member's session alive; a member silent for its session timeout is removed (not
  while its join or sync waits).
* CC1: OffsetCommit for a classic group with members needs a known member and the current generation;
  it is accepted in Stable and in PreparingRebalance (eager members commit while their partitions are
  being revoked, before they join again), refused with REBALANCE_IN_PROGRESS in CompletingRebalance
  (the member has a new generation but not yet its assignment). A commit with generation -1 and no
  member id is a "simple" commit, refused (UNKNOWN_MEMBER_ID) while the group has members.
* CST1 (static membership, KIP-345): a join with a known ``group.instance.id`` replaces the old member id
  (the old one is fenced: FENCED_INSTANCE_ID); in Stable with the same protocols no rebalance happens,
  the member gets the current generation and its stored assignment on sync. A static member leaves only
  by LeaveGroup naming its instance id, or by its session timeout.

Membership is kept in memory by the coordinator that owns the group (a new coordinator starts with none:
members get UNKNOWN_MEMBER_ID and join again); committed offsets go to ``__consumer_offsets`` like every
group's (:meth:`GroupShard.commit_offsets`).

Waiting requests are opaque tokens: an operation returns the answers that became ready as
``(token, answer)`` pairs, and the driver (:mod:`broker.group.classic_driver`) hands them to the
waiting threads. Thread-safety: none; the shard's lock is its one owner.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from broker.group import errors as E
from broker.group.errors import GroupError

INCONSISTENT_GROUP_PROTOCOL = "INCONSISTENT_GROUP_PROTOCOL"
MEMBER_ID_REQUIRED = "MEMBER_ID_REQUIRED"
ILLEGAL_GENERATION = "ILLEGAL_GENERATION"
REBALANCE_IN_PROGRESS = "REBALANCE_IN_PROGRESS"
UNKNOWN_MEMBER_ID = E.UNKNOWN_MEMBER_ID
FENCED_INSTANCE_ID = E.FENCED_INSTANCE_ID
INVALID_SESSION_TIMEOUT = "INVALID_SESSION_TIMEOUT"


class ClassicState(enum.StrEnum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True, slots=True)
class ClassicConfig:
    min_session_timeout_ms: int = 6_000
    max_session_timeout_ms: int = 1_800_000
    initial_rebalance_delay_ms: int = 3_000
    max_size: int = 2**31 - 1


@dataclass(frozen=True, slots=True)
class JoinRequest:
    group_id: str
    member_id: str
    instance_id: str
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    client_id: str = ""
    client_host: str = ""
    require_known_member: bool = True  # JoinGroup v4+ (KIP-394)


@dataclass(frozen=True, slots=True)
class JoinResult:
    error: str = ""
    generation_id: int = -1
    protocol_type: str = ""
    protocol_name: str = ""
    leader: str = ""
    member_id: str = ""
    skip_assignment: bool = False
    members: tuple[tuple[str, str, bytes], ...] = ()  # the leader's: (member id, instance id, metadata)


@dataclass(frozen=True, slots=True)
class SyncResult:
    error: str = ""
    protocol_type: str = ""
    protocol_name: str = ""
    assignment: bytes = b""


@dataclass(slots=True)
class ClassicMember:
    member_id: str
    instance_id: str
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]
    assignment: bytes = b""
    join_token: Any = None  # a waiting JoinGroup
    sync_token: Any = None  # a waiting SyncGroup
    session_deadline_ms: float = 0.0

    def metadata(self, protocol: str) -> bytes:
        return next((m for name, m in self.protocols if name == protocol), b"")


@dataclass(slots=True)
class ClassicGroup:
    group_id: str
    state: ClassicState = ClassicState.EMPTY
    generation_id: int = 0
    protocol_type: str = ""
    protocol_name: str = ""
    leader: str = ""
    members: dict[str, ClassicMember] = field(default_factory=dict)
    pending: dict[str, float] = field(default_factory=dict)  # member ids handed out (CJ1) -> expiry
    static: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    rebalance_deadline_ms: float = 0.0
    max_rebalance_deadline_ms: float = 0.0  # CJ2's bound on the initial delay

    def member(self, member_id: str, instance_id: str) -> ClassicMember:
        if instance_id and instance_id in self.static and self.static[instance_id] != member_id:
            raise GroupError(FENCED_INSTANCE_ID, f"instance id {instance_id} now belongs to another member")
        m = self.members.get(member_id)
        if m is None:
            raise GroupError(UNKNOWN_MEMBER_ID, f"member {member_id!r} is not in group {self.group_id}")
        return m

    def supports(self, protocol_type: str, protocols: tuple[tuple[str, bytes], ...]) -> bool:
        """CJ3: the member shares the group's protocol type and at least one protocol with every member."""
        if not self.members:
            return True
        return protocol_type == self.protocol_type and bool(self._common() & {n for n, _ in protocols})

    def _common(self) -> set[str]:
        sets = [{n for n, _ in m.protocols} for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def select_protocol(self) -> str:
        """CJ3: among the protocols every member supports, the one most members list first."""
        common = self._common()
        votes: dict[str, int] = {}
        for m in self.members.values():
            choice = next(n for n, _ in m.protocols if n in common)
            votes[choice] = votes.get(choice, 0) + 1
        return max(sorted(votes), key=lambda n: votes[n])


Ready = list[tuple[Any, Any]]  # (token, JoinResult | SyncResult) answers now due


class ClassicGroups:
    """The classic groups of one shard; see the module docstring."""

    def __init__(self, config: ClassicConfig, *, new_member_id: Callable[[str], str] | None = None) -> None:
        self.config = config
        self.groups: dict[str, ClassicGroup] = {}
        self._new_member_id = new_member_id or (lambda client_id: f"{client_id or 'member'}-{uuid.uuid4()}")

    # --- JoinGroup --------------------------------------------------------------------------------

    def join(self, req: JoinRequest, token: Any, now: float) -> tuple[JoinResult | None, Ready]:
        """``(answer now, or None when the join waits on token; other answers now due)``."""
        if not req.group_id:
            raise GroupError(E.INVALID_GROUP_ID, "the group id must not be empty")
        if not self.config.min_session_timeout_ms <= req.session_timeout_ms <= self.config.max_session_timeout_ms:
            bounds = f"[{self.config.min_session_timeout_ms}, {self.config.max_session_timeout_ms}]"
            why = f"session timeout {req.session_timeout_ms} ms is outside {bounds}"
            raise GroupError(INVALID_SESSION_TIMEOUT, why)
        if not req.protocols or not req.protocol_type:
            raise GroupError(INCONSISTENT_GROUP_PROTOCOL, "a member must name its protocol type and protocols")
        group = self.groups.setdefault(req.group_id, ClassicGroup(req.group_id))
        if not group.supports(req.protocol_type, req.protocols) and not (
            req.member_id in group.members and len(group.members) == 1
        ):
            offered = [n for n, _ in req.protocols]
            raise GroupError(INCONSISTENT_GROUP_PROTOCOL, f"group {req.group_id} uses {group.protocol_type} "
                             f"{sorted(group._common())}, this member offers {offered}")  # fmt: skip
        if req.instance_id:
            return self._join_static(group, req, token, now)
        if not req.member_id:
            if len(group.members) + len(group.pending) >= self.config.max_size:
                raise GroupError(E.GROUP_MAX_SIZE_REACHED, f"group {req.group_id} is full")
            member_id = self._new_member_id(req.client_id)
            if req.require_known_member:  # CJ1
                group.pending[member_id] = now + req.session_timeout_ms
                return JoinResult(error=MEMBER_ID_REQUIRED, member_id=member_id), []
            return self._add_member(group, member_id, req, token, now)
        if req.member_id in group.pending:
            del group.pending[req.member_id]
            return self._add_member(group, req.member_id, req, token, now)
        member = group.members.get(req.member_id)
        if member is None:
            raise GroupError(UNKNOWN_MEMBER_ID, f"member {req.member_id!r} is not in group {req.group_id}")
        return self._rejoin(group, member, req, token, now)

    def _join_static(
        self, group: ClassicGroup, req: JoinRequest, token: Any, now: float
    ) -> tuple[JoinResult | None, Ready]:
        old_id = group.static.get(req.instance_id)
        if old_id is None:
            member_id = req.member_id or self._new_member_id(req.client_id)
            group.static[req.instance_id] = member_id
            return self._add_member(group, member_id, req, token, now)
        old = group.members[old_id]
        if req.member_id and req.member_id != old_id:
            raise GroupError(FENCED_INSTANCE_ID, f"instance id {req.instance_id} now belongs to another member")
        if req.member_id == old_id:
            return self._rejoin(group, old, req, token, now)
        # CST1: a new incarnation takes the old member's place
        new_id = self._new_member_id(req.client_id)
        del group.members[old_id]
        old.member_id = new_id
        group.members[new_id] = old
        group.static[req.instance_id] = new_id
        if group.leader == old_id:
            group.leader = new_id
        ready: Ready = []
        if old.join_token is not None:
            ready.append((old.join_token, JoinResult(error=FENCED_INSTANCE_ID, member_id=old_id)))
            old.join_token = None
        if old.sync_token is not None:
            ready.append((old.sync_token, SyncResult(error=FENCED_INSTANCE_ID)))
            old.sync_token = None
        same = dict(old.protocols) == dict(req.protocols)
        self._update(old, req, now)
        if group.state is ClassicState.STABLE and same:
            result = JoinResult(generation_id=group.generation_id, protocol_type=group.protocol_type,
                                protocol_name=group.protocol_name, leader=group.leader, member_id=new_id,
                                members=self._member_list(group) if group.leader == new_id else ())  # fmt: skip
            return result, ready
        answer, more = self._rejoin(group, old, req, token, now)
        return answer, ready + more

    def _add_member(
        self, group: ClassicGroup, member_id: str, req: JoinRequest, token: Any, now: float
    ) -> tuple[JoinResult | None, Ready]:
        if len(group.members) >= self.config.max_size:
            raise GroupError(E.GROUP_MAX_SIZE_REACHED, f"group {req.group_id} is full")
        member = ClassicMember(member_id, req.instance_id, req.client_id, req.client_host, req.session_timeout_ms,
                               req.rebalance_timeout_ms, req.protocols)  # fmt: skip
        if not group.members:
            group.protocol_type = req.protocol_type
        group.members[member_id] = member
        return self._rejoin(group, member, req, token, now, new=True)

    def _update(self, member: ClassicMember, req: JoinRequest, now: float) -> None:
        member.protocols = req.protocols
        member.session_timeout_ms = req.session_timeout_ms
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
        member.client_id, member.client_host = req.client_id, req.client_host
        member.session_deadline_ms = now + req.session_timeout_ms

    def _rejoin(
        self, group: ClassicGroup, member: ClassicMember, req: JoinRequest, token: Any, now: float, new: bool = False
    ) -> tuple[JoinResult | None, Ready]:
        ready: Ready = []
        if member.join_token is not None:  # a retried join replaces the waiting one
            ready.append((member.join_token, JoinResult(error=UNKNOWN_MEMBER_ID, member_id=member.member_id)))
        self._update(member, req, now)
        member.join_token = token
        if group.state is not ClassicState.PREPARING_REBALANCE:
            ready += self._prepare_rebalance(group, now)
        elif group.max_rebalance_deadline_ms and new:  # CJ2: the initial delay is pushed back by a new member
            group.rebalance_deadline_ms = min(now + self.config.initial_rebalance_delay_ms,
                                              group.max_rebalance_deadline_ms)  # fmt: skip
        ready += self._maybe_complete_join(group, now)
        answered = next((a for t, a in ready if t is token), None)
        return answered, [(t, a) for t, a in ready if t is not token]

    def _prepare_rebalance(self, group: ClassicGroup, now: float) -> Ready:
        ready: Ready = []
        for m in group.members.values():  # a waiting sync must join again
            if m.sync_token is not None:
                ready.append((m.sync_token, SyncResult(error=REBALANCE_IN_PROGRESS)))
                m.sync_token = None
        timeout = max((m.rebalance_timeout_ms for m in group.members.values()), default=0)
        if group.state is ClassicState.EMPTY:
            group.max_rebalance_deadline_ms = now + timeout
            group.rebalance_deadline_ms = now + min(self.config.initial_rebalance_delay_ms, timeout)
        else:
            group.max_rebalance_deadline_ms = 0.0
            group.rebalance_deadline_ms = now + timeout
        group.state = ClassicState.PREPARING_REBALANCE
        return ready

    def _maybe_complete_join(self, group: ClassicGroup, now: float) -> Ready:
        """CJ2."""
        if group.state is not ClassicState.PREPARING_REBALANCE:
            return []
        all_joined = all(m.join_token is not None for m in group.members.values())
        if now < group.rebalance_deadline_ms and not (all_joined and not group.max_rebalance_deadline_ms):
            return []
        for m in [m for m in group.members.values() if m.join_token is None]:
            self._remove(group, m.member_id)
        group.generation_id += 1
        if not group.members:
            group.state = ClassicState.EMPTY
            group.protocol_name = group.leader = ""
            return []
        group.protocol_name = group.select_protocol()
        if group.leader not in group.members:
            group.leader = next(iter(group.members))
        group.state = ClassicState.COMPLETING_REBALANCE
        group.rebalance_deadline_ms = now + max(m.rebalance_timeout_ms for m in group.members.values())
        everyone = self._member_list(group)
        ready: Ready = []
        for m in group.members.values():
            ready.append((m.join_token, JoinResult(
                generation_id=group.generation_id, protocol_type=group.protocol_type,
                protocol_name=group.protocol_name, leader=group.leader, member_id=m.member_id,
                members=everyone if m.member_id == group.leader else (),
            )))  # fmt: skip
            m.join_token = None
            m.assignment = b""
            m.session_deadline_ms = now + m.session_timeout_ms
        return ready

    def _member_list(self, group: ClassicGroup) -> tuple[tuple[str, str, bytes], ...]:
        return tuple((m.member_id, m.instance_id, m.metadata(group.protocol_name)) for m in group.members.values())

    def _remove(self, group: ClassicGroup, member_id: str) -> None:
        member = group.members.pop(member_id)
        if member.instance_id and group.static.get(member.instance_id) == member_id:
            del group.static[member.instance_id]

    # --- SyncGroup, Heartbeat, LeaveGroup -----------------------------------------------------------

    def sync(
        self, group_id: str, member_id: str, instance_id: str, generation_id: int,
        assignments: dict[str, bytes], token: Any, now: float,
    ) -> tuple[SyncResult | None, Ready]:  # fmt: skip
        """CS1: ``(answer now, or None when the sync waits on token; other answers now due)``."""
        group = self._group(group_id)
        member = group.member(member_id, instance_id)
        if generation_id != group.generation_id:
            raise GroupError(ILLEGAL_GENERATION, f"generation {generation_id} is not the group's {group.generation_id}")
        if group.state is ClassicState.PREPARING_REBALANCE:
            raise GroupError(REBALANCE_IN_PROGRESS, f"group {group_id} is rebalancing: join again")
        member.session_deadline_ms = now + member.session_timeout_ms
        if group.state is ClassicState.STABLE:
            return self._sync_result(group, member), []
        member.sync_token = token
        if member_id != group.leader:
            return None, []
        for mid, m in group.members.items():
            m.assignment = assignments.get(mid, b"")
        group.state = ClassicState.STABLE
        ready: Ready = []
        for m in group.members.values():
            if m.sync_token is not None:
                ready.append((m.sync_token, self._sync_result(group, m)))
                m.sync_token = None
        answered = next((a for t, a in ready if t is token), None)
        return answered, [(t, a) for t, a in ready if t is not token]

    def _sync_result(self, group: ClassicGroup, member: ClassicMember) -> SyncResult:
        return SyncResult(protocol_type=group.protocol_type, protocol_name=group.protocol_name,
                          assignment=member.assignment)  # fmt: skip

    def heartbeat(self, group_id: str, member_id: str, instance_id: str, generation_id: int, now: float) -> None:
        """CH1; raises the errors."""
        group = self._group(group_id)
        member = group.member(member_id, instance_id)
        if generation_id != group.generation_id:
            raise GroupError(ILLEGAL_GENERATION, f"generation {generation_id} is not the group's {group.generation_id}")
        member.session_deadline_ms = now + member.session_timeout_ms
        if group.state is ClassicState.PREPARING_REBALANCE:
            raise GroupError(REBALANCE_IN_PROGRESS, f"group {group_id} is rebalancing: join again")

    def leave(self, group_id: str, members: list[tuple[str, str]], now: float) -> tuple[list[str], Ready]:
        """``members``: (member id, instance id) pairs; returns each one's error ("" when it left)."""
        group = self._group(group_id)
        errors: list[str] = []
        ready: Ready = []
        for member_id, instance_id in members:
            if instance_id and not member_id:
                member_id = group.static.get(instance_id, "")
            try:
                member = group.member(member_id, instance_id)
            except GroupError as exc:
                errors.append(exc.code)
                continue
            for t in (member.join_token, member.sync_token):
                if t is not None:
                    ready.append((t, JoinResult(error=UNKNOWN_MEMBER_ID) if t is member.join_token
                                  else SyncResult(error=UNKNOWN_MEMBER_ID)))  # fmt: skip
            self._remove(group, member_id)
            errors.append("")
        if any(not e for e in errors):
            ready += self._after_removal(group, now)
        return errors, ready

    def _after_removal(self, group: ClassicGroup, now: float) -> Ready:
        if not group.members:
            ready = self._prepare_rebalance(group, now) if group.state is not ClassicState.EMPTY else []
            group.state = ClassicState.EMPTY
            group.protocol_name = group.leader = ""
            group.generation_id += 1
            return ready
        if group.state in (ClassicState.STABLE, ClassicState.COMPLETING_REBALANCE):
            return self._prepare_rebalance(group, now) + self._maybe_complete_join(group, now)
        return self._maybe_complete_join(group, now)

    def _group(self, group_id: str) -> ClassicGroup:
        group = self.groups.get(group_id)
        if group is None:
            raise GroupError(UNKNOWN_MEMBER_ID, f"group {group_id} has no members")
        return group

    # --- timers ---------------------------------------------------------------------------------------

    def tick(self, now: float) -> Ready:
        """Session timeouts (CH1), rebalance deadlines (CJ2, CS2), pending member ids (CJ1)."""
        ready: Ready = []
        for group in list(self.groups.values()):
            group.pending = {mid: t for mid, t in group.pending.items() if t > now}
            expired = [m.member_id for m in group.members.values()
                       if m.join_token is None and m.sync_token is None and m.session_deadline_ms <= now]  # fmt: skip
            if group.state is ClassicState.COMPLETING_REBALANCE and now >= group.rebalance_deadline_ms:
                expired += [m.member_id for m in group.members.values() if m.sync_token is None]  # CS2
                for m in group.members.values():
                    if m.sync_token is not None:
                        ready.append((m.sync_token, SyncResult(error=REBALANCE_IN_PROGRESS)))
                        m.sync_token = None
            for member_id in dict.fromkeys(expired):
                self._remove(group, member_id)
            if expired:
                ready += self._after_removal(group, now)
            else:
                ready += self._maybe_complete_join(group, now)
            if group.state is ClassicState.EMPTY and not group.members and not group.pending:
                del self.groups[group.group_id]
        return ready

    def check_commit(self, group_id: str, member_id: str, instance_id: str, generation_id: int) -> bool:
        """Whether a commit for ``group_id`` is a classic group's (True: checked; raises when refused);
        False: not a classic group with members (the commit goes the consumer-group way)."""
        group = self.groups.get(group_id)
        if group is None or not group.members:
            return False
        if generation_id < 0 and not member_id:
            raise GroupError(UNKNOWN_MEMBER_ID, f"group {group_id} has members: only they may commit")
        group.member(member_id, instance_id)
        if generation_id != group.generation_id:
            raise GroupError(ILLEGAL_GENERATION, f"generation {generation_id} is not the group's {group.generation_id}")
        if group.state is ClassicState.COMPLETING_REBALANCE:  # CC1
            raise GroupError(REBALANCE_IN_PROGRESS, f"group {group_id} is waiting for its assignment")
        return True
