"""Consumer group lag, computed at scrape time by the group coordinator's broker (kafka_exporter's names).

For every group whose coordinator runs here (the loaded ``__consumer_offsets`` shards): its members, and per
partition with a committed offset that offset and the lag behind the partition's high watermark (what a
``read_uncommitted`` consumer can reach). The high watermark is read locally when this broker leads the
partition, else asked of its leader with one ListOffsets per leader (bounded by ``timeout_s``); a partition
whose leader does not answer has no lag sample in that scrape rather than a wrong one.

Thread-safety: ``collect`` runs on the metrics endpoint's threads; each shard is read under its lock.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import grpc
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from broker.lifecycle import LISTENER
from broker.replica_fetcher import inter_broker_address
from controller.security.settings import open_channel
from metadata.image import MetadataImage
from proto import broker_pb2, broker_pb2_grpc

if TYPE_CHECKING:
    from broker.metrics.node import BrokerNode

logger = logging.getLogger(__name__)

LATEST = -1  # ListOffsets timestamp: the high watermark
TopicPartition = tuple[str, int]


class GroupLagCollector(Collector):
    """``kafka_consumergroup_*`` of the groups coordinated here (see the module docstring)."""

    def __init__(self, server: BrokerNode, timeout_s: float = 2.0) -> None:
        self._server = server
        self._timeout_s = timeout_s
        self._channels: dict[str, grpc.Channel] = {}

    def collect(self) -> Iterator[Metric]:
        members = GaugeMetricFamily("kafka_consumergroup_members", "members of the group", labels=["group"])
        labels = ["group", "topic", "partition"]
        current = GaugeMetricFamily("kafka_consumergroup_current_offset", "the group's committed offset", labels=labels)
        lag = GaugeMetricFamily("kafka_consumergroup_lag", "high watermark minus committed offset", labels=labels)
        committed = self._committed(members)
        ends = self._high_watermarks({tp for offsets in committed.values() for tp in offsets})
        for group_id, offsets in sorted(committed.items()):
            for tp, offset in sorted(offsets.items()):
                key = [group_id, tp[0], str(tp[1])]
                current.add_metric(key, offset)
                end = ends.get(tp)
                if end is not None:
                    lag.add_metric(key, max(0, end - offset))
        yield members
        yield current
        yield lag

    def _committed(self, members: GaugeMetricFamily) -> dict[str, dict[TopicPartition, int]]:
        committed: dict[str, dict[TopicPartition, int]] = {}
        for _, core, lock in self._server.coordinator.shards():
            with lock:
                for group_id, group in core.groups.items():
                    members.add_metric([group_id], len(group.members))
                    committed[group_id] = {(tp[0], tp[1]): om.offset for tp, om in group.offsets.items()}
        return committed

    def _high_watermarks(self, partitions: set[TopicPartition]) -> dict[TopicPartition, int]:
        server = self._server
        image = server.metadata.image
        ends: dict[TopicPartition, int] = {}
        remote: dict[int, list[TopicPartition]] = defaultdict(list)
        for tp in partitions:
            local = server.replicas.partition(*tp)
            if local is not None and local.is_leader:
                ends[tp] = local.high_watermark
                continue
            topic = image.topic(tp[0])
            registration = topic.partition(tp[1]) if topic is not None else None
            if registration is not None and registration.has_leader and registration.leader != server.node_id:
                remote[registration.leader].append(tp)
        for leader, wanted in remote.items():
            ends.update(self._ask(image, leader, wanted))
        return ends

    def _ask(self, image: MetadataImage, leader: int, wanted: list[TopicPartition]) -> dict[TopicPartition, int]:
        address = inter_broker_address(image, leader)
        if address is None:
            return {}
        request = broker_pb2.ListOffsetsRequest(
            replica_id=-1,
            partitions=[broker_pb2.ListOffsetsPartition(topic=t, partition=p, timestamp=LATEST, current_leader_epoch=-1)
                        for t, p in wanted],
        )  # fmt: skip
        try:
            response = self._stub(address).ListOffsets(request, timeout=self._timeout_s)
        except grpc.RpcError as exc:
            logger.debug("group lag: broker %d at %s did not answer ListOffsets: %s", leader, address, exc)
            return {}
        return {(p.topic, p.partition): p.offset for p in response.partitions if not p.error.code and p.offset >= 0}

    def _stub(self, address: str) -> Any:
        channel = self._channels.get(address)
        if channel is None:
            credentials = self._server.security.channel_credentials(self._server.security.protocol(LISTENER))
            channel = self._channels[address] = open_channel(address, credentials)
        return broker_pb2_grpc.BrokerStub(channel)  # type: ignore[no-untyped-call]

    def close(self) -> None:
        for channel in self._channels.values():
            channel.close()
        self._channels.clear()

