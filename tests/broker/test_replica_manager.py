"""The replica manager following metadata: roles, deletes, reassignment, config changes, strays, restarts;
the metadata loader's image diff; log maintenance (retention, checkpoints)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.controller_channel import ControllerChannel
from broker.handlers import fetch, produce
from broker.log_manager import (
    DELETE_SUFFIX,
    HW_CHECKPOINT,
    MAX_NAME_BYTES,
    PARTITION_METADATA,
    STRAY_SUFFIX,
    aside_dir_name,
    parse_partition_dir,
)
from broker.maintenance import LogMaintenance
from broker.metadata_loader import MetadataLoader, config_changes, image_changes
from common.clock import ManualClock
from log.errors import StorageError
from metadata.image import MetadataDelta, MetadataImage
from metadata.record_codec import encode_record
from metadata.records import (
    Config,
    ConfigResourceType,
    Endpoint,
    MetadataRecord,
    Partition,
    PartitionChange,
    RegisterBroker,
    RemoveTopic,
    Topic,
)
from proto import controller_pb2
from replication.views import Role
from tests.broker.conftest import BrokerHarness, batch
from tests.broker.test_fetch_handler import append, fetch_request, part
from tests.broker.test_produce_handler import answer, produce_request


def test_partition_directories_carry_the_topic_id(harness: BrokerHarness) -> None:
    topic_id = harness.create_topic("orders-v2", partitions=2)
    for p in (0, 1):
        directory = harness.root / f"orders-v2-{p}"
        assert (directory / PARTITION_METADATA).read_text() == f"version: 0\ntopic_id: {topic_id}\n"
        assert parse_partition_dir(directory.name) == ("orders-v2", p)
    assert parse_partition_dir("orders-v2-x") is None
    assert parse_partition_dir("t-0.abc-delete") is None


def test_a_deleted_topic_loses_its_directories(harness: BrokerHarness) -> None:
    harness.create_topic("t", partitions=2)
    append(harness, batch())
    harness.delete_topic("t")
    assert harness.replicas.partition("t", 0) is None
    assert not any(path.name.startswith("t-") for path in harness.root.iterdir())


def test_a_249_character_topic_is_deleted_and_set_aside_within_the_name_limit(tmp_path: Path) -> None:
    """Issue 15: ``<249 chars>-0.<32 hex>-delete`` is 289 bytes; Kafka cuts the topic short, and so do we."""
    longest = "t" * 249
    h = BrokerHarness(tmp_path / "b")
    try:
        topic_id = h.create_topic(longest, partitions=2)
        append(h, batch([b"x"]), longest, 1)
        h.apply(RemoveTopic(topic_id))
        assert h.replicas.partition(longest, 0) is None
        assert [p.name for p in h.root.iterdir() if p.name.startswith("ttt")] == []  # deleted, not left aside
        stray_id = h.create_topic(longest)
        h.close()
        h = BrokerHarness(tmp_path / "b")  # the topic is gone from this new image: its log is a stray
        assert h.replicas.quarantine_strays() == [(longest, 0)]
        (aside,) = [p.name for p in h.root.iterdir() if p.name.startswith("ttt")]
        assert aside.endswith("-stray")
        assert len(aside.encode()) == MAX_NAME_BYTES
        assert aside.startswith("t" * 10)
        assert "-0." in aside
        assert stray_id
    finally:
        h.close()


@pytest.mark.parametrize("suffix", [DELETE_SUFFIX, STRAY_SUFFIX])
def test_aside_names_keep_what_fits(suffix: str) -> None:
    assert aside_dir_name("orders-12", suffix, "ab" * 16) == f"orders-12.{'ab' * 16}{suffix}"
    name = aside_dir_name("x" * 249 + "-99999", suffix, "cd" * 16)
    assert len(name) == MAX_NAME_BYTES
    assert name.endswith(f"-99999.{'cd' * 16}{suffix}")


def test_reassignment_away_deletes_and_follower_refuses_writes(harness: BrokerHarness) -> None:
    harness.register(1)
    harness.create_topic("t", replicas=[0, 1])
    harness.change("t", leader=1)
    assert harness.partition("t").role is Role.FOLLOWER
    harness.change("t", isr=[1], replicas=[1])
    assert harness.replicas.partition("t", 0) is None
    assert not (harness.root / "t-0").exists()


def test_topic_config_changes_reach_the_log(harness: BrokerHarness) -> None:
    harness.create_topic("t")
    append(harness, batch())
    harness.set_config("t", "retention.ms", "1234")
    assert harness.partition("t").config.retention_ms == 1234
    assert harness.partition("t").log_end_offset == 1  # the data survived the reopen
    harness.set_config("t", "retention.ms", None)
    assert harness.partition("t").config.retention_ms == 7 * 24 * 3600 * 1000
    harness.apply(Config(ConfigResourceType.CLUSTER, "", "log.retention.bytes", "99"))
    assert harness.partition("t").config.retention_bytes == 99


def test_restart_keeps_data_and_high_watermark_and_sets_strays_aside(tmp_path: Path) -> None:
    root = tmp_path / "broker"
    first = BrokerHarness(root)
    first.register(1)
    first.create_topic("kept", replicas=[0, 1], isr=[0, 1])
    first.create_topic("gone")
    append(first, batch([b"a", b"b"]), "kept")
    fetch.handle(first.ctx, fetch_request([("kept", 0, 2)], replica_id=1, replica_epoch=first.broker_epoch(1)))  # HW 2
    assert first.partition("kept").high_watermark == 2
    records = part(fetch.handle(first.ctx, fetch_request([("kept", 0, 0)])), "kept").records
    kept_id = first.topic_ids["kept"]
    first.close()
    assert (root / HW_CHECKPOINT).exists()
    assert (root / "kept-0" / "clean-shutdown").exists()

    second = BrokerHarness(root)  # a new image in which only "kept" exists (with the same id)
    try:
        assert second.replicas.partition("kept", 0) is not None  # opened from disk, role NONE
        second.register(1)
        second.apply(Topic("kept", kept_id), Partition(kept_id, 0, (0, 1), (0, 1), 0, leader_epoch=1))
        assert second.partition("kept").role is Role.LEADER
        assert second.partition("kept").high_watermark == 2  # from the checkpoint
        assert part(fetch.handle(second.ctx, fetch_request([("kept", 0, 0)])), "kept").records[16:] == records[16:]
        strays = second.replicas.quarantine_strays()
        assert strays == [("gone", 0)]
        assert [p.name.endswith("-stray") for p in root.iterdir() if p.name.startswith("gone-0")] == [True]
    finally:
        second.close()


def test_another_topic_with_the_same_name_does_not_get_old_data(tmp_path: Path) -> None:
    root = tmp_path / "broker"
    first = BrokerHarness(root)
    first.create_topic("t")
    append(first, batch([b"old"]))
    first.close()
    second = BrokerHarness(root)
    try:
        second.create_topic("t")  # a new topic id
        assert second.partition("t").log_end_offset == 0
        assert any(p.name.endswith("-stray") for p in root.iterdir())
    finally:
        second.close()


def test_meta_properties_guard_the_node_id(tmp_path: Path) -> None:
    root = tmp_path / "broker"
    BrokerHarness(root, broker_id=3).close()
    with pytest.raises(StorageError, match="belongs to broker 3"):
        BrokerHarness(root, broker_id=4)


def test_retention_deletes_segments_and_completes_waiting_fetches(tmp_path: Path) -> None:
    h = BrokerHarness(tmp_path / "b", props={"log.retention.check.interval.ms": "10"})
    try:
        h.create_topic("t", configs={"segment.bytes": "200", "retention.bytes": "1"})
        for _ in range(4):
            append(h, batch([b"x" * 100]))
        assert len(h.partition("t").log.segments) == 4
        clock = ManualClock()
        maintenance = LogMaintenance(h.replicas, h.config, clock)
        clock.advance(10)
        maintenance.run_due()
        assert h.partition("t").log_start_offset == 3  # only the active segment is left
        assert part(fetch.handle(h.ctx, fetch_request([("t", 0, 0)]))).error.code == "OFFSET_OUT_OF_RANGE"
        clock.advance(5000)
        maintenance.run_due()
        assert "t 0 4" in (tmp_path / "b" / HW_CHECKPOINT).read_text()
    finally:
        h.close()


# --------------------------------------------------------------------------- image diffs (snapshots)


def _image(records: list[MetadataRecord]) -> MetadataImage:
    delta = MetadataDelta(MetadataImage())
    for i, record in enumerate(records):
        delta.replay(record, i)
    return delta.apply()


TOPIC_IDS = [str(uuid.UUID(int=i + 1)) for i in range(3)]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 3), st.integers(0, 3)), max_size=12))
def test_image_changes_agree_with_the_delta(changes: list[tuple[int, int, int]]) -> None:
    """After a snapshot the loader diffs two images; that diff must ask of the broker what the delta between
    the same two images asks (deletes exactly; leaders/followers at least the delta's, by registration)."""
    base: list[MetadataRecord] = [
        RegisterBroker(b, str(uuid.UUID(int=100 + b)), b, (Endpoint("P", "h", 1),)) for b in range(3)
    ]
    base += [Topic(f"t{i}", TOPIC_IDS[i]) for i in range(3)]
    base += [Partition(TOPIC_IDS[i], 0, (0, 1, 2), (0, 1, 2), i) for i in range(3)]
    old = _image(base)
    delta = MetadataDelta(old)
    offset = old.offset
    removed: set[int] = set()
    for topic, leader, action in changes:
        if topic in removed:
            continue
        offset += 1
        if action == 3:
            delta.replay(RemoveTopic(TOPIC_IDS[topic]), offset)
            removed.add(topic)
        else:
            replicas = (0, 1, 2) if action == 0 else (1, 2)
            lead = leader if leader in replicas else replicas[0]
            delta.replay(PartitionChange(TOPIC_IDS[topic], 0, isr=replicas, leader=lead, replicas=replicas), offset)
    new = delta.apply()
    for broker in range(3):
        expected = delta.local_changes(broker)
        diff = image_changes(old, new, broker)
        assert diff.deletes == expected.deletes
        assert {tp: r for tp, r in expected.leaders.items() if old.partition(tp.topic_id, 0) != r} == dict(diff.leaders)
        assert {tp: r for tp, r in expected.followers.items() if old.partition(tp.topic_id, 0) != r} == dict(
            diff.followers
        )
    assert config_changes(old, new) == set()


def test_idle_logs_are_flushed_by_flush_ms(tmp_path: Path) -> None:
    h = BrokerHarness(tmp_path / "b")
    try:
        h.create_topic("t", configs={"flush.ms": "1000"})
        h.create_topic("lazy")  # flush.ms unset: never flushed by time
        clock = ManualClock()
        maintenance = LogMaintenance(h.replicas, h.config, clock)
        maintenance.run_due()  # starts the flush.ms clock of each log
        append(h, batch(), "t")
        append(h, batch(), "lazy")
        clock.advance(999)
        maintenance.run_due()
        assert h.partition("t").log.recovery_point == 0
        clock.advance(1)
        maintenance.run_due()
        assert h.partition("t").log.recovery_point == 1
        assert h.partition("lazy").log.recovery_point == 0
    finally:
        h.close()


def test_a_file_system_refusal_in_the_metadata_thread_takes_the_log_dir_offline(harness: BrokerHarness) -> None:
    """Kafka's LogDirFailureChannel: an OSError while following the metadata (here a file where a partition's
    directory must go) takes the log dir offline: every partition answers KAFKA_STORAGE_ERROR, later metadata
    is still published (without touching the disk), the broker asks to be fenced; nothing stops the thread."""
    harness.create_topic("ok")
    append(harness, batch([b"a"]), "ok")
    (harness.root / "bad-0").write_text("a file squatting the directory name")
    loader = MetadataLoader(0, ControllerChannel(["127.0.0.1:1"]), harness.metadata, harness.replicas)
    failures: list[int] = []
    loader.on_log_dir_failure = lambda: failures.append(1)
    bad_id = str(uuid.uuid4())
    assert loader.apply(entries(harness, Topic("bad", bad_id), Partition(bad_id, 0, (0,), (0,), 0)))
    assert failures == [1]
    assert harness.image.topic("bad") is not None  # published all the same
    assert "FileExistsError" in (harness.replicas.offline_reason or "")
    produced = answer(produce.handle(harness.ctx, produce_request("ok", batch([b"b"]))))
    assert produced.error.code == "KAFKA_STORAGE_ERROR"
    assert "offline" in produced.error.message
    assert part(fetch.handle(harness.ctx, fetch_request([("ok", 0, 0)])), "ok").error.code == "KAFKA_STORAGE_ERROR"
    assert loader.apply(entries(harness, RemoveTopic(harness.topic_ids["ok"])))  # goes on, touching no file
    assert (harness.root / "ok-0").is_dir()
    assert failures == [1]


def entries(harness: BrokerHarness, *records: MetadataRecord) -> controller_pb2.FetchMetadataResponse:
    """A FetchMetadata answer carrying ``records`` right after the harness's image."""
    first = harness.image.offset + 1
    return controller_pb2.FetchMetadataResponse(entries=[
        controller_pb2.MetadataLogEntry(offset=first + i, term=1, payload=encode_record(r))
        for i, r in enumerate(records)
    ], end_offset=first + len(records))  # fmt: skip


class ScriptedController:
    """The controller's side of FetchMetadata for :class:`MetadataLoader`: ``answers`` in order, each asked
    ``from_offset`` kept."""

    def __init__(self, answers: list[controller_pb2.FetchMetadataResponse]) -> None:
        self.answers = answers
        self.asked: list[int] = []

    def call(self, method: str, request: controller_pb2.FetchMetadataRequest, timeout_s: float,
             active: bool = True) -> controller_pb2.FetchMetadataResponse:  # fmt: skip
        assert method == "FetchMetadata"
        self.asked.append(request.from_offset)
        return self.answers.pop(0)


def test_a_broker_catching_up_takes_up_only_the_partitions_state_where_the_log_ends(
    harness: BrokerHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A starting broker replays the metadata log from its start, in answers of up to 2,000 records. Until it
    reaches the end it follows none of them: a leadership the log gave it long ago (here leader in epoch 5 of a
    partition led by broker 1 in epoch 6 by the log's end) is never taken up, not even for a moment (Kafka's
    MetadataLoader publishes nothing while it still needs to catch up). The chaos harness saw a restarted broker
    become leader in epochs 25 and 30 of a partition in epoch 33, then truncate thousands of committed records
    as follower. Once caught up, each answer is followed as it comes."""
    followed: list[tuple[int, set[str], set[str]]] = []  # (image offset, leaders, followers) per apply_changes
    real_apply = harness.replicas.apply_changes

    def spy(image: MetadataImage, changes: Any, configs: Any) -> Any:
        followed.append((image.offset, {tp.topic_id for tp in changes.leaders},
                         {tp.topic_id for tp in changes.followers}))  # fmt: skip
        return real_apply(image, changes, configs)

    monkeypatch.setattr(harness.replicas, "apply_changes", spy)
    topic_id = str(uuid.uuid4())
    records: list[MetadataRecord] = [Topic("t", topic_id), Partition(topic_id, 0, (0, 1), (0, 1), 0, leader_epoch=5),
                                     PartitionChange(topic_id, 0, leader=1)]  # fmt: skip
    first = harness.image.offset + 1
    log = [controller_pb2.MetadataLogEntry(offset=first + i, term=1, payload=encode_record(r))
           for i, r in enumerate(records)]  # fmt: skip
    end = first + len(log)
    controller = ScriptedController([
        controller_pb2.FetchMetadataResponse(entries=log[:2], end_offset=end),
        controller_pb2.FetchMetadataResponse(entries=log[2:], end_offset=end),
    ])  # fmt: skip
    loader = MetadataLoader(0, controller, harness.metadata, harness.replicas)  # type: ignore[arg-type]

    assert loader.poll_once()  # the first part: replayed, not followed, not published
    assert followed == []
    assert harness.image.offset == first - 1
    assert not loader.caught_up.is_set()
    assert loader.poll_once()  # the end: followed once, from where it started
    assert controller.asked == [first, first + 2]
    assert loader.caught_up.is_set()
    assert followed == [(end - 1, set(), {topic_id})]
    partition = harness.partition("t")
    assert partition.role is Role.FOLLOWER
    assert partition.latest_epoch == -1  # never a leader here: no epoch 5 in its leader-epoch cache

    more: list[MetadataRecord] = [Config(ConfigResourceType.CLUSTER, "", "log.retention.bytes", "99"),
                                  PartitionChange(topic_id, 0, leader=0)]  # fmt: skip
    controller.answers.append(controller_pb2.FetchMetadataResponse(entries=[
        controller_pb2.MetadataLogEntry(offset=end + i, term=1, payload=encode_record(r)) for i, r in enumerate(more)
    ], end_offset=end + len(more)))  # fmt: skip
    assert loader.poll_once()  # caught up: followed at once
    assert followed[-1] == (end + 1, {topic_id}, set())
    assert harness.partition("t").role is Role.LEADER
