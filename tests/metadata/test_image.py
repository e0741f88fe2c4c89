"""MetadataImage and MetadataDelta (metadata/image/); snapshots are in test_snapshot.py.

The property tests replay record sequences drawn by ``record_sequences()`` (tests/metadata/strategies.py):
runs a correct controller could write, each with an independent model of the image it must produce.
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from metadata.errors import MetadataDecodeError, MetadataError
from metadata.image import (
    ConfigResource,
    MetadataDelta,
    MetadataImage,
    PartitionDiff,
    TopicIdPartition,
    image_from_records,
)
from metadata.records import (
    NO_LEADER,
    BrokerControlledShutdown,
    Config,
    ConfigResourceType,
    Endpoint,
    FeatureLevel,
    FenceBroker,
    LeaderChange,
    MetadataRecord,
    NoOp,
    Partition,
    PartitionChange,
    ProducerIds,
    RegisterBroker,
    RemoveTopic,
    Topic,
    UnfenceBroker,
    UnregisterBroker,
)
from metadata.snapshot import decode_snapshot, encode_snapshot
from tests.metadata.strategies import (
    MAX_BROKER_ID,
    SETTINGS,
    Model,
    RecordsAndModel,
    image_as_plain,
    inc,
    record_sequences,
    replay_all,
    sample_image,
    tid,
)

FRESH_TOPIC_ID = str(uuid.UUID(int=(999 << 64) | 1))  # record_sequences() never makes this id
UNUSED_NAME = "never-used"


def check_invariants(image: MetadataImage) -> None:
    """What every image must satisfy, whatever records built it."""
    assert len(image.topics_by_id) == len(image.topics_by_name)
    for topic_id, topic in image.topics_by_id.items():
        assert topic.topic_id == topic_id
        assert image.topics_by_name[topic.name] is topic
        assert sorted(topic.partitions) == list(range(len(topic.partitions)))  # numbered 0..n-1
        for reg in topic.partitions.values():
            assert set(reg.isr) <= set(reg.replicas)
            assert reg.leader == NO_LEADER or reg.leader in reg.isr
    for resource, values in image.configs.items():
        assert values, "a resource without configs is dropped"
        if resource.resource_type is ConfigResourceType.TOPIC:
            assert resource.resource_name in image.topics_by_name


def delta_reports(delta: MetadataDelta) -> tuple[Any, ...]:
    """Everything a delta says about what it changed, as comparable plain data."""
    locals_ = [delta.local_changes(b) for b in range(MAX_BROKER_ID + 1)]
    return (
        {t: (c.name, c.created, dict(c.partitions)) for t, c in delta.changed_topics().items()},
        dict(delta.deleted_topics()),
        dict(delta.changed_brokers()),
        {r: dict(v) for r, v in delta.changed_configs().items()},
        [(lc.deletes, dict(lc.leaders), dict(lc.followers)) for lc in locals_],
    )


# --- replay against the model ------------------------------------------------------------------------------


@SETTINGS
@given(record_sequences())
def test_replay_builds_the_image_the_model_expects(sequence: RecordsAndModel) -> None:
    """Rule: applying records in order yields the image (DESIGN "The control plane"): brokers, topics,
    partitions with Kafka's epoch rules, configs (dropped with their topic), features, producer ids."""
    records, model = sequence
    image = replay_all(records)
    assert image_as_plain(image) == model.plain()
    assert image.offset == len(records) - 1
    check_invariants(image)


@SETTINGS
@given(record_sequences(), st.lists(st.integers(0, 200), max_size=5))
def test_replay_is_associative(sequence: RecordsAndModel, cuts: list[int]) -> None:
    """Rule (Kafka's image/delta): replaying a sequence in one delta gives the same image as replaying it
    in several deltas, each applied to the image the previous one returned."""
    records, _ = sequence
    bounds = sorted({min(c, len(records)) for c in cuts} | {0, len(records)})
    image = MetadataImage()
    for start, end in zip(bounds, bounds[1:], strict=False):
        image = replay_all(records[start:end], image)
    assert image == replay_all(records)


