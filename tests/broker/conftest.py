"""Fixtures for the broker's unit tests: a broker's pieces in a tmp dir, driven by hand-made metadata.

:class:`BrokerHarness` builds a :class:`~broker.context.BrokerContext` with real logs under ``tmp_path`` and
no gRPC and no controller; metadata records are replayed through a ``MetadataDelta`` and applied as the
metadata thread does it (replica changes first, then the image is published).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from broker.config import BrokerConfig
from broker.context import BrokerContext
from broker.log_manager import LogManager
from broker.metadata_cache import MetadataCache
from broker.replica_manager import ConfigChanges, ReplicaManager
from common.clock import SystemClock
from log.record import build_batch
from metadata.image import MetadataDelta, MetadataImage
from metadata.records import (
    Config,
    ConfigResourceType,
    Endpoint,
    LeaderChange,
    MetadataRecord,
    Partition,
    PartitionChange,
    RegisterBroker,
    RemoveTopic,
    Topic,
    UnfenceBroker,
)
from replication.partition import Partition as ReplicaPartition

BROKER_ID = 0
START_MS = 1_700_000_000_000


def batch(values: Sequence[bytes] = (b"v",), *, timestamp_ms: int = START_MS, epoch: int = -1) -> bytes:
    return build_batch(list(values), timestamp_ms=timestamp_ms, partition_leader_epoch=epoch)


class BrokerHarness:
    """One broker's data plane in a directory. Not thread-safe: the test drives it (as the metadata thread)."""

    def __init__(self, root: Path, broker_id: int = BROKER_ID, props: Mapping[str, str] | None = None) -> None:
        self.root = root
        self.broker_id = broker_id
        self.clock = SystemClock()
        self.config = BrokerConfig.from_props(props or {})
        self.log_manager = LogManager(root, broker_id, self.clock)
        self.replicas = ReplicaManager(broker_id, self.config, self.log_manager, self.clock)
        self.metadata = MetadataCache()
        self.ctx = BrokerContext(broker_id, self.config, self.metadata, self.replicas)
        self.topic_ids: dict[str, str] = {}
        self.replicas.startup()
        self.replicas.fetch_purgatory.start()
        self.replicas.produce_purgatory.start()
        self.apply(LeaderChange(1, 100), RegisterBroker(broker_id, str(uuid.uuid4()), 1,
                                                        (Endpoint("PLAINTEXT", "127.0.0.1", 9092),)))  # fmt: skip
        self.apply(UnfenceBroker(broker_id, 1))

    @property
    def image(self) -> MetadataImage:
        return self.metadata.image

    def apply(self, *records: MetadataRecord) -> MetadataImage:
        delta = MetadataDelta(self.image)
        for i, record in enumerate(records):
            delta.replay(record, self.image.offset + 1 + i)
        image = delta.apply()
        touched = self.replicas.apply_changes(
            image, delta.local_changes(self.broker_id), ConfigChanges.of(delta.changed_configs(), self.broker_id)
        )
        self.metadata.publish(image)
        self.replicas.complete_delayed(*sorted(touched))
        return image

    def broker_epoch(self, broker_id: int) -> int:
        """The broker epoch the image has for ``broker_id`` (what its fetches must carry)."""
        broker = self.image.broker(broker_id)
        assert broker is not None, f"broker {broker_id} is not registered"
        return broker.broker_epoch

    def register(self, broker_id: int) -> None:
        epoch = self.image.offset + 1
        endpoint = Endpoint("PLAINTEXT", "127.0.0.1", 9092 + broker_id)
        self.apply(RegisterBroker(broker_id, str(uuid.uuid4()), epoch, (endpoint,)))
        self.apply(UnfenceBroker(broker_id, epoch))

    def create_topic(
        self, name: str, partitions: int = 1, *, replicas: Sequence[int] | None = None,
        isr: Sequence[int] | None = None, leader: int | None = None, configs: Mapping[str, str] | None = None,
    ) -> str:  # fmt: skip
        topic_id = str(uuid.uuid4())
        self.topic_ids[name] = topic_id
        replica_ids = tuple(replicas) if replicas is not None else (self.broker_id,)
        in_sync = tuple(isr) if isr is not None else replica_ids
        lead = leader if leader is not None else in_sync[0]
        records: list[MetadataRecord] = [Topic(name, topic_id)]
        records += [Config(ConfigResourceType.TOPIC, name, k, v) for k, v in (configs or {}).items()]
        records += [Partition(topic_id, p, replica_ids, in_sync, lead) for p in range(partitions)]
        self.apply(*records)
        return topic_id

    def change(self, name: str, partition: int = 0, *, leader: int | None = None,
               isr: Sequence[int] | None = None, replicas: Sequence[int] | None = None) -> None:  # fmt: skip
        self.apply(PartitionChange(self.topic_ids[name], partition, isr=None if isr is None else tuple(isr),
                                   leader=leader, replicas=None if replicas is None else tuple(replicas)))  # fmt: skip

    def set_config(self, name: str, key: str, value: str | None) -> None:
        self.apply(Config(ConfigResourceType.TOPIC, name, key, value))

    def delete_topic(self, name: str) -> None:
        self.apply(RemoveTopic(self.topic_ids.pop(name)))

    def partition(self, name: str, number: int = 0) -> ReplicaPartition:
        found = self.replicas.partition(name, number)
        assert found is not None, f"no local partition {name}-{number}"
        return found

    def close(self) -> None:
        self.replicas.shutdown()


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[BrokerHarness]:
    h = BrokerHarness(tmp_path / "broker")
    try:
        yield h
    finally:
        h.close()
