"""The Consumer as a group member against the fake cluster and its fake coordinator, over real gRPC."""

from __future__ import annotations

import re
import time
from collections.abc import Callable

import pytest

from odradek import Consumer, ConsumerRecord, TopicPartition
from odradek.errors import CommitFailedError, FencedInstanceIdError, IllegalStateError, InvalidGroupIdError
from odradek.group import ConsumerRebalanceListener
from tests.clients.fake_broker import FakeCluster
from tests.clients.fake_coordinator import FakeCoordinator, FakeMember
from tests.clients.test_consumer import fill

T = [TopicPartition("t", p) for p in range(4)]


@pytest.fixture
def groups(make_cluster: Callable[..., FakeCluster]) -> tuple[FakeCluster, FakeCoordinator]:
    cluster = make_cluster((1, 2))
    cluster.groups = FakeCoordinator(cluster.topics, node=2)
    cluster.create_topic("t", 4)
    return cluster, cluster.groups


def member(cluster: FakeCluster, **config: object) -> Consumer:
    settings: dict[str, object] = {
        "bootstrap.servers": cluster.bootstrap,
        "group.id": "g",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "fetch.max.wait.ms": 50,
        "retry.backoff.ms": 20,
        "retry.backoff.max.ms": 100,
    }
    return Consumer({**settings, **config})


def poll_until(
    consumers: list[Consumer], done: Callable[[], bool], timeout_s: float = 15
) -> dict[int, list[ConsumerRecord]]:
    got: dict[int, list[ConsumerRecord]] = {i: [] for i in range(len(consumers))}
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, "timed out waiting for the group"
        for i, c in enumerate(consumers):
            got[i].extend(c.poll(timeout_ms=20))
    return got


class Recorder(ConsumerRebalanceListener):
    def __init__(self, consumer: Consumer | None = None) -> None:
        self.events: list[tuple[str, set[TopicPartition]]] = []
        self.consumer = consumer
        self.committed_on_revoke: dict[TopicPartition, int | None] = {}

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.events.append(("revoked", revoked))
        if self.consumer is not None:  # at-least-once: commit what was processed before giving it up
            self.consumer.commit()
            for tp in revoked:
                self.committed_on_revoke[tp] = self.consumer.committed(tp)

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.events.append(("assigned", assigned))

    def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        self.events.append(("lost", lost))


def test_two_members_share_the_partitions_and_move_them_incrementally(
    groups: tuple[FakeCluster, FakeCoordinator],
) -> None:
    cluster, _ = groups
    for tp in T:
        fill(cluster, tp, 5)
    first = member(cluster)
    listener = Recorder(first)
    first.subscribe(["t"], listener)
    got = poll_until([first], lambda: first.assignment() == set(T))
    assert listener.events == [("assigned", set(T))]
    got = poll_until([first], lambda: sum(first.position(tp) for tp in T) == 20)
    second = member(cluster)
    second.subscribe(["t"])
    got = poll_until([first, second], lambda: len(first.assignment()) == 2 and len(second.assignment()) == 2)
    assert first.assignment() | second.assignment() == set(T)
    assert not first.assignment() & second.assignment()
    # the first member revoked (and committed, in its listener) before the second got those partitions
    kinds = [kind for kind, _ in listener.events]
    assert kinds == ["assigned", "revoked"]
    moved = listener.events[1][1]
    assert moved == second.assignment()
    assert listener.committed_on_revoke == dict.fromkeys(moved, 5)
    # the second member starts from the committed offsets: nothing is delivered twice
    fill(cluster, T[0], 1)
    fill(cluster, T[3], 1)
    got = poll_until(
        [first, second], lambda: sum(c.position(tp) for c in (first, second) for tp in c.assignment()) == 22
    )
    delivered = [(r.partition, r.offset) for records in got.values() for r in records]
    assert sorted(delivered) == [(0, 5), (3, 5)]
    second.close()
    first.close()