@SETTINGS
@given(record_sequences())
def test_epochs_follow_kafkas_rules(sequence: RecordsAndModel) -> None:
    """Rule (Kafka's PartitionRegistration.merge): every PartitionChange bumps partition_epoch by one and
    leader_epoch by one exactly when the leader changes; no other record touches an existing partition."""
    records, _ = sequence
    image = MetadataImage()
    for offset, record in enumerate(records):
        new = replay_all([record], image)
        if isinstance(record, PartitionChange):
            old_p = image.partition(record.topic_id, record.partition)
            new_p = new.partition(record.topic_id, record.partition)
            assert old_p is not None
            assert new_p is not None
            assert new_p.partition_epoch == old_p.partition_epoch + 1
            assert new_p.leader_epoch == old_p.leader_epoch + (1 if new_p.leader != old_p.leader else 0)
        else:
            for topic_id, topic in image.topics_by_id.items():
                survivor = new.topic_by_id(topic_id)
                if survivor is not None:
                    assert all(survivor.partitions[p] == reg for p, reg in topic.partitions.items())
        assert new.offset == offset
        image = new


# --- immutability and copy-on-write ------------------------------------------------------------------------


@SETTINGS
@given(record_sequences(), st.lists(st.integers(1, 8), max_size=40))
def test_prior_images_never_change(sequence: RecordsAndModel, sizes: list[int]) -> None:
    """Rule (STYLE §4): apply() returns a new immutable image; readers of earlier images never see a change,
    whether later records go to a new delta over it or to the same delta that made it."""
    records, _ = sequence
    kept: list[tuple[MetadataImage, bytes, dict[str, Any]]] = []
    image, start = MetadataImage(), 0
    same_delta = MetadataDelta(image)
    for size in [*sizes, len(records)]:
        chunk = records[start : start + size]
        image = replay_all(chunk, image)
        for offset, record in enumerate(chunk, start=start):
            same_delta.replay(record, offset)
        applied = same_delta.apply()
        assert applied == image
        kept += [(im, encode_snapshot(im), image_as_plain(im)) for im in (image, applied)]
        start += size
    for old, data, plain in kept:
        assert encode_snapshot(old) == data
        assert image_as_plain(old) == plain


def test_replaying_after_apply_leaves_the_applied_image_alone() -> None:
    """Rule (STYLE §4): an image apply() returned never changes, even when its delta replays on, touching
    the same topic, partition, broker, config resource and feature again."""
    delta = MetadataDelta(sample_image())
    first_round: list[MetadataRecord] = [
        PartitionChange(tid(1), 0, isr=(1,)),
        FenceBroker(1, 10),
        Config(ConfigResourceType.TOPIC, "orders", "cleanup.policy", "compact"),
        FeatureLevel("f", 1),
        Partition(tid(2), 1, (1,), (1,), 1),
    ]
    second_round: list[MetadataRecord] = [
        PartitionChange(tid(1), 0, isr=(1, 2)),
        UnfenceBroker(1, 10),
        Config(ConfigResourceType.TOPIC, "orders", "cleanup.policy", "delete"),
        FeatureLevel("f", 2),
        PartitionChange(tid(2), 1, leader=NO_LEADER),
        Partition(tid(2), 2, (2,), (2,), 2),
    ]
    for offset, record in enumerate(first_round, start=20):
        delta.replay(record, offset)
    applied = delta.apply()
    applied_bytes, applied_plain = encode_snapshot(applied), image_as_plain(applied)
    for offset, record in enumerate(second_round, start=40):
        delta.replay(record, offset)
    later = delta.apply()
    assert encode_snapshot(applied) == applied_bytes
    assert image_as_plain(applied) == applied_plain
    assert later.config(ConfigResourceType.TOPIC, "orders")["cleanup.policy"] == "delete"
    assert applied.config(ConfigResourceType.TOPIC, "orders")["cleanup.policy"] == "compact"
    assert (applied.features["f"], later.features["f"]) == (1, 2)
    assert len(applied.topics_by_id[tid(2)].partitions) == 2


