"""The typed records of the ``__cluster_metadata`` log.

One frozen, slotted dataclass per record type, each with a fixed ``TYPE_ID`` (Kafka's api key where Kafka
has the same record) and a schema ``VERSION``. A record validates its own fields when built, so every
record that exists can be encoded (:mod:`metadata.record_codec`); whether it fits the current image is
:mod:`metadata.image`'s call.

The security records, with Kafka's type ids, are records like the others (one registry, one codec):

=====  ==================================  ==========================================================
type   record                              effect on the image
=====  ==================================  ==========================================================
11     :class:`UserScramCredential`        sets one user's credential for one mechanism
22     :class:`RemoveUserScramCredential`  removes it (the user must have it)
18     :class:`AccessControlEntry`         adds one ACL binding under a new random id
19     :class:`RemoveAccessControlEntry`   removes the binding with that id (it must exist)
=====  ==================================  ==========================================================

Their fields are checked by ``metadata/acl.py`` (A1-A2) and ``metadata/scram.py`` (S1) when built.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import ClassVar

from metadata._validate import (
    INT16_MAX,
    INT32_MAX,
    INT64_MAX,
    check_bool,
    check_int,
    check_str,
    check_topic_name,
    check_uuid,
    coerce_ids,
    fail,
)
from metadata.acl import AclBinding, AclError
from metadata.errors import InvalidMetadataRecordError
from metadata.scram import MECHANISMS, ScramCredential, ScramError

NO_LEADER = -1
"""``leader`` of a partition that has none (offline)."""
PRODUCER_ID_BLOCK_SIZE = 1000
"""Producer ids the controller hands a broker at a time, like Kafka's ``PRODUCER_ID_BLOCK_SIZE``."""


# --- the records ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A listener of a broker: clients of listener ``name`` connect to ``host:port``."""

    name: str
    host: str
    port: int

    def __post_init__(self) -> None:
        check_str(self, "name", nonempty=True)
        check_str(self, "host", nonempty=True)
        check_int(self, "port", 0, 65535)

    @property
    def address(self) -> str:
        """``host:port`` (``[host]:port`` for an IPv6 literal)."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @classmethod
    def parse(cls, name: str, address: str) -> Endpoint:
        """The endpoint of listener ``name`` at ``address`` (``host:port`` or ``[ipv6]:port``)."""
        host, sep, port = address.rpartition(":")
        if not sep or not port.isdigit():
            raise InvalidMetadataRecordError(f"Endpoint: {address!r} is not host:port")
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        return cls(name, host, int(port))


@dataclass(frozen=True, slots=True)
class RegisterBroker:
    """A broker joined (or rejoined, with a higher ``broker_epoch``); it starts fenced.

    ``broker_epoch`` is assigned by the controller and grows with each registration of the same id.
    ``fenced`` and ``in_controlled_shutdown`` let a snapshot restore a registration as it stood.
    """

    TYPE_ID: ClassVar[int] = 0
    VERSION: ClassVar[int] = 0
    broker_id: int
    incarnation_id: str
    broker_epoch: int
    endpoints: tuple[Endpoint, ...] = ()
    rack: str | None = None
    fenced: bool = True
    in_controlled_shutdown: bool = False

    def __post_init__(self) -> None:
        check_int(self, "broker_id", 0, INT32_MAX)
        check_uuid(self, "incarnation_id")
        check_int(self, "broker_epoch", 0, INT64_MAX)
        if not isinstance(self.endpoints, tuple | list) or not all(
            isinstance(e, Endpoint) for e in self.endpoints
        ):
            fail(self, f"endpoints must be a tuple of Endpoint, got {self.endpoints!r}")
        object.__setattr__(self, "endpoints", tuple(self.endpoints))
        names = [e.name for e in self.endpoints]
        if len(set(names)) != len(names):
            fail(self, f"endpoints name a listener twice: {names}")
        check_str(self, "rack", optional=True)
        check_bool(self, "fenced")
        check_bool(self, "in_controlled_shutdown")


@dataclass(frozen=True, slots=True)
class _BrokerEpochRecord:
    """Shared shape of the records that name one registration of a broker: id and epoch."""

    broker_id: int
    broker_epoch: int

    def __post_init__(self) -> None:
        check_int(self, "broker_id", 0, INT32_MAX)
        check_int(self, "broker_epoch", 0, INT64_MAX)


@dataclass(frozen=True, slots=True)
class UnregisterBroker(_BrokerEpochRecord):
    """The broker's registration ``broker_epoch`` is removed from the cluster."""

    TYPE_ID: ClassVar[int] = 1
    VERSION: ClassVar[int] = 0


