"""ListGroups: the groups this broker coordinates (clients ask every broker), optionally by state.

While this broker is still loading one of its ``__consumer_offsets`` partitions, the answer is
COORDINATOR_LOAD_IN_PROGRESS and no groups, as in Kafka: a list without that partition's groups would look
complete. Clients retry it (it is retriable).
"""

from __future__ import annotations

from broker.context import BrokerContext
from broker.group import errors as E
from broker.group.config import OFFSETS_TOPIC
from proto import broker_pb2 as pb


def handle(ctx: BrokerContext, request: pb.ListGroupsRequest) -> pb.ListGroupsResponse:
    response = pb.ListGroupsResponse()
    coordinator = ctx.coordinator
    if coordinator is None:
        return response
    loading = coordinator.loading()
    if loading:
        response.error.code = E.COORDINATOR_LOAD_IN_PROGRESS
        response.error.message = f"loading {', '.join(f'{OFFSETS_TOPIC}-{p}' for p in loading)}"
        return response
    wanted = {s.lower() for s in request.states_filter}
    for _, core, lock in sorted(coordinator.shards(), key=lambda s: s[0]):
        with lock:
            listed = [(gid, g.state().value) for gid, g in core.groups.items()]
        for gid, state in sorted(listed):
            if not wanted or state.lower() in wanted:
                response.groups.add(group_id=gid, state=state, group_type="consumer", protocol_type="consumer")
    return response
