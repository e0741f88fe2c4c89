"""Fixtures for the controller tests: a pure-core harness (manual clock, seeded random)."""

from __future__ import annotations

import random
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from common.clock import ManualClock
from controller.core import ControllerCore, ControllerResult
from controller.core.common import preview
from metadata.configs import ControllerConfig
from metadata.image import MetadataDelta, MetadataImage, PartitionRegistration
from metadata.records import LeaderChange
from proto import controller_pb2 as pb


def incarnation(broker_id: int, generation: int = 0) -> str:
    return str(uuid.UUID(int=(generation << 32) | (broker_id + 1)))


class CoreHarness:
    """A :class:`ControllerCore` and the committed image, advanced as the server does it: every command
    of a result is replayed at the next offsets before the next decision.

    Not thread-safe (a test drives it).
    """

    def __init__(self, config: ControllerConfig | None = None, seed: int = 0) -> None:
        self.clock = ManualClock()
        self.rng = random.Random(seed)
        self.core = ControllerCore(config or ControllerConfig(), self.clock, self.rng)
        delta = MetadataDelta(MetadataImage())
        delta.replay(LeaderChange(1, 0), 0)  # a log starts with the active controller's marker
        self.image = delta.apply()
        self.core.activate(self.image)
        self.results: list[ControllerResult[Any]] = []

    # --- driving ---

    def commit(self, result: ControllerResult[Any]) -> Any:
        """Append ``result``'s commands (replay them at the next offsets); return its response."""
        self.results.append(result)
        self.image = preview(self.image, result.commands)
        return result.response

    def call(self, rpc: str, request: Any) -> Any:
        return self.commit(self.core.handler(rpc)(self.image, request))

    def tick(self, advance_ms: float = 0) -> ControllerResult[None]:
        self.clock.advance(advance_ms)
        result = self.core.tick(self.image)
        self.commit(result)
        return result

    def advance(self, ms: float) -> None:
        self.clock.advance(ms)

    # --- brokers ---

    def register(
        self, broker_id: int, generation: int = 0, rack: str | None = None, port: int | None = None
    ) -> pb.RegisterBrokerResponse:
        request = pb.RegisterBrokerRequest(
            broker_id=broker_id,
            incarnation_id=incarnation(broker_id, generation),
            endpoints={"PLAINTEXT": f"127.0.0.1:{port or 9092 + broker_id}"},
            rack=rack or "",
        )
        response: pb.RegisterBrokerResponse = self.call("RegisterBroker", request)
        return response

    def epoch(self, broker_id: int) -> int:
        broker = self.image.broker(broker_id)
        assert broker is not None
        return broker.broker_epoch

    def heartbeat(
        self, broker_id: int, *, offset: int | None = None, epoch: int | None = None, want_fence: bool = False,
        want_shut_down: bool = False,
    ) -> pb.BrokerHeartbeatResponse:  # fmt: skip
        request = pb.BrokerHeartbeatRequest(
            broker_id=broker_id,
            broker_epoch=self.epoch(broker_id) if epoch is None else epoch,
            current_metadata_offset=self.image.offset if offset is None else offset,
            want_fence=want_fence,
            want_shut_down=want_shut_down,
        )
        response: pb.BrokerHeartbeatResponse = self.call("BrokerHeartbeat", request)
        return response

    def start_brokers(self, ids: Sequence[int]) -> None:
        """Register brokers ``ids`` and unfence them (each heartbeats caught up)."""
        for b in ids:
            assert not self.register(b).error.code
        for b in ids:
            assert not self.heartbeat(b).is_fenced

    def keep_alive(self, ms: float, step_ms: float = 1000) -> list[ControllerResult[None]]:
        """Let ``ms`` pass in steps; at each, every unfenced broker heartbeats and the core ticks."""
        ticks = []
        while ms > 0:
            self.advance(min(step_ms, ms))
            ms -= step_ms
            self.heartbeat_all([b for b, reg in self.image.brokers.items() if not reg.fenced])
            ticks.append(self.tick())
        return ticks

    def heartbeat_all(self, ids: Sequence[int] | None = None) -> None:
        for b in ids if ids is not None else sorted(self.image.brokers):
            self.heartbeat(b)

    # --- topics ---

    def create_topic(
        self, name: str, partitions: int = 1, rf: int = 1, *, configs: Mapping[str, str] | None = None,
        assignments: Sequence[Sequence[int]] | None = None, validate_only: bool = False,
    ) -> pb.TopicResult:  # fmt: skip
        topic = pb.TopicToCreate(name=name, num_partitions=partitions, replication_factor=rf, configs=configs or {})
        for replicas in assignments or []:
            topic.assignments.add(broker_ids=replicas)
        response: pb.CreateTopicsResponse = self.call(
            "CreateTopics", pb.CreateTopicsRequest(topics=[topic], validate_only=validate_only)
        )
        return response.topics[0]

    def partition(self, topic: str, partition: int = 0) -> PartitionRegistration:
        image_topic = self.image.topic(topic)
        assert image_topic is not None, f"no topic {topic}"
        reg = image_topic.partition(partition)
        assert reg is not None
        return reg

    def topic_id(self, topic: str) -> str:
        image_topic = self.image.topic(topic)
        assert image_topic is not None
        return image_topic.topic_id


@pytest.fixture
def harness() -> CoreHarness:
    return CoreHarness()


def make_harness(props: Mapping[str, str] | None = None, seed: int = 0) -> CoreHarness:
    """A harness whose controller has the static config ``props`` (``--config`` keys)."""
    return CoreHarness(ControllerConfig.from_props(props or {}), seed)
