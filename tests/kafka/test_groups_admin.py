"""Consumer groups and administration through stock clients: classic groups with client-side assignors
(range, roundrobin, cooperative-sticky) rebalancing as members join and leave, KIP-848 groups with
librdkafka's ``group.protocol=consumer``, committed offsets, topic and config admin, describe cluster,
aiokafka and kcat."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions

from tests.kafka.helpers import WAIT_S, consume, create_topic
from tests.support.apt import apt_install

pytestmark = pytest.mark.slow


def _assigned(consumers: list[Consumer], total: int, timeout_s: float = WAIT_S) -> list[set[int]]:
    """Poll every consumer until their assignments are disjoint and cover ``total`` partitions."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for c in consumers:
            c.poll(0.1)
        sets = [{tp.partition for tp in c.assignment()} for c in consumers]
        if sum(len(s) for s in sets) == total and len(set().union(*sets)) == total and all(sets):
            return sets
    raise AssertionError(f"no balanced assignment in {timeout_s} s: {[c.assignment() for c in consumers]}")


@pytest.mark.parametrize(("strategy", "protocol"), [("range", "classic"), ("roundrobin", "classic"),
                                                     ("cooperative-sticky", "classic"), ("", "consumer")])  # fmt: skip
def test_group_rebalances_when_members_join_and_leave(bootstrap: str, strategy: str, protocol: str) -> None:
    topic, group = f"grp-{protocol}-{strategy or 'server'}", f"g-{protocol}-{strategy or 'server'}"
    create_topic(bootstrap, topic, partitions=4)
    config = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
              "group.protocol": protocol, "enable.auto.commit": False}  # fmt: skip
    if protocol == "classic":
        config |= {"partition.assignment.strategy": strategy, "session.timeout.ms": 6000,
                   "heartbeat.interval.ms": 500}  # fmt: skip
    first = Consumer(config)
    first.subscribe([topic])
    assert _assigned([first], 4) == [{0, 1, 2, 3}]
    second = Consumer(config)
    second.subscribe([topic])
    halves = _assigned([first, second], 4)
    assert sorted(len(s) for s in halves) == [2, 2]
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(40):
        producer.produce(topic, value=b"%d" % i, partition=i % 4)
    assert producer.flush(30) == 0
    got = []
    deadline = time.monotonic() + WAIT_S
    while len(got) < 40 and time.monotonic() < deadline:
        for c in (first, second):
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                got.append(m)
                c.commit(m, asynchronous=False)
    assert sorted(int(m.value()) for m in got) == list(range(40))
    second.close()  # leaves the group: the first member gets every partition back
    assert _assigned([first], 4) == [{0, 1, 2, 3}]
    committed = first.committed([TopicPartition(topic, p) for p in range(4)], timeout=10)
    assert [tp.offset for tp in committed] == [10, 10, 10, 10]
    first.close()


def test_mixed_group_protocols_are_refused(bootstrap: str) -> None:
    topic = "mixed"
    create_topic(bootstrap, topic, partitions=1)
    classic = Consumer({"bootstrap.servers": bootstrap, "group.id": "mixed", "session.timeout.ms": 6000})
    classic.subscribe([topic])
    assert _assigned([classic], 1) == [{0}]
    modern = Consumer({"bootstrap.servers": bootstrap, "group.id": "mixed", "group.protocol": "consumer"})
    modern.subscribe([topic])
    deadline = time.monotonic() + 5
    error = None
    while time.monotonic() < deadline and error is None:
        m = modern.poll(0.2)
        if m is not None and m.error() is not None:
            error = m.error()
    assert not modern.assignment()
    modern.close()
    classic.close()


