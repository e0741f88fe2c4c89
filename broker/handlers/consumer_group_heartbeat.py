"""ConsumerGroupHeartbeat (KIP-848): join, heartbeat, leave; the coordinator answers the member's assignment.

The semantics clients follow are in ``broker/group/PROTOCOL.md``; the rules in :mod:`broker.group.shard`.
The answer goes out after the records the heartbeat wrote are committed in ``__consumer_offsets``.
"""

from __future__ import annotations

from broker.context import BrokerContext
from broker.group.errors import GroupError
from broker.group.shard import Heartbeat
from broker.group.wire import from_topic_partitions, group_error, no_coordinator, to_topic_partitions
from proto import broker_pb2 as pb


def handle(ctx: BrokerContext, request: pb.ConsumerGroupHeartbeatRequest) -> pb.ConsumerGroupHeartbeatResponse:
    response = pb.ConsumerGroupHeartbeatResponse(member_id=request.member_id, member_epoch=request.member_epoch)
    joining = request.member_epoch == 0
    hb = Heartbeat(
        group_id=request.group_id,
        member_id=request.member_id,
        member_epoch=request.member_epoch,
        instance_id=request.instance_id,
        rack_id=request.rack_id,
        client_id=request.client_id,
        client_host=request.client_host,
        rebalance_timeout_ms=request.rebalance_timeout_ms,
        session_timeout_ms=request.session_timeout_ms,
        subscribed_topic_names=tuple(request.subscribed_topic_names)
        if request.subscription_changed or joining
        else None,
        subscribed_topic_regex=request.subscribed_topic_regex if request.subscription_changed or joining else None,
        server_assignor=request.server_assignor,
        owned=from_topic_partitions(request.owned_partitions) if request.owned_partitions_sent or joining else None,
    )
    coordinator = ctx.coordinator
    try:
        if coordinator is None:
            raise no_coordinator()
        topics = coordinator.topics()
        result = coordinator.run(request.group_id, lambda core: core.heartbeat(hb, topics))
    except GroupError as exc:
        response.error.CopyFrom(group_error(exc))
        return response
    response.member_id = result.member_id
    response.member_epoch = result.member_epoch
    response.heartbeat_interval_ms = result.heartbeat_interval_ms
    if result.assignment is not None:
        response.has_assignment = True
        response.assignment.extend(to_topic_partitions(result.assignment))
    return response
