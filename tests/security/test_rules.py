"""The per-RPC table (``controller/security/rules.py`` R1-R5): for every Broker and Controller RPC, a caller
without ACLs is refused with the error of the resource's type, and the ACL the table names is what allows it."""

from __future__ import annotations

from typing import Any

import pytest

from controller.security.authorizer import Authorizer
from controller.security.rules import BROKER_RULES, CONTROLLER_RULES, Check, filter_groups, filter_metadata
from metadata.acl import AccessControlEntry, AclBinding, AclOperation, AclPermissionType, PatternType
from metadata.acl import ResourcePattern as P
from metadata.acl import ResourceType as Rt
from proto import broker_pb2 as b
from proto import controller_pb2 as c
from proto import security_pb2 as s

Op = AclOperation
ME = "User:bob"
CLUSTER = (Rt.CLUSTER, "kafka-cluster")


def allow(op: AclOperation, rtype: Rt, name: str) -> AclBinding:
    return AclBinding(P(rtype, name, PatternType.LITERAL), AccessControlEntry(ME, "*", op, AclPermissionType.ALLOW))


def check(*bindings: AclBinding) -> Check:
    return Check(Authorizer(frozenset(bindings)), ME, "10.0.0.1")


# RPC -> (request, the error without ACLs, the ACLs that allow it)
BROKER_CASES: dict[str, tuple[Any, str, list[tuple[AclOperation, Rt, str]]]] = {
    "Produce": (b.ProduceRequest(topics=[b.ProduceTopicData(name="t")]), "TOPIC", [(Op.WRITE, Rt.TOPIC, "t")]),
    "Fetch": (b.FetchRequest(replica_id=-1, topics=[b.FetchTopic(name="t")]), "TOPIC", [(Op.READ, Rt.TOPIC, "t")]),
    "ListOffsets": (b.ListOffsetsRequest(replica_id=-1, partitions=[b.ListOffsetsPartition(topic="t")]), "TOPIC",
                    [(Op.DESCRIBE, Rt.TOPIC, "t")]),
    "OffsetsForLeaderEpoch": (b.OffsetsForLeaderEpochRequest(
        replica_id=-1, partitions=[b.OffsetForLeaderPartition(topic="t")]), "TOPIC", [(Op.READ, Rt.TOPIC, "t")]),
    "DescribeConfigs": (b.DescribeConfigsRequest(resources=[b.DescribeConfigsRequest.Resource(
        resource_type="topic", resource_name="t")]), "TOPIC", [(Op.ALTER_CONFIGS, Rt.TOPIC, "t")]),
    "DescribeLogDirs": (b.DescribeLogDirsRequest(), "CLUSTER", [(Op.DESCRIBE, *CLUSTER)]),
    "CreateTopics": (c.CreateTopicsRequest(topics=[c.TopicToCreate(name="t")]), "TOPIC", [(Op.CREATE, Rt.TOPIC, "t")]),
    "DeleteTopics": (c.DeleteTopicsRequest(names=["t"]), "TOPIC", [(Op.DELETE, Rt.TOPIC, "t")]),
    "CreatePartitions": (c.CreatePartitionsRequest(topics=[c.CreatePartitionsRequest.Topic(name="t")]), "TOPIC",
                         [(Op.ALTER, Rt.TOPIC, "t")]),
    "AlterConfigs": (c.AlterConfigsRequest(resources=[c.AlterConfigsRequest.Resource(
        resource_type="broker", resource_name="0")]), "CLUSTER", [(Op.ALTER_CONFIGS, *CLUSTER)]),
    "ElectLeaders": (c.ElectLeadersRequest(), "CLUSTER", [(Op.ALTER, *CLUSTER)]),
    "CreateAcls": (s.CreateAclsRequest(), "CLUSTER", [(Op.ALTER, *CLUSTER)]),
    "DeleteAcls": (s.DeleteAclsRequest(), "CLUSTER", [(Op.ALTER, *CLUSTER)]),
    "AlterUserScramCredentials": (s.AlterUserScramCredentialsRequest(), "CLUSTER", [(Op.ALTER, *CLUSTER)]),
    "DescribeAcls": (s.DescribeAclsRequest(), "CLUSTER", [(Op.DESCRIBE, *CLUSTER)]),
    "DescribeUserScramCredentials": (s.DescribeUserScramCredentialsRequest(), "CLUSTER", [(Op.DESCRIBE, *CLUSTER)]),
    "InitProducerId": (b.InitProducerIdRequest(), "CLUSTER", [(Op.IDEMPOTENT_WRITE, *CLUSTER)]),
    "FindCoordinator": (b.FindCoordinatorRequest(key_type=0, keys=["g"]), "GROUP", [(Op.DESCRIBE, Rt.GROUP, "g")]),
    "ConsumerGroupHeartbeat": (b.ConsumerGroupHeartbeatRequest(group_id="g"), "GROUP", [(Op.READ, Rt.GROUP, "g")]),
    "OffsetCommit": (b.OffsetCommitRequest(group_id="g", topics=[b.OffsetCommitRequest.Topic(name="t")]), "GROUP",
                     [(Op.READ, Rt.GROUP, "g"), (Op.READ, Rt.TOPIC, "t")]),
    "OffsetFetch": (b.OffsetFetchRequest(group_id="g", topics=[b.TopicPartitions(topic="t")]), "GROUP",
                    [(Op.DESCRIBE, Rt.GROUP, "g"), (Op.DESCRIBE, Rt.TOPIC, "t")]),
    "ConsumerGroupDescribe": (b.ConsumerGroupDescribeRequest(group_ids=["g"]), "GROUP", [(Op.DESCRIBE, Rt.GROUP, "g")]),
    "DeleteGroups": (b.DeleteGroupsRequest(group_ids=["g"]), "GROUP", [(Op.DELETE, Rt.GROUP, "g")]),
    "AddPartitionsToTxn": (b.AddPartitionsToTxnRequest(transactional_id="tx", topics=[b.TopicPartitions(topic="t")]),
                           "TRANSACTIONAL_ID", [(Op.WRITE, Rt.TRANSACTIONAL_ID, "tx"), (Op.WRITE, Rt.TOPIC, "t")]),
    "AddOffsetsToTxn": (b.AddOffsetsToTxnRequest(transactional_id="tx", group_id="g"), "TRANSACTIONAL_ID",
                        [(Op.WRITE, Rt.TRANSACTIONAL_ID, "tx"), (Op.READ, Rt.GROUP, "g")]),
    "EndTxn": (b.EndTxnRequest(transactional_id="tx"), "TRANSACTIONAL_ID", [(Op.WRITE, Rt.TRANSACTIONAL_ID, "tx")]),
    "TxnOffsetCommit": (b.TxnOffsetCommitRequest(transactional_id="tx", group_id="g", topics=[
        b.OffsetCommitRequest.Topic(name="t")]), "TRANSACTIONAL_ID",
        [(Op.WRITE, Rt.TRANSACTIONAL_ID, "tx"), (Op.READ, Rt.GROUP, "g"), (Op.READ, Rt.TOPIC, "t")]),
    "WriteTxnMarkers": (b.WriteTxnMarkersRequest(), "CLUSTER", [(Op.CLUSTER_ACTION, *CLUSTER)]),
    "DescribeTransactions": (b.DescribeTransactionsRequest(transactional_ids=["tx"]), "TRANSACTIONAL_ID",
                             [(Op.DESCRIBE, Rt.TRANSACTIONAL_ID, "tx")]),
}  # fmt: skip