def test_commit_committed_and_async_callbacks(groups: tuple[FakeCluster, FakeCoordinator]) -> None:
    cluster, coordinator = groups
    fill(cluster, T[0], 3)
    with member(cluster) as c:
        c.subscribe(["t"])
        poll_until([c], lambda: len(c.assignment()) == 4)
        poll_until([c], lambda: c.position(T[0]) == 3)
        c.commit()
        assert c.committed(T[0]) == 3
        assert c.committed(T[1]) == 0  # the position of an empty partition is committed too
        results: list[tuple[dict[TopicPartition, int], Exception | None]] = []
        c.commit_async({T[0]: 2}, lambda offsets, error: results.append((dict(offsets), error))).result(10)
        assert results == []  # callbacks run on the application thread, inside poll
        c.poll(timeout_ms=10)
        assert results == [({T[0]: 2}, None)]
        assert coordinator.groups["g"].offsets[T[0]] == 2


def test_positions_start_from_committed_offsets_else_auto_offset_reset(
    groups: tuple[FakeCluster, FakeCoordinator],
) -> None:
    cluster, coordinator = groups
    for tp in T:
        fill(cluster, tp, 4)
    coordinator.group("g").offsets[T[1]] = 2
    with member(cluster, **{"auto.offset.reset": "latest"}) as c:
        c.subscribe(["t"])
        poll_until([c], lambda: len(c.assignment()) == 4)
        poll_until([c], lambda: all(c.position(tp) is not None for tp in T))
        assert [c.position(tp) for tp in T] == [4, 2, 4, 4]


def test_auto_commit_on_close_and_interval(groups: tuple[FakeCluster, FakeCoordinator]) -> None:
    cluster, coordinator = groups
    fill(cluster, T[2], 7)
    c = member(cluster, **{"enable.auto.commit": True, "auto.commit.interval.ms": 60_000})
    c.subscribe(["t"])
    poll_until([c], lambda: len(c.assignment()) == 4 and c.position(T[2]) == 7)
    c.close()
    assert coordinator.groups["g"].offsets[T[2]] == 7
    assert coordinator.groups["g"].members == {}  # it left


def test_static_member_closes_with_epoch_minus_two(groups: tuple[FakeCluster, FakeCoordinator]) -> None:
    cluster, coordinator = groups
    c = member(cluster, **{"group.instance.id": "box-1"})
    c.subscribe(["t"])
    poll_until([c], lambda: len(c.assignment()) == 4)
    c.close()
    assert coordinator.heartbeats[-1].member_epoch == -2
    assert coordinator.heartbeats[-1].instance_id == "box-1"


def test_a_duplicate_instance_id_fences_the_older_member(groups: tuple[FakeCluster, FakeCoordinator]) -> None:
    cluster, _ = groups
    old = member(cluster, **{"group.instance.id": "box-1"})
    old.subscribe(["t"])
    poll_until([old], lambda: len(old.assignment()) == 4)
    new = member(cluster, **{"group.instance.id": "box-1"})
    new.subscribe(["t"])
    poll_until([new], lambda: len(new.assignment()) == 4)
    deadline = time.monotonic() + 10
    with pytest.raises(FencedInstanceIdError, match="group.instance.id 'box-1'"):  # noqa: PT012
        while time.monotonic() < deadline:
            old.poll(timeout_ms=20)
    with pytest.raises(FencedInstanceIdError):
        old.commit({T[0]: 1})
    old.close()
    new.close()


def test_fenced_member_loses_its_partitions_and_rejoins(groups: tuple[FakeCluster, FakeCoordinator]) -> None:
    cluster, coordinator = groups
    c = member(cluster)
    listener = Recorder()
    c.subscribe(["t"], listener)
    poll_until([c], lambda: len(c.assignment()) == 4)
    coordinator.inject("ConsumerGroupHeartbeat", "FENCED_MEMBER_EPOCH")
    poll_until([c], lambda: ("lost", set(T)) in listener.events and len(c.assignment()) == 4)
    assert listener.events == [("assigned", set(T)), ("lost", set(T)), ("assigned", set(T))]
    c.close()