def test_images_refuse_mutation() -> None:
    """Rule: every part of an image is read-only (frozen dataclasses, tuples, mapping proxies)."""
    image = sample_image()
    topic = image.topic("orders")
    assert topic is not None
    with pytest.raises(TypeError):
        image.brokers[9] = image.brokers[1]  # type: ignore[index]
    with pytest.raises(TypeError):
        topic.partitions[0] = topic.partitions[1]  # type: ignore[index]
    with pytest.raises(TypeError):
        image.configs[ConfigResource(ConfigResourceType.TOPIC, "orders")]["x"] = "1"  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        image.offset = 5  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        topic.partitions[0].leader = 2  # type: ignore[misc]
    assert isinstance(topic.partitions[0].replicas, tuple)
    assert isinstance(image.brokers[1].endpoints, tuple)


def test_a_partition_change_copies_only_what_it_touches() -> None:
    """Rule (copy-on-write): with 10,000 partitions, one PartitionChange shares every untouched topic,
    partition and broker object with the prior image."""
    records: list[MetadataRecord] = [RegisterBroker(b, inc(b), b, fenced=False) for b in range(3)]
    for t in range(100):
        records.append(Topic(f"t{t}", tid(t)))
        records += [Partition(tid(t), p, (0, 1, 2), (0, 1, 2), p % 3) for p in range(100)]
    image = image_from_records(records, 0)
    delta = MetadataDelta(image)
    delta.replay(PartitionChange(tid(7), 42, isr=(0, 1), leader=0), 1)
    changed = delta.changed_topics()
    assert list(changed) == [tid(7)]
    assert list(changed[tid(7)].partitions) == [42]
    new = delta.apply()
    assert new.brokers is image.brokers
    assert new.configs is image.configs
    for t in range(100):
        if t != 7:
            assert new.topics_by_id[tid(t)] is image.topics_by_id[tid(t)]
    old_topic, new_topic = image.topics_by_id[tid(7)], new.topics_by_id[tid(7)]
    assert all(new_topic.partitions[p] is old_topic.partitions[p] for p in range(100) if p != 42)
    assert new_topic.partitions[42].isr == (0, 1)
    assert old_topic.partitions[42].isr == (0, 1, 2)
    assert sum(len(t.partitions) for t in new.topics_by_id.values()) == 10_000


def test_a_delta_without_changes_shares_everything() -> None:
    image = sample_image()
    delta = MetadataDelta(image)
    delta.replay(NoOp(), image.offset + 5)
    new = delta.apply()
    assert new.offset == image.offset + 5
    assert dataclasses.replace(new, offset=image.offset) == image
    for name in ("brokers", "topics_by_id", "topics_by_name", "configs", "features", "producer_ids"):
        assert getattr(new, name) is getattr(image, name)


# --- invalid records ---------------------------------------------------------------------------------------


