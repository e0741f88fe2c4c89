"""The API table of the Kafka listener: key -> :class:`~broker.kafka.api.Api` (name, versions, handler).

ApiVersions answers exactly this table. The versions are the ones the modules translate correctly and
that kio's schemas cover; the upper bounds are what current clients (librdkafka 2.x, the Java client
3.x/4.x, kafka-python, aiokafka) ask for, except Fetch, capped at v12: v13+ names topics by id.
SaslHandshake/SaslAuthenticate are added here when they exist (with ``before_auth=True``). The transaction
APIs are the client's (:mod:`broker.kafka.transactions`): AddPartitionsToTxn up to v3 (v4+ is Kafka's
inter-broker batch), EndTxn and TxnOffsetCommit up to v3 (v4/v5 are KIP-890's transaction version 2).
"""

from __future__ import annotations

from broker.kafka import admin, api_versions, classic, fetch, groups, metadata, offsets, produce, security, transactions
from broker.kafka.api import Api

_APIS = [
    Api(0, "Produce", 3, 12, produce.handle),
    Api(1, "Fetch", 4, 12, fetch.handle),
    Api(2, "ListOffsets", 1, 9, offsets.handle_list_offsets),
    Api(3, "Metadata", 0, 12, metadata.handle_metadata),
    Api(8, "OffsetCommit", 2, 9, groups.handle_offset_commit),
    Api(9, "OffsetFetch", 1, 9, groups.handle_offset_fetch),
    Api(10, "FindCoordinator", 0, 6, groups.handle_find_coordinator),
    Api(11, "JoinGroup", 0, 9, classic.handle_join_group),
    Api(12, "Heartbeat", 0, 4, classic.handle_heartbeat),
    Api(13, "LeaveGroup", 0, 5, classic.handle_leave_group),
    Api(14, "SyncGroup", 0, 5, classic.handle_sync_group),
    Api(15, "DescribeGroups", 0, 5, groups.handle_describe_groups),
    Api(16, "ListGroups", 0, 5, groups.handle_list_groups),
    Api(17, "SaslHandshake", 1, 1, security.handle_sasl_handshake, before_auth=True),
    Api(18, "ApiVersions", 0, 4, lambda request: api_versions.handle(request, API_TABLE), before_auth=True),
    Api(19, "CreateTopics", 2, 7, admin.handle_create_topics),
    Api(20, "DeleteTopics", 1, 6, admin.handle_delete_topics),
    Api(22, "InitProducerId", 0, 5, admin.handle_init_producer_id),
    Api(23, "OffsetForLeaderEpoch", 2, 4, offsets.handle_offset_for_leader_epoch),
    Api(24, "AddPartitionsToTxn", 0, 3, transactions.handle_add_partitions_to_txn),
    Api(25, "AddOffsetsToTxn", 0, 3, transactions.handle_add_offsets_to_txn),
    Api(26, "EndTxn", 0, 3, transactions.handle_end_txn),
    Api(28, "TxnOffsetCommit", 0, 3, transactions.handle_txn_offset_commit),
    Api(32, "DescribeConfigs", 1, 4, admin.handle_describe_configs),
    Api(36, "SaslAuthenticate", 0, 2, security.handle_sasl_authenticate, before_auth=True),
    Api(37, "CreatePartitions", 0, 3, admin.handle_create_partitions),
    Api(42, "DeleteGroups", 0, 2, groups.handle_delete_groups),
    Api(44, "IncrementalAlterConfigs", 0, 1, admin.handle_incremental_alter_configs),
    Api(60, "DescribeCluster", 0, 1, metadata.handle_describe_cluster),
    Api(65, "DescribeTransactions", 0, 0, transactions.handle_describe_transactions),
    Api(66, "ListTransactions", 0, 0, transactions.handle_list_transactions),
    Api(68, "ConsumerGroupHeartbeat", 0, 1, groups.handle_consumer_group_heartbeat),
    Api(69, "ConsumerGroupDescribe", 0, 1, groups.handle_consumer_group_describe),
]
API_TABLE: dict[int, Api] = {api.key: api for api in _APIS}