@dataclass(frozen=True, slots=True)
class FenceBroker(_BrokerEpochRecord):
    """The broker may no longer lead or be in an ISR (its heartbeats stopped, or it asked)."""

    TYPE_ID: ClassVar[int] = 7
    VERSION: ClassVar[int] = 0


@dataclass(frozen=True, slots=True)
class UnfenceBroker(_BrokerEpochRecord):
    """The broker caught up with the metadata log and may serve again."""

    TYPE_ID: ClassVar[int] = 8
    VERSION: ClassVar[int] = 0


@dataclass(frozen=True, slots=True)
class BrokerControlledShutdown(_BrokerEpochRecord):
    """The broker is shutting down in order: move its leaderships away, then fence it.

    Kafka's ``BrokerRegistrationChangeRecord`` (type 17) narrowed to its in-controlled-shutdown flag; the
    flag is only ever set, and cleared by the broker's next registration.
    """

    TYPE_ID: ClassVar[int] = 17
    VERSION: ClassVar[int] = 0


@dataclass(frozen=True, slots=True)
class Topic:
    """A topic named ``name`` with the never-reused id ``topic_id``; its partitions follow."""

    TYPE_ID: ClassVar[int] = 2
    VERSION: ClassVar[int] = 0
    name: str
    topic_id: str

    def __post_init__(self) -> None:
        check_topic_name(self, "name")
        check_uuid(self, "topic_id", allow_nil=False)


@dataclass(frozen=True, slots=True)
class Partition:
    """Partition ``partition`` of topic ``topic_id`` as it stands: replicas, ISR, leader and epochs.

    ``leader`` is ``NO_LEADER`` (-1) or a member of ``isr``, which is a subset of ``replicas``.
    """

    TYPE_ID: ClassVar[int] = 3
    VERSION: ClassVar[int] = 0
    topic_id: str
    partition: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int = 0
    partition_epoch: int = 0
    elr: tuple[int, ...] = ()  # KIP-966 eligible leader replicas: out of the ISR, still holding the HW
    last_known_elr: tuple[int, ...] = ()  # KIP-966: left the ELR by an unclean shutdown

    def __post_init__(self) -> None:
        check_uuid(self, "topic_id", allow_nil=False)
        check_int(self, "partition", 0, INT32_MAX)
        coerce_ids(self, "replicas", nonempty=True)
        coerce_ids(self, "isr")
        coerce_ids(self, "elr")
        coerce_ids(self, "last_known_elr")
        check_int(self, "leader", NO_LEADER, INT32_MAX)
        check_int(self, "leader_epoch", 0, INT32_MAX)
        check_int(self, "partition_epoch", 0, INT32_MAX)
        if not set(self.isr) <= set(self.replicas):
            fail(self, f"isr {list(self.isr)} is not a subset of replicas {list(self.replicas)}")
        if self.leader != NO_LEADER and self.leader not in self.isr:
            fail(self, f"leader {self.leader} is not in the isr {list(self.isr)}")
        if not set(self.elr) <= set(self.replicas) or set(self.elr) & set(self.isr):
            fail(self, f"elr {list(self.elr)} must be replicas {list(self.replicas)} outside the isr {list(self.isr)}")