@st.composite
def invalid_records(
    draw: st.DrawFn, model: Model, last_offset: int, kind: str
) -> tuple[MetadataRecord, int] | None:
    """A record of ``kind`` (the rule it breaks) that does not fit the state ``model`` describes, and the
    offset to replay it at; None when the state offers no such record (no broker to fence, ...)."""
    options: dict[str, Any] = {
        "fence of an unknown broker": lambda: FenceBroker(MAX_BROKER_ID + 1, 0),
        "unregister of an unknown broker": lambda: UnregisterBroker(MAX_BROKER_ID + 2, 3),
        "remove of an unknown topic": lambda: RemoveTopic(FRESH_TOPIC_ID),
        "partition of an unknown topic": lambda: Partition(FRESH_TOPIC_ID, 0, (0,), (0,), 0),
        "change of an unknown topic": lambda: PartitionChange(FRESH_TOPIC_ID, 0, leader=NO_LEADER),
        "config of an unknown topic": lambda: Config(ConfigResourceType.TOPIC, UNUSED_NAME, "k", "v"),
        "offset that does not grow": lambda: NoOp(),
    }
    brokers = sorted(model.brokers)
    topics = sorted(model.topics)
    parts = [(t, p) for t in topics for p in range(len(model.topics[t].partitions))]
    if brokers:
        b = draw(st.sampled_from(brokers))
        epoch = model.brokers[b].broker_epoch
        cls = draw(st.sampled_from([FenceBroker, UnfenceBroker, UnregisterBroker, BrokerControlledShutdown]))
        wrong = draw(st.sampled_from([e for e in (epoch - 1, epoch + 1, epoch + 1000) if e >= 0]))
        options["stale broker epoch"] = lambda: cls(b, wrong)
        old = draw(st.integers(0, epoch))
        options["re-registration without a higher epoch"] = lambda: RegisterBroker(b, inc(99), old)
        in_shutdown = [x for x in brokers if model.brokers[x].in_controlled_shutdown]
        if in_shutdown:
            s = draw(st.sampled_from(in_shutdown))
            s_epoch = model.brokers[s].broker_epoch
            options["unfence in controlled shutdown"] = lambda: UnfenceBroker(s, s_epoch)
    if topics:
        topic = draw(st.sampled_from(topics))
        count = len(model.topics[topic].partitions)
        options["duplicate topic name"] = lambda: Topic(model.topics[topic].name, FRESH_TOPIC_ID)
        options["duplicate topic id"] = lambda: Topic(UNUSED_NAME, topic)
        skip = draw(st.integers(1, 3))
        options["partition out of order"] = lambda: Partition(topic, count + skip, (0,), (0,), 0)
        options["change of an unknown partition"] = lambda: PartitionChange(topic, count + skip - 1, isr=())
    if parts:
        t, p = draw(st.sampled_from(parts))
        mp = model.topics[t].partitions[p]
        options["partition created twice"] = lambda: Partition(t, p, (0,), (0,), 0)
        outsider = draw(st.sampled_from(sorted({*mp.replicas} - {*mp.isr}) + [1000]))
        options["leader outside the isr"] = lambda: PartitionChange(t, p, leader=outsider)
        options["isr outside the replicas"] = lambda: PartitionChange(t, p, isr=(*mp.isr, 1000))
        if mp.isr:
            options["replicas without the isr"] = lambda: PartitionChange(t, p, replicas=(1000,))
        if mp.leader != NO_LEADER:
            options["isr without the leader"] = lambda: PartitionChange(
                t, p, isr=tuple(x for x in mp.isr if x != mp.leader)
            )
    if model.producer_ids[0] > 0:
        back = draw(st.integers(1, model.producer_ids[0]))
        options["producer ids going back"] = lambda: ProducerIds(0, 0, back)
    if model.term >= 1:
        term = draw(st.integers(0, model.term - 1))
        options["term going back"] = lambda: LeaderChange(term, model.controller_id)
    if model.term >= 0:
        options["two leaders in one term"] = lambda: LeaderChange(model.term, model.controller_id + 1)
    assert set(options) <= set(INVALID_KINDS)
    if kind not in options:
        return None
    offset = draw(st.integers(-3, last_offset)) if kind == "offset that does not grow" else last_offset + 1
    return options[kind](), offset


INVALID_KINDS = (
    "fence of an unknown broker",
    "unregister of an unknown broker",
    "remove of an unknown topic",
    "partition of an unknown topic",
    "change of an unknown topic",
    "config of an unknown topic",
    "offset that does not grow",
    "stale broker epoch",
    "re-registration without a higher epoch",
    "unfence in controlled shutdown",
    "duplicate topic name",
    "duplicate topic id",
    "partition out of order",
    "change of an unknown partition",
    "partition created twice",
    "leader outside the isr",
    "isr outside the replicas",
    "replicas without the isr",
    "isr without the leader",
    "producer ids going back",
    "term going back",
    "two leaders in one term",
)


