"""A small in-memory group coordinator for the client tests, plugged into :class:`FakeCluster` (``cluster.groups``).

It follows ``broker/group/PROTOCOL.md`` where the client can tell: epoch 0 joins, -1/-2 leave, the
answer's ``assignment`` is the complete set and is sent only when it changed, a partition goes to a new
owner only after its old owner reported it gone, a static join replaces the live member with the same
instance id (the old one then gets FENCED_INSTANCE_ID), commits are checked against member epochs.
The assignor is round-robin over sorted partitions and sorted member ids. No session timeouts.

Thread-safe: every call runs under ``FakeCluster.lock`` (the fake broker takes it).
"""

from __future__ import annotations

import itertools
import re
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from odradek.types import TopicPartition
from proto import broker_pb2, common_pb2


def _error(code: str = "", message: str = "") -> common_pb2.Error:
    return common_pb2.Error(code=code, message=message)


@dataclass
class FakeMember:
    member_id: str
    instance_id: str
    epoch: int
    topics: tuple[str, ...] = ()
    pattern: str = ""
    owned: frozenset[TopicPartition] = frozenset()
    sent: frozenset[TopicPartition] | None = None  # the last assignment answered
    heartbeats: int = 0


@dataclass
class FakeGroup:
    group_id: str
    epoch: int = 0
    members: dict[str, FakeMember] = field(default_factory=dict)
    offsets: dict[TopicPartition, int] = field(default_factory=dict)
    fenced: set[str] = field(default_factory=set)  # member ids replaced by a static rejoin


