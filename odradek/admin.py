"""The Admin client: topics, partitions, configs, offsets and the cluster's shape.

Topic, partition and config changes go to any broker, which forwards them to the active controller.
A NOT_CONTROLLER answer (the controller is changing) or a broker that cannot be reached is retried
with backoff until ``timeout_ms`` (default ``default.api.timeout.ms``). A request that timed out is not
retried: it may have been applied.

Results: the calls that change several topics at once (``create_topics``, ``delete_topics``,
``create_partitions``) raise the typed error of the first topic that failed, in request order, with
every failure named in the message; the others in the same call may have succeeded. When nothing
failed, ``create_topics`` returns a :class:`TopicResult` per topic.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any

from common.clock import SYSTEM_CLOCK, Clock
from odradek.config import AdminConfig
from odradek.errors import (
    ElectionNotNeededError,
    IllegalStateError,
    KafkaError,
    KafkaTimeoutError,
    NotControllerError,
    UnknownTopicOrPartitionError,
    error_from_code,
)
from odradek.group.admin_calls import GroupAdmin
from odradek.net import ClusterClient
from odradek.security import admin_calls as security_calls
from odradek.security.acls import AclBinding, AclBindingFilter
from odradek.types import (
    BrokerDescription,
    ClusterDescription,
    ConfigEntry,
    ConfigResource,
    GroupDescription,
    GroupListing,
    NewTopic,
    NodeDescription,
    PartitionDescription,
    ReplicaLogDir,
    TopicDescription,
    TopicPartition,
    TopicResult,
    TransactionDescription,
    TransactionListing,
)
from proto import broker_pb2, common_pb2, controller_pb2

OFFSET_SPECS = {"earliest": -2, "latest": -1, "max_timestamp": -3}


class Admin:
    """A Kafka-style admin client. Thread-safe: calls are independent; the network layer is shared safely."""

    def __init__(self, config: Mapping[str, object], *, clock: Clock | None = None) -> None:
        self.config = cfg = AdminConfig.from_mapping(config)
        self._clock = clock or SYSTEM_CLOCK
        self._client = ClusterClient.for_config(cfg, clock=self._clock)
        self._closed = False

    # ---------------------------------------------------------------------------------- topics

    def create_topics(
        self, new_topics: Iterable[NewTopic], *, timeout_ms: float | None = None, validate_only: bool = False
    ) -> dict[str, TopicResult]:
        """Create topics; returns what the controller answered for each (see the module docstring on errors)."""
        topics = list(new_topics)
        for topic in topics:
            if not isinstance(topic, NewTopic):
                raise TypeError(f"create_topics() takes NewTopic values, got {topic!r}")
        request = controller_pb2.CreateTopicsRequest(
            topics=[_topic_to_create(t) for t in topics],
            validate_only=validate_only,
            timeout_ms=int(self._timeout(timeout_ms)),
        )
        response = self._forwarded("CreateTopics", request, timeout_ms)
        _raise_failures("create", response.topics)
        return {
            r.name: TopicResult(r.name, r.topic_id, r.num_partitions, r.replication_factor) for r in response.topics
        }

    def delete_topics(self, names: Iterable[str], *, timeout_ms: float | None = None) -> None:
        request = controller_pb2.DeleteTopicsRequest(names=_names(names), timeout_ms=int(self._timeout(timeout_ms)))
        _raise_failures("delete", self._forwarded("DeleteTopics", request, timeout_ms).topics)

    def create_partitions(
        self, new_counts: Mapping[str, int], *, timeout_ms: float | None = None, validate_only: bool = False
    ) -> None:
        """Grow topics to the given total numbers of partitions."""
        request = controller_pb2.CreatePartitionsRequest(
            topics=[controller_pb2.CreatePartitionsRequest.Topic(name=n, count=c) for n, c in new_counts.items()],
            validate_only=validate_only,
            timeout_ms=int(self._timeout(timeout_ms)),
        )
        _raise_failures("add partitions to", self._forwarded("CreatePartitions", request, timeout_ms).topics)

    def list_topics(self, *, include_internal: bool = False) -> list[str]:
        response = self._call("Metadata", broker_pb2.MetadataRequest(all_topics=True))
        return sorted(t.name for t in response.topics if not t.error.code and (include_internal or not t.is_internal))

    def describe_topics(self, names: Iterable[str] | None = None) -> dict[str, TopicDescription]:
        """Partitions, leaders, replicas and ISRs (every topic when ``names`` is None, internal ones included)."""
        wanted = None if names is None else _names(names)
        request = broker_pb2.MetadataRequest(all_topics=wanted is None, topics=wanted or [])
        response = self._call("Metadata", request)
        described: dict[str, TopicDescription] = {}
        for t in response.topics:
            if t.error.code:
                raise error_from_code(t.error.code, f"topic {t.name!r}: {t.error.message or t.error.code}")
            partitions = [
                PartitionDescription(
                    p.partition, p.leader, list(p.replicas), list(p.isr), p.leader_epoch, list(p.offline_replicas)
                )
                for p in sorted(t.partitions, key=lambda p: p.partition)
            ]
            described[t.name] = TopicDescription(t.name, partitions, t.topic_id, t.is_internal)
        missing = [n for n in wanted or () if n not in described]
        if missing:
            raise UnknownTopicOrPartitionError(f"topic {missing[0]!r} does not exist")
        return dict(sorted(described.items()))

    # --------------------------------------------------------------------------------- cluster

    def describe_cluster(self) -> ClusterDescription:
        response = self._call("DescribeCluster", broker_pb2.DescribeClusterRequest())
        _raise(response.error, "describing the cluster")
        return ClusterDescription(
            cluster_id=response.cluster_id,
            controller_id=response.controller_id,
            controllers=[
                NodeDescription(n.node_id, n.address) for n in sorted(response.controllers, key=lambda n: n.node_id)
            ],
            brokers=[
                BrokerDescription(b.node_id, f"{b.host}:{b.port}", b.fenced, b.rack)
                for b in sorted(response.brokers, key=lambda b: b.node_id)
            ],
        )

    def describe_log_dirs(
        self, broker_ids: Iterable[int], topics: Iterable[str] = ()
    ) -> dict[int, list[ReplicaLogDir]]:
        """The replicas each broker holds with their sizes (Kafka's DescribeLogDirs), asked of each broker;
        raises the first broker's failure (NetworkError when it does not answer)."""
        request = broker_pb2.DescribeLogDirsRequest(topics=_names(topics))
        described: dict[int, list[ReplicaLogDir]] = {}
        for broker_id in broker_ids:
            if self._closed:
                raise IllegalStateError("the admin client is closed")
            if self._client.stub_for(broker_id) is None:
                self._client.refresh()  # a broker not in the metadata yet
            response = self._client.call_node(broker_id, "DescribeLogDirs", request)
            _raise(response.error, f"describing the log dirs of broker {broker_id}")
            described[broker_id] = [
                ReplicaLogDir(r.topic, r.partition, r.size_bytes, r.log_start_offset, r.log_end_offset,
                              r.high_watermark, r.segments, r.is_leader)
                for r in response.replicas
            ]  # fmt: skip
        return described

    def list_offsets(
        self,
        specs: Mapping[TopicPartition, str | int],
        *,
        isolation_level: str = "read_uncommitted",
        timeout_ms: float | None = None,
    ) -> dict[TopicPartition, int]:
        """Offsets by ``"earliest"``, ``"latest"``, ``"max_timestamp"`` or a timestamp in ms (-1: no such record)."""
        timestamps: dict[TopicPartition, int] = {}
        for tp, spec in specs.items():
            if isinstance(spec, str) and spec in OFFSET_SPECS:
                timestamps[TopicPartition(*tp)] = OFFSET_SPECS[spec]
            elif type(spec) is int and spec >= 0:
                timestamps[TopicPartition(*tp)] = spec
            else:
                raise ValueError(
                    f"offset spec for {tp} must be earliest, latest, max_timestamp or a timestamp >= 0, got {spec!r}"
                )
        level = 1 if isolation_level == "read_committed" else 0
        listed = self._client.list_offsets(timestamps, self._timeout(timeout_ms), level, fail_on_unknown_topic=True)
        return {tp: listed[tp].offset for tp in timestamps}

    def elect_leaders(
        self, partitions: Iterable[TopicPartition] | None = None, *, unclean: bool = False
    ) -> dict[TopicPartition, int]:
        """Run preferred (or unclean) leader elections; returns each partition's leader afterwards."""
        by_topic: dict[str, list[int]] = {}
        for tp in partitions or ():
            by_topic.setdefault(tp[0], []).append(tp[1])
        request = controller_pb2.ElectLeadersRequest(
            unclean=unclean,
            topics=[
                controller_pb2.ElectLeadersRequest.TopicPartitions(topic=t, partitions=ps) for t, ps in by_topic.items()
            ],
        )
        response = self._forwarded("ElectLeaders", request, None)
        leaders: dict[TopicPartition, int] = {}
        for p in response.partitions:
            if p.error.code and p.error.code != ElectionNotNeededError.code:
                raise error_from_code(
                    p.error.code, f"electing a leader for {p.topic}-{p.partition}: {p.error.message or p.error.code}"
                )
            leaders[TopicPartition(p.topic, p.partition)] = p.leader
        return leaders

    # --------------------------------------------------------------------------------- configs

    def describe_configs(
        self, resources: Iterable[ConfigResource | tuple[str, str]], keys: Sequence[str] = ()
    ) -> dict[ConfigResource, dict[str, ConfigEntry]]:
        wanted = [ConfigResource(*r) for r in resources]
        request = broker_pb2.DescribeConfigsRequest(
            resources=[
                broker_pb2.DescribeConfigsRequest.Resource(
                    resource_type=r.resource_type, resource_name=r.name, keys=list(keys)
                )
                for r in wanted
            ]
        )
        response = self._call("DescribeConfigs", request)
        described: dict[ConfigResource, dict[str, ConfigEntry]] = {}
        for result in response.results:
            resource = ConfigResource(result.resource_type, result.resource_name)
            _raise(result.error, f"describing the configs of {resource.resource_type} {resource.name!r}")
            described[resource] = {
                c.key: ConfigEntry(c.key, c.value, c.source, c.is_default, c.read_only, c.sensitive)
                for c in result.configs
            }
        return described

    def alter_configs(
        self,
        changes: Mapping[ConfigResource | tuple[str, str], Mapping[str, str | None]],
        *,
        validate_only: bool = False,
    ) -> None:
        """Set keys (a value) or remove them (None: back to the default), per resource, incrementally."""
        request = controller_pb2.AlterConfigsRequest(
            resources=[
                controller_pb2.AlterConfigsRequest.Resource(
                    resource_type=ConfigResource(*r).resource_type,
                    resource_name=ConfigResource(*r).name,
                    entries=[
                        controller_pb2.ConfigEntry(key=k, value="" if v is None else str(v), delete=v is None)
                        for k, v in entries.items()
                    ],
                )
                for r, entries in changes.items()
            ],
            validate_only=validate_only,
        )
        response = self._forwarded("AlterConfigs", request, None)
        for result in response.resources:
            _raise(result.error, f"altering the configs of {result.resource_type} {result.resource_name!r}")

    # ---------------------------------------------------------------------------------- groups

    def list_groups(self, states: Iterable[str] = ()) -> list[GroupListing]:
        """Every consumer group of the cluster (optionally only those in ``states``, e.g. ["Stable"])."""
        return self._groups().list_groups(states)

    def describe_group(self, group_id: str) -> GroupDescription:
        """State, members and assignments, committed offsets and lag per partition (GroupIdNotFoundError)."""
        return self._groups().describe_group(group_id)

    def delete_groups(self, group_ids: Iterable[str]) -> None:
        """Delete groups that have no members, with their offsets (NonEmptyGroupError, GroupIdNotFoundError)."""
        self._groups().delete_groups(group_ids)

    def list_group_offsets(self, group_id: str) -> dict[TopicPartition, int | None]:
        """Every committed offset of ``group_id``."""
        return self._groups().committed(group_id)

    def alter_group_offsets(self, group_id: str, offsets: Mapping[TopicPartition, int]) -> None:
        """Commit ``offsets`` for a group without active members (NonEmptyGroupError otherwise)."""
        self._groups().alter_group_offsets(group_id, offsets)

    def reset_group_offsets(
        self,
        group_id: str,
        partitions: Iterable[TopicPartition],
        to: str | int | datetime.datetime,
        *,
        execute: bool = True,
    ) -> dict[TopicPartition, int]:
        """Reset an inactive group's offsets to "earliest", "latest", an offset or a datetime (with its zone).

        Returns the new offsets; with ``execute=False`` only computes them (a dry run).
        """
        return self._groups().reset_offsets(group_id, partitions, to, execute=execute)

    # ------------------------------------------------------------------ ACLs and SCRAM credentials

    def create_acls(self, bindings: Iterable[AclBinding]) -> None:
        """Kafka's ``createAcls``: every binding, or the first failure's error naming every failure."""
        security_calls.create_acls(lambda m, r: self._forwarded(m, r, None), bindings)

    def delete_acls(self, filters: Iterable[AclBindingFilter]) -> list[AclBinding]:
        """Kafka's ``deleteAcls``: removes every ACL a filter matches and returns them."""
        return security_calls.delete_acls(lambda m, r: self._forwarded(m, r, None), filters)

    def describe_acls(self, acl_filter: AclBindingFilter | None = None) -> list[AclBinding]:
        """Kafka's ``describeAcls`` (default: every ACL)."""
        return security_calls.describe_acls(self._call, acl_filter or AclBindingFilter())

    def upsert_scram_credential(
        self, user: str, mechanism: str, password: str, iterations: int = security_calls.DEFAULT_ITERATIONS
    ) -> None:
        """Sets ``user``'s credential for ``mechanism`` (``kafka-configs --alter --add-config``)."""
        upsert = security_calls.upsertion(user, mechanism, password, iterations)
        security_calls.alter_user_scram_credentials(lambda m, r: self._forwarded(m, r, None), [upsert])

    def delete_scram_credential(self, user: str, mechanism: str) -> None:
        """Removes ``user``'s credential for ``mechanism`` (``kafka-configs --alter --delete-config``)."""
        security_calls.alter_user_scram_credentials(
            lambda m, r: self._forwarded(m, r, None), deletions=[(user, mechanism)]
        )

    def describe_user_scram_credentials(
        self, users: Iterable[str] = ()
    ) -> dict[str, list[security_calls.ScramCredentialInfo]]:
        """Kafka's ``describeUserScramCredentials`` (default: every user)."""
        return security_calls.describe_user_scram_credentials(self._call, users)

    # ---------------------------------------------------------------------------- transactions

    def list_transactions(self, states: Iterable[str] = ()) -> list[TransactionListing]:
        """Every transactional id of the cluster (optionally only in ``states``, Kafka's names)."""
        from odradek.txn_admin import list_transactions

        self._check_open()
        return list_transactions(self._client, list(states))

    def describe_transactions(self, transactional_ids: Iterable[str]) -> dict[str, TransactionDescription]:
        """Each id's state, producer id and epoch and partitions at its coordinator
        (TransactionalIdNotFoundError for an unknown one)."""
        from odradek.txn_admin import describe_transaction

        self._check_open()
        return {t: describe_transaction(self._client, t, self._timeout(None)) for t in transactional_ids}

    def _check_open(self) -> None:
        if self._closed:
            raise IllegalStateError("the admin client is closed")

    def _groups(self) -> GroupAdmin:
        if self._closed:
            raise IllegalStateError("the admin client is closed")
        return GroupAdmin(self._client, self._timeout(None))

    # --------------------------------------------------------------------------------- plumbing

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._client.close()

    def __enter__(self) -> Admin:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _timeout(self, timeout_ms: float | None) -> float:
        return float(self.config.default_api_timeout_ms if timeout_ms is None else timeout_ms)

    def _call(self, method: str, request: Any) -> Any:
        if self._closed:
            raise IllegalStateError("the admin client is closed")
        return self._client.call_any(method, request)

    def _forwarded(self, method: str, request: Any, timeout_ms: float | None) -> Any:
        """Call a controller-bound RPC through any broker, retrying NOT_CONTROLLER and unreachable brokers."""
        timeout = self._timeout(timeout_ms)
        deadline = self._clock.monotonic_ms() + timeout
        attempt = 0
        while True:
            error: KafkaError
            try:
                response = self._call(method, request)
            except KafkaError as exc:
                if isinstance(exc, KafkaTimeoutError) or not exc.retriable:
                    raise
                error = exc
            else:
                if not response.error.code:
                    return response
                error = error_from_code(
                    response.error.code, f"{method}: {response.error.message or response.error.code}"
                )
                if not isinstance(error, NotControllerError):
                    raise error
            now = self._clock.monotonic_ms()
            if now >= deadline:
                raise KafkaTimeoutError(f"{method} did not succeed within {timeout:.0f} ms; last error: {error}")
            time.sleep(min(self._client.backoff.backoff_ms(attempt), deadline - now) / 1000)
            attempt += 1


def _names(names: Iterable[str]) -> list[str]:
    if isinstance(names, str):
        raise TypeError(f"give a list of topic names, not the string {names!r}")
    return list(names)


def _topic_to_create(topic: NewTopic) -> controller_pb2.TopicToCreate:
    assignments = []
    if topic.replica_assignment:
        for partition in range(len(topic.replica_assignment)):
            if partition not in topic.replica_assignment:
                raise ValueError(f"replica_assignment of {topic.name!r} must cover partitions 0..n-1")
            assignments.append(controller_pb2.ReplicaList(broker_ids=topic.replica_assignment[partition]))
    return controller_pb2.TopicToCreate(
        name=topic.name,
        num_partitions=topic.num_partitions,
        replication_factor=topic.replication_factor,
        configs={k: str(v) for k, v in topic.config.items()},
        assignments=assignments,
    )


def _raise(error: common_pb2.Error, what: str) -> None:
    if error.code:
        raise error_from_code(error.code, f"{what}: {error.message or error.code}")


def _raise_failures(verb: str, results: Iterable[controller_pb2.TopicResult]) -> None:
    """Raise the first failed topic's typed error, naming every failure."""
    failures = [(r.name, r.error) for r in results if r.error.code]
    if not failures:
        return
    name, first = failures[0]
    text = "; ".join(f"{n!r}: {e.message or e.code} ({e.code})" for n, e in failures)
    prefix = f"could not {verb} topic {name!r}" if len(failures) == 1 else f"could not {verb} {len(failures)} topics"
    raise error_from_code(
        first.code, f"{prefix}: {text}" if len(failures) > 1 else f"{prefix}: {first.message or first.code}"
    )
