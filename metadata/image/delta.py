"""MetadataDelta: replays records on top of an image and says what they changed.

``MetadataDelta(image).replay(record, offset)`` checks a record against the image as changed so far and
records its effect; ``apply()`` returns the new :class:`MetadataImage`. Changes are copy-on-write by
entity: replaying a PartitionChange stores one new ``PartitionRegistration``; ``apply()`` copies the
top-level maps (one entry per topic or broker) and the partition maps of the touched topics only, and
shares everything else with the base image.

Replay refuses, with :class:`MetadataError` and without changing the delta, any record that would make
the image inconsistent: offsets that do not grow, a broker record with a stale epoch or for an unknown
broker, a broker re-registering with an epoch not above its current one, unfencing a broker in
controlled shutdown, a duplicate topic name or id, a partition created out of order or twice, a change of
an unknown partition, an ISR outside the replicas, a leader outside the ISR, a topic config for an
unknown topic, producer ids or Raft terms that go back. The controller never writes such a record;
a broker that meets one has a corrupt log or a bug and must stop loudly.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import NamedTuple, TypeVar

from metadata._validate import INT32_MAX
from metadata.acl import AclBinding
from metadata.errors import MetadataError
from metadata.image.model import (
    BrokerRegistration,
    ConfigResource,
    MetadataImage,
    PartitionRegistration,
    ProducerIdsImage,
    TopicIdPartition,
    TopicImage,
    frozen_map,
)
from metadata.records import (
    NO_LEADER,
    AccessControlEntry,
    BrokerControlledShutdown,
    Config,
    ConfigResourceType,
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

K = TypeVar("K")
V = TypeVar("V")


class PartitionDiff(NamedTuple):
    """One partition before the delta (None: it is new) and after it."""

    before: PartitionRegistration | None
    after: PartitionRegistration


@dataclass(frozen=True, slots=True)
class TopicChanges:
    """The partitions of one topic a delta created or changed; ``created``: the base had no such topic."""

    topic_id: str
    name: str
    created: bool
    partitions: Mapping[int, PartitionDiff]


@dataclass(frozen=True, slots=True)
class LocalReplicaChanges:
    """What one broker must do after a delta (Kafka's ``LocalReplicaChanges``).

    Act on ``deletes`` first (stop serving and delete these replicas), then become leader of ``leaders``
    and follower of ``followers``: every created or changed partition that has the broker as a replica.
    """

    deletes: frozenset[TopicIdPartition]
    leaders: Mapping[TopicIdPartition, PartitionRegistration]
    followers: Mapping[TopicIdPartition, PartitionRegistration]


class _TopicDelta:
    """The partitions of one topic that the delta created or changed, over its base (None: new topic)."""

    __slots__ = ("name", "topic_id", "base", "changes", "count")

    def __init__(self, name: str, topic_id: str, base: TopicImage | None) -> None:
        self.name = name
        self.topic_id = topic_id
        self.base = base
        self.changes: dict[int, PartitionRegistration] = {}
        self.count = len(base.partitions) if base is not None else 0

    def get(self, partition: int) -> PartitionRegistration | None:
        found = self.changes.get(partition)
        if found is None and self.base is not None:
            return self.base.partitions.get(partition)
        return found

    def apply(self) -> TopicImage:
        if self.base is not None and not self.changes:
            return self.base
        partitions = dict(self.base.partitions) if self.base is not None else {}
        partitions.update(self.changes)
        return TopicImage(self.name, self.topic_id, MappingProxyType(partitions))


def _overlay(base: Mapping[K, V], changes: Mapping[K, V | None]) -> Mapping[K, V]:
    """``base`` with ``changes`` applied (None removes a key), as a new read-only mapping."""
    if not changes:
        return base
    merged = dict(base)
    for key, value in changes.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    return MappingProxyType(merged)


_BrokerEpochRecord = UnregisterBroker | FenceBroker | UnfenceBroker | BrokerControlledShutdown


class MetadataDelta:
    """The changes of a run of records over a base image. ``replay`` each record, then ``apply``.

    Not thread-safe: one owner (the metadata loader, or the controller's single thread) replays and
    applies. The images it returns are immutable and safe to share; ``apply`` may be called more than
    once, and replaying after ``apply`` goes on from where the delta stood.
    """

    __slots__ = (
        "_base",
        "_offset",
        "_term",
        "_controller_id",
        "_controller_address",
        "_brokers",
        "_topics",
        "_deleted",
        "_names",
        "_configs",
        "_features",
        "_producer_ids",
        "_acls",
        "_scram",
    )

    def __init__(self, image: MetadataImage) -> None:
        self._base = image
        self._offset = image.offset
        self._term = image.term
        self._controller_id = image.controller_id
        self._controller_address = image.controller_address
        self._brokers: dict[int, BrokerRegistration | None] = {}  # None: unregistered
        self._topics: dict[str, _TopicDelta] = {}  # by id: created or changed topics
        self._deleted: dict[str, TopicImage] = {}  # by id: topics of the base image that were removed
        self._names: dict[str, str | None] = {}  # topic name -> id, None: removed
        self._configs: dict[ConfigResource, dict[str, str]] = {}  # the whole new map of each touched resource
        self._features: dict[str, int] | None = None  # the whole new map once touched
        self._producer_ids = image.producer_ids
        self._acls: dict[str, AclBinding | None] = {}  # by id; None: removed
        self._scram: dict[str, dict[str, ScramCredential]] = {}  # the whole new map of each touched user

    @property
    def image(self) -> MetadataImage:
        """The base image this delta applies to."""
        return self._base

    @property
    def offset(self) -> int:
        """The offset of the last record replayed (the base image's offset before any)."""
        return self._offset

    # --- replay ---

    def replay(self, record: MetadataRecord, offset: int) -> None:
        """Add the effect of ``record``, read at ``offset`` of the metadata log.

        Raises :class:`MetadataError` (changing nothing) when ``offset`` does not follow the last one or
        the record does not fit the image as changed so far (see the module docstring).
        """
        if offset <= self._offset:
            raise MetadataError(f"record offset {offset} does not follow offset {self._offset}: {record!r}")
        self._replay(record)
        self._offset = offset

    def _replay(self, record: MetadataRecord) -> None:
        match record:
            case RegisterBroker():
                self._register_broker(record)
            case UnregisterBroker():
                self._registration(record)
                self._brokers[record.broker_id] = None
            case FenceBroker():
                prev = self._registration(record)
                self._brokers[record.broker_id] = replace(prev, fenced=True)
            case UnfenceBroker():
                prev = self._registration(record)
                if prev.in_controlled_shutdown:
                    raise MetadataError(f"{record!r}: broker {record.broker_id} is in controlled shutdown")
                self._brokers[record.broker_id] = replace(prev, fenced=False)
            case BrokerControlledShutdown():
                prev = self._registration(record)
                self._brokers[record.broker_id] = replace(prev, in_controlled_shutdown=True)
            case Topic():
                self._create_topic(record)
            case Partition():
                self._create_partition(record)
            case PartitionChange():
                self._change_partition(record)
            case RemoveTopic():
                self._remove_topic(record)
            case Config():
                self._config(record)
            case ProducerIds():
                self._allocate_producer_ids(record)
            case FeatureLevel():
                self._feature_level(record)
            case LeaderChange():
                self._leader_change(record)
            case AccessControlEntry():
                if self._acl(record.acl_id) is not None:
                    raise MetadataError(f"{record!r}: an ACL with id {record.acl_id} exists")
                self._acls[record.acl_id] = record.binding
            case RemoveAccessControlEntry():
                if self._acl(record.acl_id) is None:
                    raise MetadataError(f"{record!r}: no ACL has id {record.acl_id}")
                self._acls[record.acl_id] = None
            case UserScramCredential():
                self._user_for_write(record.name)[record.credential.mechanism] = record.credential
            case RemoveUserScramCredential():
                creds = self._user_for_write(record.name)
                if record.mechanism not in creds:
                    raise MetadataError(f"{record!r}: user {record.name!r} has no {record.mechanism} credential")
                del creds[record.mechanism]
            case NoOp():
                pass
            case _:
                raise MetadataError(f"not a metadata record: {record!r}")

    # --- brokers ---

    def _broker(self, broker_id: int) -> BrokerRegistration | None:
        if broker_id in self._brokers:
            return self._brokers[broker_id]
        return self._base.brokers.get(broker_id)

    def _registration(self, record: _BrokerEpochRecord) -> BrokerRegistration:
        """The current registration that ``record`` names by id and epoch."""
        prev = self._broker(record.broker_id)
        if prev is None:
            raise MetadataError(f"{record!r}: broker {record.broker_id} is not registered")
        if prev.broker_epoch != record.broker_epoch:
            raise MetadataError(
                f"{record!r}: broker {record.broker_id} is registered with epoch {prev.broker_epoch}"
            )
        return prev

    def _register_broker(self, r: RegisterBroker) -> None:
        prev = self._broker(r.broker_id)
        if prev is not None and r.broker_epoch <= prev.broker_epoch:
            raise MetadataError(
                f"{r!r}: broker {r.broker_id} is registered with epoch {prev.broker_epoch}; "
                "a new registration needs a higher epoch"
            )
        self._brokers[r.broker_id] = BrokerRegistration(
            r.broker_id,
            r.incarnation_id,
            r.broker_epoch,
            r.endpoints,
            r.rack,
            r.fenced,
            r.in_controlled_shutdown,
        )

    # --- topics and partitions ---

    def _topic(self, topic_id: str) -> _TopicDelta | TopicImage | None:
        """The topic as changed so far, None if it does not exist."""
        changed = self._topics.get(topic_id)
        if changed is not None:
            return changed
        if topic_id in self._deleted:
            return None
        return self._base.topics_by_id.get(topic_id)

    def _topic_id(self, name: str) -> str | None:
        if name in self._names:
            return self._names[name]
        topic = self._base.topics_by_name.get(name)
        return None if topic is None else topic.topic_id

    def _topic_for_write(self, topic_id: str) -> _TopicDelta:
        """The topic's delta, made on first write (the caller checked that the topic exists)."""
        changed = self._topics.get(topic_id)
        if changed is None:
            base = self._base.topics_by_id[topic_id]
            changed = self._topics[topic_id] = _TopicDelta(base.name, topic_id, base)
        return changed

    def _create_topic(self, r: Topic) -> None:
        if self._topic_id(r.name) is not None:
            raise MetadataError(f"{r!r}: a topic named {r.name!r} exists")
        existing = self._topic(r.topic_id)
        if existing is not None:
            raise MetadataError(f"{r!r}: topic id {r.topic_id} belongs to topic {existing.name!r}")
        self._topics[r.topic_id] = _TopicDelta(r.name, r.topic_id, None)
        self._names[r.name] = r.topic_id

    def _remove_topic(self, r: RemoveTopic) -> None:
        topic = self._topic(r.topic_id)
        if topic is None:
            raise MetadataError(f"{r!r}: no topic has id {r.topic_id}")
        self._topics.pop(r.topic_id, None)
        base = self._base.topics_by_id.get(r.topic_id)
        if base is not None:
            self._deleted.setdefault(r.topic_id, base)
        self._names[topic.name] = None
        resource = ConfigResource(ConfigResourceType.TOPIC, topic.name)
        if self._current_config(resource):
            self._configs[resource] = {}  # Kafka's rule: a topic's configs go with the topic

    def _create_partition(self, r: Partition) -> None:
        topic = self._topic(r.topic_id)
        if topic is None:
            raise MetadataError(f"{r!r}: no topic has id {r.topic_id}")
        count = topic.count if isinstance(topic, _TopicDelta) else len(topic.partitions)
        if r.partition < count:
            raise MetadataError(f"{r!r}: partition {topic.name}-{r.partition} exists")
        if r.partition > count:
            raise MetadataError(f"{r!r}: partitions of {topic.name} are created in order; next is {count}")
        delta = self._topic_for_write(r.topic_id)
        delta.changes[r.partition] = PartitionRegistration(
            r.replicas, r.isr, r.leader, r.leader_epoch, r.partition_epoch, r.elr, r.last_known_elr
        )
        delta.count += 1

    def _change_partition(self, r: PartitionChange) -> None:
        topic = self._topic(r.topic_id)
        if topic is None:
            raise MetadataError(f"{r!r}: no topic has id {r.topic_id}")
        prev = topic.get(r.partition) if isinstance(topic, _TopicDelta) else topic.partitions.get(r.partition)
        if prev is None:
            raise MetadataError(f"{r!r}: topic {topic.name} has no partition {r.partition}")
        replicas = prev.replicas if r.replicas is None else r.replicas
        isr = prev.isr if r.isr is None else r.isr
        leader = prev.leader if r.leader is None else r.leader
        elr = prev.elr if r.elr is None else r.elr
        last_known_elr = prev.last_known_elr if r.last_known_elr is None else r.last_known_elr
        where = f"{r!r}: partition {topic.name}-{r.partition}"
        if not set(elr) <= set(replicas) or set(elr) & set(isr):
            raise MetadataError(f"{where}: elr {list(elr)} must be replicas outside the isr {list(isr)}")
        strangers = [b for b in isr if b not in replicas]
        if strangers:
            raise MetadataError(f"{where}: isr members {strangers} are not replicas {list(replicas)}")
        if leader != NO_LEADER and leader not in isr:
            raise MetadataError(f"{where}: leader {leader} is not in the isr {list(isr)}")
        # Kafka's rules: every change bumps the partition epoch; a new leader bumps the leader epoch.
        leader_epoch = prev.leader_epoch + (1 if leader != prev.leader else 0)
        partition_epoch = prev.partition_epoch + 1
        if leader_epoch > INT32_MAX or partition_epoch > INT32_MAX:
            raise MetadataError(f"{where}: epochs would overflow int32")
        self._topic_for_write(r.topic_id).changes[r.partition] = PartitionRegistration(
            replicas, isr, leader, leader_epoch, partition_epoch, elr, last_known_elr
        )

    # --- ACLs and SCRAM credentials ---

    def _acl(self, acl_id: str) -> AclBinding | None:
        if acl_id in self._acls:
            return self._acls[acl_id]
        return self._base.acls.get(acl_id)

    def _user_for_write(self, user: str) -> dict[str, ScramCredential]:
        creds = self._scram.get(user)
        if creds is None:
            creds = self._scram[user] = dict(self._base.scram_credentials.get(user, {}))
        return creds

    def acls_changed(self) -> bool:
        """Whether the delta added or removed an ACL (a node rebuilds its authorizer then)."""
        return any(self._base.acls.get(acl_id) != binding for acl_id, binding in self._acls.items())

    # --- configs, features, producer ids, controller ---

    def _current_config(self, resource: ConfigResource) -> Mapping[str, str]:
        changed = self._configs.get(resource)
        return changed if changed is not None else self._base.configs.get(resource, {})

    def _config(self, r: Config) -> None:
        if r.resource_type is ConfigResourceType.TOPIC and self._topic_id(r.resource_name) is None:
            raise MetadataError(f"{r!r}: no topic is named {r.resource_name!r}")
        resource = ConfigResource(r.resource_type, r.resource_name)
        current = self._current_config(resource)
        if r.value is None and r.key not in current:
            return  # deleting an absent key changes nothing
        values = self._configs.get(resource)
        if values is None:
            values = self._configs[resource] = dict(current)
        if r.value is None:
            del values[r.key]
        else:
            values[r.key] = r.value

    def _feature_level(self, r: FeatureLevel) -> None:
        if self._features is None:
            self._features = dict(self._base.features)
        if r.level == 0:
            self._features.pop(r.name, None)
        else:
            self._features[r.name] = r.level

    def _allocate_producer_ids(self, r: ProducerIds) -> None:
        current = self._producer_ids.next_producer_id
        if r.next_producer_id <= current:
            raise MetadataError(f"{r!r}: producer ids go back; the next block already starts at {current}")
        self._producer_ids = ProducerIdsImage(r.next_producer_id, r.broker_id, r.broker_epoch)

    def _leader_change(self, r: LeaderChange) -> None:
        if r.term < self._term:
            raise MetadataError(f"{r!r}: term goes back from {self._term}")
        if r.term == self._term and r.leader_id != self._controller_id:
            raise MetadataError(f"{r!r}: term {r.term} already has leader {self._controller_id}")
        self._term, self._controller_id, self._controller_address = r.term, r.leader_id, r.leader_address

    # --- results ---

    def apply(self) -> MetadataImage:
        """The base image with every replayed record applied (the delta itself is left as it is)."""
        base = self._base
        topics_by_id, topics_by_name = base.topics_by_id, base.topics_by_name
        if self._topics or self._deleted:
            by_id, by_name = dict(topics_by_id), dict(topics_by_name)
            for topic_id, gone in self._deleted.items():
                del by_id[topic_id]
                del by_name[gone.name]
            for topic_id, delta in self._topics.items():
                by_id[topic_id] = by_name[delta.name] = delta.apply()
            topics_by_id, topics_by_name = MappingProxyType(by_id), MappingProxyType(by_name)
        configs: dict[ConfigResource, Mapping[str, str] | None] = {
            res: frozen_map(values) if values else None for res, values in self._configs.items()
        }
        return MetadataImage(
            offset=self._offset,
            term=self._term,
            controller_id=self._controller_id,
            controller_address=self._controller_address,
            brokers=_overlay(base.brokers, self._brokers),
            topics_by_id=topics_by_id,
            topics_by_name=topics_by_name,
            configs=_overlay(base.configs, configs),
            features=base.features if self._features is None else frozen_map(self._features),
            producer_ids=self._producer_ids,
            acls=_overlay(base.acls, self._acls),
            scram_credentials=_overlay(
                base.scram_credentials, {u: frozen_map(c) if c else None for u, c in self._scram.items()}
            ),
        )

    def changed_brokers(self) -> Mapping[int, BrokerRegistration | None]:
        """Brokers whose registration differs from the base image's; None: no longer registered."""
        return frozen_map({b: reg for b, reg in self._brokers.items() if reg != self._base.brokers.get(b)})

    def changed_topics(self) -> Mapping[str, TopicChanges]:
        """By topic id: the topics after the delta that are new or have new or changed partitions."""
        result = {}
        for topic_id, delta in self._topics.items():
            old = delta.base.partitions if delta.base is not None else {}
            diffs = {p: PartitionDiff(old.get(p), reg) for p, reg in delta.changes.items()}
            result[topic_id] = TopicChanges(topic_id, delta.name, delta.base is None, frozen_map(diffs))
        return frozen_map(result)

    def deleted_topics(self) -> Mapping[str, TopicImage]:
        """By topic id: the topics of the base image that the delta removed, as the base image had them."""
        return frozen_map(self._deleted)

    def changed_configs(self) -> Mapping[ConfigResource, Mapping[str, str]]:
        """Resources whose configs changed, with all their configs after the delta (empty: none left)."""
        return frozen_map(
            {
                res: frozen_map(values)
                for res, values in self._configs.items()
                if values != self._base.configs.get(res, {})
            }
        )

    def local_changes(self, broker_id: int) -> LocalReplicaChanges:
        """What broker ``broker_id`` must do to follow this delta (Kafka's ``TopicsDelta.localChanges``)."""
        deletes: set[TopicIdPartition] = set()
        leaders: dict[TopicIdPartition, PartitionRegistration] = {}
        followers: dict[TopicIdPartition, PartitionRegistration] = {}
        for topic_id, gone in self._deleted.items():
            deletes.update(
                TopicIdPartition(topic_id, gone.name, p)
                for p, reg in gone.partitions.items()
                if broker_id in reg.replicas
            )
        for topic_id, delta in self._topics.items():
            for p, reg in delta.changes.items():
                tp = TopicIdPartition(topic_id, delta.name, p)
                before = delta.base.partitions.get(p) if delta.base is not None else None
                if reg.leader == broker_id:
                    leaders[tp] = reg
                elif broker_id in reg.replicas:
                    followers[tp] = reg
                elif before is not None and broker_id in before.replicas:
                    deletes.add(tp)  # reassigned away from this broker
        return LocalReplicaChanges(frozenset(deletes), frozen_map(leaders), frozen_map(followers))


def image_from_records(records: Iterable[MetadataRecord], offset: int) -> MetadataImage:
    """The image that ``records`` build from nothing, stamped with ``offset`` (how snapshots load).

    The records carry no offsets of their own; they are checked like any replay.
    """
    if offset < -1:
        raise MetadataError(f"an image offset is -1 or more, got {offset}")
    delta = MetadataDelta(MetadataImage())
    for record in records:
        delta._replay(record)
    delta._offset = offset
    return delta.apply()