class FakeCoordinator:
    """Answers the group RPCs for every fake broker; ``node`` is the coordinator (others: NOT_COORDINATOR)."""

    def __init__(self, topics: dict[str, list[Any]], node: int) -> None:
        self.topics = topics  # FakeCluster.topics: name -> partitions
        self.node = node
        self.groups: dict[str, FakeGroup] = {}
        self.errors: dict[str, deque[str]] = {}  # rpc -> error codes for the next calls
        self.heartbeats: list[broker_pb2.ConsumerGroupHeartbeatRequest] = []
        self._ids = itertools.count(1)

    def inject(self, rpc: str, *codes: str) -> None:
        self.errors.setdefault(rpc, deque()).extend(codes)

    def _injected(self, rpc: str) -> str:
        queue = self.errors.get(rpc)
        return queue.popleft() if queue else ""

    def group(self, group_id: str) -> FakeGroup:
        return self.groups.setdefault(group_id, FakeGroup(group_id))

    # ---------------------------------------------------------------------------------- RPCs

    def FindCoordinator(self, node_id: int, request: Any, address: str) -> broker_pb2.FindCoordinatorResponse:
        code = self._injected("FindCoordinator")
        return broker_pb2.FindCoordinatorResponse(
            coordinators=[
                broker_pb2.FindCoordinatorResponse.Coordinator(
                    key=key, node_id=-1 if code else self.node, address="" if code else address, error=_error(code)
                )
                for key in request.keys
            ]
        )

    def ConsumerGroupHeartbeat(self, node_id: int, request: Any) -> broker_pb2.ConsumerGroupHeartbeatResponse:
        self.heartbeats.append(request)
        code = "NOT_COORDINATOR" if node_id != self.node else self._injected("ConsumerGroupHeartbeat")
        group = self.group(request.group_id)
        if code in ("FENCED_MEMBER_EPOCH", "UNKNOWN_MEMBER_ID"):
            group.members.pop(request.member_id, None)  # the coordinator removed it
        if code:
            return broker_pb2.ConsumerGroupHeartbeatResponse(error=_error(code, "injected"))
        if request.member_id in group.fenced:
            return broker_pb2.ConsumerGroupHeartbeatResponse(error=_error("FENCED_INSTANCE_ID", "replaced"))
        if request.member_epoch < 0:
            group.members.pop(request.member_id, None)
            group.epoch += 1
            return broker_pb2.ConsumerGroupHeartbeatResponse(
                member_id=request.member_id, member_epoch=request.member_epoch
            )
        if request.member_epoch == 0:
            member = self._join(group, request)
        else:
            found = group.members.get(request.member_id)
            if found is None:
                return broker_pb2.ConsumerGroupHeartbeatResponse(error=_error("UNKNOWN_MEMBER_ID"))
            if request.member_epoch != found.epoch:
                return broker_pb2.ConsumerGroupHeartbeatResponse(error=_error("FENCED_MEMBER_EPOCH"))
            member = found
        member.heartbeats += 1
        if request.subscription_changed:
            member.topics, member.pattern = tuple(request.subscribed_topic_names), request.subscribed_topic_regex
            group.epoch += 1
        if request.owned_partitions_sent:
            member.owned = frozenset(TopicPartition(t.topic, p) for t in request.owned_partitions for p in t.partitions)
        assignment = self._assignment(group, member)
        response = broker_pb2.ConsumerGroupHeartbeatResponse(member_id=member.member_id, heartbeat_interval_ms=100)
        if assignment != member.sent:
            member.sent = assignment
            member.epoch = max(member.epoch, group.epoch)
            response.has_assignment = True
            by_topic: dict[str, list[int]] = {}
            for tp in sorted(assignment):
                by_topic.setdefault(tp.topic, []).append(tp.partition)
            response.assignment.extend(broker_pb2.TopicPartitions(topic=t, partitions=p) for t, p in by_topic.items())
        response.member_epoch = member.epoch
        return response

    def _join(self, group: FakeGroup, request: Any) -> FakeMember:
        member = FakeMember(f"member-{next(self._ids)}", request.instance_id, epoch=0)
        if request.instance_id:
            for old in list(group.members.values()):
                if old.instance_id == request.instance_id:  # the newer instance wins
                    del group.members[old.member_id]
                    group.fenced.add(old.member_id)
                    member.epoch, member.owned = old.epoch, old.owned
        group.members[member.member_id] = member
        group.epoch += 1
        member.epoch = max(member.epoch, 1)
        return member

    def _assignment(self, group: FakeGroup, member: FakeMember) -> frozenset[TopicPartition]:
        """Round-robin target; a partition another member still owns is held back (revoke before assign)."""
        members = sorted(group.members)
        wanted: list[TopicPartition] = []
        for name, parts in sorted(self.topics.items()):
            if name in member.topics or (member.pattern and re.fullmatch(member.pattern, name)):
                wanted.extend(TopicPartition(name, p) for p in range(len(parts)))
        target = {tp for i, tp in enumerate(sorted(wanted)) if members[i % len(members)] == member.member_id}
        owned_by_others = {tp for m in group.members.values() if m is not member for tp in m.owned}
        keep = member.owned & target
        return frozenset(keep | {tp for tp in target if tp not in owned_by_others})

    def OffsetCommit(self, node_id: int, request: Any) -> broker_pb2.OffsetCommitResponse:
        code = "NOT_COORDINATOR" if node_id != self.node else self._injected("OffsetCommit")
        group = self.group(request.group_id)
        if not code and request.member_id in group.fenced:
            code = "FENCED_INSTANCE_ID"
        if not code and request.member_id:
            member = group.members.get(request.member_id)
            if member is None:
                code = "UNKNOWN_MEMBER_ID"
            elif request.member_epoch != member.epoch:
                code = "STALE_MEMBER_EPOCH"
        elif not code and group.members:
            code = "UNKNOWN_MEMBER_ID"
        if code:
            return broker_pb2.OffsetCommitResponse(error=_error(code, "fake coordinator"))
        topics = []
        for t in request.topics:
            answers = []
            for p in t.partitions:
                ok = t.name in self.topics and p.partition < len(self.topics[t.name])
                if ok:
                    group.offsets[TopicPartition(t.name, p.partition)] = p.committed_offset
                answers.append(
                    broker_pb2.OffsetCommitResponse.Partition(
                        partition=p.partition, error=_error("" if ok else "UNKNOWN_TOPIC_OR_PARTITION")
                    )
                )
            topics.append(broker_pb2.OffsetCommitResponse.Topic(name=t.name, partitions=answers))
        return broker_pb2.OffsetCommitResponse(topics=topics)

    def OffsetFetch(self, node_id: int, request: Any) -> broker_pb2.OffsetFetchResponse:
        code = "NOT_COORDINATOR" if node_id != self.node else self._injected("OffsetFetch")
        if code:
            return broker_pb2.OffsetFetchResponse(error=_error(code))
        group = self.groups.get(request.group_id) or FakeGroup(request.group_id)
        wanted = [TopicPartition(t.topic, p) for t in request.topics for p in t.partitions] or sorted(group.offsets)
        by_topic: dict[str, list[broker_pb2.OffsetFetchResponse.Partition]] = {}
        for tp in wanted:
            by_topic.setdefault(tp.topic, []).append(
                broker_pb2.OffsetFetchResponse.Partition(
                    partition=tp.partition, committed_offset=group.offsets.get(tp, -1), committed_leader_epoch=-1
                )
            )
        return broker_pb2.OffsetFetchResponse(
            topics=[broker_pb2.OffsetFetchResponse.Topic(name=t, partitions=ps) for t, ps in by_topic.items()]
        )

    def ListGroups(self, node_id: int, request: Any) -> broker_pb2.ListGroupsResponse:
        if node_id != self.node:
            return broker_pb2.ListGroupsResponse()
        code = self._injected("ListGroups")
        if code:
            return broker_pb2.ListGroupsResponse(error=_error(code, "injected"))
        return broker_pb2.ListGroupsResponse(
            groups=[
                broker_pb2.ListGroupsResponse.Group(
                    group_id=g.group_id,
                    state="Stable" if g.members else "Empty",
                    group_type="consumer",
                    protocol_type="consumer",
                )
                for g in sorted(self.groups.values(), key=lambda g: g.group_id)
            ]
        )

    def ConsumerGroupDescribe(self, node_id: int, request: Any) -> broker_pb2.ConsumerGroupDescribeResponse:
        out = []
        injected = self._injected("ConsumerGroupDescribe") if node_id == self.node else ""
        for group_id in request.group_ids:
            group = self.groups.get(group_id)
            if node_id != self.node or group is None or injected:
                code = injected or ("NOT_COORDINATOR" if node_id != self.node else "GROUP_ID_NOT_FOUND")
                out.append(broker_pb2.ConsumerGroupDescribeResponse.Group(group_id=group_id, error=_error(code)))
                continue
            members = []
            for m in sorted(group.members.values(), key=lambda m: m.member_id):
                by_topic: dict[str, list[int]] = {}
                for tp in sorted(m.owned):
                    by_topic.setdefault(tp.topic, []).append(tp.partition)
                owned = [broker_pb2.TopicPartitions(topic=t, partitions=p) for t, p in by_topic.items()]
                members.append(
                    broker_pb2.ConsumerGroupDescribeResponse.Member(
                        member_id=m.member_id,
                        instance_id=m.instance_id,
                        member_epoch=m.epoch,
                        client_id="c",
                        client_host="/127.0.0.1",
                        subscribed_topic_names=list(m.topics),
                        assignment=owned,
                        target_assignment=owned,
                        state="STABLE",
                    )
                )
            out.append(
                broker_pb2.ConsumerGroupDescribeResponse.Group(
                    group_id=group_id,
                    group_state="Stable" if group.members else "Empty",
                    group_epoch=group.epoch,
                    assignment_epoch=group.epoch,
                    assignor_name="uniform",
                    members=members,
                )
            )
        return broker_pb2.ConsumerGroupDescribeResponse(groups=out)

    def DeleteGroups(self, node_id: int, request: Any) -> broker_pb2.DeleteGroupsResponse:
        results = []
        injected = self._injected("DeleteGroups") if node_id == self.node else ""
        for group_id in request.group_ids:
            group = self.groups.get(group_id)
            code = ""
            if node_id != self.node:
                code = "NOT_COORDINATOR"
            elif injected:
                code = injected
            elif group is None:
                code = "GROUP_ID_NOT_FOUND"
            elif group.members:
                code = "NON_EMPTY_GROUP"
            else:
                del self.groups[group_id]
            results.append(broker_pb2.DeleteGroupsResponse.Result(group_id=group_id, error=_error(code)))
        return broker_pb2.DeleteGroupsResponse(results=results)
