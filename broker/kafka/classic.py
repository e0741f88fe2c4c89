"""The classic group protocol on the Kafka listener: JoinGroup (11), Heartbeat (12), LeaveGroup (13),
SyncGroup (14) through :class:`broker.group.classic_driver.ClassicCoordinator`, and the parts of
OffsetCommit, ListGroups, DescribeGroups, DeleteGroups and ConsumerGroupHeartbeat that depend on whether
a group is classic (:mod:`broker.kafka.groups` calls them).

JoinGroup v0 has no rebalance timeout: the session timeout is used (Kafka's rule). A join before v4
gets its member id at once (no MEMBER_ID_REQUIRED round trip).
"""

from __future__ import annotations

from typing import Any

from broker.context import BrokerContext
from broker.group import errors as E
from broker.group.classic import ClassicState, JoinRequest
from broker.group.errors import GroupError
from broker.group.shard import GroupShard, OffsetCommit
from broker.group.wire import no_coordinator
from broker.kafka.api import Request
from broker.kafka.codec import build, millis, response_class
from proto import broker_pb2 as pb

JOIN_GROUP_KEY = 11
HEARTBEAT_KEY = 12
LEAVE_GROUP_KEY = 13
SYNC_GROUP_KEY = 14
NO_AUTHORIZED_OPERATIONS = -(2**31)


def _driver(ctx: BrokerContext) -> Any:
    if ctx.classic is None:
        raise no_coordinator()
    return ctx.classic


def handle_join_group(request: Request) -> Any:
    body = request.body
    cls = response_class(JOIN_GROUP_KEY, request.version)
    session_ms = millis(body.session_timeout)
    rebalance = getattr(body, "rebalance_timeout", None)
    req = JoinRequest(
        group_id=body.group_id, member_id=body.member_id or "",
        instance_id=getattr(body, "group_instance_id", None) or "", protocol_type=body.protocol_type,
        protocols=tuple((p.name, bytes(p.metadata)) for p in body.protocols), session_timeout_ms=session_ms,
        rebalance_timeout_ms=millis(rebalance) if rebalance is not None else session_ms,
        client_id=request.client_id, client_host=request.session.client_host,
        require_known_member=request.version >= 4,
    )  # fmt: skip
    try:
        result = _driver(request.ctx).join(req)
    except GroupError as exc:
        return build(cls, throttle_time=0, error_code=exc.code, protocol_name=None, leader="", member_id="",
                     members=[])  # fmt: skip
    return build(
        cls, throttle_time=0, error_code=result.error, generation_id=result.generation_id,
        protocol_type=result.protocol_type or None, protocol_name=result.protocol_name or None,
        leader=result.leader, skip_assignment=False, member_id=result.member_id,
        members=[dict(member_id=m, group_instance_id=i or None, metadata=meta) for m, i, meta in result.members],
    )  # fmt: skip


def handle_sync_group(request: Request) -> Any:
    body = request.body
    cls = response_class(SYNC_GROUP_KEY, request.version)
    assignments = {a.member_id: bytes(a.assignment) for a in body.assignments}
    try:
        result = _driver(request.ctx).sync(body.group_id, body.member_id,
                                           getattr(body, "group_instance_id", None) or "", body.generation_id,
                                           assignments)  # fmt: skip
    except GroupError as exc:
        return build(cls, throttle_time=0, error_code=exc.code, assignment=b"")
    return build(cls, throttle_time=0, error_code=result.error, protocol_type=result.protocol_type or None,
                 protocol_name=result.protocol_name or None, assignment=result.assignment)  # fmt: skip


def handle_heartbeat(request: Request) -> Any:
    body = request.body
    try:
        code = _driver(request.ctx).heartbeat(body.group_id, body.member_id,
                                              getattr(body, "group_instance_id", None) or "", body.generation_id)
    except GroupError as exc:
        code = exc.code
    return build(response_class(HEARTBEAT_KEY, request.version), throttle_time=0, error_code=code)


def handle_leave_group(request: Request) -> Any:
    body = request.body
    cls = response_class(LEAVE_GROUP_KEY, request.version)
    if request.version >= 3:
        members = [(m.member_id or "", m.group_instance_id or "") for m in body.members]
    else:
        members = [(body.member_id, "")]
    try:
        code, errors = _driver(request.ctx).leave(body.group_id, members)
    except GroupError as exc:
        code, errors = exc.code, [exc.code] * len(members)
    if request.version < 3:
        return build(cls, throttle_time=0, error_code=code or errors[0])
    return build(cls, throttle_time=0, error_code=code, members=[
        dict(member_id=m, group_instance_id=i or None, error_code=e) for (m, i), e in zip(members, errors, strict=True)
    ])  # fmt: skip


