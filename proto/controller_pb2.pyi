from proto import common_pb2 as _common_pb2
from proto import security_pb2 as _security_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RegisterBrokerRequest(_message.Message):
    __slots__ = ("broker_id", "incarnation_id", "endpoints", "rack", "previous_broker_epoch")
    class EndpointsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_ID_FIELD_NUMBER: _ClassVar[int]
    ENDPOINTS_FIELD_NUMBER: _ClassVar[int]
    RACK_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_BROKER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    incarnation_id: str
    endpoints: _containers.ScalarMap[str, str]
    rack: str
    previous_broker_epoch: int
    def __init__(self, broker_id: _Optional[int] = ..., incarnation_id: _Optional[str] = ..., endpoints: _Optional[_Mapping[str, str]] = ..., rack: _Optional[str] = ..., previous_broker_epoch: _Optional[int] = ...) -> None: ...

class RegisterBrokerResponse(_message.Message):
    __slots__ = ("error", "controller", "broker_epoch")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_FIELD_NUMBER: _ClassVar[int]
    BROKER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    error: _common_pb2.Error
    controller: _common_pb2.ControllerHint
    broker_epoch: int
    def __init__(self, error: _Optional[_Union[_common_pb2.Error, _Mapping]] = ..., controller: _Optional[_Union[_common_pb2.ControllerHint, _Mapping]] = ..., broker_epoch: _Optional[int] = ...) -> None: ...

class BrokerHeartbeatRequest(_message.Message):
    __slots__ = ("broker_id", "broker_epoch", "current_metadata_offset", "want_fence", "want_shut_down")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    CURRENT_METADATA_OFFSET_FIELD_NUMBER: _ClassVar[int]
    WANT_FENCE_FIELD_NUMBER: _ClassVar[int]
    WANT_SHUT_DOWN_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    broker_epoch: int
    current_metadata_offset: int
    want_fence: bool
    want_shut_down: bool
    def __init__(self, broker_id: _Optional[int] = ..., broker_epoch: _Optional[int] = ..., current_metadata_offset: _Optional[int] = ..., want_fence: _Optional[bool] = ..., want_shut_down: _Optional[bool] = ...) -> None: ...

class BrokerHeartbeatResponse(_message.Message):
    __slots__ = ("error", "controller", "is_caught_up", "is_fenced", "should_shut_down")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_FIELD_NUMBER: _ClassVar[int]
    IS_CAUGHT_UP_FIELD_NUMBER: _ClassVar[int]
    IS_FENCED_FIELD_NUMBER: _ClassVar[int]
    SHOULD_SHUT_DOWN_FIELD_NUMBER: _ClassVar[int]
    error: _common_pb2.Error
    controller: _common_pb2.ControllerHint
    is_caught_up: bool
    is_fenced: bool
    should_shut_down: bool
    def __init__(self, error: _Optional[_Union[_common_pb2.Error, _Mapping]] = ..., controller: _Optional[_Union[_common_pb2.ControllerHint, _Mapping]] = ..., is_caught_up: _Optional[bool] = ..., is_fenced: _Optional[bool] = ..., should_shut_down: _Optional[bool] = ...) -> None: ...

class FetchMetadataRequest(_message.Message):
    __slots__ = ("from_offset", "max_wait_ms", "max_records", "broker_id")
    FROM_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_RECORDS_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    from_offset: int
    max_wait_ms: int
    max_records: int
    broker_id: int
    def __init__(self, from_offset: _Optional[int] = ..., max_wait_ms: _Optional[int] = ..., max_records: _Optional[int] = ..., broker_id: _Optional[int] = ...) -> None: ...

class MetadataLogEntry(_message.Message):
    __slots__ = ("offset", "term", "payload")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    offset: int
    term: int
    payload: bytes
    def __init__(self, offset: _Optional[int] = ..., term: _Optional[int] = ..., payload: _Optional[bytes] = ...) -> None: ...

class MetadataSnapshot(_message.Message):
    __slots__ = ("offset", "payload")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    offset: int
    payload: bytes
    def __init__(self, offset: _Optional[int] = ..., payload: _Optional[bytes] = ...) -> None: ...

class FetchMetadataResponse(_message.Message):
    __slots__ = ("error", "controller", "snapshot", "entries", "end_offset")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    error: _common_pb2.Error
    controller: _common_pb2.ControllerHint
    snapshot: MetadataSnapshot
    entries: _containers.RepeatedCompositeFieldContainer[MetadataLogEntry]
    end_offset: int
    def __init__(self, error: _Optional[_Union[_common_pb2.Error, _Mapping]] = ..., controller: _Optional[_Union[_common_pb2.ControllerHint, _Mapping]] = ..., snapshot: _Optional[_Union[MetadataSnapshot, _Mapping]] = ..., entries: _Optional[_Iterable[_Union[MetadataLogEntry, _Mapping]]] = ..., end_offset: _Optional[int] = ...) -> None: ...