def test_kafka_python_classic_group_and_commits(bootstrap: str) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.structs import TopicPartition as KTopicPartition

    topic = "kp-group"
    create_topic(bootstrap, topic, partitions=2)
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    for i in range(20):
        producer.send(topic, value=b"%d" % i, partition=i % 2)
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id="kp-group", auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=15000)  # fmt: skip
    values = sorted(int(m.value) for _, m in zip(range(20), consumer, strict=False))
    assert values == list(range(20))
    consumer.commit()
    assert consumer.committed(KTopicPartition(topic, 0)) == 10
    consumer.close()


def test_topic_admin_configs_and_cluster(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    create_topic(bootstrap, "admin-t", partitions=1, config={"retention.ms": "3600000"})
    admin.create_partitions([NewPartitions("admin-t", 3)])["admin-t"].result(WAIT_S)
    metadata = admin.list_topics(timeout=10)
    assert len(metadata.topics["admin-t"].partitions) == 3
    resource = ConfigResource(ConfigResource.Type.TOPIC, "admin-t")
    described = admin.describe_configs([resource])[resource].result(WAIT_S)
    assert described["retention.ms"].value == "3600000"
    change = ConfigResource(ConfigResource.Type.TOPIC, "admin-t", incremental_configs=[
        ConfigEntry("retention.ms", "7200000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
    ])  # fmt: skip
    admin.incremental_alter_configs([change])[change].result(WAIT_S)
    deadline = time.monotonic() + WAIT_S  # as in Kafka, a broker's metadata shows the change a moment later
    while True:
        described = admin.describe_configs([resource])[resource].result(WAIT_S)
        if described["retention.ms"].value != "3600000" or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert described["retention.ms"].value == "7200000"
    assert set(described["cleanup.policy"].value.split(",")) == {"delete", "compact"}  # APPEND kept delete
    cluster = admin.describe_cluster().result(WAIT_S)
    assert [n.id for n in cluster.nodes] == [0]
    assert f"{cluster.nodes[0].host}:{cluster.nodes[0].port}" == bootstrap
    admin.delete_topics(["admin-t"])["admin-t"].result(WAIT_S)
    assert "admin-t" not in admin.list_topics(timeout=10).topics


def test_aiokafka_produce_and_consume(bootstrap: str) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    topic = "aio"
    create_topic(bootstrap, topic)

    async def run() -> list[bytes]:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, compression_type="gzip")
        await producer.start()
        try:
            for i in range(10):
                await producer.send_and_wait(topic, b"aio-%d" % i, key=b"k")
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id="aio", auto_offset_reset="earliest")
        await consumer.start()
        try:
            values = []
            async with asyncio.timeout(WAIT_S):
                async for message in consumer:
                    values.append(message.value)
                    if len(values) == 10:
                        break
            await consumer.commit()
        finally:
            await consumer.stop()
        return values

    assert asyncio.run(run()) == [b"aio-%d" % i for i in range(10)]


@pytest.fixture(scope="module")
def kcat() -> str:
    found = shutil.which("kcat")
    if found is None:
        why = apt_install(["kcat"])
        found = shutil.which("kcat")
        if found is None:
            pytest.skip(f"kcat is not installed and apt-get cannot install it: {why or 'installed nowhere'}")
    return found


def test_kcat_produces_and_consumes(bootstrap: str, kcat: str) -> None:
    topic = "kcat"
    create_topic(bootstrap, topic)
    lines = "".join(f"k{i}:v{i}\n" for i in range(5))
    subprocess.run([kcat, "-b", bootstrap, "-t", topic, "-P", "-K:", "-z", "snappy"], input=lines.encode(),
                   check=True, timeout=60)  # fmt: skip
    out = subprocess.run([kcat, "-b", bootstrap, "-t", topic, "-C", "-e", "-o", "beginning", "-f", "%k=%s\n"],
                         capture_output=True, check=True, timeout=60)  # fmt: skip
    assert out.stdout.decode().splitlines() == [f"k{i}=v{i}" for i in range(5)]
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "kcat-check"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    assert [m.key() for m in consume(consumer, 5)] == [b"k%d" % i for i in range(5)]
    consumer.close()
