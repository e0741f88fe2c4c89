"""ConsumerGroupDescribe: state, epochs, assignor and members (current and target assignments) per group.

Per group: GROUP_ID_NOT_FOUND, NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, INVALID_GROUP_ID.
"""

from __future__ import annotations

from broker.context import BrokerContext
from broker.group import errors as E
from broker.group.errors import GroupError
from broker.group.shard import GroupShard
from broker.group.wire import group_error, no_coordinator, to_topic_partitions
from proto import broker_pb2 as pb

Group = pb.ConsumerGroupDescribeResponse.Group


def handle(ctx: BrokerContext, request: pb.ConsumerGroupDescribeRequest) -> pb.ConsumerGroupDescribeResponse:
    response = pb.ConsumerGroupDescribeResponse()
    coordinator = ctx.coordinator
    for gid in request.group_ids:
        try:
            if coordinator is None:
                raise no_coordinator()
            response.groups.append(coordinator.read(gid, lambda core, g=gid: describe(core, g)))  # type: ignore[misc]
        except GroupError as exc:
            response.groups.append(Group(group_id=gid, error=group_error(exc)))
    return response


def describe(core: GroupShard, group_id: str) -> pb.ConsumerGroupDescribeResponse.Group:
    group = core.groups.get(group_id)
    if group is None:
        raise GroupError(E.GROUP_ID_NOT_FOUND, f"group {group_id} does not exist")
    answer = Group(
        group_id=group_id,
        group_state=group.state().value,
        group_epoch=group.group_epoch,
        assignment_epoch=max(group.assignment_epoch, 0),
        assignor_name=core.assignor_name(group),
    )
    for mid, m in sorted(group.members.items()):
        answer.members.add(
            member_id=mid,
            instance_id=m.instance_id,
            rack_id=m.rack_id,
            member_epoch=m.member_epoch,
            client_id=m.client_id,
            client_host=m.client_host,
            subscribed_topic_names=list(m.subscribed_topic_names),
            subscribed_topic_regex=m.subscribed_topic_regex,
            assignment=to_topic_partitions(m.assigned),
            target_assignment=to_topic_partitions(group.target.get(mid, m.assigned)),
            state=m.state.label,
        )
    return answer
