"""Group APIs of the Kafka listener, through the gRPC handlers: FindCoordinator (10), OffsetCommit (8),
OffsetFetch (9), ListGroups (16), DescribeGroups (15), DeleteGroups (42), ConsumerGroupHeartbeat (68,
KIP-848), ConsumerGroupDescribe (69). The classic protocol's JoinGroup, SyncGroup, Heartbeat and
LeaveGroup are in :mod:`broker.kafka.classic`.

KIP-848 heartbeats name topics by id; they are translated to names with the metadata image (a topic id
no topic has is left out of what the member says it owns). A null subscription or owned-partition list
means "unchanged" (the gRPC request's ``subscription_changed`` / ``owned_partitions_sent`` unset).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import Any

from broker.handlers import (
    consumer_group_describe,
    consumer_group_heartbeat,
    delete_groups,
    find_coordinator,
    list_groups,
    offset_fetch,
)
from broker.kafka.api import Request
from broker.kafka.codec import NULL_UUID, build, millis, response_class
from proto import broker_pb2 as pb

OFFSET_COMMIT_KEY = 8
OFFSET_FETCH_KEY = 9
FIND_COORDINATOR_KEY = 10
DESCRIBE_GROUPS_KEY = 15
LIST_GROUPS_KEY = 16
DELETE_GROUPS_KEY = 42
CONSUMER_GROUP_HEARTBEAT_KEY = 68
CONSUMER_GROUP_DESCRIBE_KEY = 69
NO_AUTHORIZED_OPERATIONS = -(2**31)


def handle_find_coordinator(request: Request) -> Any:
    body = request.body
    keys = list(body.coordinator_keys) if request.version >= 4 else [body.key]
    answer = find_coordinator.handle(
        request.ctx, pb.FindCoordinatorRequest(key_type=getattr(body, "key_type", 0), keys=keys),
        listener=request.session.listener,
    )  # fmt: skip
    coordinators = []
    for c in answer.coordinators:
        host, _, port = c.address.rpartition(":")
        coordinators.append(dict(key=c.key, node_id=c.node_id, host=host, port=int(port) if port else -1,
                                 error_code=c.error.code, error_message=c.error.message or None))  # fmt: skip
    cls = response_class(FIND_COORDINATOR_KEY, request.version)
    if request.version >= 4:
        return build(cls, throttle_time=0, coordinators=coordinators)
    first = coordinators[0]
    return build(cls, throttle_time=0, **first)


def handle_offset_commit(request: Request) -> Any:
    from broker.kafka.classic import commit_offsets  # classic groups check generations, not member epochs

    body = request.body
    answer = commit_offsets(request, body)
    topics = [
        dict(name=t.name, partitions=[dict(partition_index=p.partition, error_code=p.error.code)
                                      for p in t.partitions])  # fmt: skip
        for t in answer.topics
    ]
    return build(response_class(OFFSET_COMMIT_KEY, request.version), throttle_time=0, topics=topics)


def pb_offset_commit(body: Any) -> pb.OffsetCommitRequest:
    pb_request = pb.OffsetCommitRequest(
        group_id=body.group_id, member_epoch=getattr(body, "generation_id_or_member_epoch", -1),
        member_id=body.member_id or "", instance_id=getattr(body, "group_instance_id", None) or "",
    )  # fmt: skip
    for t in body.topics:
        topic = pb_request.topics.add(name=t.name)
        for p in t.partitions:
            topic.partitions.add(partition=p.partition_index, committed_offset=p.committed_offset,
                                 committed_leader_epoch=getattr(p, "committed_leader_epoch", -1),
                                 committed_metadata=p.committed_metadata or "")  # fmt: skip
    return pb_request


def handle_offset_fetch(request: Request) -> Any:
    body = request.body
    cls = response_class(OFFSET_FETCH_KEY, request.version)
    if request.version >= 8:
        groups = []
        for g in body.groups:
            topics = None if g.topics is None else [(t.name, list(t.partition_indexes)) for t in g.topics]
            answer = _fetch_offsets(request, g.group_id, topics, getattr(g, "member_id", None),
                                    getattr(g, "member_epoch", -1))  # fmt: skip
            groups.append(dict(group_id=g.group_id, topics=_offset_topics(answer), error_code=answer.error.code))
        return build(cls, throttle_time=0, groups=groups)
    topics = None if body.topics is None else [(t.name, list(t.partition_indexes)) for t in body.topics]
    answer = _fetch_offsets(request, body.group_id, topics, None, -1)
    return build(cls, throttle_time=0, topics=_offset_topics(answer), error_code=answer.error.code)


def _fetch_offsets(
    request: Request, group_id: str, topics: list[tuple[str, list[int]]] | None, member_id: str | None, epoch: int
) -> pb.OffsetFetchResponse:
    pb_request = pb.OffsetFetchRequest(group_id=group_id, member_id=member_id or "", member_epoch=epoch)
    for name, partitions in topics or ():
        pb_request.topics.add(topic=name, partitions=partitions)
    answer = offset_fetch.handle(request.ctx, pb_request)
    if topics:  # Kafka answers every partition asked, -1 where nothing is committed
        have = {(t.name, p.partition) for t in answer.topics for p in t.partitions}
        for name, partitions in topics:
            missing = [p for p in partitions if (name, p) not in have]
            if missing:
                topic = answer.topics.add(name=name)
                for p in missing:
                    topic.partitions.add(partition=p, committed_offset=-1, committed_leader_epoch=-1)
    return answer


def _offset_topics(answer: pb.OffsetFetchResponse) -> list[dict[str, Any]]:
    return [
        dict(name=t.name, partitions=[
            dict(partition_index=p.partition, committed_offset=p.committed_offset,
                 committed_leader_epoch=p.committed_leader_epoch, metadata=p.metadata,
                 error_code=p.error.code or answer.error.code)
            for p in t.partitions
        ])
        for t in answer.topics
    ]  # fmt: skip


def handle_list_groups(request: Request) -> Any:
    from broker.kafka.classic import list_classic_groups

    body = request.body
    states = {s.lower() for s in getattr(body, "states_filter", ())}
    types = {t.lower() for t in getattr(body, "types_filter", ())}
    answer = list_groups.handle(request.ctx, pb.ListGroupsRequest())
    if answer.error.code:  # COORDINATOR_LOAD_IN_PROGRESS: no groups (a partial list would look complete)
        return build(response_class(LIST_GROUPS_KEY, request.version), throttle_time=0,
                     error_code=answer.error.code, groups=[])  # fmt: skip
    classic = list_classic_groups(request.ctx)
    ids = {gid for gid, *_ in classic}  # a classic group's offsets live in an entry without members: not listed twice
    listed = [(g.group_id, g.protocol_type, g.state, g.group_type) for g in answer.groups if g.group_id not in ids]
    listed += classic
    groups = [
        dict(group_id=gid, protocol_type=protocol, group_state=state, group_type=kind)
        for gid, protocol, state, kind in sorted(listed)
        if (not states or state.lower() in states) and (not types or kind.lower() in types)
    ]
    return build(response_class(LIST_GROUPS_KEY, request.version), throttle_time=0, error_code=0, groups=groups)


def handle_describe_groups(request: Request) -> Any:
    from broker.kafka.classic import describe_classic_group

    groups = []
    for gid in request.body.groups:
        found = describe_classic_group(request.ctx, gid)
        groups.append(found if found is not None else _describe_consumer_group(request, gid))
    return build(response_class(DESCRIBE_GROUPS_KEY, request.version), throttle_time=0, groups=groups)


def _describe_consumer_group(request: Request, group_id: str) -> dict[str, Any]:
    """A KIP-848 group as DescribeGroups shows it (Kafka's rule): protocol type ``consumer``, the assignor
    as protocol, each member's assignment in the classic ``ConsumerProtocolAssignment`` layout."""
    answer = consumer_group_describe.handle(request.ctx, pb.ConsumerGroupDescribeRequest(group_ids=[group_id]))
    g = answer.groups[0]
    if g.error.code == "GROUP_ID_NOT_FOUND":  # Kafka: an unknown group is described as Dead, no error
        return dict(error_code=0, group_id=group_id, group_state="Dead", protocol_type="", protocol_data="",
                    members=[], authorized_operations=NO_AUTHORIZED_OPERATIONS)  # fmt: skip
    members = [
        dict(member_id=m.member_id, group_instance_id=m.instance_id or None, client_id=m.client_id,
             client_host=m.client_host, member_metadata=b"",
             member_assignment=consumer_assignment((t.topic, t.partitions) for t in m.assignment))
        for m in g.members
    ]  # fmt: skip
    return dict(error_code=g.error.code, group_id=group_id, group_state=g.group_state, protocol_type="consumer",
                protocol_data=g.assignor_name, members=members,
                authorized_operations=NO_AUTHORIZED_OPERATIONS)  # fmt: skip


def consumer_assignment(topics: Iterable[tuple[str, Iterable[int]]]) -> bytes:
    """Kafka's ConsumerProtocolAssignment v0: int16 version, [string topic, [int32 partition]], bytes user data."""
    items = sorted((t, sorted(ps)) for t, ps in topics)
    out = bytearray(struct.pack(">hi", 0, len(items)))
    for topic, partitions in items:
        name = topic.encode()
        out += struct.pack(">h", len(name)) + name + struct.pack(f">i{len(partitions)}i", len(partitions), *partitions)
    out += struct.pack(">i", -1)
    return bytes(out)


def handle_delete_groups(request: Request) -> Any:
    from broker.kafka.classic import delete_classic_groups

    names = list(request.body.groups_names)
    classic = delete_classic_groups(request.ctx, names)
    rest = [g for g in names if g not in classic]
    answer = delete_groups.handle(request.ctx, pb.DeleteGroupsRequest(group_ids=rest))
    codes = {r.group_id: r.error.code for r in answer.results}
    codes.update(classic)
    results = [dict(group_id=g, error_code=codes.get(g, "")) for g in names]
    return build(response_class(DELETE_GROUPS_KEY, request.version), throttle_time=0, results=results)


def handle_consumer_group_heartbeat(request: Request) -> Any:
    from broker.kafka.classic import refuse_if_classic

    body = request.body
    cls = response_class(CONSUMER_GROUP_HEARTBEAT_KEY, request.version)
    refused = refuse_if_classic(request.ctx, body.group_id)
    if refused:
        return build(cls, throttle_time=0, error_code=refused, error_message=f"{body.group_id} is a classic group",
                     member_id=body.member_id, member_epoch=body.member_epoch, heartbeat_interval=0)  # fmt: skip
    image = request.ctx.metadata.image
    names = body.subscribed_topic_names
    regex = getattr(body, "subscribed_topic_regex", None)
    owned = body.topic_partitions
    pb_request = pb.ConsumerGroupHeartbeatRequest(
        group_id=body.group_id, member_id=body.member_id, member_epoch=body.member_epoch,
        instance_id=body.instance_id or "", rack_id=body.rack_id or "",
        rebalance_timeout_ms=millis(body.rebalance_timeout), subscribed_topic_names=list(names or ()),
        subscription_changed=names is not None or regex is not None, subscribed_topic_regex=regex or "",
        server_assignor=body.server_assignor or "", owned_partitions_sent=owned is not None,
        client_id=request.client_id, client_host=request.session.client_host,
    )  # fmt: skip
    if owned:
        by_id = {t.topic_id: t.name for t in image.topics_by_name.values()}
        for tp in owned:
            name = by_id.get(str(tp.topic_id))
            if name is not None:
                pb_request.owned_partitions.add(topic=name, partitions=list(tp.partitions))
    answer = consumer_group_heartbeat.handle(request.ctx, pb_request)
    assignment = None
    if answer.has_assignment:
        ids = {name: t.topic_id for name, t in image.topics_by_name.items()}
        assignment = dict(topic_partitions=[dict(topic_id=ids.get(t.topic) or NULL_UUID, partitions=list(t.partitions))
                                            for t in answer.assignment if t.topic in ids])  # fmt: skip
    return build(cls, throttle_time=0, error_code=answer.error.code, error_message=answer.error.message or None,
                 member_id=answer.member_id or None, member_epoch=answer.member_epoch,
                 heartbeat_interval=answer.heartbeat_interval_ms, assignment=assignment)  # fmt: skip


def handle_consumer_group_describe(request: Request) -> Any:
    body = request.body
    pb_request = pb.ConsumerGroupDescribeRequest(group_ids=list(body.group_ids))
    answer = consumer_group_describe.handle(request.ctx, pb_request)
    ids = {name: t.topic_id for name, t in request.ctx.metadata.image.topics_by_name.items()}

    def assignment(tps: Iterable[pb.TopicPartitions]) -> dict[str, Any]:
        return dict(topic_partitions=[dict(topic_id=ids.get(t.topic) or NULL_UUID, topic_name=t.topic,
                                           partitions=list(t.partitions)) for t in tps])  # fmt: skip

    groups = [
        dict(error_code=g.error.code, error_message=g.error.message or None, group_id=g.group_id,
             group_state=g.group_state, group_epoch=g.group_epoch, assignment_epoch=g.assignment_epoch,
             assignor_name=g.assignor_name, authorized_operations=NO_AUTHORIZED_OPERATIONS,
             members=[dict(member_id=m.member_id, instance_id=m.instance_id or None, rack_id=m.rack_id or None,
                           member_epoch=m.member_epoch, client_id=m.client_id, client_host=m.client_host,
                           subscribed_topic_names=list(m.subscribed_topic_names),
                           subscribed_topic_regex=m.subscribed_topic_regex or None,
                           assignment=assignment(m.assignment), target_assignment=assignment(m.target_assignment),
                           member_type=1)
                      for m in g.members])
        for g in answer.groups
    ]  # fmt: skip
    return build(response_class(CONSUMER_GROUP_DESCRIBE_KEY, request.version), throttle_time=0, groups=groups)
