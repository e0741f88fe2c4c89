"""Admin group calls against the fake cluster and its fake coordinator: list, describe with lag, delete, reset."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Iterator

import pytest

from odradek import Admin, TopicPartition
from odradek.errors import GroupIdNotFoundError, InvalidRequestError, KafkaTimeoutError, NonEmptyGroupError
from odradek.types import PartitionLag
from tests.clients.fake_broker import FakeCluster
from tests.clients.fake_coordinator import FakeCoordinator, FakeMember
from tests.clients.test_consumer import fill

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)


@pytest.fixture
def setup(make_cluster: Callable[..., FakeCluster]) -> Iterator[tuple[FakeCluster, FakeCoordinator, Admin]]:
    cluster = make_cluster((1, 2))
    cluster.groups = FakeCoordinator(cluster.topics, node=2)
    cluster.create_topic("t", 2)
    fill(cluster, T0, 10, start_ms=1_000)  # record i has timestamp 1_000 + i
    fill(cluster, T1, 4, start_ms=1_000)
    admin = Admin({"bootstrap.servers": cluster.bootstrap, "retry.backoff.ms": 10, "default.api.timeout.ms": 5000})
    yield cluster, cluster.groups, admin
    admin.close()


def test_list_and_describe_with_lag(setup: tuple[FakeCluster, FakeCoordinator, Admin]) -> None:
    cluster, coordinator, admin = setup
    group = coordinator.group("billing")
    group.offsets = {T0: 7, T1: 4}
    group.members["m-1"] = FakeMember("m-1", "box", 3, topics=("t",), owned=frozenset({T0}))
    coordinator.group("idle")
    listed = admin.list_groups()
    assert [(g.group_id, g.state, g.coordinator_id) for g in listed] == [("billing", "Stable", 2), ("idle", "Empty", 2)]
    described = admin.describe_group("billing")
    assert described.state == "Stable"
    assert described.coordinator_id == 2
    assert [(m.member_id, m.instance_id, m.assignment) for m in described.members] == [("m-1", "box", [T0])]
    assert described.offsets == [PartitionLag(T0, 7, 10, 3, "m-1"), PartitionLag(T1, 4, 4, 0, None)]
    assert described.total_lag == 3
    with pytest.raises(GroupIdNotFoundError):
        admin.describe_group("nope")


def test_delete_groups(setup: tuple[FakeCluster, FakeCoordinator, Admin]) -> None:
    _, coordinator, admin = setup
    coordinator.group("empty")
    coordinator.group("busy").members["m"] = FakeMember("m", "", 1)
    admin.delete_groups(["empty"])
    assert "empty" not in coordinator.groups
    with pytest.raises(NonEmptyGroupError, match="still has members"):
        admin.delete_groups(["busy"])
    with pytest.raises(GroupIdNotFoundError):
        admin.delete_groups(["empty"])
    with pytest.raises(TypeError, match="list of group ids"):
        admin.delete_groups("busy")


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("earliest", {T0: 0, T1: 0}),
        ("latest", {T0: 10, T1: 4}),
        (6, {T0: 6, T1: 4}),  # kept within the log's range
        (dt.datetime.fromtimestamp(1.002, tz=dt.UTC), {T0: 2, T1: 2}),
        (dt.datetime.fromtimestamp(1.008, tz=dt.UTC), {T0: 8, T1: 4}),  # nothing after it in t-1: the end
    ],
)
def test_reset_offsets_plans_and_executes(
    setup: tuple[FakeCluster, FakeCoordinator, Admin], spec: object, expected: dict[TopicPartition, int]
) -> None:
    _, coordinator, admin = setup
    coordinator.group("g").offsets = {T0: 5}
    plan = admin.reset_group_offsets("g", [T0, T1], spec, execute=False)  # type: ignore[arg-type]
    assert plan == expected
    assert coordinator.groups["g"].offsets == {T0: 5}  # a dry run changes nothing
    admin.reset_group_offsets("g", [T0, T1], spec)  # type: ignore[arg-type]
    assert coordinator.groups["g"].offsets == expected


def test_reset_is_refused_while_the_group_has_members(setup: tuple[FakeCluster, FakeCoordinator, Admin]) -> None:
    _, coordinator, admin = setup
    coordinator.group("g").members["m"] = FakeMember("m", "", 1)
    with pytest.raises(NonEmptyGroupError, match="inactive, but it is Stable"):
        admin.reset_group_offsets("g", [T0], "earliest")
    with pytest.raises(NonEmptyGroupError, match="no active members"):
        admin.alter_group_offsets("g", {T0: 1})
    coordinator.group("g").members.clear()
    with pytest.raises(ValueError, match="time zone"):
        admin.reset_group_offsets("g", [T0], dt.datetime(2020, 1, 1), execute=False)


COORDINATOR_ERRORS = ("COORDINATOR_LOAD_IN_PROGRESS", "COORDINATOR_NOT_AVAILABLE", "NOT_COORDINATOR")


def test_coordinator_errors_are_retried(setup: tuple[FakeCluster, FakeCoordinator, Admin]) -> None:
    """COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE and NOT_COORDINATOR are retriable (as in Kafka):
    every group call answers once the coordinator does."""
    _, coordinator, admin = setup
    coordinator.group("billing").offsets = {T0: 7}
    coordinator.group("old")
    coordinator.inject("FindCoordinator", "COORDINATOR_NOT_AVAILABLE")
    coordinator.inject("ListGroups", "COORDINATOR_LOAD_IN_PROGRESS", "COORDINATOR_NOT_AVAILABLE")
    assert [g.group_id for g in admin.list_groups()] == ["billing", "old"]
    for rpc in ("ConsumerGroupDescribe", "OffsetFetch", "OffsetCommit", "DeleteGroups"):
        coordinator.inject(rpc, *COORDINATOR_ERRORS)
    described = admin.describe_group("billing")
    assert (described.state, described.coordinator_id) == ("Empty", 2)
    assert admin.list_group_offsets("billing") == {T0: 7}
    admin.alter_group_offsets("billing", {T0: 3})
    assert coordinator.groups["billing"].offsets == {T0: 3}
    admin.delete_groups(["old"])
    assert "old" not in coordinator.groups
    assert not any(coordinator.errors.values()), "every injected error was answered (and retried)"


def test_a_coordinator_that_stays_unavailable_times_out_and_other_errors_fail_at_once(
    make_cluster: Callable[..., FakeCluster],
) -> None:
    cluster = make_cluster((1, 2))
    cluster.groups = coordinator = FakeCoordinator(cluster.topics, node=2)
    coordinator.group("g")
    config = {"bootstrap.servers": cluster.bootstrap, "retry.backoff.ms": 10, "default.api.timeout.ms": 300}
    with Admin(config) as admin:
        coordinator.inject("ListGroups", *["COORDINATOR_LOAD_IN_PROGRESS"] * 1000)
        started = time.monotonic()
        with pytest.raises(KafkaTimeoutError, match="COORDINATOR_LOAD_IN_PROGRESS"):
            admin.list_groups()
        assert time.monotonic() - started < 5, "bounded by default.api.timeout.ms"
        coordinator.errors.clear()
        coordinator.inject("ListGroups", "INVALID_REQUEST", "COORDINATOR_LOAD_IN_PROGRESS")
        with pytest.raises(InvalidRequestError):
            admin.list_groups()
        assert list(coordinator.errors["ListGroups"]) == ["COORDINATOR_LOAD_IN_PROGRESS"], "not retried"
