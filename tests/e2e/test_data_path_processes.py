"""Odradek's clients on the brokers' ``DATA`` listeners (``broker/data_listener.py``, ``odradek/net/data_link.py``)
against real controller and broker processes.

Three brokers with ``REPLICATION`` and ``DATA`` listeners: an idempotent acks=all producer and a consumer send
their Produce and Fetch there (their connections are seen in the kernel's table; a connection is opened by a
first request only), every record comes back once and in order, and a failover of a partition leader moves
them to the new leader's listener with no acknowledged record lost. A broker that advertises a DATA address
nobody listens on gets the clients' requests on gRPC instead (a warning says so), and nothing is lost.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from controller.ports import free_ports
from odradek import Consumer, Producer, TopicPartition
from tests.broker.cluster import Cluster, established_connections
from tests.replication.test_replication_processes import CONTROLLER_CONFIG, TOPIC_CONFIG

pytestmark = pytest.mark.slow

WAIT_S = 30.0


def send_all(producer: Producer, topic: str, values: list[bytes]) -> list[int]:
    futures = [producer.send(topic, value=v, partition=0) for v in values]
    producer.flush(timeout=WAIT_S)
    return [f.result(timeout=1).offset for f in futures]


def consume(consumer: Consumer, want: int, timeout_polls: int = 150) -> list[bytes]:
    got: list[bytes] = []
    for _ in range(timeout_polls):
        got.extend(r.value for r in consumer.poll(timeout_ms=200))
        if len(got) >= want:
            break
    return got


def test_clients_produce_and_fetch_on_the_data_listener_and_follow_a_failover(tmp_path: Path) -> None:
    with Cluster(tmp_path, brokers=3, controller_config=CONTROLLER_CONFIG, replication=True, data=True) as cluster:
        cluster.create_topic("d", replication_factor=3, configs=TOPIC_CONFIG)
        leader = cluster.leader("d")
        before = [established_connections(a) for a in cluster.data_addresses]
        assert before == [0, 0, 0]
        producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", "linger.ms": 1,
                             "enable.idempotence": True, "retries": 1000, "delivery.timeout.ms": 60000})  # fmt: skip
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "auto.offset.reset": "earliest"})
        try:
            first = [f"before-{i}".encode() for i in range(300)]
            assert send_all(producer, "d", first) == list(range(300))
            consumer.assign([TopicPartition("d", 0)])
            assert consume(consumer, len(first)) == first
            # the producer's and the consumer's connections, to the leader's DATA listener only
            assert established_connections(cluster.data_addresses[leader]) == 2
            assert [established_connections(a) for i, a in enumerate(cluster.data_addresses) if i != leader] == [0, 0]

            cluster.kill_broker(leader)
            survivor = next(i for i in range(3) if i != leader)

            def new_leader() -> bool:
                now = cluster.leader("d", via=survivor)
                return now >= 0 and now != leader

            cluster.wait_for(new_leader, WAIT_S, "a new leader from the ISR")
            now = cluster.leader("d", via=survivor)
            second = [f"after-{i}".encode() for i in range(300)]
            offsets = send_all(producer, "d", second)  # retried through the failover: each written once
            assert offsets == list(range(300, 600))
            assert consume(consumer, len(second)) == second
            assert established_connections(cluster.data_addresses[now]) == 2
        finally:
            producer.close(timeout=WAIT_S)
            consumer.close()
        cluster.wait_for(lambda: established_connections(cluster.data_addresses[now]) == 0, WAIT_S,
                         "the clients' connections closed with the clients")  # fmt: skip


def test_an_unreachable_data_listener_gets_the_requests_on_grpc(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with Cluster(tmp_path, brokers=1, data=True, start=False) as cluster:
        # the broker listens on its DATA address but tells clients of another one, where nothing listens
        dead = cluster.data_addresses[0]
        cluster.brokers[0].argv += ["--advertised", f"DATA://127.0.0.1:{free_ports(1)[0]}"]
        cluster.start()
        cluster.create_topic("g", replication_factor=1)
        caplog.set_level(logging.WARNING, logger="odradek.net.client")
        producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "auto.offset.reset": "earliest"})
        try:
            values = [f"v-{i}".encode() for i in range(50)]
            assert send_all(producer, "g", values) == list(range(50))
            consumer.assign([TopicPartition("g", 0)])
            assert consume(consumer, len(values)) == values
            assert established_connections(dead) == 0  # nothing reached the real listener either
        finally:
            producer.close(timeout=WAIT_S)
            consumer.close()
        warnings = [r.getMessage() for r in caplog.records if "cannot reach the DATA listener" in r.getMessage()]
        assert len(warnings) == 2, warnings  # the producer's and the consumer's, once each