def test_r1_every_rpc_has_a_rule() -> None:
    broker_rpcs = {m.name for m in b.DESCRIPTOR.services_by_name["Broker"].methods}
    controller_rpcs = {m.name for m in c.DESCRIPTOR.services_by_name["Controller"].methods}
    assert set(BROKER_RULES) == broker_rpcs
    assert set(CONTROLLER_RULES) == controller_rpcs
    unlisted = broker_rpcs - set(BROKER_CASES) - {"Metadata", "DescribeCluster", "ListGroups", "ListTransactions",
                                                  "ReplicaFetch", "FetchStream",  # Fetch's rule, per message
                                                  "ProduceStream"}  # Produce's rule, per message
    assert not unlisted, f"RPCs without a test case: {unlisted}"


@pytest.mark.parametrize("rpc", sorted(BROKER_CASES))
def test_r2_refused_without_acls_then_allowed_by_the_named_ones(rpc: str) -> None:
    request, kind, needs = BROKER_CASES[rpc]
    denial = BROKER_RULES[rpc](request, check())
    assert denial is not None
    assert denial.code == f"{kind}_AUTHORIZATION_FAILED"
    granted = [allow(op, rtype, name) for op, rtype, name in needs]
    assert BROKER_RULES[rpc](request, check(*granted)) is None
    if len(granted) > 1:  # each ACL is needed
        for missing in granted:
            assert BROKER_RULES[rpc](request, check(*(g for g in granted if g != missing))) is not None