class TopicToCreate(_message.Message):
    __slots__ = ("name", "num_partitions", "replication_factor", "configs", "assignments")
    class ConfigsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    NUM_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    REPLICATION_FACTOR_FIELD_NUMBER: _ClassVar[int]
    CONFIGS_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENTS_FIELD_NUMBER: _ClassVar[int]
    name: str
    num_partitions: int
    replication_factor: int
    configs: _containers.ScalarMap[str, str]
    assignments: _containers.RepeatedCompositeFieldContainer[ReplicaList]
    def __init__(self, name: _Optional[str] = ..., num_partitions: _Optional[int] = ..., replication_factor: _Optional[int] = ..., configs: _Optional[_Mapping[str, str]] = ..., assignments: _Optional[_Iterable[_Union[ReplicaList, _Mapping]]] = ...) -> None: ...

class ReplicaList(_message.Message):
    __slots__ = ("broker_ids",)
    BROKER_IDS_FIELD_NUMBER: _ClassVar[int]
    broker_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, broker_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class CreateTopicsRequest(_message.Message):
    __slots__ = ("topics", "validate_only", "timeout_ms")
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    VALIDATE_ONLY_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[TopicToCreate]
    validate_only: bool
    timeout_ms: int
    def __init__(self, topics: _Optional[_Iterable[_Union[TopicToCreate, _Mapping]]] = ..., validate_only: _Optional[bool] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class TopicResult(_message.Message):
    __slots__ = ("name", "topic_id", "error", "num_partitions", "replication_factor")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    NUM_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    REPLICATION_FACTOR_FIELD_NUMBER: _ClassVar[int]
    name: str
    topic_id: str
    error: _common_pb2.Error
    num_partitions: int
    replication_factor: int
    def __init__(self, name: _Optional[str] = ..., topic_id: _Optional[str] = ..., error: _Optional[_Union[_common_pb2.Error, _Mapping]] = ..., num_partitions: _Optional[int] = ..., replication_factor: _Optional[int] = ...) -> None: ...

class CreateTopicsResponse(_message.Message):
    __slots__ = ("error", "controller", "topics")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    error: _common_pb2.Error
    controller: _common_pb2.ControllerHint
    topics: _containers.RepeatedCompositeFieldContainer[TopicResult]
    def __init__(self, error: _Optional[_Union[_common_pb2.Error, _Mapping]] = ..., controller: _Optional[_Union[_common_pb2.ControllerHint, _Mapping]] = ..., topics: _Optional[_Iterable[_Union[TopicResult, _Mapping]]] = ...) -> None: ...

class DeleteTopicsRequest(_message.Message):
    __slots__ = ("names", "timeout_ms")
    NAMES_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    names: _containers.RepeatedScalarFieldContainer[str]
    timeout_ms: int
    def __init__(self, names: _Optional[_Iterable[str]] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class DeleteTopicsResponse(_message.Message):
    __slots__ = ("error", "controller", "topics")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    error: _common_pb2.Error
    controller: _common_pb2.ControllerHint
    topics: _containers.RepeatedCompositeFieldContainer[TopicResult]
    def __init__(self, error: _Optional[_Union[_common_pb2.Error, _Mapping]] = ..., controller: _Optional[_Union[_common_pb2.ControllerHint, _Mapping]] = ..., topics: _Optional[_Iterable[_Union[TopicResult, _Mapping]]] = ...) -> None: ...

class CreatePartitionsRequest(_message.Message):
    __slots__ = ("topics", "validate_only", "timeout_ms")
    class Topic(_message.Message):
        __slots__ = ("name", "count", "assignments")
        NAME_FIELD_NUMBER: _ClassVar[int]
        COUNT_FIELD_NUMBER: _ClassVar[int]
        ASSIGNMENTS_FIELD_NUMBER: _ClassVar[int]
        name: str
        count: int
        assignments: _containers.RepeatedCompositeFieldContainer[ReplicaList]
        def __init__(self, name: _Optional[str] = ..., count: _Optional[int] = ..., assignments: _Optional[_Iterable[_Union[ReplicaList, _Mapping]]] = ...) -> None: ...
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    VALIDATE_ONLY_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[CreatePartitionsRequest.Topic]
    validate_only: bool
    timeout_ms: int
    def __init__(self, topics: _Optional[_Iterable[_Union[CreatePartitionsRequest.Topic, _Mapping]]] = ..., validate_only: _Optional[bool] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class CreatePartitionsResponse(_message.Message):
    __slots__ = ("error", "controller", "topics")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    error: _common_pb2.Error
    controller: _common_pb2.ControllerHint
    topics: _containers.RepeatedCompositeFieldContainer[TopicResult]
    def __init__(self, error: _Optional[_Union[_common_pb2.Error, _Mapping]] = ..., controller: _Optional[_Union[_common_pb2.ControllerHint, _Mapping]] = ..., topics: _Optional[_Iterable[_Union[TopicResult, _Mapping]]] = ...) -> None: ...

class AlterPartitionRequest(_message.Message):
    __slots__ = ("broker_id", "broker_epoch", "topic_id", "partition", "leader_epoch", "partition_epoch", "new_isr", "joining")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    PARTITION_EPOCH_FIELD_NUMBER: _ClassVar[int]
    NEW_ISR_FIELD_NUMBER: _ClassVar[int]
    JOINING_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    broker_epoch: int
    topic_id: str
    partition: int
    leader_epoch: int
    partition_epoch: int
    new_isr: _containers.RepeatedScalarFieldContainer[int]
    joining: _containers.RepeatedCompositeFieldContainer[JoiningReplica]
    def __init__(self, broker_id: _Optional[int] = ..., broker_epoch: _Optional[int] = ..., topic_id: _Optional[str] = ..., partition: _Optional[int] = ..., leader_epoch: _Optional[int] = ..., partition_epoch: _Optional[int] = ..., new_isr: _Optional[_Iterable[int]] = ..., joining: _Optional[_Iterable[_Union[JoiningReplica, _Mapping]]] = ...) -> None: ...

class JoiningReplica(_message.Message):
    __slots__ = ("broker_id", "broker_epoch")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    broker_epoch: int
    def __init__(self, broker_id: _Optional[int] = ..., broker_epoch: _Optional[int] = ...) -> None: ...

class AlterPartitionResponse(_message.Message):
    __slots__ = ("error", "controller", "leader", "leader_epoch", "partition_epoch", "isr")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    PARTITION_EPOCH_FIELD_NUMBER: _ClassVar[int]
    ISR_FIELD_NUMBER: _ClassVar[int]
    error: _common_pb2.Error
    controller: _common_pb2.ControllerHint
    leader: int
    leader_epoch: int
    partition_epoch: int
    isr: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, error: _Optional[_Union[_common_pb2.Error, _Mapping]] = ..., controller: _Optional[_Union[_common_pb2.ControllerHint, _Mapping]] = ..., leader: _Optional[int] = ..., leader_epoch: _Optional[int] = ..., partition_epoch: _Optional[int] = ..., isr: _Optional[_Iterable[int]] = ...) -> None: ...

class ConfigEntry(_message.Message):
    __slots__ = ("key", "value", "delete")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    DELETE_FIELD_NUMBER: _ClassVar[int]
    key: str
    value: str
    delete: bool
    def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ..., delete: _Optional[bool] = ...) -> None: ...

class AlterConfigsRequest(_message.Message):
    __slots__ = ("resources", "validate_only")
    class Resource(_message.Message):
        __slots__ = ("resource_type", "resource_name", "entries")
        RESOURCE_TYPE_FIELD_NUMBER: _ClassVar[int]
        RESOURCE_NAME_FIELD_NUMBER: _ClassVar[int]
        ENTRIES_FIELD_NUMBER: _ClassVar[int]
        resource_type: str
        resource_name: str
        entries: _containers.RepeatedCompositeFieldContainer[ConfigEntry]
        def __init__(self, resource_type: _Optional[str] = ..., resource_name: _Optional[str] = ..., entries: _Optional[_Iterable[_Union[ConfigEntry, _Mapping]]] = ...) -> None: ...
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    VALIDATE_ONLY_FIELD_NUMBER: _ClassVar[int]
    resources: _containers.RepeatedCompositeFieldContainer[AlterConfigsRequest.Resource]
    validate_only: bool
    def __init__(self, resources: _Optional[_Iterable[_Union[AlterConfigsRequest.Resource, _Mapping]]] = ..., validate_only: _Optional[bool] = ...) -> None: ...

class ResourceResult(_message.Message):
    __slots__ = ("resource_type", "resource_name", "error")
    RESOURCE_TYPE_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_NAME_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    resource_type: str
    resource_name: str
    error: _common_pb2.Error
    def __init__(self, resource_type: _Optional[str] = ..., resource_name: _Optional[str] = ..., error: _Optional[_Union[_common_pb2.Error, _Mapping]] = ...) -> None: ...

class AlterConfigsResponse(_message.Message):
    __slots__ = ("error", "controller", "resources")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    error: _common_pb2.Error
    controller: _common_pb2.ControllerHint
    resources: _containers.RepeatedCompositeFieldContainer[ResourceResult]
    def __init__(self, error: _Optional[_Union[_common_pb2.Error, _Mapping]] = ..., controller: _Optional[_Union[_common_pb2.ControllerHint, _Mapping]] = ..., resources: _Optional[_Iterable[_Union[ResourceResult, _Mapping]]] = ...) -> None: ...

class ElectLeadersRequest(_message.Message):
    __slots__ = ("unclean", "topics")
    class TopicPartitions(_message.Message):
        __slots__ = ("topic", "partitions")
        TOPIC_FIELD_NUMBER: _ClassVar[int]
        PARTITIONS_FIELD_NUMBER: _ClassVar[int]
        topic: str
        partitions: _containers.RepeatedScalarFieldContainer[int]
        def __init__(self, topic: _Optional[str] = ..., partitions: _Optional[_Iterable[int]] = ...) -> None: ...
    UNCLEAN_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    unclean: bool
    topics: _containers.RepeatedCompositeFieldContainer[ElectLeadersRequest.TopicPartitions]
    def __init__(self, unclean: _Optional[bool] = ..., topics: _Optional[_Iterable[_Union[ElectLeadersRequest.TopicPartitions, _Mapping]]] = ...) -> None: ...

class ElectLeadersResponse(_message.Message):
    __slots__ = ("error", "controller", "partitions")
    class PartitionResult(_message.Message):
        __slots__ = ("topic", "partition", "leader", "error")
        TOPIC_FIELD_NUMBER: _ClassVar[int]
        PARTITION_FIELD_NUMBER: _ClassVar[int]
        LEADER_FIELD_NUMBER: _ClassVar[int]
        ERROR_FIELD_NUMBER: _ClassVar[int]
        topic: str
        partition: int
        leader: int
        error: _common_pb2.Error
        def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., leader: _Optional[int] = ..., error: _Optional[_Union[_common_pb2.Error, _Mapping]] = ...) -> None: ...
    ERROR_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    error: _common_pb2.Error
    controller: _common_pb2.ControllerHint
    partitions: _containers.RepeatedCompositeFieldContainer[ElectLeadersResponse.PartitionResult]
    def __init__(self, error: _Optional[_Union[_common_pb2.Error, _Mapping]] = ..., controller: _Optional[_Union[_common_pb2.ControllerHint, _Mapping]] = ..., partitions: _Optional[_Iterable[_Union[ElectLeadersResponse.PartitionResult, _Mapping]]] = ...) -> None: ...