@dataclass(frozen=True, slots=True)
class PartitionChange:
    """A change of one partition; ``None`` fields are unchanged, at least one is set.

    Applying it bumps ``partition_epoch`` by one, and ``leader_epoch`` by one when the leader changes.
    """

    TYPE_ID: ClassVar[int] = 5
    VERSION: ClassVar[int] = 0
    topic_id: str
    partition: int
    isr: tuple[int, ...] | None = None
    leader: int | None = None
    replicas: tuple[int, ...] | None = None
    elr: tuple[int, ...] | None = None  # KIP-966
    last_known_elr: tuple[int, ...] | None = None  # KIP-966

    def __post_init__(self) -> None:
        check_uuid(self, "topic_id", allow_nil=False)
        check_int(self, "partition", 0, INT32_MAX)
        coerce_ids(self, "isr", optional=True)
        if self.leader is not None:
            check_int(self, "leader", NO_LEADER, INT32_MAX)
        coerce_ids(self, "replicas", optional=True, nonempty=True)
        coerce_ids(self, "elr", optional=True)
        coerce_ids(self, "last_known_elr", optional=True)
        fields = (self.isr, self.leader, self.replicas, self.elr, self.last_known_elr)
        if all(f is None for f in fields):
            fail(self, "changes nothing: set isr, leader, replicas, elr or last_known_elr")


@dataclass(frozen=True, slots=True)
class RemoveTopic:
    """The topic, its partitions and its configs are deleted."""

    TYPE_ID: ClassVar[int] = 9
    VERSION: ClassVar[int] = 0
    topic_id: str

    def __post_init__(self) -> None:
        check_uuid(self, "topic_id", allow_nil=False)


class ConfigResourceType(StrEnum):
    """What a config belongs to; the values are the strings the Admin API uses."""

    TOPIC = "topic"
    BROKER = "broker"  # resource_name: the broker id in decimal
    CLUSTER = "cluster"  # resource_name: "" (Kafka's cluster-wide default broker config)


@dataclass(frozen=True, slots=True)
class Config:
    """Sets config ``key`` of a resource to ``value``; ``value=None`` deletes the key."""

    TYPE_ID: ClassVar[int] = 4
    VERSION: ClassVar[int] = 0
    resource_type: ConfigResourceType
    resource_name: str
    key: str
    value: str | None

    def __post_init__(self) -> None:
        if not isinstance(self.resource_type, ConfigResourceType):
            fail(self, f"resource_type must be a ConfigResourceType, got {self.resource_type!r}")
        if self.resource_type is ConfigResourceType.TOPIC:
            check_topic_name(self, "resource_name")
        elif self.resource_type is ConfigResourceType.BROKER:
            name = self.resource_name
            if not (
                isinstance(name, str)
                and name.isdecimal()
                and name.isascii()
                and str(int(name)) == name
                and int(name) <= INT32_MAX
            ):
                fail(self, f"a broker config's resource_name must be a broker id, got {name!r}")
        elif self.resource_name != "":
            fail(self, f"a cluster config's resource_name must be '', got {self.resource_name!r}")
        check_str(self, "key", nonempty=True)
        check_str(self, "value", optional=True)


@dataclass(frozen=True, slots=True)
class ProducerIds:
    """Broker ``broker_id`` got the producer ids up to ``next_producer_id``, the next block's start."""

    TYPE_ID: ClassVar[int] = 15
    VERSION: ClassVar[int] = 0
    broker_id: int
    broker_epoch: int
    next_producer_id: int

    def __post_init__(self) -> None:
        check_int(self, "broker_id", 0, INT32_MAX)
        check_int(self, "broker_epoch", 0, INT64_MAX)
        check_int(self, "next_producer_id", 1, INT64_MAX)


