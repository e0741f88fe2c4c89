"""Hypothesis strategies and helpers for the metadata tests (records, image, delta, snapshot).

``RECORD_STRATEGIES`` draws any single valid record of each type. ``record_sequences()`` draws a run of
records that a correct controller could write, starting from an empty image, together with the state an
independent model expects after it (:class:`Model`).
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from metadata._validate import INT16_MAX, INT32_MAX, INT64_MAX
from metadata.acl import (
    AccessControlEntry as AclEntry,
)
from metadata.acl import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from metadata.image import MetadataDelta, MetadataImage
from metadata.records import (
    NO_LEADER,
    PRODUCER_ID_BLOCK_SIZE,
    AccessControlEntry,
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
    RemoveAccessControlEntry,
    RemoveTopic,
    RemoveUserScramCredential,
    Topic,
    UnfenceBroker,
    UnregisterBroker,
    UserScramCredential,
)
from metadata.scram import ScramCredential

T = TypeVar("T")
NIL_UUID = str(uuid.UUID(int=0))

# --- single records with any legal field values ------------------------------------------------------

broker_ids = st.integers(0, INT32_MAX)
broker_epochs = st.integers(0, INT64_MAX)
uuids = st.uuids().map(str)
topic_ids = uuids.filter(lambda u: u != NIL_UUID)
topic_names = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-", min_size=1, max_size=249
).filter(lambda n: n not in (".", ".."))
texts = st.text(max_size=30)
nonempty_texts = st.text(min_size=1, max_size=30)
id_tuples = st.lists(broker_ids, unique=True, max_size=6).map(tuple)
endpoints = st.builds(Endpoint, nonempty_texts, nonempty_texts, st.integers(0, 65535))
mechanisms = st.sampled_from(["SCRAM-SHA-256", "SCRAM-SHA-512"])


@st.composite
def scram_credentials(draw: st.DrawFn) -> ScramCredential:
    mechanism = draw(mechanisms)
    size = 32 if mechanism == "SCRAM-SHA-256" else 64
    keys = st.binary(min_size=size, max_size=size)
    return ScramCredential(
        mechanism, draw(st.binary(min_size=1, max_size=32)), draw(keys), draw(keys), draw(st.integers(4096, 16384))
    )


@st.composite
def acl_bindings(draw: st.DrawFn) -> AclBinding:
    rtype = draw(st.sampled_from([ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER,
                                  ResourceType.TRANSACTIONAL_ID]))
    if rtype is ResourceType.CLUSTER:
        pattern = ResourcePattern(rtype, "kafka-cluster", PatternType.LITERAL)
    else:
        pattern = ResourcePattern(rtype, draw(nonempty_texts), draw(st.sampled_from([PatternType.LITERAL,
                                                                                     PatternType.PREFIXED])))
    ops = {
        ResourceType.TOPIC: [AclOperation.READ, AclOperation.WRITE, AclOperation.ALL, AclOperation.DESCRIBE_CONFIGS],
        ResourceType.GROUP: [AclOperation.READ, AclOperation.DELETE],
        ResourceType.CLUSTER: [AclOperation.CLUSTER_ACTION, AclOperation.CREATE, AclOperation.IDEMPOTENT_WRITE],
        ResourceType.TRANSACTIONAL_ID: [AclOperation.WRITE, AclOperation.DESCRIBE],
    }[rtype]
    entry = AclEntry(
        "User:" + draw(nonempty_texts), draw(st.sampled_from(["*", "10.0.0.1"])), draw(st.sampled_from(ops)),
        draw(st.sampled_from([AclPermissionType.ALLOW, AclPermissionType.DENY])),
    )
    return AclBinding(pattern, entry)


@st.composite
def partitions(draw: st.DrawFn) -> Partition:
    replicas = draw(st.lists(broker_ids, unique=True, min_size=1, max_size=6))
    isr = draw(st.lists(st.sampled_from(replicas), unique=True))
    leader = draw(st.sampled_from([NO_LEADER, *isr]))
    return Partition(
        draw(topic_ids),
        draw(st.integers(0, INT32_MAX)),
        tuple(replicas),
        tuple(isr),
        leader,
        draw(st.integers(0, INT32_MAX)),
        draw(st.integers(0, INT32_MAX)),
    )


@st.composite
def configs(draw: st.DrawFn) -> Config:
    kind = draw(st.sampled_from(ConfigResourceType))
    if kind is ConfigResourceType.TOPIC:
        name = draw(topic_names)
    elif kind is ConfigResourceType.BROKER:
        name = str(draw(broker_ids))
    else:
        name = ""
    return Config(kind, name, draw(nonempty_texts), draw(st.none() | texts))


@st.composite
def partition_changes(draw: st.DrawFn) -> PartitionChange:
    fields = draw(st.sets(st.sampled_from(["isr", "leader", "replicas"]), min_size=1))
    return PartitionChange(
        draw(topic_ids),
        draw(st.integers(0, INT32_MAX)),
        isr=draw(id_tuples) if "isr" in fields else None,
        leader=draw(st.integers(NO_LEADER, INT32_MAX)) if "leader" in fields else None,
        replicas=draw(st.lists(broker_ids, unique=True, min_size=1, max_size=6).map(tuple))
        if "replicas" in fields
        else None,
    )


RECORD_STRATEGIES: dict[type[Any], st.SearchStrategy[Any]] = {
    RegisterBroker: st.builds(
        RegisterBroker,
        broker_ids,
        uuids,
        broker_epochs,
        st.lists(endpoints, max_size=3, unique_by=lambda e: e.name).map(tuple),
        st.none() | texts,
        st.booleans(),
        st.booleans(),
    ),
    UnregisterBroker: st.builds(UnregisterBroker, broker_ids, broker_epochs),
    FenceBroker: st.builds(FenceBroker, broker_ids, broker_epochs),
    UnfenceBroker: st.builds(UnfenceBroker, broker_ids, broker_epochs),
    BrokerControlledShutdown: st.builds(BrokerControlledShutdown, broker_ids, broker_epochs),
    Topic: st.builds(Topic, topic_names, topic_ids),
    Partition: partitions(),
    PartitionChange: partition_changes(),
    RemoveTopic: st.builds(RemoveTopic, topic_ids),
    Config: configs(),
    ProducerIds: st.builds(ProducerIds, broker_ids, broker_epochs, st.integers(1, INT64_MAX)),
    FeatureLevel: st.builds(FeatureLevel, nonempty_texts, st.integers(0, INT16_MAX)),
    NoOp: st.builds(NoOp),
    LeaderChange: st.builds(
        LeaderChange, st.integers(0, INT64_MAX), st.integers(0, INT32_MAX), st.sampled_from(["", "127.0.0.1:9093"])
    ),
}
RECORD_STRATEGIES.update({
    UserScramCredential: st.builds(UserScramCredential, nonempty_texts, scram_credentials()),
    RemoveUserScramCredential: st.builds(RemoveUserScramCredential, nonempty_texts, mechanisms),
    AccessControlEntry: st.builds(AccessControlEntry, topic_ids, acl_bindings()),
    RemoveAccessControlEntry: st.builds(RemoveAccessControlEntry, topic_ids),
})
any_record: st.SearchStrategy[MetadataRecord] = st.one_of(*RECORD_STRATEGIES.values())


# --- valid sequences, with an independent model of their effect --------------------------------------

TOPIC_NAME_POOL = ("orders", "payments", "a", "t.1", "x_y-z")
CONFIG_KEYS = ("retention.ms", "cleanup.policy", "min.insync.replicas")
FEATURES = ("metadata.version", "transaction.version")
MAX_BROKER_ID = 5


@dataclass
class ModelPartition:
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int = 0
    partition_epoch: int = 0


@dataclass
class ModelTopic:
    name: str
    partitions: list[ModelPartition] = field(default_factory=list)


@dataclass
class Model:
    """What the image must hold after a sequence: written independently of metadata.image."""

    term: int = -1
    controller_id: int = -1
    brokers: dict[int, RegisterBroker] = field(default_factory=dict)  # with the current flags
    topics: dict[str, ModelTopic] = field(default_factory=dict)  # by id
    configs: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)
    features: dict[str, int] = field(default_factory=dict)
    producer_ids: tuple[int, int, int] = (0, -1, -1)
    acls: dict[str, AclBinding] = field(default_factory=dict)
    scram: dict[str, dict[str, ScramCredential]] = field(default_factory=dict)
    acl_counter: int = 0
    epoch_counter: int = 0
    topic_counter: int = 0

    def topic_names(self) -> set[str]:
        return {t.name for t in self.topics.values()}

    def plain(self) -> dict[str, Any]:
        """The model in the shape of ``image_as_plain``."""
        return {
            "term": self.term,
            "controller_id": self.controller_id,
            "brokers": {
                b: (r.incarnation_id, r.broker_epoch, r.endpoints, r.rack, r.fenced, r.in_controlled_shutdown)
                for b, r in self.brokers.items()
            },
            "topics": {
                tid: (
                    t.name,
                    {
                        p: (mp.replicas, mp.isr, mp.leader, mp.leader_epoch, mp.partition_epoch)
                        for p, mp in enumerate(t.partitions)
                    },
                )
                for tid, t in self.topics.items()
            },
            "configs": {k: dict(v) for k, v in self.configs.items() if v},
            "features": dict(self.features),
            "producer_ids": self.producer_ids,
            "acls": dict(self.acls),
            "scram": {u: dict(c) for u, c in self.scram.items() if c},
        }


def pick(draw: st.DrawFn, items: Sequence[T]) -> T:
    """One of ``items`` (cheaper than ``st.sampled_from`` on a fresh list each step; shrinks to the first)."""
    return items[draw(st.integers(0, len(items) - 1))]


def subset(draw: st.DrawFn, items: Sequence[T], min_size: int, max_size: int) -> tuple[T, ...]:
    """Distinct elements of ``items`` in a drawn order, between ``min_size`` and ``max_size`` of them."""
    remaining = list(items)
    chosen = []
    for _ in range(draw(st.integers(min_size, min(max_size, len(remaining))))):
        chosen.append(remaining.pop(draw(st.integers(0, len(remaining) - 1))))
    return tuple(chosen)


def _epoch_record(draw: st.DrawFn, model: Model, cls: type[Any]) -> MetadataRecord:
    broker_id = pick(draw, sorted(model.brokers))
    reg = model.brokers[broker_id]
    if cls is UnregisterBroker:
        del model.brokers[broker_id]
    elif cls is FenceBroker:
        model.brokers[broker_id] = _with(reg, fenced=True)
    elif cls is UnfenceBroker:
        model.brokers[broker_id] = _with(reg, fenced=False)
    else:
        model.brokers[broker_id] = _with(reg, in_controlled_shutdown=True)
    record: MetadataRecord = cls(broker_id, reg.broker_epoch)
    return record


def _with(reg: RegisterBroker, **changes: Any) -> RegisterBroker:
    return dataclasses.replace(reg, **changes)


def _register(draw: st.DrawFn, model: Model) -> list[MetadataRecord]:
    model.epoch_counter += draw(st.integers(1, 3))
    broker_id = draw(st.integers(0, MAX_BROKER_ID))
    reg = RegisterBroker(
        broker_id,
        str(uuid.UUID(int=model.epoch_counter)),
        model.epoch_counter,
        (Endpoint("PLAINTEXT", "127.0.0.1", 9000 + broker_id),),
        pick(draw, [None, "r1", "r2"]),
        fenced=pick(draw, [True, True, False]),
    )
    model.brokers[broker_id] = reg
    return [reg]


def _new_partition(draw: st.DrawFn, model: Model, topic_id: str) -> Partition:
    ids = sorted(model.brokers)
    replicas = subset(draw, ids, 1, 3)
    isr = subset(draw, replicas, 1, 3)
    leader = pick(draw, [isr[0], isr[0], NO_LEADER])
    topic = model.topics[topic_id]
    topic.partitions.append(ModelPartition(replicas, isr, leader))
    return Partition(topic_id, len(topic.partitions) - 1, replicas, isr, leader)


def _create_topic(draw: st.DrawFn, model: Model) -> list[MetadataRecord]:
    name = pick(draw, [n for n in TOPIC_NAME_POOL if n not in model.topic_names()])
    model.topic_counter += 1
    topic_id = str(uuid.UUID(int=(model.topic_counter << 64) | 0xABC))
    model.topics[topic_id] = ModelTopic(name)
    records: list[MetadataRecord] = [Topic(name, topic_id)]
    if model.brokers:
        records += [_new_partition(draw, model, topic_id) for _ in range(draw(st.integers(0, 3)))]
    return records


def _add_partition(draw: st.DrawFn, model: Model) -> list[MetadataRecord]:
    topic_id = pick(draw, sorted(model.topics))
    return [_new_partition(draw, model, topic_id)]


def _change_partition(draw: st.DrawFn, model: Model) -> list[MetadataRecord]:
    topic_id = pick(draw, sorted(t for t in model.topics if model.topics[t].partitions))
    topic = model.topics[topic_id]
    index = draw(st.integers(0, len(topic.partitions) - 1))
    mp = topic.partitions[index]
    replicas, isr, leader = mp.replicas, mp.isr, mp.leader
    kind = pick(draw, ["isr", "leader", "replicas", "all"])
    pool = sorted(set(model.brokers) | set(replicas))
    if kind in ("replicas", "all"):
        replicas = subset(draw, pool, 1, 4)
    if kind in ("isr", "replicas", "all"):
        isr = subset(draw, replicas, 0, 4)
    if kind in ("leader", "all") or (leader != NO_LEADER and leader not in isr):
        leader = pick(draw, [NO_LEADER, *isr])
    change = PartitionChange(
        topic_id,
        index,
        isr=isr if kind in ("isr", "replicas", "all") else None,
        leader=leader if leader != mp.leader or kind in ("leader", "all") else None,
        replicas=replicas if kind in ("replicas", "all") else None,
    )
    mp.leader_epoch += 1 if leader != mp.leader else 0
    mp.partition_epoch += 1
    mp.replicas, mp.isr, mp.leader = replicas, isr, leader
    return [change]


def _remove_topic(draw: st.DrawFn, model: Model) -> list[MetadataRecord]:
    topic_id = pick(draw, sorted(model.topics))
    name = model.topics.pop(topic_id).name
    model.configs.pop((ConfigResourceType.TOPIC.value, name), None)
    return [RemoveTopic(topic_id)]


def _config(draw: st.DrawFn, model: Model) -> list[MetadataRecord]:
    kinds = [ConfigResourceType.BROKER, ConfigResourceType.CLUSTER]
    if model.topics:
        kinds.append(ConfigResourceType.TOPIC)
    kind = pick(draw, kinds)
    if kind is ConfigResourceType.TOPIC:
        name = pick(draw, sorted(model.topic_names()))
    elif kind is ConfigResourceType.BROKER:
        name = str(draw(st.integers(0, MAX_BROKER_ID)))
    else:
        name = ""
    key = pick(draw, CONFIG_KEYS)
    value = pick(draw, [None, "1", "delete", "compact"])
    values = model.configs.setdefault((kind.value, name), {})
    if value is None:
        values.pop(key, None)
    else:
        values[key] = value
    return [Config(kind, name, key, value)]


def _producer_ids(draw: st.DrawFn, model: Model) -> list[MetadataRecord]:
    broker_id = pick(draw, sorted(model.brokers))
    epoch = model.brokers[broker_id].broker_epoch
    model.producer_ids = (model.producer_ids[0] + PRODUCER_ID_BLOCK_SIZE, broker_id, epoch)
    return [ProducerIds(broker_id, epoch, model.producer_ids[0])]


def _leader_change(draw: st.DrawFn, model: Model) -> list[MetadataRecord]:
    if model.term >= 0 and draw(st.booleans()):
        return [LeaderChange(model.term, model.controller_id)]  # the same leader again: allowed
    model.term += draw(st.integers(1, 2))
    model.controller_id = draw(st.integers(0, 2))
    return [LeaderChange(model.term, model.controller_id)]


def _feature(draw: st.DrawFn, model: Model) -> list[MetadataRecord]:
    name = pick(draw, FEATURES)
    level = draw(st.integers(0, 3))
    if level:
        model.features[name] = level
    else:
        model.features.pop(name, None)
    return [FeatureLevel(name, level)]


USER_POOL = ("alice", "bob", "broker")


def _add_acl(draw: st.DrawFn, model: Model) -> list[MetadataRecord]:
    model.acl_counter += 1
    acl_id = str(uuid.UUID(int=(model.acl_counter << 64) | 0xAC1))
    binding = draw(acl_bindings())
    model.acls[acl_id] = binding
    return [AccessControlEntry(acl_id, binding)]


def _remove_acl(draw: st.DrawFn, model: Model) -> list[MetadataRecord]:
    acl_id = pick(draw, sorted(model.acls))
    del model.acls[acl_id]
    return [RemoveAccessControlEntry(acl_id)]


def _upsert_scram(draw: st.DrawFn, model: Model) -> list[MetadataRecord]:
    user = pick(draw, USER_POOL)
    credential = draw(scram_credentials())
    model.scram.setdefault(user, {})[credential.mechanism] = credential
    return [UserScramCredential(user, credential)]


def _remove_scram(draw: st.DrawFn, model: Model) -> list[MetadataRecord]:
    user = pick(draw, sorted(u for u, c in model.scram.items() if c))
    mechanism = pick(draw, sorted(model.scram[user]))
    del model.scram[user][mechanism]
    return [RemoveUserScramCredential(user, mechanism)]


def _actions(model: Model) -> list[str]:
    """The applicable actions, repeated by weight: the records that matter most get drawn most.

    Hypothesis favours small indexes, so the list starts with what is most worth drawing.
    """
    actions = []
    if any(t.partitions for t in model.topics.values()):
        actions += ["change_partition"] * 6
    if len(model.topic_names()) < len(TOPIC_NAME_POOL) and model.brokers:
        actions += ["create_topic"] * (3 if len(model.topics) < 2 else 1)
    actions += ["register"] * (3 if len(model.brokers) < 2 else 1)
    if model.brokers:
        if any(not r.in_controlled_shutdown for r in model.brokers.values()):
            actions += ["unfence"] * 2
        actions += ["fence", "controlled_shutdown", "unregister", "producer_ids"]
        if model.topics:
            actions.append("add_partition")
    if model.topics:
        actions.append("remove_topic")
    if len(model.topic_names()) < len(TOPIC_NAME_POOL) and not model.brokers:
        actions.append("create_topic")
    if model.acls:
        actions.append("remove_acl")
    if any(model.scram.values()):
        actions.append("remove_scram")
    return [*actions, "config", "leader_change", "feature", "noop", "add_acl", "upsert_scram"]


def _step(draw: st.DrawFn, model: Model, action: str) -> list[MetadataRecord]:
    if action == "unfence":
        candidates = sorted(b for b, r in model.brokers.items() if not r.in_controlled_shutdown)
        broker_id = pick(draw, candidates)
        reg = model.brokers[broker_id]
        model.brokers[broker_id] = _with(reg, fenced=False)
        return [UnfenceBroker(broker_id, reg.broker_epoch)]
    simple = {
        "unregister": UnregisterBroker,
        "fence": FenceBroker,
        "controlled_shutdown": BrokerControlledShutdown,
    }
    if action in simple:
        return [_epoch_record(draw, model, simple[action])]
    if action == "noop":
        return [NoOp()]
    steps = {
        "register": _register,
        "create_topic": _create_topic,
        "add_partition": _add_partition,
        "change_partition": _change_partition,
        "remove_topic": _remove_topic,
        "config": _config,
        "producer_ids": _producer_ids,
        "leader_change": _leader_change,
        "feature": _feature,
        "add_acl": _add_acl,
        "remove_acl": _remove_acl,
        "upsert_scram": _upsert_scram,
        "remove_scram": _remove_scram,
    }
    return steps[action](draw, model)


@st.composite
def record_sequences(draw: st.DrawFn, max_steps: int = 40) -> tuple[list[MetadataRecord], Model]:
    """A run of records a correct controller could write from an empty image, and the model after it."""
    model = Model()
    records: list[MetadataRecord] = []
    for _ in range(draw(st.integers(0, max_steps))):
        records += _step(draw, model, pick(draw, _actions(model)))
    return records, model


# --- helpers shared by the metadata tests ---------------------------------------------------------------

SETTINGS = settings(
    derandomize=True, deadline=None, max_examples=60, suppress_health_check=[HealthCheck.too_slow]
)
RecordsAndModel = tuple[list[MetadataRecord], Model]
"""What ``record_sequences()`` draws."""


def tid(n: int) -> str:
    return str(uuid.UUID(int=n + 1))


def inc(n: int) -> str:
    return str(uuid.UUID(int=(7 << 96) | n))


def replay_all(records: list[MetadataRecord], base: MetadataImage | None = None) -> MetadataImage:
    """One delta over ``base`` (default: empty), records at the offsets after the base's."""
    base = base or MetadataImage()
    delta = MetadataDelta(base)
    for i, record in enumerate(records):
        delta.replay(record, base.offset + 1 + i)
    return delta.apply()