def test_coordinator_errors_are_retried(groups: tuple[FakeCluster, FakeCoordinator]) -> None:
    cluster, coordinator = groups
    coordinator.inject("FindCoordinator", "COORDINATOR_NOT_AVAILABLE")
    coordinator.inject("ConsumerGroupHeartbeat", "NOT_COORDINATOR", "COORDINATOR_LOAD_IN_PROGRESS")
    coordinator.inject("OffsetCommit", "NOT_COORDINATOR")
    with member(cluster) as c:
        c.subscribe(["t"])
        poll_until([c], lambda: len(c.assignment()) == 4)
        c.commit({T[0]: 0})
        assert coordinator.groups["g"].offsets == {T[0]: 0}


def test_every_coordinator_error_is_retried_by_commits_and_offset_fetches(
    groups: tuple[FakeCluster, FakeCoordinator],
) -> None:
    """COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE and NOT_COORDINATOR (Kafka's retriable coordinator
    errors) on each group call: the consumer backs off and retries (rediscovering the coordinator), never fails."""
    cluster, coordinator = groups
    codes = ("COORDINATOR_LOAD_IN_PROGRESS", "COORDINATOR_NOT_AVAILABLE", "NOT_COORDINATOR")
    for tp in T:
        fill(cluster, tp, 3)
    coordinator.group("g").offsets[T[2]] = 1
    coordinator.inject("FindCoordinator", "COORDINATOR_NOT_AVAILABLE", "COORDINATOR_LOAD_IN_PROGRESS")
    for rpc in ("ConsumerGroupHeartbeat", "OffsetFetch", "OffsetCommit"):
        coordinator.inject(rpc, *codes)
    with member(cluster) as c:
        c.subscribe(["t"])
        poll_until([c], lambda: len(c.assignment()) == 4 and all(c.position(tp) is not None for tp in T))
        assert c.position(T[2]) == 1  # from the committed offset, fetched through the errors
        c.commit({T[0]: 2})
        assert coordinator.groups["g"].offsets == {T[0]: 2, T[2]: 1}
        coordinator.inject("OffsetFetch", *codes)
        assert c.committed(T[0]) == 2
    assert not any(coordinator.errors.values()), "every injected error was answered (and retried)"


def test_a_commit_from_a_former_member_fails(groups: tuple[FakeCluster, FakeCoordinator]) -> None:
    cluster, coordinator = groups
    with member(cluster) as c:
        c.subscribe(["t"])
        poll_until([c], lambda: len(c.assignment()) == 4)
        group = coordinator.groups["g"]
        with cluster.lock:  # removed by the coordinator (as after a session timeout), another member took over
            group.members = {"someone": FakeMember("someone", "", 1)}
        with pytest.raises(CommitFailedError, match="no longer a member"):
            c.commit({T[0]: 1})


def test_misuse_is_refused(groups: tuple[FakeCluster, FakeCoordinator]) -> None:
    cluster, _ = groups
    with member(cluster, **{"group.id": None}) as c:
        with pytest.raises(InvalidGroupIdError, match="needs a group.id"):
            c.subscribe(["t"])
        with pytest.raises(InvalidGroupIdError, match="needs a group.id"):
            c.commit({T[0]: 1})
    with member(cluster) as c:
        c.assign([T[0]])
        with pytest.raises(IllegalStateError, match="exclude each other"):
            c.subscribe(["t"])
        c.unsubscribe()
        c.subscribe(["t"])
        with pytest.raises(IllegalStateError, match="exclude each other"):
            c.assign([T[0]])
        with pytest.raises(ValueError, match="topics or a pattern"):
            c.subscribe(["t"], pattern="t.*")
        with pytest.raises(TypeError, match="not the string"):
            c.subscribe("t")


