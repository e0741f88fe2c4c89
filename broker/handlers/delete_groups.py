"""DeleteGroups: delete empty groups and their committed offsets (tombstones in ``__consumer_offsets``).

Per group: NON_EMPTY_GROUP while members remain, GROUP_ID_NOT_FOUND, NOT_COORDINATOR (the client sends
each group to its coordinator).
"""

from __future__ import annotations

from broker.context import BrokerContext
from broker.group.errors import GroupError
from broker.group.wire import group_error, no_coordinator
from proto import broker_pb2 as pb
from proto import common_pb2


def handle(ctx: BrokerContext, request: pb.DeleteGroupsRequest) -> pb.DeleteGroupsResponse:
    response = pb.DeleteGroupsResponse()
    coordinator = ctx.coordinator
    for gid in request.group_ids:
        result = response.results.add(group_id=gid)
        try:
            if coordinator is None:
                raise no_coordinator()
            errors = coordinator.run(gid, lambda core, g=gid: core.delete_groups([g]))  # type: ignore[misc]
        except GroupError as exc:
            result.error.CopyFrom(group_error(exc))
            continue
        if errors.get(gid):
            result.error.CopyFrom(common_pb2.Error(code=errors[gid], message=f"group {gid}: {errors[gid]}"))
    return response