def image_as_plain(image: MetadataImage) -> dict[str, Any]:
    """The image as plain data, in the shape of ``Model.plain()``."""
    ids = image.producer_ids
    return {
        "term": image.term,
        "controller_id": image.controller_id,
        "brokers": {
            b: (r.incarnation_id, r.broker_epoch, r.endpoints, r.rack, r.fenced, r.in_controlled_shutdown)
            for b, r in image.brokers.items()
        },
        "topics": {
            topic_id: (
                t.name,
                {
                    p: (reg.replicas, reg.isr, reg.leader, reg.leader_epoch, reg.partition_epoch)
                    for p, reg in t.partitions.items()
                },
            )
            for topic_id, t in image.topics_by_id.items()
        },
        "configs": {(r.resource_type.value, r.resource_name): dict(v) for r, v in image.configs.items()},
        "features": dict(image.features),
        "producer_ids": (ids.next_producer_id, ids.broker_id, ids.broker_epoch),
        "acls": dict(image.acls),
        "scram": {u: dict(c) for u, c in image.scram_credentials.items()},
    }


def sample_image() -> MetadataImage:
    """Two brokers, topic "orders" (2 partitions) and "logs" (1), configs, producer ids, a controller."""
    return replay_all(
        [
            LeaderChange(3, 1),
            RegisterBroker(1, inc(1), 10, (Endpoint("PLAINTEXT", "127.0.0.1", 9092),), rack="r1"),
            RegisterBroker(2, inc(2), 11, (Endpoint("PLAINTEXT", "127.0.0.1", 9093),)),
            UnfenceBroker(1, 10),
            Topic("orders", tid(1)),
            Partition(tid(1), 0, (1, 2), (1, 2), 1),
            Partition(tid(1), 1, (2, 1), (2,), 2),
            Topic("logs", tid(2)),
            Partition(tid(2), 0, (2,), (2,), 2),
            Config(ConfigResourceType.TOPIC, "orders", "retention.ms", "1000"),
            Config(ConfigResourceType.CLUSTER, "", "min.insync.replicas", "2"),
            ProducerIds(1, 10, 1000),
        ]
    )
