"""The Kafka listener reads on while an acks=all Produce waits for the ISR (``broker/kafka/connection.py``):
the next requests of the connection are read and appended meanwhile, and every answer still goes out in
request order. Real processes: 1 controller, 2 brokers, a partition whose follower is paused (SIGSTOP)."""

from __future__ import annotations

import signal
import socket
import struct
import time
import urllib.request
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from log.record import build_batch
from tests.broker.cluster import Cluster
from tests.kafka.helpers import read_response_frame, request_frame

WAIT_S = 30.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root: Path = tmp_path_factory.mktemp("kafka-pipelining")
    # the paused follower stays registered and in the ISR for the whole test: the acks=all Produce waits until
    # it is resumed
    with Cluster(root, brokers=2, kafka=True, metrics=True, broker_config={"replica.lag.time.max.ms": "120000"},
                 controller_config={"broker.session.timeout.ms": "120000"}) as c:  # fmt: skip
        yield c


def test_an_acks_all_produce_waiting_for_the_isr_does_not_stop_the_connection(cluster: Cluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap_servers})
    admin.create_topics([NewTopic("pipe", 1, 2)], operation_timeout=10)["pipe"].result(WAIT_S)
    leader = _leader(admin, "pipe")
    follower = cluster.brokers[1 - leader]
    _wait(lambda: _log_end(cluster, leader, "pipe") == 0, "the partition on its leader")
    follower.signal(signal.SIGSTOP)
    try:
        with socket.create_connection(_host_port(cluster.kafka_addresses[leader]), timeout=WAIT_S) as conn:
            conn.sendall(_produce(1, b"first", acks=-1) + _produce(2, b"second", acks=-1) + _metadata(3))
            # the second Produce is read and appended while the first waits for the paused follower
            _wait(lambda: _log_end(cluster, leader, "pipe") == 2, "the second Produce appended")
            conn.settimeout(0.5)
            with pytest.raises(TimeoutError):
                conn.recv(1)  # no answer yet: the first one comes first, and it waits for the ISR
            follower.signal(signal.SIGCONT)
            conn.settimeout(WAIT_S)
            answers = [_answer(conn) for _ in range(3)]
    finally:
        follower.signal(signal.SIGCONT)
    assert [correlation for correlation, _ in answers] == [1, 2, 3]
    assert [_produced(payload) for _, payload in answers[:2]] == [(0, 0), (0, 1)]  # (error code, base offset)


# --------------------------------------------------------------------------------------------- helpers


def _leader(admin: AdminClient, topic: str) -> int:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        partitions = admin.list_topics(topic, timeout=10).topics[topic].partitions
        if partitions and partitions[0].leader >= 0 and len(partitions[0].isrs) == 2:
            return int(partitions[0].leader)
        time.sleep(0.1)
    raise AssertionError(f"{topic} has no leader with both replicas in sync within {WAIT_S} s")


def _log_end(cluster: Cluster, broker: int, topic: str) -> int | None:
    address = cluster.brokers[broker].metrics_address
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    for line in text.splitlines():
        if line.startswith("kafka_log_log_logendoffset{") and f'topic="{topic}"' in line:
            return int(float(line.rsplit(" ", 1)[1]))
    return None


def _wait(condition: object, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {WAIT_S} s: {what}")
        time.sleep(0.05)


def _host_port(address: str) -> tuple[str, int]:
    host, port = address.rsplit(":", 1)
    return host, int(port)


def _produce(correlation_id: int, value: bytes, acks: int) -> bytes:
    from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

    records = build_batch([value], timestamp_ms=int(time.time() * 1000))
    body = ProduceRequest(acks=acks, timeout=timedelta(seconds=60), topic_data=(  # type: ignore[arg-type]
        TopicProduceData(name="pipe", partition_data=(PartitionProduceData(index=0, records=records),)),  # type: ignore[arg-type]
    ))  # fmt: skip
    return request_frame(0, 9, correlation_id, body, "pipelining")


def _metadata(correlation_id: int) -> bytes:
    from kio.schema.metadata.v9.request import MetadataRequest

    body = MetadataRequest(topics=None, include_cluster_authorized_operations=False,
                           include_topic_authorized_operations=False)  # fmt: skip
    return request_frame(3, 9, correlation_id, body, "pipelining")


def _answer(conn: socket.socket) -> tuple[int, memoryview]:
    """One response frame: its correlation id and the rest (the flexible header's tag section included)."""
    payload = read_response_frame(conn)
    return struct.unpack(">i", payload[:4])[0], payload[4:]


def _produced(payload: memoryview) -> tuple[int, int]:
    """(error code, base offset) of the one partition of a Produce v9 answer."""
    from kio.index import load_response_schema
    from kio.serial import entity_reader

    response, _ = entity_reader(load_response_schema(0, 9))(payload, 1)  # after the header's empty tag section
    partition = response.responses[0].partition_responses[0]  # type: ignore[union-attr]
    return int(partition.error_code), int(partition.base_offset)
