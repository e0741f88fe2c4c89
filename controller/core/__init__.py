"""The active controller's logic as a pure core (Kafka's ``QuorumController`` decisions, no I/O).

- :mod:`controller.core.controller`: :class:`ControllerCore`, the single entry point.
- :mod:`controller.core.brokers`: registration, heartbeats and sessions, fencing, controlled shutdown.
- :mod:`controller.core.placement`: replica placement for new partitions.
- :mod:`controller.core.topics`: CreateTopics, DeleteTopics, CreatePartitions.
- :mod:`controller.core.elections`: leader elections and ISR upkeep.
- :mod:`controller.core.partitions`: AlterPartition and ElectLeaders.
- :mod:`controller.core.alter_configs`: AlterConfigs and the effective cluster-level configs.
- :mod:`controller.core.producer_ids`: AllocateProducerIds.
"""

from controller.core.common import Command, ControllerResult
from controller.core.controller import ControllerCore

__all__ = ["Command", "ControllerCore", "ControllerResult"]
