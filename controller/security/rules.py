"""What each RPC needs: the table of ``docs/SECURITY.md`` ("What each RPC needs") as functions of the request.

A rule takes the request and a :class:`Check` (the authorizer bound to one principal and host) and returns
None (allowed) or a :class:`Denial` with Kafka's error code. Rules the tests cite:

* R1. Every RPC of the Broker and Controller services has a rule; an RPC without one is refused (fail closed).
* R2. A call that names a resource the principal may not use is refused whole, with the error of that
  resource's type (TOPIC_, GROUP_, CLUSTER_, TRANSACTIONAL_ID_AUTHORIZATION_FAILED), and changes nothing.
  (Kafka answers per topic and serves the others; here a multi-topic call is all or nothing.)
* R3. Broker-only operations (RegisterBroker, BrokerHeartbeat, AlterPartition, FetchMetadata,
  AllocateProducerIds, WriteTxnMarkers, a follower's Fetch, ListOffsets and OffsetsForLeaderEpoch with
  ``replica_id >= 0``) need ClusterAction on the cluster.
* R4. On a controller, ClusterAction on the cluster allows every RPC: brokers forward admin calls they have
  authorized already (Kafka forwards them in an envelope; Odradek's brokers call as themselves).
* R5. Metadata answers only the topics the principal may DESCRIBE (:func:`filter_metadata`); ListGroups
  without DESCRIBE on the cluster answers only the groups it may DESCRIBE (:func:`filter_groups`);
  ListTransactions only the transactional ids it may DESCRIBE (:func:`filter_transactions`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from controller.security.authorizer import Authorizer
from metadata.acl import CLUSTER_RESOURCE_NAME, AclOperation, ResourceType

Op, Rt = AclOperation, ResourceType

_FAILED = {
    Rt.TOPIC: "TOPIC_AUTHORIZATION_FAILED",
    Rt.GROUP: "GROUP_AUTHORIZATION_FAILED",
    Rt.CLUSTER: "CLUSTER_AUTHORIZATION_FAILED",
    Rt.TRANSACTIONAL_ID: "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
}


@dataclass(frozen=True, slots=True)
class Denial:
    code: str
    message: str


@dataclass(frozen=True, slots=True)
class Check:
    """The authorizer bound to one caller."""

    authorizer: Authorizer
    principal: str
    host: str

    def allowed(self, op: AclOperation, rtype: ResourceType, name: str = CLUSTER_RESOURCE_NAME) -> bool:
        return self.authorizer.authorize(self.principal, self.host, op, rtype, name)

    def need(self, op: AclOperation, rtype: ResourceType, names: Iterable[str]) -> Denial | None:
        """R2: the first name of ``names`` the caller may not ``op``, as a Denial."""
        for name in names:
            if not self.allowed(op, rtype, name):
                what = "the cluster" if rtype is Rt.CLUSTER else f"{rtype.name} {name!r}"
                return Denial(_FAILED[rtype], f"{self.principal} is not authorized to {op.name} {what}")
        return None

    def cluster(self, op: AclOperation) -> Denial | None:
        return self.need(op, Rt.CLUSTER, [CLUSTER_RESOURCE_NAME])


Rule = Callable[[Any, Check], Denial | None]


def _topics(op: AclOperation, names: Callable[[Any], Iterable[str]]) -> Rule:
    return lambda req, check: check.need(op, Rt.TOPIC, names(req))


def _cluster(op: AclOperation) -> Rule:
    return lambda req, check: check.cluster(op)


def _replica_or(op: AclOperation, names: Callable[[Any], Iterable[str]]) -> Rule:
    """R3: a follower (``replica_id >= 0``) needs ClusterAction; a client needs ``op`` on the topics."""

    def rule(req: Any, check: Check) -> Denial | None:
        if req.replica_id >= 0:
            return check.cluster(Op.CLUSTER_ACTION)
        return check.need(op, Rt.TOPIC, names(req))

    return rule


def _create_topics(req: Any, check: Check) -> Denial | None:
    if check.allowed(Op.CREATE, Rt.CLUSTER):
        return None
    return check.need(Op.CREATE, Rt.TOPIC, [t.name for t in req.topics])


def _configs(op: AclOperation) -> Rule:
    def rule(req: Any, check: Check) -> Denial | None:
        for resource in req.resources:
            if str(resource.resource_type).lower() == "topic":
                denial = check.need(op, Rt.TOPIC, [resource.resource_name])
            else:  # a broker or the cluster
                denial = check.cluster(op)
            if denial is not None:
                return denial
        return None

    return rule


def _produce(req: Any, check: Check) -> Denial | None:
    if req.transactional_id:
        denial = check.need(Op.WRITE, Rt.TRANSACTIONAL_ID, [req.transactional_id])
        if denial is not None:
            return denial
    return check.need(Op.WRITE, Rt.TOPIC, [t.name for t in req.topics])


def _init_producer_id(req: Any, check: Check) -> Denial | None:
    if req.transactional_id:
        return check.need(Op.WRITE, Rt.TRANSACTIONAL_ID, [req.transactional_id])
    if check.allowed(Op.IDEMPOTENT_WRITE, Rt.CLUSTER):
        return None
    if check.authorizer.authorize_any(check.principal, check.host, Op.WRITE, Rt.TOPIC):
        return None  # Kafka's rule: WRITE on any topic is enough for an idempotent producer id
    return check.cluster(Op.IDEMPOTENT_WRITE)


def _find_coordinator(req: Any, check: Check) -> Denial | None:
    rtype = Rt.TRANSACTIONAL_ID if req.key_type == 1 else Rt.GROUP
    return check.need(Op.DESCRIBE, rtype, list(req.keys))


def _group(op: AclOperation, also_topics: AclOperation | None = None, topic_names: Any = None) -> Rule:
    def rule(req: Any, check: Check) -> Denial | None:
        denial = check.need(op, Rt.GROUP, [req.group_id])
        if denial is None and also_topics is not None:
            denial = check.need(also_topics, Rt.TOPIC, topic_names(req))
        return denial

    return rule


def _no_requirement(req: Any, check: Check) -> Denial | None:
    return None


_ADMIN: dict[str, Rule] = {
    "CreateTopics": _create_topics,
    "DeleteTopics": _topics(Op.DELETE, lambda r: r.names),
    "CreatePartitions": _topics(Op.ALTER, lambda r: [t.name for t in r.topics]),
    "AlterConfigs": _configs(Op.ALTER_CONFIGS),
    "ElectLeaders": _cluster(Op.ALTER),
    "CreateAcls": _cluster(Op.ALTER),
    "DeleteAcls": _cluster(Op.ALTER),
    "AlterUserScramCredentials": _cluster(Op.ALTER),
}

BROKER_RULES: Mapping[str, Rule] = {
    "Metadata": _no_requirement,  # R5: filtered by DESCRIBE
    "Produce": _produce,
    "Fetch": _replica_or(Op.READ, lambda r: [t.name for t in r.topics]),
    "ListOffsets": _replica_or(Op.DESCRIBE, lambda r: [p.topic for p in r.partitions]),
    "OffsetsForLeaderEpoch": _replica_or(Op.DESCRIBE, lambda r: [p.topic for p in r.partitions]),
    "DescribeCluster": _no_requirement,  # Kafka's: any authenticated principal
    "DescribeConfigs": _configs(Op.DESCRIBE_CONFIGS),
    "DescribeLogDirs": _cluster(Op.DESCRIBE),
    **_ADMIN,
    "DescribeAcls": _cluster(Op.DESCRIBE),
    "DescribeUserScramCredentials": _cluster(Op.DESCRIBE),
    "InitProducerId": _init_producer_id,
    "FindCoordinator": _find_coordinator,
    "ConsumerGroupHeartbeat": _group(Op.READ),
    "OffsetCommit": _group(Op.READ, Op.READ, lambda r: [t.name for t in r.topics]),
    "OffsetFetch": _group(Op.DESCRIBE, Op.DESCRIBE, lambda r: [t.topic for t in r.topics]),
    "ListGroups": _no_requirement,  # R5: filtered by DESCRIBE
    "ConsumerGroupDescribe": lambda req, check: check.need(Op.DESCRIBE, Rt.GROUP, list(req.group_ids)),
    "DeleteGroups": lambda req, check: check.need(Op.DELETE, Rt.GROUP, list(req.group_ids)),
}

def _txn(also: Callable[[Any, Check], Denial | None] | None = None) -> Rule:
    """WRITE on the transactional id, then ``also`` (Kafka's transaction APIs)."""

    def rule(req: Any, check: Check) -> Denial | None:
        denial = check.need(Op.WRITE, Rt.TRANSACTIONAL_ID, [req.transactional_id])
        return denial if denial is not None or also is None else also(req, check)

    return rule


BROKER_RULES = {
    **BROKER_RULES,
    "AddPartitionsToTxn": lambda req, check: check.cluster(Op.CLUSTER_ACTION) if req.verify_only else _txn(
        lambda req, check: check.need(Op.WRITE, Rt.TOPIC, [t.topic for t in req.topics]))(req, check),  # R3: a
    # leader's verification (verify_only, KIP-890) comes from brokers only
    "AddOffsetsToTxn": _txn(lambda req, check: check.need(Op.READ, Rt.GROUP, [req.group_id])),
    "EndTxn": _txn(),
    "TxnOffsetCommit": _txn(_group(Op.READ, Op.READ, lambda r: [t.name for t in r.topics])),
    "WriteTxnMarkers": _cluster(Op.CLUSTER_ACTION),  # R3: from transaction coordinators (brokers) only
    "ReplicaFetch": BROKER_RULES["Fetch"],  # a stream of Fetch requests: each one checked as a Fetch
    "FetchStream": BROKER_RULES["Fetch"],  # a consumer's stream of Fetch requests: each checked as a Fetch
    "ProduceStream": BROKER_RULES["Produce"],  # a producer's stream of Produce requests: each checked as one
    "ListTransactions": _no_requirement,  # R5: filtered by DESCRIBE on each transactional id
    "DescribeTransactions": lambda req, check: check.need(Op.DESCRIBE, Rt.TRANSACTIONAL_ID,
                                                          list(req.transactional_ids)),
}

_BROKER_ONLY = ("RegisterBroker", "BrokerHeartbeat", "AlterPartition", "FetchMetadata", "AllocateProducerIds")


def _controller_rule(rule: Rule) -> Rule:
    """R4: ClusterAction first, then the RPC's own rule."""
    return lambda req, check: None if check.allowed(Op.CLUSTER_ACTION, Rt.CLUSTER) else rule(req, check)


CONTROLLER_RULES: Mapping[str, Rule] = {
    **{name: _cluster(Op.CLUSTER_ACTION) for name in _BROKER_ONLY},  # R3
    "DescribeQuorum": _controller_rule(_cluster(Op.DESCRIBE)),
    **{name: _controller_rule(rule) for name, rule in _ADMIN.items()},
}


def filter_metadata(response: Any, check: Check, requested: Iterable[str]) -> None:
    """R5: drops the topics the caller may not DESCRIBE; one it asked for by name answers
    TOPIC_AUTHORIZATION_FAILED, as Kafka's Metadata does."""
    asked = set(requested)
    kept = []
    for topic in response.topics:
        if check.allowed(Op.DESCRIBE, Rt.TOPIC, topic.name):
            kept.append(topic)
        elif topic.name in asked:
            denied = type(topic)(name=topic.name)
            denied.error.code = "TOPIC_AUTHORIZATION_FAILED"
            denied.error.message = f"{check.principal} is not authorized to DESCRIBE TOPIC {topic.name!r}"
            kept.append(denied)
    del response.topics[:]
    response.topics.extend(kept)


def filter_transactions(response: Any, check: Check) -> None:
    """R5: ListTransactions answers the transactional ids the caller may DESCRIBE."""
    kept = [t for t in response.transactions if check.allowed(Op.DESCRIBE, Rt.TRANSACTIONAL_ID, t.transactional_id)]
    del response.transactions[:]
    response.transactions.extend(kept)


def filter_groups(response: Any, check: Check) -> None:
    """R5: without DESCRIBE on the cluster, only the groups the caller may DESCRIBE."""
    if check.allowed(Op.DESCRIBE, Rt.CLUSTER):
        return
    kept = [g for g in response.groups if check.allowed(Op.DESCRIBE, Rt.GROUP, g.group_id)]
    del response.groups[:]
    response.groups.extend(kept)