@dataclass(frozen=True, slots=True)
class FeatureLevel:
    """The finalized level of feature ``name`` (e.g. ``metadata.version``); level 0 removes it."""

    TYPE_ID: ClassVar[int] = 12
    VERSION: ClassVar[int] = 0
    name: str
    level: int

    def __post_init__(self) -> None:
        check_str(self, "name", nonempty=True)
        check_int(self, "level", 0, INT16_MAX)


@dataclass(frozen=True, slots=True)
class NoOp:
    """Advances the metadata offset and nothing else (a heartbeat of the log)."""

    TYPE_ID: ClassVar[int] = 20
    VERSION: ClassVar[int] = 0


@dataclass(frozen=True, slots=True)
class LeaderChange:
    """Controller ``leader_id`` became active in Raft term ``term``: written before it acts.

    Kafka writes this as a control record (``LeaderChangeMessage``); here it is an ordinary record with
    a type id outside Kafka's metadata record keys.
    """

    TYPE_ID: ClassVar[int] = 64
    VERSION: ClassVar[int] = 0
    term: int
    leader_id: int
    leader_address: str = ""  # host:port of its Controller gRPC service ("" when unknown)

    def __post_init__(self) -> None:
        check_int(self, "term", 0, INT64_MAX)
        check_int(self, "leader_id", 0, INT32_MAX)
        check_str(self, "leader_address")


# --- the security records (Kafka's type ids) -------------------------------------------------------


def _check_mechanism(rec: object, mechanism: str) -> None:
    if mechanism not in MECHANISMS:
        fail(rec, f"unknown SCRAM mechanism {mechanism!r}")


@dataclass(frozen=True, slots=True)
class UserScramCredential:
    """User ``name``'s SCRAM credential for ``credential.mechanism`` (Kafka's UserScramCredentialRecord)."""

    TYPE_ID: ClassVar[int] = 11
    VERSION: ClassVar[int] = 0
    name: str
    credential: ScramCredential

    def __post_init__(self) -> None:
        check_str(self, "name", nonempty=True)
        try:
            self.credential.validate()
        except ScramError as exc:
            fail(self, str(exc))


@dataclass(frozen=True, slots=True)
class RemoveUserScramCredential:
    """User ``name`` loses its credential for ``mechanism``."""

    TYPE_ID: ClassVar[int] = 22
    VERSION: ClassVar[int] = 0
    name: str
    mechanism: str

    def __post_init__(self) -> None:
        check_str(self, "name", nonempty=True)
        _check_mechanism(self, self.mechanism)


@dataclass(frozen=True, slots=True)
class AccessControlEntry:
    """ACL ``binding`` under the id ``acl_id`` (Kafka's AccessControlEntryRecord)."""

    TYPE_ID: ClassVar[int] = 18
    VERSION: ClassVar[int] = 0
    acl_id: str
    binding: AclBinding

    def __post_init__(self) -> None:
        check_uuid(self, "acl_id", allow_nil=False)
        try:
            self.binding.validate()
        except AclError as exc:
            fail(self, str(exc))


@dataclass(frozen=True, slots=True)
class RemoveAccessControlEntry:
    """The ACL with id ``acl_id`` is removed."""

    TYPE_ID: ClassVar[int] = 19
    VERSION: ClassVar[int] = 0
    acl_id: str

    def __post_init__(self) -> None:
        check_uuid(self, "acl_id", allow_nil=False)


SecurityRecord = UserScramCredential | RemoveUserScramCredential | AccessControlEntry | RemoveAccessControlEntry


MetadataRecord = (
    RegisterBroker
    | UnregisterBroker
    | FenceBroker
    | UnfenceBroker
    | BrokerControlledShutdown
    | Topic
    | Partition
    | PartitionChange
    | RemoveTopic
    | Config
    | ProducerIds
    | FeatureLevel
    | NoOp
    | LeaderChange
    | UserScramCredential
    | RemoveUserScramCredential
    | AccessControlEntry
    | RemoveAccessControlEntry
)
"""Any record of the ``__cluster_metadata`` log."""
