"""ListGroups: the groups this broker coordinates (clients ask every broker), optionally by state."""

from __future__ import annotations

from broker.context import BrokerContext
from proto import broker_pb2 as pb


def handle(ctx: BrokerContext, request: pb.ListGroupsRequest) -> pb.ListGroupsResponse:
    response = pb.ListGroupsResponse()
    coordinator = ctx.coordinator
    if coordinator is None:
        return response
    wanted = {s.lower() for s in request.states_filter}
    for _, core, lock in sorted(coordinator.shards(), key=lambda s: s[0]):
        with lock:
            listed = [(gid, g.state().value) for gid, g in core.groups.items()]
        for gid, state in sorted(listed):
            if not wanted or state.lower() in wanted:
                response.groups.add(group_id=gid, state=state, group_type="consumer", protocol_type="consumer")
    return response