@pytest.mark.parametrize("kind", INVALID_KINDS)
@settings(SETTINGS, max_examples=8, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(sequence=record_sequences(), data=st.data())
def test_invalid_records_raise_and_change_nothing(kind: str, sequence: RecordsAndModel, data: Any) -> None:
    """Rule: a record that would make the image inconsistent raises MetadataError and leaves both the
    delta and its base image exactly as they were; the delta stays usable."""
    records, model = sequence
    cut = len(records) - data.draw(st.integers(0, len(records)), label="records after the cut")
    base = replay_all(records[:cut])
    base_bytes = encode_snapshot(base)
    delta = MetadataDelta(base)
    for offset, record in enumerate(records[cut:], start=cut):
        delta.replay(record, offset)
    before, before_offset, reports = delta.apply(), delta.offset, delta_reports(delta)
    drawn = data.draw(invalid_records(model, delta.offset, kind), label="invalid")
    assume(drawn is not None)
    assert drawn is not None
    bad, offset = drawn
    with pytest.raises(MetadataError) as info:
        delta.replay(bad, offset)
    assert not isinstance(info.value, MetadataDecodeError), kind
    assert delta.offset == before_offset
    assert delta.apply() == before
    assert delta_reports(delta) == reports
    assert encode_snapshot(base) == base_bytes
    delta.replay(NoOp(), before_offset + 1)
    assert delta.apply() == dataclasses.replace(before, offset=before_offset + 1)


@pytest.mark.parametrize(
    ("record", "message"),
    [
        (PartitionChange(tid(1), 5, leader=1), "topic orders has no partition 5"),
        (PartitionChange(tid(1), 1, leader=1), r"leader 1 is not in the isr \[2\]"),
        (PartitionChange(tid(1), 0, isr=(1, 3)), r"isr members \[3\] are not replicas \[1, 2\]"),
        (PartitionChange(tid(9), 0, leader=1), "no topic has id"),
        (FenceBroker(2, 10), "broker 2 is registered with epoch 11"),
        (FenceBroker(3, 10), "broker 3 is not registered"),
        (RegisterBroker(1, inc(5), 10), "needs a higher epoch"),
        (Topic("orders", tid(5)), "a topic named 'orders' exists"),
        (Topic("new", tid(2)), "belongs to topic 'logs'"),
        (Partition(tid(2), 2, (1,), (1,), 1), "partitions of logs are created in order; next is 1"),
        (Partition(tid(2), 0, (1,), (1,), 1), "partition logs-0 exists"),
        (Config(ConfigResourceType.TOPIC, "nope", "k", "v"), "no topic is named 'nope'"),
        (ProducerIds(1, 10, 1000), "producer ids go back"),
        (LeaderChange(2, 1), "term goes back from 3"),
        (LeaderChange(3, 2), "term 3 already has leader 1"),
    ],
)
def test_invalid_records_say_what_is_wrong(record: MetadataRecord, message: str) -> None:
    image = sample_image()
    delta = MetadataDelta(image)
    with pytest.raises(MetadataError, match=message):
        delta.replay(record, image.offset + 1)
    assert delta.apply() == image
    assert delta_reports(delta) == delta_reports(MetadataDelta(image))


def test_offsets_must_grow() -> None:
    delta = MetadataDelta(sample_image())
    with pytest.raises(MetadataError, match="does not follow offset 11"):
        delta.replay(NoOp(), 11)
    delta.replay(NoOp(), 20)  # gaps are fine: the log may hold records the image does not need
    assert delta.apply().offset == 20


def test_not_a_record_is_refused() -> None:
    with pytest.raises(MetadataError, match="not a metadata record"):
        MetadataDelta(MetadataImage()).replay("NoOp", 0)  # type: ignore[arg-type]


# --- Kafka's broker and topic rules ------------------------------------------------------------------------


def test_broker_lifecycle() -> None:
    """Rule (Kafka's ClusterControlManager): a broker registers fenced, is unfenced, enters controlled
    shutdown (then cannot be unfenced), and a new registration with a higher epoch starts afresh."""
    image = sample_image()
    assert image.brokers[2].fenced
    assert not image.brokers[1].fenced
    image = replay_all([BrokerControlledShutdown(1, 10)], image)
    assert image.brokers[1].in_controlled_shutdown
    assert not image.brokers[1].fenced
    with pytest.raises(MetadataError, match="in controlled shutdown"):
        replay_all([UnfenceBroker(1, 10)], image)
    image = replay_all([FenceBroker(1, 10), RegisterBroker(1, inc(9), 12)], image)
    reg = image.brokers[1]
    assert (reg.broker_epoch, reg.incarnation_id) == (12, inc(9))
    assert (reg.fenced, reg.in_controlled_shutdown) == (True, False)
    image = replay_all([UnregisterBroker(1, 12)], image)
    assert 1 not in image.brokers
    assert image.unfenced_brokers() == ()


def test_removing_a_topic_removes_its_configs() -> None:
    """Rule (Kafka's RemoveTopicRecord replay): a topic's configs go with it; a new topic of the same
    name starts without them."""
    image = replay_all([RemoveTopic(tid(1)), Topic("orders", tid(5))], sample_image())
    assert image.config(ConfigResourceType.TOPIC, "orders") == {}
    assert ConfigResource(ConfigResourceType.TOPIC, "orders") not in image.configs
    assert image.config(ConfigResourceType.CLUSTER, "") == {"min.insync.replicas": "2"}
    orders = image.topic("orders")
    assert orders is not None
    assert orders.topic_id == tid(5)
    assert image.topic_by_id(tid(1)) is None


def test_config_deletes() -> None:
    image = sample_image()
    image = replay_all([Config(ConfigResourceType.TOPIC, "orders", "retention.ms", None)], image)
    assert ConfigResource(ConfigResourceType.TOPIC, "orders") not in image.configs  # no keys: no entry
    again = replay_all([Config(ConfigResourceType.TOPIC, "orders", "retention.ms", None)], image)
    assert dataclasses.replace(again, offset=image.offset) == image  # deleting an absent key: no change


def test_a_leader_change_of_the_same_leader_is_allowed() -> None:
    image = replay_all([LeaderChange(3, 1), LeaderChange(5, 0)], sample_image())
    assert (image.term, image.controller_id) == (5, 0)


# --- what a delta says changed -----------------------------------------------------------------------------


@SETTINGS
@given(record_sequences(), st.data())
def test_delta_reports_exactly_what_changed(sequence: RecordsAndModel, data: Any) -> None:
    """Rule (DESIGN "The control plane"): a delta says what a batch changed, so brokers can react:
    changed topics and partitions (before and after), deleted topics, changed brokers and configs."""
    records, _ = sequence
    cut = len(records) - data.draw(st.integers(0, len(records)), label="records after the cut")
    base = replay_all(records[:cut])
    delta = MetadataDelta(base)
    for offset, record in enumerate(records[cut:], start=cut):
        delta.replay(record, offset)
    new = delta.apply()
    changed, deleted = delta.changed_topics(), delta.deleted_topics()
    assert set(deleted) == set(base.topics_by_id) - set(new.topics_by_id)
    assert all(deleted[t] is base.topics_by_id[t] for t in deleted)
    for topic_id, topic in new.topics_by_id.items():
        old = base.topics_by_id.get(topic_id)
        if old != topic:
            assert topic_id in changed
            assert changed[topic_id].created == (old is None)
    for topic_id, changes in changed.items():
        assert topic_id in new.topics_by_id
        old = base.topics_by_id.get(topic_id)
        for p, diff in changes.partitions.items():
            before = old.partitions.get(p) if old else None
            assert diff == PartitionDiff(before, new.topics_by_id[topic_id].partitions[p])
    changed_brokers = delta.changed_brokers()
    for b in set(base.brokers) | set(new.brokers) | set(changed_brokers):
        if base.brokers.get(b) != new.brokers.get(b):
            assert changed_brokers[b] == new.brokers.get(b)
        else:
            assert b not in changed_brokers
    assert dict(delta.changed_configs()) == {
        res: new.configs.get(res, {})
        for res in set(base.configs) | set(new.configs)
        if base.configs.get(res) != new.configs.get(res)
    }


@SETTINGS
@given(record_sequences(), st.data())
def test_local_changes_tell_a_broker_what_to_do(sequence: RecordsAndModel, data: Any) -> None:
    """Rule (Kafka's TopicsDelta.localChanges): a broker leads the changed partitions it is leader of,
    follows the other changed ones it is a replica of, and deletes replicas it no longer has."""
    records, _ = sequence
    cut = len(records) - data.draw(st.integers(0, len(records)), label="records after the cut")
    base = replay_all(records[:cut])
    delta = MetadataDelta(base)
    for offset, record in enumerate(records[cut:], start=cut):
        delta.replay(record, offset)
    new = delta.apply()
    changed = delta.changed_topics()
    for broker in range(MAX_BROKER_ID + 1):
        local = delta.local_changes(broker)
        for tp, reg in local.leaders.items():
            assert new.partition(tp.topic_id, tp.partition) == reg
            assert reg.leader == broker
        for tp, reg in local.followers.items():
            assert new.partition(tp.topic_id, tp.partition) == reg
            assert reg.leader != broker
            assert broker in reg.replicas
        for tp in local.deletes:
            old = base.partition(tp.topic_id, tp.partition)
            now = new.partition(tp.topic_id, tp.partition)
            assert old is not None
            assert broker in old.replicas
            assert now is None or broker not in now.replicas
        for topic_id, changes in changed.items():
            for p, diff in changes.partitions.items():
                tp = TopicIdPartition(topic_id, changes.name, p)
                if broker in diff.after.replicas:
                    assert tp in (local.leaders if diff.after.leader == broker else local.followers)
        for topic_id, gone in delta.deleted_topics().items():
            for p, reg in gone.partitions.items():
                assert (TopicIdPartition(topic_id, gone.name, p) in local.deletes) == (broker in reg.replicas)


def test_local_changes_for_a_reassignment() -> None:
    image = sample_image()
    delta = MetadataDelta(image)
    delta.replay(PartitionChange(tid(1), 0, replicas=(2,), isr=(2,), leader=2), image.offset + 1)
    orders0 = TopicIdPartition(tid(1), "orders", 0)
    assert delta.local_changes(1).deletes == {orders0}
    assert dict(delta.local_changes(2).leaders) == {orders0: delta.apply().partition(tid(1), 0)}
    assert str(orders0) == "orders-0"


# --- queries -----------------------------------------------------------------------------------------------


def test_queries() -> None:
    image = sample_image()
    orders = image.topic("orders")
    assert orders is not None
    assert image.topic_by_id(tid(1)) is orders
    assert image.partitions_led_by(2) == (
        TopicIdPartition(tid(2), "logs", 0),
        TopicIdPartition(tid(1), "orders", 1),
    )
    assert image.partitions_led_by(1) == (TopicIdPartition(tid(1), "orders", 0),)
    assert len(image.partitions_with_replica(1)) == 2
    assert len(image.partitions_with_replica(2)) == 3
    assert [b.broker_id for b in image.unfenced_brokers()] == [1]
    assert image.brokers[1].endpoint("PLAINTEXT") == Endpoint("PLAINTEXT", "127.0.0.1", 9092)
    assert image.brokers[1].endpoint("SSL") is None
    assert image.next_producer_id == 1000
    assert image.partition(tid(1), 0) is not None
    assert image.partition(tid(1), 9) is None
    text = image.describe()
    assert "offset 11, term 3, controller 1" in text
    assert "broker 1 epoch 10 unfenced rack=r1 PLAINTEXT=127.0.0.1:9092" in text
    assert "0: leader=1 leader_epoch=0 replicas=[1, 2] isr=[1, 2] partition_epoch=0" in text
    assert "topic 'orders': retention.ms=1000" in text
    assert decode_snapshot(encode_snapshot(image)).describe() == text
