"""A cluster with Kafka-protocol listeners for the real-client tests (one broker, shared by a module)."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.broker.cluster import Cluster

with warnings.catch_warnings():  # kafka-python's import calls importlib.resources.read_text (deprecated)
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka  # noqa: F401

KAFKA_BROKER_CONFIG = {
    "group.initial.rebalance.delay.ms": "0",  # Kafka's test setting: no 3 s wait before a group's first generation
    "offsets.topic.num.partitions": "3",
    "offsets.topic.replication.factor": "1",
    "group.consumer.min.session.timeout.ms": "6000",  # librdkafka's KIP-848 default session is 45 s: allowed
    # KIP-848 members learn a new assignment from their next heartbeat: 0.5 s apart instead of 5, so a rebalance
    # of librdkafka's group.protocol=consumer takes seconds, not three heartbeats of 5 s
    "group.consumer.heartbeat.interval.ms": "500",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root: Path = tmp_path_factory.mktemp("kafka")
    with Cluster(root, brokers=1, kafka=True, broker_config=KAFKA_BROKER_CONFIG) as c:
        yield c


@pytest.fixture(scope="module")
def bootstrap(cluster: Cluster) -> str:
    return cluster.kafka_bootstrap_servers
