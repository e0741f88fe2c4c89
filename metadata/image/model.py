"""The MetadataImage: the cluster's metadata after the records up to one offset, immutable.

Every part is frozen: dataclasses are frozen and slotted, sequences are tuples and mappings are
``types.MappingProxyType`` views of dicts that only the code building the image ever held. Readers on any
thread share an image without locks; a new image comes from :meth:`MetadataDelta.apply`, which reuses
every part that did not change (an untouched topic is the very same ``TopicImage`` object).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NamedTuple, TypeVar

from metadata.acl import AclBinding
from metadata.records import NO_LEADER, ConfigResourceType, Endpoint
from metadata.scram import ScramCredential

K = TypeVar("K")
V = TypeVar("V")
_NO_ITEMS: Mapping[Any, Any] = MappingProxyType({})


def frozen_map(items: Mapping[K, V] | None = None) -> Mapping[K, V]:
    """A read-only mapping holding a private copy of ``items``."""
    return MappingProxyType(dict(items)) if items else _NO_ITEMS


class TopicIdPartition(NamedTuple):
    """One partition, named by topic id (the stable key) and by topic name (for directories and humans)."""

    topic_id: str
    topic_name: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic_name}-{self.partition}"


class ConfigResource(NamedTuple):
    """What a set of configs belongs to; equal to the plain tuple ``(resource_type, resource_name)``."""

    resource_type: ConfigResourceType
    resource_name: str


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """A registered broker as the metadata log last described it."""

    broker_id: int
    incarnation_id: str
    broker_epoch: int
    endpoints: tuple[Endpoint, ...]
    rack: str | None
    fenced: bool
    in_controlled_shutdown: bool

    def endpoint(self, listener: str) -> Endpoint | None:
        """The endpoint of ``listener``, or None if the broker has no such listener."""
        return next((e for e in self.endpoints if e.name == listener), None)


@dataclass(frozen=True, slots=True)
class PartitionRegistration:
    """The replicas, ISR, leader and epochs of one partition (``leader`` is -1 when it has none)."""

    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int
    elr: tuple[int, ...] = ()  # KIP-966 eligible leader replicas (controller/core/elections.py, ELR rules)
    last_known_elr: tuple[int, ...] = ()  # KIP-966: left the ELR by an unclean shutdown

    @property
    def has_leader(self) -> bool:
        return self.leader != NO_LEADER


@dataclass(frozen=True, slots=True)
class TopicImage:
    """A topic and its partitions, numbered 0 to ``len(partitions) - 1``."""

    name: str
    topic_id: str
    partitions: Mapping[int, PartitionRegistration]

    def partition(self, partition: int) -> PartitionRegistration | None:
        return self.partitions.get(partition)


@dataclass(frozen=True, slots=True)
class ProducerIdsImage:
    """The producer-id blocks handed out so far: the next block starts at ``next_producer_id``.

    ``broker_id`` and ``broker_epoch`` name the broker that got the last block (-1 before the first).
    """

    next_producer_id: int = 0
    broker_id: int = -1
    broker_epoch: int = -1


@dataclass(frozen=True, slots=True)
class MetadataImage:
    """The cluster metadata after applying every record up to ``offset`` (-1: none yet).

    ``term`` and ``controller_id`` come from the last LeaderChange (-1: none seen). ``configs`` holds
    only resources with at least one key; a topic's configs go when the topic goes.
    """

    offset: int = -1
    term: int = -1
    controller_id: int = -1
    controller_address: str = ""  # the active controller's Controller gRPC address, from LeaderChange
    brokers: Mapping[int, BrokerRegistration] = field(default_factory=frozen_map)
    topics_by_id: Mapping[str, TopicImage] = field(default_factory=frozen_map)
    topics_by_name: Mapping[str, TopicImage] = field(default_factory=frozen_map)
    configs: Mapping[ConfigResource, Mapping[str, str]] = field(default_factory=frozen_map)
    features: Mapping[str, int] = field(default_factory=frozen_map)
    producer_ids: ProducerIdsImage = field(default_factory=ProducerIdsImage)
    acls: Mapping[str, AclBinding] = field(default_factory=frozen_map)  # by ACL id
    scram_credentials: Mapping[str, Mapping[str, ScramCredential]] = field(default_factory=frozen_map)
    """user name -> mechanism -> credential; only users with at least one credential"""

    # --- lookups ---

    def topic(self, name: str) -> TopicImage | None:
        return self.topics_by_name.get(name)

    def topic_by_id(self, topic_id: str) -> TopicImage | None:
        return self.topics_by_id.get(topic_id)

    def partition(self, topic_id: str, partition: int) -> PartitionRegistration | None:
        topic = self.topics_by_id.get(topic_id)
        return None if topic is None else topic.partitions.get(partition)

    def broker(self, broker_id: int) -> BrokerRegistration | None:
        return self.brokers.get(broker_id)

    def config(self, resource_type: ConfigResourceType, resource_name: str) -> Mapping[str, str]:
        """The configs set on one resource (empty when none is)."""
        return self.configs.get(ConfigResource(resource_type, resource_name), _NO_ITEMS)

    def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        return self.scram_credentials.get(user, _NO_ITEMS).get(mechanism)

    @property
    def next_producer_id(self) -> int:
        """The first producer id of the next block the controller hands out."""
        return self.producer_ids.next_producer_id

    # --- queries over the whole image (each walks every partition: O(partitions)) ---

    def all_partitions(self) -> Iterator[tuple[TopicIdPartition, PartitionRegistration]]:
        """Every partition, by topic name then partition number."""
        for name in sorted(self.topics_by_name):
            topic = self.topics_by_name[name]
            for p in sorted(topic.partitions):
                yield TopicIdPartition(topic.topic_id, name, p), topic.partitions[p]

    def partitions_led_by(self, broker_id: int) -> tuple[TopicIdPartition, ...]:
        return tuple(tp for tp, reg in self.all_partitions() if reg.leader == broker_id)

    def partitions_with_replica(self, broker_id: int) -> tuple[TopicIdPartition, ...]:
        return tuple(tp for tp, reg in self.all_partitions() if broker_id in reg.replicas)

    def unfenced_brokers(self) -> tuple[BrokerRegistration, ...]:
        """Brokers that may lead and join ISRs, by id (including those in controlled shutdown)."""
        return tuple(self.brokers[b] for b in sorted(self.brokers) if not self.brokers[b].fenced)

    def describe(self) -> str:
        """A multi-line human-readable account of the image, stable for a given image."""
        lines = [f"metadata image at offset {self.offset}, term {self.term}, controller {self.controller_id}"]
        lines.append(f"brokers ({len(self.brokers)}):")
        for b in sorted(self.brokers):
            broker = self.brokers[b]
            state = "fenced" if broker.fenced else "unfenced"
            if broker.in_controlled_shutdown:
                state += ", in controlled shutdown"
            listeners = " ".join(f"{e.name}={e.address}" for e in broker.endpoints)
            rack = f" rack={broker.rack}" if broker.rack is not None else ""
            lines.append(f"  broker {b} epoch {broker.broker_epoch} {state}{rack} {listeners}".rstrip())
        lines.append(f"topics ({len(self.topics_by_name)}):")
        for name in sorted(self.topics_by_name):
            topic = self.topics_by_name[name]
            lines.append(f"  {name} id={topic.topic_id} partitions={len(topic.partitions)}")
            for p in sorted(topic.partitions):
                reg = topic.partitions[p]
                lines.append(
                    f"    {p}: leader={reg.leader} leader_epoch={reg.leader_epoch}"
                    f" replicas={list(reg.replicas)}"
                    f" isr={list(reg.isr)} partition_epoch={reg.partition_epoch}"
                )
        lines.append(f"configs ({len(self.configs)}):")
        for res in sorted(self.configs):
            values = self.configs[res]
            entries = " ".join(f"{k}={values[k]}" for k in sorted(values))
            lines.append(f"  {res.resource_type} {res.resource_name!r}: {entries}")
        lines.append("features: " + " ".join(f"{k}={self.features[k]}" for k in sorted(self.features)))
        lines.append(f"next producer id: {self.producer_ids.next_producer_id}")
        lines.append(f"acls ({len(self.acls)}):")
        for acl_id in sorted(self.acls):
            pat, e = self.acls[acl_id].pattern, self.acls[acl_id].entry
            lines.append(
                f"  {acl_id} {pat.resource_type.name}:{pat.pattern_type.name}:{pat.name} "
                f"{e.permission_type.name} {e.principal} {e.operation.name} from {e.host}"
            )
        lines.append(f"scram users ({len(self.scram_credentials)}):")
        for user in sorted(self.scram_credentials):
            creds = self.scram_credentials[user]
            lines.append(f"  {user}: " + " ".join(f"{m}(iterations={creds[m].iterations})" for m in sorted(creds)))
        return "\n".join(lines)
