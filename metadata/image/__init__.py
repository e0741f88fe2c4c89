"""The metadata image and delta (Kafka's ``image/``): what applying ``__cluster_metadata`` records yields.

:class:`MetadataImage` is immutable and shared by readers without locks; :class:`MetadataDelta` replays
records on top of one image, says what they changed, and ``apply()`` returns the next image.
"""

from metadata.image.delta import (
    LocalReplicaChanges,
    MetadataDelta,
    PartitionDiff,
    TopicChanges,
    image_from_records,
)
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

__all__ = [
    "BrokerRegistration",
    "ConfigResource",
    "LocalReplicaChanges",
    "MetadataDelta",
    "MetadataImage",
    "PartitionDiff",
    "PartitionRegistration",
    "ProducerIdsImage",
    "TopicChanges",
    "TopicIdPartition",
    "TopicImage",
    "frozen_map",
    "image_from_records",
]