def commit_offsets(request: Request, body: Any) -> pb.OffsetCommitResponse:
    """OffsetCommit for any group: a classic group's member is checked by generation, a KIP-848 member by
    epoch (:meth:`GroupShard.commit_offsets`), atomically under the shard's lock."""
    ctx = request.ctx
    generation = getattr(body, "generation_id_or_member_epoch", -1)
    member_id, instance_id = body.member_id or "", getattr(body, "group_instance_id", None) or ""
    offsets = {
        (t.name, p.partition_index): (p.committed_offset, getattr(p, "committed_leader_epoch", -1),
                                      p.committed_metadata or "")
        for t in body.topics for p in t.partitions
    }  # fmt: skip
    response = pb.OffsetCommitResponse()
    coordinator = ctx.coordinator
    try:
        if coordinator is None:
            raise no_coordinator()
        topics = coordinator.topics()

        def op(core: GroupShard) -> tuple[dict[tuple[str, int], str], Any]:
            if ctx.classic is not None and ctx.classic.groups_of(core).check_commit(
                body.group_id, member_id, instance_id, generation
            ):
                return core.commit_offsets(OffsetCommit(body.group_id, "", -1, "", offsets), topics)
            return core.commit_offsets(OffsetCommit(body.group_id, member_id, generation, instance_id, offsets), topics)

        errors = coordinator.run(body.group_id, op)
    except GroupError as exc:
        response.error.code, response.error.message = exc.code, str(exc)
        errors = {tp: exc.code for tp in offsets}
    for t in body.topics:
        answer = response.topics.add(name=t.name)
        for p in t.partitions:
            part = answer.partitions.add(partition=p.partition_index)
            part.error.code = errors.get((t.name, p.partition_index), "")
    return response


def _classic_snapshot(ctx: BrokerContext) -> list[tuple[str, str, str, list[Any]]]:
    """(group id, protocol type, state, [members]) of every classic group led here."""
    out: list[tuple[str, str, str, list[Any]]] = []
    if ctx.coordinator is None or ctx.classic is None:
        return out
    for _, core, lock in ctx.coordinator.shards():
        with lock:
            for gid, g in ctx.classic.groups_of(core).groups.items():
                out.append((gid, g.protocol_type, g.state.value, [
                    dict(member_id=m.member_id, group_instance_id=m.instance_id or None, client_id=m.client_id,
                         client_host=m.client_host, member_metadata=m.metadata(g.protocol_name),
                         member_assignment=m.assignment)
                    for m in g.members.values()
                ]))  # fmt: skip
    return out


def list_classic_groups(ctx: BrokerContext) -> list[tuple[str, str, str, str]]:
    return [(gid, protocol, state, "classic") for gid, protocol, state, _ in _classic_snapshot(ctx)]


def describe_classic_group(ctx: BrokerContext, group_id: str) -> dict[str, Any] | None:
    """DescribeGroups of a classic group (None: not a classic group here)."""
    if ctx.coordinator is None or ctx.classic is None:
        return None
    try:
        found = ctx.coordinator.read(group_id, lambda core: _describe(ctx, core, group_id))
    except GroupError as exc:
        return dict(error_code=exc.code, group_id=group_id, group_state="", protocol_type="", protocol_data="",
                    members=[], authorized_operations=NO_AUTHORIZED_OPERATIONS)  # fmt: skip
    return found


def _describe(ctx: BrokerContext, core: GroupShard, group_id: str) -> dict[str, Any] | None:
    g = ctx.classic.groups_of(core).groups.get(group_id)
    if g is None:
        return None
    members = [
        dict(member_id=m.member_id, group_instance_id=m.instance_id or None, client_id=m.client_id,
             client_host=m.client_host, member_metadata=m.metadata(g.protocol_name), member_assignment=m.assignment)
        for m in g.members.values()
    ]  # fmt: skip
    return dict(error_code=0, group_id=group_id, group_state=g.state.value, protocol_type=g.protocol_type,
                protocol_data=g.protocol_name, members=members,
                authorized_operations=NO_AUTHORIZED_OPERATIONS)  # fmt: skip


def delete_classic_groups(ctx: BrokerContext, group_ids: list[str]) -> dict[str, str]:
    """Refuses the classic groups with members (NON_EMPTY_GROUP) and forgets the empty ones; returns the
    refusals (the offsets of every other group are deleted by the consumer-group handler)."""
    refused: dict[str, str] = {}
    if ctx.coordinator is None or ctx.classic is None:
        return refused
    for gid in group_ids:
        def op(core: GroupShard, gid: str = gid) -> str:
            groups = ctx.classic.groups_of(core).groups
            g = groups.get(gid)
            if g is None:
                return ""
            if g.members:
                return E.NON_EMPTY_GROUP
            del groups[gid]
            return ""

        try:
            code = ctx.coordinator.read(gid, op)
        except GroupError:
            continue  # the consumer-group handler answers the same error
        if code:
            refused[gid] = code
    return refused


def refuse_if_classic(ctx: BrokerContext, group_id: str) -> str:
    """GROUP_ID_NOT_FOUND when ``group_id`` is a classic group with members (a KIP-848 member cannot join)."""
    if ctx.coordinator is None or ctx.classic is None:
        return ""

    def op(core: GroupShard) -> str:
        g = ctx.classic.groups_of(core).groups.get(group_id)
        return E.GROUP_ID_NOT_FOUND if g is not None and g.members and g.state is not ClassicState.DEAD else ""

    try:
        return str(ctx.coordinator.read(group_id, op))
    except GroupError:
        return ""