def test_assign_only_consumer_commits_as_a_non_member(groups: tuple[FakeCluster, FakeCoordinator]) -> None:
    cluster, coordinator = groups
    with member(cluster) as c:
        c.assign([T[1]])
        c.commit({T[1]: 9})
        assert c.committed(T[1]) == 9
    request = cluster.calls_of("OffsetCommit")[-1]
    assert (request.member_id, request.member_epoch) == ("", -1)


def test_pattern_subscription(groups: tuple[FakeCluster, FakeCoordinator]) -> None:
    cluster, _ = groups
    cluster.create_topic("tx", 1)
    cluster.create_topic("other", 1)
    with member(cluster) as c:
        c.subscribe(re.compile("t.*"))
        poll_until([c], lambda: len(c.assignment()) == 5)
        assert {tp.topic for tp in c.assignment()} == {"t", "tx"}
        assert c.subscription() == {"t", "tx"}


def test_a_member_that_stops_polling_leaves_and_rejoins_on_the_next_poll(
    groups: tuple[FakeCluster, FakeCoordinator],
) -> None:
    cluster, coordinator = groups
    c = member(cluster, **{"max.poll.interval.ms": 300})
    listener = Recorder()
    c.subscribe(["t"], listener)
    poll_until([c], lambda: len(c.assignment()) == 4)
    deadline = time.monotonic() + 10
    while not any(h.member_epoch == -1 for h in coordinator.heartbeats):  # no poll: the heartbeat thread leaves
        assert time.monotonic() < deadline, "the member did not leave"
        time.sleep(0.05)
    assert coordinator.groups["g"].members == {}
    poll_until([c], lambda: len(listener.events) == 3 and len(c.assignment()) == 4)
    assert listener.events == [("assigned", set(T)), ("lost", set(T)), ("assigned", set(T))]
    c.close()


def test_a_stale_member_epoch_commit_is_retried_after_a_heartbeat(
    groups: tuple[FakeCluster, FakeCoordinator],
) -> None:
    cluster, coordinator = groups
    with member(cluster) as c:
        c.subscribe(["t"])
        poll_until([c], lambda: len(c.assignment()) == 4)
        coordinator.inject("OffsetCommit", "STALE_MEMBER_EPOCH")
        before = len(coordinator.heartbeats)
        c.commit({T[3]: 0})
        assert coordinator.groups["g"].offsets == {T[3]: 0}
        assert len(coordinator.heartbeats) > before  # it heartbeated before retrying


def test_position_of_a_newly_assigned_partition_comes_from_the_committed_offset(
    groups: tuple[FakeCluster, FakeCoordinator],
) -> None:
    cluster, coordinator = groups
    fill(cluster, T[2], 9)
    coordinator.group("g").offsets[T[2]] = 6
    coordinator.inject("OffsetFetch", "UNKNOWN_TOPIC_OR_PARTITION")  # poll's lookup fails (retriable)
    with member(cluster, **{"auto.offset.reset": "latest"}) as c:
        c.subscribe(["t"])
        deadline = time.monotonic() + 10
        while not c.assignment():  # stop polling as soon as the partitions are assigned
            assert time.monotonic() < deadline
            c.poll(timeout_ms=0)
        assert c.position(T[2], timeout_ms=5000) == 6
        assert c.position(T[1], timeout_ms=5000) == 0  # nothing committed: auto.offset.reset (latest, empty)


def test_an_assigned_consumer_with_a_group_id_auto_commits(groups: tuple[FakeCluster, FakeCoordinator]) -> None:
    cluster, coordinator = groups
    fill(cluster, T[1], 3)
    c = member(cluster, **{"enable.auto.commit": True, "auto.commit.interval.ms": 50})
    c.assign([T[1]])
    poll_until([c], lambda: c.position(T[1]) == 3)
    deadline = time.monotonic() + 10
    while coordinator.group("g").offsets.get(T[1]) != 3:  # committed by poll, every auto.commit.interval.ms
        assert time.monotonic() < deadline, "no auto-commit"
        c.poll(timeout_ms=20)
    c.close()
    assert cluster.calls_of("OffsetCommit")[-1].member_epoch == -1  # not a member: epoch -1
