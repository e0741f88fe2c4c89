"""``__consumer_offsets`` is created with ``offsets.topic.replication.factor`` replicas or not at all (issue 16,
item 5; Kafka's rule): with fewer live brokers FindCoordinator answers COORDINATOR_NOT_AVAILABLE and the
client retries, instead of the topic being created under-replicated for ever."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.handlers import find_coordinator
from proto import broker_pb2 as pb
from proto import controller_pb2 as cpb
from tests.broker.conftest import BrokerHarness


class FakeControllers:
    """Records CreateTopics; answers TOPIC_ALREADY_EXISTS (so nothing waits for the topic to appear)."""

    def __init__(self) -> None:
        self.created: list[cpb.TopicToCreate] = []

    def call(self, method: str, request: Any, timeout_s: float, *, active: bool = True) -> Any:
        assert method == "CreateTopics"
        self.created += list(request.topics)
        results = [cpb.TopicResult(name=t.name, error={"code": "TOPIC_ALREADY_EXISTS"}) for t in request.topics]
        return cpb.CreateTopicsResponse(topics=results)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[tuple[BrokerHarness, FakeControllers]]:
    h = BrokerHarness(tmp_path / "broker", props={"offsets.topic.replication.factor": "3"})
    controllers = FakeControllers()
    h.ctx.controllers = controllers  # type: ignore[assignment]
    try:
        yield h, controllers
    finally:
        h.close()


def find(h: BrokerHarness) -> pb.FindCoordinatorResponse.Coordinator:
    response = find_coordinator.handle(h.ctx, pb.FindCoordinatorRequest(key_type=0, keys=["billing"]))
    return response.coordinators[0]


def test_too_few_live_brokers_refuse_to_create_the_offsets_topic(broker: tuple[BrokerHarness, FakeControllers]) -> None:
    h, controllers = broker
    h.register(1)  # two live brokers, the factor is 3
    answer = find(h)
    assert answer.error.code == "COORDINATOR_NOT_AVAILABLE"
    assert "offsets.topic.replication.factor=3" in answer.error.message
    assert controllers.created == []


def test_enough_live_brokers_create_it_with_the_factor(broker: tuple[BrokerHarness, FakeControllers]) -> None:
    h, controllers = broker
    h.register(1)
    h.register(2)
    assert find(h).error.code == "COORDINATOR_NOT_AVAILABLE"  # created now; its leaders come with the metadata
    assert [(t.name, t.replication_factor) for t in controllers.created] == [("__consumer_offsets", 3)]