class AllocateProducerIdsRequest(_message.Message):
    __slots__ = ("broker_id", "broker_epoch")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    broker_epoch: int
    def __init__(self, broker_id: _Optional[int] = ..., broker_epoch: _Optional[int] = ...) -> None: ...

class AllocateProducerIdsResponse(_message.Message):
    __slots__ = ("error", "controller", "producer_id_start", "producer_id_len")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_START_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_LEN_FIELD_NUMBER: _ClassVar[int]
    error: _common_pb2.Error
    controller: _common_pb2.ControllerHint
    producer_id_start: int
    producer_id_len: int
    def __init__(self, error: _Optional[_Union[_common_pb2.Error, _Mapping]] = ..., controller: _Optional[_Union[_common_pb2.ControllerHint, _Mapping]] = ..., producer_id_start: _Optional[int] = ..., producer_id_len: _Optional[int] = ...) -> None: ...

class DescribeQuorumRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class QuorumNode(_message.Message):
    __slots__ = ("node_id", "address", "raft_address", "is_leader", "match_index")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    RAFT_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    IS_LEADER_FIELD_NUMBER: _ClassVar[int]
    MATCH_INDEX_FIELD_NUMBER: _ClassVar[int]
    node_id: int
    address: str
    raft_address: str
    is_leader: bool
    match_index: int
    def __init__(self, node_id: _Optional[int] = ..., address: _Optional[str] = ..., raft_address: _Optional[str] = ..., is_leader: _Optional[bool] = ..., match_index: _Optional[int] = ...) -> None: ...

class DescribeQuorumResponse(_message.Message):
    __slots__ = ("error", "controller", "leader_id", "term", "commit_index", "metadata_end_offset", "nodes", "cluster_id")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    COMMIT_INDEX_FIELD_NUMBER: _ClassVar[int]
    METADATA_END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    error: _common_pb2.Error
    controller: _common_pb2.ControllerHint
    leader_id: int
    term: int
    commit_index: int
    metadata_end_offset: int
    nodes: _containers.RepeatedCompositeFieldContainer[QuorumNode]
    cluster_id: str
    def __init__(self, error: _Optional[_Union[_common_pb2.Error, _Mapping]] = ..., controller: _Optional[_Union[_common_pb2.ControllerHint, _Mapping]] = ..., leader_id: _Optional[int] = ..., term: _Optional[int] = ..., commit_index: _Optional[int] = ..., metadata_end_offset: _Optional[int] = ..., nodes: _Optional[_Iterable[_Union[QuorumNode, _Mapping]]] = ..., cluster_id: _Optional[str] = ...) -> None: ...
