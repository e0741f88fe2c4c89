"""Transactions against real broker processes (docs/TRANSACTIONS.md): a committed transaction is read by a
read_committed consumer, an aborted one never is, an open one holds read_committed readers at its first offset,
a new instance fences the old one (whose open transaction is aborted), offsets sent to a transaction become the
group's only when it commits, the coordinator aborts a transaction older than its timeout, and the
``odradek transactions`` tool lists and describes."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from odradek import Consumer, Producer, TopicPartition
from odradek.errors import IllegalStateError, InvalidProducerEpochError, ProducerFencedError
from tests.broker.cluster import Cluster

CONFIG = {
    "transaction.state.log.num.partitions": "3",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "offsets.topic.num.partitions": "3",
    "offsets.topic.replication.factor": "1",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with Cluster(tmp_path_factory.mktemp("txn"), brokers=1, broker_config=CONFIG) as c:
        yield c


def producer(cluster: Cluster, txn_id: str, **extra: object) -> Producer:
    return Producer({"bootstrap.servers": cluster.bootstrap_servers, "transactional.id": txn_id, "linger.ms": 0,
                     "max.block.ms": 30000, **extra})  # fmt: skip


def read_all(cluster: Cluster, topic: str, partitions: int, isolation: str, *, until: int = 0,
             timeout_s: float = 10.0) -> list[bytes]:  # fmt: skip
    """Every value of ``topic`` (read from the beginning) once ``until`` values are in, or after ``timeout_s``."""
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "isolation.level": isolation,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})  # fmt: skip
    consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
    values: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            values.extend(r.value or b"" for r in consumer.poll(200))
            if until and len(values) >= until:
                time.sleep(0.3)  # anything beyond what was expected shows up too
                values.extend(r.value or b"" for r in consumer.poll(200))
                break
    finally:
        consumer.close()
    return values


def test_commit_is_read_and_abort_is_not(cluster: Cluster) -> None:
    cluster.create_topic("out", partitions=2, replication_factor=1)
    p = producer(cluster, "tx-basic")
    try:
        p.init_transactions()
        p.begin_transaction()
        for i in range(10):
            p.send("out", value=f"c{i}".encode(), partition=i % 2)
        p.commit_transaction()
        p.begin_transaction()
        for i in range(10):
            p.send("out", value=f"a{i}".encode(), partition=i % 2)
        p.flush()
        p.abort_transaction()
        p.begin_transaction()
        p.send("out", value=b"last", partition=0)
        p.commit_transaction()
    finally:
        p.close()
    committed = read_all(cluster, "out", 2, "read_committed", until=11)
    assert sorted(committed) == sorted([f"c{i}".encode() for i in range(10)] + [b"last"])
    uncommitted = read_all(cluster, "out", 2, "read_uncommitted", until=21)
    assert len(uncommitted) == 21  # the aborted records are in the log, marked


def test_open_transaction_holds_read_committed_readers(cluster: Cluster) -> None:
    cluster.create_topic("held", partitions=1, replication_factor=1)
    p = producer(cluster, "tx-held")
    plain = Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 0})
    try:
        p.init_transactions()
        p.begin_transaction()
        p.send("held", value=b"in-txn", partition=0).result(10)
        plain.send("held", value=b"after", partition=0).result(10)
        assert read_all(cluster, "held", 1, "read_committed", timeout_s=1.5) == []  # the LSO is at the txn
        assert read_all(cluster, "held", 1, "read_uncommitted", until=2) == [b"in-txn", b"after"]
        p.commit_transaction()
        assert read_all(cluster, "held", 1, "read_committed", until=2) == [b"in-txn", b"after"]
    finally:
        p.close()
        plain.close()


def test_new_instance_fences_the_zombie_and_aborts_its_transaction(cluster: Cluster) -> None:
    cluster.create_topic("fence", partitions=1, replication_factor=1)
    zombie = producer(cluster, "tx-fence")
    successor = producer(cluster, "tx-fence")
    try:
        zombie.init_transactions()
        zombie.begin_transaction()
        zombie.send("fence", value=b"zombie-1", partition=0).result(10)
        successor.init_transactions()  # fences the zombie, aborts its open transaction
        # the partition has its successor's epoch now (the abort): the record is refused, which makes the
        # transaction abortable (KIP-588); the abort asks the coordinator, which says the zombie is fenced
        with pytest.raises(InvalidProducerEpochError):
            zombie.send("fence", value=b"zombie-2", partition=0).result(10)
        with pytest.raises(InvalidProducerEpochError):
            zombie.commit_transaction()
        with pytest.raises(ProducerFencedError):
            zombie.abort_transaction()
        with pytest.raises(ProducerFencedError):
            zombie.begin_transaction()
        successor.begin_transaction()
        successor.send("fence", value=b"successor", partition=0)
        successor.commit_transaction()
    finally:
        zombie.close()
        successor.close()
    assert read_all(cluster, "fence", 1, "read_committed", until=1) == [b"successor"]


def test_send_outside_a_transaction_is_refused(cluster: Cluster) -> None:
    cluster.create_topic("refused", partitions=1, replication_factor=1)
    p = producer(cluster, "tx-refused")
    try:
        with pytest.raises(IllegalStateError, match="init_transactions"):
            p.begin_transaction()
        p.init_transactions()
        with pytest.raises(IllegalStateError, match="begin_transaction"):
            p.send("refused", value=b"x")
        plain = Producer({"bootstrap.servers": cluster.bootstrap_servers})
        with pytest.raises(IllegalStateError, match="transactional.id"):
            plain.begin_transaction()
        plain.close()
    finally:
        p.close()


def test_offsets_commit_with_the_transaction(cluster: Cluster) -> None:
    cluster.create_topic("in", partitions=1, replication_factor=1)
    cluster.create_topic("copy", partitions=1, replication_factor=1)
    plain = Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 0})
    for i in range(6):
        plain.send("in", value=f"m{i}".encode(), partition=0)
    plain.close()
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "copier",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "isolation.level": "read_committed"})  # fmt: skip
    p = producer(cluster, "tx-copier")
    tp = TopicPartition("in", 0)
    try:
        consumer.assign([tp])
        records: list = []
        deadline = time.monotonic() + 10
        while len(records) < 6 and time.monotonic() < deadline:
            records.extend(consumer.poll(200))
        assert len(records) == 6
        p.init_transactions()
        p.begin_transaction()
        for r in records[:3]:
            p.send("copy", value=r.value, partition=0)
        p.send_offsets_to_transaction({tp: records[2].offset + 1}, consumer.group_metadata())
        p.abort_transaction()
        assert consumer.committed(tp) is None  # aborted: not the group's
        p.begin_transaction()
        for r in records[:3]:
            p.send("copy", value=r.value, partition=0)
        p.send_offsets_to_transaction({tp: records[2].offset + 1}, consumer.group_metadata())
        p.commit_transaction()
        deadline = time.monotonic() + 10
        while consumer.committed(tp) != 3 and time.monotonic() < deadline:
            time.sleep(0.05)  # the offsets are the group's once the marker is written (after EndTxn)
        assert consumer.committed(tp) == 3
    finally:
        p.close()
        consumer.close()
    assert read_all(cluster, "copy", 1, "read_committed", until=3) == [b"m0", b"m1", b"m2"]


def test_the_coordinator_aborts_an_expired_transaction(cluster: Cluster) -> None:
    cluster.create_topic("expire", partitions=1, replication_factor=1)
    p = producer(cluster, "tx-expire", **{"transaction.timeout.ms": 1000})
    try:
        p.init_transactions()
        p.begin_transaction()
        p.send("expire", value=b"forgotten", partition=0).result(10)
        assert read_all(cluster, "expire", 1, "read_committed", timeout_s=0.5) == []
        deadline = time.monotonic() + 15
        consumer_sees: list[bytes] = []
        while time.monotonic() < deadline:  # the LSO moves past the aborted transaction
            plain = Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 0})
            plain.send("expire", value=b"probe", partition=0).result(10)
            plain.close()
            consumer_sees = read_all(cluster, "expire", 1, "read_committed", timeout_s=0.5)
            if consumer_sees:
                break
        assert consumer_sees
        assert b"forgotten" not in consumer_sees
        with pytest.raises(ProducerFencedError):  # its epoch was bumped by the abort (the deviation)
            p.commit_transaction()
    finally:
        p.close()


def test_transactions_tool(cluster: Cluster, tmp_path: Path) -> None:
    p = producer(cluster, "tx-tool")
    try:
        p.init_transactions()
        cluster.create_topic("tool", partitions=1, replication_factor=1)
        p.begin_transaction()
        p.send("tool", value=b"x", partition=0).result(10)
        command = [sys.executable, "-m", "odradek.cli", "transactions"]
        servers = ["--bootstrap-servers", cluster.bootstrap_servers]
        listed = subprocess.run([*command, "list", *servers], capture_output=True, text=True, timeout=60)
        assert listed.returncode == 0, listed.stderr
        assert "tx-tool" in listed.stdout
        assert "Ongoing" in listed.stdout
        described = subprocess.run([*command, "describe", "tx-tool", *servers], capture_output=True, text=True,
                                   timeout=60)  # fmt: skip
        assert described.returncode == 0, described.stderr
        assert "tool-0" in described.stdout
        missing = subprocess.run([*command, "describe", "nope", *servers], capture_output=True, text=True, timeout=60)
        assert missing.returncode != 0
        assert "TRANSACTIONAL_ID_NOT_FOUND" in missing.stderr
        p.abort_transaction()
    finally:
        p.close()


def test_another_process_ends_the_transaction_two_phase(cluster: Cluster) -> None:
    """Phase one in a producer (records flushed, the transaction left open), phase two elsewhere with the
    handle (EndTxn by id, producer id and epoch), as Spark's exactly-once sink does; a fenced handle fails."""
    from odradek.txn_handle import end_transaction

    cluster.create_topic("two-phase", partitions=1, replication_factor=1)
    config = {"bootstrap.servers": cluster.bootstrap_servers}
    handles = []
    for value in (b"kept", b"dropped"):
        p = producer(cluster, f"tx-2pc-{value.decode()}")
        p.init_transactions()
        p.begin_transaction()
        p.send("two-phase", value=value, partition=0)
        p.flush()
        handles.append(p.transaction_handle())
        p.close()  # the transaction stays open
    end_transaction(config, handles[0], commit=True)
    end_transaction(config, handles[1], commit=False)
    assert read_all(cluster, "two-phase", 1, "read_committed", until=1) == [b"kept"]
    successor = producer(cluster, "tx-2pc-kept")
    successor.init_transactions()  # a new epoch: the old handle is fenced
    successor.close()
    with pytest.raises(ProducerFencedError):
        end_transaction(config, handles[0], commit=True)
