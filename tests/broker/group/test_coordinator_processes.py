"""The group coordinator in real broker processes, driven with raw gRPC stubs (no client library).

Join / heartbeat / assignment, commit / fetch, describe / list / delete, the internal topic refused to
producers, and a coordinator failover that keeps offsets and members (``__consumer_offsets`` is replicated
and the new leader loads the groups from it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from broker.group.config import partition_for
from proto import broker_pb2 as pb
from tests.broker.cluster import Cluster

GROUP_CONFIG = {
    "offsets.topic.num.partitions": "3",
    "offsets.topic.replication.factor": "1",  # the one-broker clusters below (a 3-broker test sets 3)
    "group.consumer.heartbeat.interval.ms": "200",
    "group.consumer.session.timeout.ms": "6000",
    "group.consumer.min.session.timeout.ms": "1000",
}
WAIT_S = 30.0
# Kafka's retriable coordinator errors: the coordinator's broker has not taken up its ``__consumer_offsets``
# partition yet (its metadata lags the broker that answered FindCoordinator), is still loading it, or no
# longer leads it. A Kafka consumer backs off and retries them (rediscovering the coordinator for the last two).
RETRIABLE = frozenset({"COORDINATOR_LOAD_IN_PROGRESS", "COORDINATOR_NOT_AVAILABLE", "NOT_COORDINATOR"})


def find_coordinator(cluster: Cluster, group: str, via: int = 0) -> pb.FindCoordinatorResponse.Coordinator:
    def found() -> Any:
        answer = cluster.broker_stub(via).FindCoordinator(pb.FindCoordinatorRequest(key_type=0, keys=[group]))
        c = answer.coordinators[0]
        return c if not c.error.code else None

    return cluster.wait_for(found, WAIT_S, f"a coordinator for {group}")


def stub_of(cluster: Cluster, node_id: int) -> Any:
    index = next(i for i, b in enumerate(cluster.brokers) if b.node_id == node_id)
    return cluster.broker_stub(index)


def owned(tps: Any) -> set[tuple[str, int]]:
    return {(t.topic, p) for t in tps for p in t.partitions}


def as_topic_partitions(tps: set[tuple[str, int]]) -> list[pb.TopicPartitions]:
    topics: dict[str, list[int]] = {}
    for t, p in tps:
        topics.setdefault(t, []).append(p)
    return [pb.TopicPartitions(topic=t, partitions=sorted(ps)) for t, ps in sorted(topics.items())]


class Member:
    """A raw-stub member that follows PROTOCOL.md: revoke, then assign, then report what it owns."""

    def __init__(self, group: str, topics: list[str], instance_id: str = "") -> None:
        self.group, self.topics, self.instance_id = group, topics, instance_id
        self.member_id, self.epoch = "", 0
        self.owned: set[tuple[str, int]] = set()
        self.report = True

    def heartbeat(self, stub: Any) -> pb.ConsumerGroupHeartbeatResponse:
        joining = self.epoch == 0
        request = pb.ConsumerGroupHeartbeatRequest(
            group_id=self.group, member_id=self.member_id, member_epoch=self.epoch, instance_id=self.instance_id,
            rebalance_timeout_ms=30_000, subscribed_topic_names=self.topics, subscription_changed=joining,
            owned_partitions=as_topic_partitions(self.owned), owned_partitions_sent=self.report or joining,
        )  # fmt: skip
        answer = stub.ConsumerGroupHeartbeat(request)
        if answer.error.code:
            return answer
        self.member_id, self.epoch = answer.member_id, answer.member_epoch
        self.report = False
        if answer.has_assignment:  # revoke, then assign (nothing to do between them here), then report
            self.owned = owned(answer.assignment)
            self.report = True
        return answer

    def leave(self, stub: Any) -> pb.ConsumerGroupHeartbeatResponse:
        return stub.ConsumerGroupHeartbeat(
            pb.ConsumerGroupHeartbeatRequest(group_id=self.group, member_id=self.member_id, member_epoch=-1)
        )


def settle(cluster: Cluster, stub: Any, members: list[Member], expected: int) -> None:
    """Heartbeat every member until their owned partitions split the ``expected`` partitions exactly.

    The coordinator's retriable answers (:data:`RETRIABLE`) are retried until the wait's deadline, as a Kafka
    consumer retries them; any other error fails at once."""

    def split() -> bool:
        for m in members:
            answer = m.heartbeat(stub)
            if answer.error.code in RETRIABLE:  # as a Kafka consumer: back off, try again (bounded by the wait)
                return False
            assert not answer.error.code, answer.error
        sets = [m.owned for m in members]
        union = set().union(*sets)
        disjoint = sum(len(s) for s in sets) == len(union)
        sizes = sorted(len(s) for s in sets)
        return disjoint and len(union) == expected and sizes[-1] - sizes[0] <= 1

    cluster.wait_for(split, WAIT_S, f"{len(members)} members sharing {expected} partitions")


def commit(stub: Any, member: Member, offsets: dict[tuple[str, int], int]) -> pb.OffsetCommitResponse:
    topics: dict[str, list[pb.OffsetCommitRequest.Partition]] = {}
    for (t, p), o in offsets.items():
        topics.setdefault(t, []).append(pb.OffsetCommitRequest.Partition(partition=p, committed_offset=o))
    return stub.OffsetCommit(
        pb.OffsetCommitRequest(
            group_id=member.group,
            member_id=member.member_id,
            member_epoch=member.epoch,
            topics=[pb.OffsetCommitRequest.Topic(name=t, partitions=ps) for t, ps in topics.items()],
        )  # fmt: skip
    )


def fetched(stub: Any, group: str) -> dict[tuple[str, int], int]:
    answer = stub.OffsetFetch(pb.OffsetFetchRequest(group_id=group, member_epoch=-1))
    assert not answer.error.code, answer.error
    return {(t.name, p.partition): p.committed_offset for t in answer.topics for p in t.partitions}


@pytest.mark.slow
def test_join_share_commit_fetch_describe_delete(tmp_path: Path) -> None:
    with Cluster(tmp_path, brokers=1, broker_config=GROUP_CONFIG) as cluster:
        cluster.create_topic("orders", partitions=6, replication_factor=1)
        c = find_coordinator(cluster, "billing")
        stub = stub_of(cluster, c.node_id)
        members = [Member("billing", ["orders"]) for _ in range(3)]
        settle(cluster, stub, members, 6)
        assert all(len(m.owned) == 2 for m in members)

        # a member's commit is checked against its epoch (STALE_MEMBER_EPOCH), then stored and fetched back
        first = members[0]
        tp = sorted(first.owned)[0]
        stale = Member("billing", ["orders"])
        stale.member_id, stale.epoch = first.member_id, first.epoch - 1
        assert commit(stub, stale, {tp: 5}).error.code == "STALE_MEMBER_EPOCH"
        unknown = Member("billing", ["orders"])
        unknown.member_id, unknown.epoch = "nobody", 1
        assert commit(stub, unknown, {tp: 5}).error.code == "UNKNOWN_MEMBER_ID"
        answer = commit(stub, first, {tp: 42})
        assert not answer.error.code
        assert not answer.topics[0].partitions[0].error.code
        assert fetched(stub, "billing") == {tp: 42}

        # describe and list show the stable group; delete refuses while members remain
        described = stub.ConsumerGroupDescribe(pb.ConsumerGroupDescribeRequest(group_ids=["billing", "nope"]))
        group, missing = described.groups
        assert group.group_state == "Stable"
        assert len(group.members) == 3
        assert {m.member_id: owned(m.assignment) for m in group.members} == {m.member_id: m.owned for m in members}
        assert missing.error.code == "GROUP_ID_NOT_FOUND"
        listed = stub.ListGroups(pb.ListGroupsRequest())
        assert [(g.group_id, g.state) for g in listed.groups] == [("billing", "Stable")]
        deleted = stub.DeleteGroups(pb.DeleteGroupsRequest(group_ids=["billing"]))
        assert deleted.results[0].error.code == "NON_EMPTY_GROUP"

        # one member leaves: the others take its partitions (revoked from nobody: it left)
        assert members[2].leave(stub).member_epoch == -1
        settle(cluster, stub, members[:2], 6)
        for m in members[:2]:
            assert not m.leave(stub).error.code
        cluster.wait_for(
            lambda: stub.ListGroups(pb.ListGroupsRequest(states_filter=["Empty"])).groups, WAIT_S, "an empty group"
        )
        assert not stub.DeleteGroups(pb.DeleteGroupsRequest(group_ids=["billing"])).results[0].error.code
        assert fetched(stub, "billing") == {}

        # the internal topic is refused to producers
        produce = stub.Produce(
            pb.ProduceRequest(acks=1, timeout_ms=1000, topics=[pb.ProduceTopicData(
                name="__consumer_offsets", partitions=[pb.ProducePartitionData(partition=0, records=b"")])])
        )  # fmt: skip
        assert produce.topics[0].partitions[0].error.code == "INVALID_TOPIC_EXCEPTION"
        metadata = cluster.metadata(0, ["__consumer_offsets"])
        assert metadata.topics[0].is_internal
        assert len(metadata.topics[0].partitions) == 3


@pytest.mark.slow
def test_coordinator_failover_keeps_offsets_and_members(tmp_path: Path) -> None:
    config = {**GROUP_CONFIG, "offsets.topic.replication.factor": "3"}
    with Cluster(tmp_path, brokers=3, broker_config=config) as cluster:
        cluster.create_topic("orders", partitions=4, replication_factor=3)
        c = find_coordinator(cluster, "billing")
        number = partition_for("billing", 3)
        # in the coordinator's own metadata: FindCoordinator answered from broker 0's, which may be ahead of it
        # (and a new partition's ISR is full from its creation, so a full ISR in broker 0's view says nothing of
        # whether the coordinator's broker has taken up its partition yet)
        index = next(i for i, b in enumerate(cluster.brokers) if b.node_id == c.node_id)

        def led_with_full_isr() -> bool:
            topic = cluster.metadata(index, ["__consumer_offsets"]).topics[0]  # UNKNOWN_TOPIC_OR_PARTITION: none
            return any(p.partition == number and p.leader == c.node_id and len(p.isr) == 3 for p in topic.partitions)

        cluster.wait_for(led_with_full_isr, WAIT_S, "a full ISR, led by the coordinator, in its own metadata")
        stub = stub_of(cluster, c.node_id)
        members = [Member("billing", ["orders"]) for _ in range(2)]
        settle(cluster, stub, members, 4)
        offsets = {tp: 10 + tp[1] for m in members for tp in m.owned}
        for m in members:
            assert not commit(stub, m, {tp: offsets[tp] for tp in m.owned}).error.code

        old = c.node_id
        cluster.kill_broker(next(i for i, b in enumerate(cluster.brokers) if b.node_id == old))
        alive = next(i for i, b in enumerate(cluster.brokers) if b.node_id != old)
        new = cluster.wait_for(
            lambda: (n := find_coordinator(cluster, "billing", via=alive)).node_id != old and n, WAIT_S,
            "a new coordinator",
        )  # fmt: skip
        new_stub = stub_of(cluster, new.node_id)
        cluster.wait_for(lambda: fetched(new_stub, "billing") == offsets if _loaded(new_stub) else False, WAIT_S,
                         "the offsets at the new coordinator")  # fmt: skip
        # the members go on with their ids and epochs: the group was loaded, not rebuilt
        for m in members:
            answer = m.heartbeat(new_stub)
            assert not answer.error.code, answer.error
        settle(cluster, new_stub, members, 4)
        assert {tp for m in members for tp in m.owned} == set(offsets)


def _loaded(stub: Any) -> bool:
    answer = stub.OffsetFetch(pb.OffsetFetchRequest(group_id="billing", member_epoch=-1))
    return answer.error.code == ""


@pytest.mark.slow
def test_static_member_restart_fencing_and_session_expiry(tmp_path: Path) -> None:
    with Cluster(tmp_path, brokers=1, broker_config=GROUP_CONFIG) as cluster:
        cluster.create_topic("orders", partitions=4, replication_factor=1)
        stub = stub_of(cluster, find_coordinator(cluster, "static").node_id)
        a, b = Member("static", ["orders"], instance_id="a"), Member("static", ["orders"], instance_id="b")
        settle(cluster, stub, [a, b], 4)
        # "b" restarts as a new process (no member id, epoch 0) while the old one still runs: the new one gets
        # the same partitions at once, nothing moves, and the old one is fenced
        b2 = Member("static", ["orders"], instance_id="b")
        answer = b2.heartbeat(stub)
        assert not answer.error.code, answer.error
        assert b2.member_id != b.member_id
        assert b2.owned == b.owned
        assert b.heartbeat(stub).error.code == "FENCED_INSTANCE_ID"
        assert not a.heartbeat(stub).has_assignment, "nothing moves for the other member"
        # "b" stops heartbeating: after its session timeout "a" gets everything
        cluster.wait_for(
            lambda: a.heartbeat(stub).error.code == "" and len(a.owned) == 4, WAIT_S, "b's session to expire"
        )
        assert b2.heartbeat(stub).error.code == "UNKNOWN_MEMBER_ID"