def test_r3_r4_broker_only_operations() -> None:
    follower = b.FetchRequest(replica_id=2, topics=[b.FetchTopic(name="t")])
    everything_on_t = check(allow(Op.ALL, Rt.TOPIC, "t"))
    denial = BROKER_RULES["Fetch"](follower, everything_on_t)
    assert denial is not None
    assert denial.code == "CLUSTER_AUTHORIZATION_FAILED"
    assert BROKER_RULES["Fetch"](follower, check(allow(Op.CLUSTER_ACTION, *CLUSTER))) is None
    assert BROKER_RULES["ReplicaFetch"] is BROKER_RULES["Fetch"]  # each message of the stream
    assert BROKER_RULES["FetchStream"] is BROKER_RULES["Fetch"]
    assert BROKER_RULES["ProduceStream"] is BROKER_RULES["Produce"]
    broker = check(allow(Op.CLUSTER_ACTION, *CLUSTER))
    for rpc, request in (("RegisterBroker", c.RegisterBrokerRequest()), ("BrokerHeartbeat", c.BrokerHeartbeatRequest()),
                         ("AlterPartition", c.AlterPartitionRequest()), ("FetchMetadata", c.FetchMetadataRequest()),
                         ("AllocateProducerIds", c.AllocateProducerIdsRequest())):  # fmt: skip
        assert CONTROLLER_RULES[rpc](request, check(allow(Op.ALL, Rt.TOPIC, "t"))) is not None
        assert CONTROLLER_RULES[rpc](request, broker) is None
    create = c.CreateTopicsRequest(topics=[c.TopicToCreate(name="t")])
    assert CONTROLLER_RULES["CreateTopics"](create, broker) is None  # R4: a forwarding broker
    assert CONTROLLER_RULES["CreateTopics"](create, check(allow(Op.CREATE, Rt.TOPIC, "t"))) is None
    assert CONTROLLER_RULES["CreateTopics"](create, check()) is not None


def test_create_topics_by_cluster_create_and_idempotent_write_by_any_topic_write() -> None:
    create = c.CreateTopicsRequest(topics=[c.TopicToCreate(name="a"), c.TopicToCreate(name="b")])
    assert BROKER_RULES["CreateTopics"](create, check(allow(Op.CREATE, *CLUSTER))) is None
    assert BROKER_RULES["CreateTopics"](create, check(allow(Op.CREATE, Rt.TOPIC, "a"))) is not None  # R2: whole call
    assert BROKER_RULES["InitProducerId"](b.InitProducerIdRequest(), check(allow(Op.WRITE, Rt.TOPIC, "x"))) is None


def test_every_kafka_api_has_a_rule() -> None:
    """R1 for the Kafka-protocol listener: an API added to its table without a rule would close connections."""
    from broker.kafka.apis import API_TABLE
    from broker.kafka.security import KAFKA_RULES

    missing = {api.name for key, api in API_TABLE.items() if not api.before_auth and key not in KAFKA_RULES}
    assert not missing


def test_r5_metadata_and_groups_filtered() -> None:
    response = b.MetadataResponse(topics=[b.TopicMetadata(name=n) for n in ("a", "b", "c")])
    filter_metadata(response, check(allow(Op.READ, Rt.TOPIC, "a")), requested=["b"])
    assert [(t.name, t.error.code) for t in response.topics] == [("a", ""), ("b", "TOPIC_AUTHORIZATION_FAILED")]
    groups = b.ListGroupsResponse(groups=[b.ListGroupsResponse.Group(group_id=g) for g in ("g1", "g2")])
    filter_groups(groups, check(allow(Op.DESCRIBE, Rt.GROUP, "g2")))
    assert [g.group_id for g in groups.groups] == ["g2"]
    everything = b.ListGroupsResponse(groups=[b.ListGroupsResponse.Group(group_id=g) for g in ("g1", "g2")])
    filter_groups(everything, check(allow(Op.DESCRIBE, *CLUSTER)))
    assert len(everything.groups) == 2


