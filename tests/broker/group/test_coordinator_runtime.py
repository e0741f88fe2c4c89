"""The coordinator runtime (broker/group/coordinator.py) over a fake partition: persist before answering,
undo a failed write, load from the log, follow leadership. No threads: the test calls ``_load`` itself."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from broker.group.config import OFFSETS_TOPIC
from broker.group.coordinator import GroupCoordinator
from broker.group.errors import GroupError
from broker.group.model import Groups, replay
from broker.group.records import decode_record
from broker.group.shard import Heartbeat, OffsetCommit
from broker.handlers import list_groups
from broker.metadata_cache import MetadataCache
from broker.purgatory import Purgatory
from broker.replica_manager import ReplicaManager
from common.clock import ManualClock
from log.append import AppendInfo
from log.record.header import iter_batches, patch_base_offset
from log.record.reader import iter_records
from metadata.image import MetadataImage, PartitionRegistration, TopicImage, frozen_map
from proto import broker_pb2 as pb
from replication.errors import NotLeaderOrFollowerError
from replication.views import Role
from tests.broker.group.helpers import CONFIG


@dataclass
class FakeRead:
    records: bytes


@dataclass
class FakeLog:
    batches: list[bytes] = field(default_factory=list)
    log_start_offset: int = 0
    log_end_offset: int = 0

    def read(self, offset: int, max_bytes: int, *, min_one_batch: bool = True) -> FakeRead:
        return FakeRead(b"".join(self.batches))  # every batch: offsets start at 0 in these tests


@dataclass
class FakePartition:
    role: Role = Role.LEADER
    leader_epoch: int = 1
    log: FakeLog = field(default_factory=FakeLog)
    fail_with: Exception | None = None
    key: tuple[str, int] = (OFFSETS_TOPIC, 0)
    key_str: str = f"{OFFSETS_TOPIC}-0"

    @property
    def is_leader(self) -> bool:
        return self.role is Role.LEADER

    def append_as_leader(
        self, batch: bytes, acks: int, *, deadline_ms: float | None = None, hold: bool = True,
        verify: object = None,
    ) -> AppendInfo:  # fmt: skip
        if self.fail_with is not None:
            raise self.fail_with
        data = bytearray(batch)
        patch_base_offset(data, 0, self.log.log_end_offset)
        header = next(iter_batches(bytes(data)))[1]
        self.log.batches.append(bytes(data))
        self.log.log_end_offset = header.next_offset
        return AppendInfo(header.base_offset, header.last_offset, -1, -1, -1, 0, header.records_count, len(data))

    def acks_status(self, required_offset: int, leader_epoch: int) -> tuple[bool, str]:
        return True, ""  # the ISR has it at once


class FakeReplicas:
    def __init__(self, partition: FakePartition) -> None:
        self.p = partition
        self.clock = ManualClock()
        self.produce_purgatory: Purgatory[Any] = Purgatory("produce", self.clock, 100)

    def partition(self, topic: str, number: int) -> FakePartition | None:
        return self.p if (topic, number) == (OFFSETS_TOPIC, 0) else None

    def complete_delayed(self, *keys: object) -> None:
        return None

    append_records = ReplicaManager.append_records  # the real entry point, over this fake's partition


def metadata() -> MetadataCache:
    reg = PartitionRegistration((1,), (1,), 1, 1, 0)
    topics = {
        OFFSETS_TOPIC: TopicImage(OFFSETS_TOPIC, "id0", frozen_map({0: reg})),
        "t": TopicImage("t", "id1", frozen_map({0: reg, 1: reg})),
    }
    return MetadataCache(MetadataImage(topics_by_name=frozen_map(topics)))


def make() -> tuple[GroupCoordinator, FakePartition]:
    partition = FakePartition()
    coordinator = GroupCoordinator(1, CONFIG, ManualClock(), FakeReplicas(partition), metadata())  # type: ignore[arg-type]
    return coordinator, partition


def loaded(coordinator: GroupCoordinator, partition: FakePartition) -> None:
    coordinator.on_partition(OFFSETS_TOPIC, 0, partition)  # type: ignore[arg-type]
    with pytest.raises(GroupError) as exc:
        coordinator.read("g", lambda core: core.groups)
    assert exc.value.code == "COORDINATOR_LOAD_IN_PROGRESS"
    coordinator._load(coordinator._shards[0])


def join(coordinator: GroupCoordinator) -> Any:
    topics = coordinator.topics()
    hb = Heartbeat("g", "", 0, subscribed_topic_names=("t",), owned=frozenset())
    return coordinator.run("g", lambda core: core.heartbeat(hb, topics))


def log_groups(partition: FakePartition) -> Groups:
    groups: Groups = {}
    for batch in partition.log.batches:
        for r in iter_records(batch):
            replay(groups, decode_record(r.key, r.value))
    return groups


def test_writes_go_to_the_log_before_the_answer_and_a_new_leader_loads_them() -> None:
    coordinator, partition = make()
    loaded(coordinator, partition)
    result = join(coordinator)
    assert result.assignment == {("t", 0), ("t", 1)}
    commit = OffsetCommit("g", result.member_id, result.member_epoch, "", {("t", 0): (7, 1, "")})
    topics = coordinator.topics()
    assert coordinator.run("g", lambda core: core.commit_offsets(commit, topics)) == {("t", 0): ""}
    in_log = log_groups(partition)
    assert in_log["g"].offsets[("t", 0)].offset == 7
    assert set(in_log["g"].members) == {result.member_id}
    # leadership moves away: the groups are dropped; back with a new epoch: loaded from the log
    coordinator.on_partition(OFFSETS_TOPIC, 0, None)
    with pytest.raises(GroupError) as exc:
        coordinator.read("g", lambda core: core.groups)
    assert exc.value.code == "NOT_COORDINATOR"
    partition.leader_epoch = 2
    loaded(coordinator, partition)
    assert coordinator.read("g", lambda core: core.fetch_offsets("g", "", -1, None)) == {("t", 0): (7, 1, "")}
    assert coordinator.read("g", lambda core: set(core.groups["g"].members)) == {result.member_id}


def test_a_failed_append_answers_an_error_and_changes_nothing() -> None:
    coordinator, partition = make()
    loaded(coordinator, partition)
    first = join(coordinator)
    before = coordinator.read("g", lambda core: core.groups["g"].clone())
    partition.fail_with = NotLeaderOrFollowerError("moved")
    with pytest.raises(GroupError) as exc:
        join(coordinator)
    assert exc.value.code == "NOT_COORDINATOR"
    after = coordinator.read("g", lambda core: core.groups["g"])
    assert set(after.members) == set(before.members) == {first.member_id}
    assert after.group_epoch == before.group_epoch
    partition.fail_with = None
    partition.role = Role.FOLLOWER  # the metadata has not told the coordinator yet: the append check refuses
    with pytest.raises(GroupError) as exc:
        join(coordinator)
    assert exc.value.code == "NOT_COORDINATOR"


def test_a_group_of_another_partition_or_no_offsets_topic_is_refused() -> None:
    coordinator, partition = make()
    with pytest.raises(GroupError) as exc:
        join(coordinator)
    assert exc.value.code == "NOT_COORDINATOR"
    coordinator._metadata.publish(MetadataImage())
    with pytest.raises(GroupError) as exc:
        join(coordinator)
    assert exc.value.code == "COORDINATOR_NOT_AVAILABLE"


def test_list_groups_answers_load_in_progress_while_a_partition_loads() -> None:
    """As Kafka: a list without the loading partition's groups would look complete; the client retries."""
    coordinator, partition = make()
    ctx: Any = SimpleNamespace(coordinator=coordinator)
    loaded(coordinator, partition)
    join(coordinator)
    assert [g.group_id for g in list_groups.handle(ctx, pb.ListGroupsRequest()).groups] == ["g"]
    coordinator.on_partition(OFFSETS_TOPIC, 0, None)
    partition.leader_epoch = 2
    coordinator.on_partition(OFFSETS_TOPIC, 0, partition)  # type: ignore[arg-type]
    answer = list_groups.handle(ctx, pb.ListGroupsRequest())
    assert (answer.error.code, list(answer.groups)) == ("COORDINATOR_LOAD_IN_PROGRESS", [])
    assert f"{OFFSETS_TOPIC}-0" in answer.error.message
    coordinator._load(coordinator._shards[0])
    answer = list_groups.handle(ctx, pb.ListGroupsRequest())
    assert (answer.error.code, [g.group_id for g in answer.groups]) == ("", ["g"])
