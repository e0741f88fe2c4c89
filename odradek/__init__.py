"""Odradek: a distributed, replicated commit log in the family of Apache Kafka.

The clients::

    from odradek import Producer, Consumer, Admin, NewTopic, TopicPartition, RecordMetadata, ConsumerRecord

They are imported on first use (PEP 562), so the ``odradek`` command line starts without loading gRPC.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from odradek.version import __version__

_EXPORTS = {
    "Producer": "odradek.producer",
    "Consumer": "odradek.consumer",
    "Admin": "odradek.admin",
    "NewTopic": "odradek.types",
    "TopicPartition": "odradek.types",
    "RecordMetadata": "odradek.types",
    "ConsumerRecord": "odradek.types",
    "OffsetAndTimestamp": "odradek.types",
    "TopicDescription": "odradek.types",
    "PartitionDescription": "odradek.types",
    "ClusterDescription": "odradek.types",
    "NodeDescription": "odradek.types",
    "BrokerDescription": "odradek.types",
    "ConfigResource": "odradek.types",
    "ConfigEntry": "odradek.types",
    "TopicResult": "odradek.types",
    "GroupListing": "odradek.types",
    "GroupDescription": "odradek.types",
    "MemberDescription": "odradek.types",
    "PartitionLag": "odradek.types",
    "ConsumerGroupMetadata": "odradek.types",
    "ProducerFencedError": "odradek.errors",
    "ConsumerRebalanceListener": "odradek.group.listener",
    "OdradekError": "odradek.errors",
    "KafkaError": "odradek.errors",
    "ConfigError": "odradek.errors",
    "KafkaTimeoutError": "odradek.errors",
    "IllegalStateError": "odradek.errors",
    "NotSupportedYetError": "odradek.errors",
    "error_from_code": "odradek.errors",
}

__all__ = [
    "__version__",
    "Producer",
    "Consumer",
    "Admin",
    "NewTopic",
    "TopicPartition",
    "RecordMetadata",
    "ConsumerRecord",
    "OffsetAndTimestamp",
    "TopicDescription",
    "PartitionDescription",
    "ClusterDescription",
    "NodeDescription",
    "BrokerDescription",
    "ConfigResource",
    "ConfigEntry",
    "TopicResult",
    "GroupListing",
    "GroupDescription",
    "MemberDescription",
    "PartitionLag",
    "ConsumerGroupMetadata",
    "ProducerFencedError",
    "ConsumerRebalanceListener",
    "OdradekError",
    "KafkaError",
    "ConfigError",
    "KafkaTimeoutError",
    "IllegalStateError",
    "NotSupportedYetError",
    "error_from_code",
]

if TYPE_CHECKING:
    from odradek.admin import Admin
    from odradek.consumer import Consumer
    from odradek.errors import (
        ConfigError,
        IllegalStateError,
        KafkaError,
        KafkaTimeoutError,
        NotSupportedYetError,
        OdradekError,
        ProducerFencedError,
        error_from_code,
    )
    from odradek.group.listener import ConsumerRebalanceListener
    from odradek.producer import Producer
    from odradek.types import (
        BrokerDescription,
        ClusterDescription,
        ConfigEntry,
        ConfigResource,
        ConsumerGroupMetadata,
        ConsumerRecord,
        GroupDescription,
        GroupListing,
        MemberDescription,
        NewTopic,
        NodeDescription,
        OffsetAndTimestamp,
        PartitionDescription,
        PartitionLag,
        RecordMetadata,
        TopicDescription,
        TopicPartition,
        TopicResult,
    )


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'odradek' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