def test_a_leaders_verification_needs_cluster_action_not_the_producers_acls() -> None:
    """AddPartitionsToTxn with verify_only comes from partition leaders (KIP-890, docs/TRANSACTIONS.md S11)."""
    request = b.AddPartitionsToTxnRequest(transactional_id="tx", verify_only=True,
                                          topics=[b.TopicPartitions(topic="t")])
    producer_acls = check(allow(Op.WRITE, Rt.TRANSACTIONAL_ID, "tx"), allow(Op.WRITE, Rt.TOPIC, "t"))
    assert BROKER_RULES["AddPartitionsToTxn"](request, producer_acls) is not None
    assert BROKER_RULES["AddPartitionsToTxn"](request, check(allow(Op.CLUSTER_ACTION, *CLUSTER))) is None


def test_kafka_listener_transaction_apis_need_the_same_acls_as_grpc() -> None:
    """broker/kafka/security.py KAFKA_RULES for the transaction APIs (24, 25, 26, 28, 65, 66), on kio bodies."""
    from types import SimpleNamespace as NS

    from broker.kafka.security import KAFKA_RULES

    cases = {
        24: (NS(v3_and_below_transactional_id="x", v3_and_below_topics=[NS(name="t")]),
             [(Op.WRITE, Rt.TRANSACTIONAL_ID, "x"), (Op.WRITE, Rt.TOPIC, "t")]),
        25: (NS(transactional_id="x", group_id="g"), [(Op.WRITE, Rt.TRANSACTIONAL_ID, "x"), (Op.READ, Rt.GROUP, "g")]),
        26: (NS(transactional_id="x"), [(Op.WRITE, Rt.TRANSACTIONAL_ID, "x")]),
        28: (NS(transactional_id="x", group_id="g", topics=[NS(name="t")]),
             [(Op.WRITE, Rt.TRANSACTIONAL_ID, "x"), (Op.READ, Rt.GROUP, "g"), (Op.READ, Rt.TOPIC, "t")]),
        65: (NS(transactional_ids=["x"]), [(Op.DESCRIBE, Rt.TRANSACTIONAL_ID, "x")]),
    }  # fmt: skip
    for key, (body, needs) in cases.items():
        granted = [allow(*n) for n in needs]
        assert KAFKA_RULES[key](body, check()) is not None, key
        assert KAFKA_RULES[key](body, check(*granted)) is None, key
        for missing in granted:
            assert KAFKA_RULES[key](body, check(*(g for g in granted if g != missing))) is not None, (key, missing)


def test_kafka_listener_list_transactions_is_filtered_by_describe_on_each_id() -> None:
    """ListTransactions (66) on the Kafka listener needs no permission of its own (not DESCRIBE on the cluster):
    the answer keeps the transactional ids the caller may DESCRIBE, as Kafka's broker and the gRPC rule R5."""
    from types import SimpleNamespace as NS

    from broker.kafka.codec import build, response_class
    from broker.kafka.security import KAFKA_RULES, filter_transactions

    assert KAFKA_RULES[66](NS(state_filters=(), producer_id_filters=()), check()) is None
    listed = build(response_class(66, 0), throttle_time=0, error_code=0, unknown_state_filters=[],
                   transaction_states=[dict(transactional_id=t, producer_id=i, transaction_state="Ongoing")
                                       for i, t in enumerate(["mine", "theirs", "also-mine"])])  # fmt: skip
    may = check(allow(Op.DESCRIBE, Rt.TRANSACTIONAL_ID, "mine"), allow(Op.DESCRIBE, Rt.TRANSACTIONAL_ID, "also-mine"))
    assert [t.transactional_id for t in filter_transactions(listed, may).transaction_states] == ["mine", "also-mine"]
    assert filter_transactions(listed, check(allow(Op.DESCRIBE, *CLUSTER))).transaction_states == ()
    assert filter_transactions(listed, check()).transaction_states == ()
