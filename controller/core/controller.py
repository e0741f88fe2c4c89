"""ControllerCore: every decision of the active controller, as a pure function of the committed image.

Each request method takes the CURRENT committed :class:`MetadataImage` and a request and returns a
:class:`ControllerResult`: the commands to append and the response to send once they have committed.
``tick`` returns the periodic work: fencing brokers whose sessions expired, electing leaders for offline
partitions and tidying ISRs, and preferred-leader rebalancing every ``leader.imbalance.check.interval``.

The driver (``controller.server``) must:

1. call :meth:`ControllerCore.activate` when this node becomes the active controller (fresh sessions);
2. pass the image that includes every committed record, and append a result's commands in order, each
   at the offset right after the image (``image.offset + 1``) before deciding anything else;
3. answer only after every command has committed (persist, then answer).

The core never touches sockets, threads, files, time or randomness itself: the clock and the random
source are injected (docs/CONVENTIONS.md §1, §2); with a manual clock and a seeded ``random.Random`` every
decision replays exactly. Every result is checked by replaying it onto the image
(:func:`~controller.core.common.preview`) before it is returned.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any, TypeVar

from common.clock import Clock
from controller.core import brokers, partitions, producer_ids, security, topics
from controller.core.alter_configs import EffectiveConfig, alter_configs
from controller.core.common import Command, ControllerResult, Eligibility, chunk, preview
from controller.core.elections import imbalanced, reconcile_partitions
from metadata.configs import ControllerConfig
from metadata.image import MetadataImage
from proto import controller_pb2 as pb
from proto import security_pb2

T = TypeVar("T")


class ControllerCore:
    """The active controller's logic (Kafka's ``QuorumController`` minus its event loop and Raft client).

    Not thread-safe: one owner, the controller thread, calls every method (docs/CONVENTIONS.md §6). Its only state
    of its own is in memory and rebuilt by :meth:`activate`: broker sessions and the rebalance timer.
    """

    def __init__(self, config: ControllerConfig, clock: Clock, rng: random.Random) -> None:
        self.config = config
        self.clock = clock
        self.rng = rng
        self.sessions = brokers.BrokerSessions(config.broker_session_timeout_ms)
        self._next_rebalance_ms = 0.0
        self._reconciled_offset: int | None = None

    @property
    def max_records(self) -> int:
        return self.config.max_records_per_command

    def activate(self, image: MetadataImage) -> None:
        """This node just became the active controller: fresh sessions, timers restart (rule H2)."""
        now = self.clock.monotonic_ms()
        self.sessions.reset(image, now)
        self._next_rebalance_ms = now + self._rebalance_interval_ms
        self._reconciled_offset = None

    @property
    def _rebalance_interval_ms(self) -> float:
        return self.config.leader_imbalance_check_interval_seconds * 1000.0

    def _checked(self, image: MetadataImage, result: ControllerResult[T]) -> ControllerResult[T]:
        preview(image, result.commands)  # raises MetadataError for a result that does not fit: a bug
        return result

    def _effective(self, image: MetadataImage) -> EffectiveConfig:
        return EffectiveConfig(image, self.config)

    def _topics(self, image: MetadataImage) -> topics.TopicContext:
        return topics.TopicContext(image, self._effective(image), self.rng, self.max_records)

    # --- brokers --------------------------------------------------------------------------------

    def register_broker(
        self, image: MetadataImage, request: pb.RegisterBrokerRequest
    ) -> ControllerResult[pb.RegisterBrokerResponse]:
        unclean = self._effective(image).leader_policy()
        now = self.clock.monotonic_ms()
        return self._checked(
            image, brokers.register_broker(image, request, self.sessions, unclean, now, self.max_records)
        )

    def broker_heartbeat(
        self, image: MetadataImage, request: pb.BrokerHeartbeatRequest
    ) -> ControllerResult[pb.BrokerHeartbeatResponse]:
        unclean = self._effective(image).leader_policy()
        now = self.clock.monotonic_ms()
        return self._checked(
            image, brokers.broker_heartbeat(image, request, self.sessions, unclean, now, self.max_records)
        )

    def allocate_producer_ids(
        self, image: MetadataImage, request: pb.AllocateProducerIdsRequest
    ) -> ControllerResult[pb.AllocateProducerIdsResponse]:
        return self._checked(image, producer_ids.allocate_producer_ids(image, request))

    # --- topics, partitions, configs ------------------------------------------------------------

    def create_topics(
        self, image: MetadataImage, request: pb.CreateTopicsRequest
    ) -> ControllerResult[pb.CreateTopicsResponse]:
        return self._checked(image, topics.create_topics(self._topics(image), request))

    def delete_topics(
        self, image: MetadataImage, request: pb.DeleteTopicsRequest
    ) -> ControllerResult[pb.DeleteTopicsResponse]:
        return self._checked(image, topics.delete_topics(self._topics(image), request))

    def create_partitions(
        self, image: MetadataImage, request: pb.CreatePartitionsRequest
    ) -> ControllerResult[pb.CreatePartitionsResponse]:
        return self._checked(image, topics.create_partitions(self._topics(image), request))

    def alter_partition(
        self, image: MetadataImage, request: pb.AlterPartitionRequest
    ) -> ControllerResult[pb.AlterPartitionResponse]:
        return self._checked(image, partitions.alter_partition(image, request, self._effective(image).elr_min_isr))

    def alter_configs(
        self, image: MetadataImage, request: pb.AlterConfigsRequest
    ) -> ControllerResult[pb.AlterConfigsResponse]:
        return self._checked(image, alter_configs(image, request, self.max_records))

    def elect_leaders(
        self, image: MetadataImage, request: pb.ElectLeadersRequest
    ) -> ControllerResult[pb.ElectLeadersResponse]:
        policy = self._effective(image).leader_policy()
        return self._checked(image, partitions.elect_leaders(image, request, self.max_records, policy))

    # --- ACLs and SCRAM credentials -------------------------------------------------------------

    def create_acls(
        self, image: MetadataImage, request: security_pb2.CreateAclsRequest
    ) -> ControllerResult[security_pb2.CreateAclsResponse]:
        return self._checked(image, security.create_acls(image, request, self.rng, self.max_records))

    def delete_acls(
        self, image: MetadataImage, request: security_pb2.DeleteAclsRequest
    ) -> ControllerResult[security_pb2.DeleteAclsResponse]:
        return self._checked(image, security.delete_acls(image, request, self.max_records))

    def alter_user_scram_credentials(
        self, image: MetadataImage, request: security_pb2.AlterUserScramCredentialsRequest
    ) -> ControllerResult[security_pb2.AlterUserScramCredentialsResponse]:
        return self._checked(image, security.alter_user_scram_credentials(image, request, self.max_records))

    # --- periodic work --------------------------------------------------------------------------

    def tick(self, image: MetadataImage, now_ms: float | None = None) -> ControllerResult[None]:
        """Periodic work at ``now_ms`` (default: the clock), each step built on the one before:

        1. fence brokers whose session expired (rules H2, H5);
        2. when the image changed since the last pass: elect leaders for offline partitions and drop
           ineligible brokers from ISRs (rules E1-E4), e.g. after ``unclean.leader.election.enable`` was
           turned on or after a failover;
        3. every ``leader.imbalance.check.interval.seconds``, if ``auto.leader.rebalance.enable``:
           preferred-leader elections (rule E5).
        """
        now = self.clock.monotonic_ms() if now_ms is None else now_ms
        start = image
        commands: list[Command] = []
        step: tuple[Command, ...] = tuple(
            brokers.fence_expired(image, self.sessions, self._effective(image).leader_policy(), now, self.max_records)
        )
        commands += step
        image = preview(image, step)
        if image.offset != self._reconciled_offset:
            step = self._reconcile(image)
            commands += step
            image = preview(image, step)
            self._reconciled_offset = image.offset if not step else None
        if now >= self._next_rebalance_ms:
            self._next_rebalance_ms = now + self._rebalance_interval_ms
            if self._effective(image).cluster("auto.leader.rebalance.enable"):
                step = chunk(list(imbalanced(image, Eligibility(image))), self.max_records)
                commands += step
        return self._checked(start, ControllerResult(tuple(commands), None))

    def _reconcile(self, image: MetadataImage) -> tuple[Command, ...]:
        unclean = self._effective(image).leader_policy()
        changes = reconcile_partitions(image, Eligibility(image), unclean, lambda reg: True)
        return chunk(changes, self.max_records)

    # --- dispatch by RPC name (the driver's single entry point) ---------------------------------

    def handler(self, rpc: str) -> Callable[[MetadataImage, Any], ControllerResult[Any]]:
        """The method deciding RPC ``rpc`` (``"CreateTopics"``, ...)."""
        handlers: dict[str, Callable[[MetadataImage, Any], ControllerResult[Any]]] = {
            "RegisterBroker": self.register_broker,
            "BrokerHeartbeat": self.broker_heartbeat,
            "CreateTopics": self.create_topics,
            "DeleteTopics": self.delete_topics,
            "CreatePartitions": self.create_partitions,
            "AlterPartition": self.alter_partition,
            "AlterConfigs": self.alter_configs,
            "ElectLeaders": self.elect_leaders,
            "AllocateProducerIds": self.allocate_producer_ids,
            "CreateAcls": self.create_acls,
            "DeleteAcls": self.delete_acls,
            "AlterUserScramCredentials": self.alter_user_scram_credentials,
        }
        return handlers[rpc]
