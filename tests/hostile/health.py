"""The checks every hostile test ends with (issue 15): after the attack, every process is still up, a fresh
acks=all produce succeeds, and every record acknowledged before is still readable at its offset.

:class:`Ledger` keeps what the cluster acknowledged: it produces acks=all batches of known values to a
topic of 3 partitions, replication factor 3 and ``min.insync.replicas=2`` through the real client, and reads
them back with raw Fetch requests from each partition's leader (the exact offsets, decoded by the reader).
:func:`check_healthy` runs the three checks; every wait in them is bounded.

Attacks are sent with raw gRPC stubs and a call timeout (:data:`CALL_TIMEOUT_S`): an answer that does not come
in time fails the test as DEADLINE_EXCEEDED, so "within a bounded time" is a timeout, not a timed assertion.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable, Sequence
from typing import Any

from log.record import build_batch, iter_batches_with_records
from odradek import Producer
from proto import broker_pb2 as pb
from proto import controller_pb2
from tests.broker.cluster import Cluster

LEDGER_TOPIC = "ledger"
LEDGER_PARTITIONS = 3
CALL_TIMEOUT_S = 10.0  # every attack's gRPC call: an answer later than this is a hang
PRODUCE_TIMEOUT_S = 30.0  # a fresh acks=all produce, retries included (leaderships may be moving)
READ_TIMEOUT_S = 30.0
_counter = itertools.count()


class Ledger:
    """Records the cluster acknowledged: ``(partition, offset) -> value``. Not thread-safe (one test at a time)."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.acked: dict[tuple[int, int], bytes] = {}

    def create(self, replication_factor: int = 3) -> Ledger:
        """The ledger topic: 3 partitions, ``min.insync.replicas`` 2 (1 with a single replica)."""
        min_isr = str(min(2, replication_factor))
        self.cluster.create_topic(LEDGER_TOPIC, LEDGER_PARTITIONS, replication_factor, {"min.insync.replicas": min_isr})
        return self

    def produce(self, count: int = 3) -> None:
        """``count`` records per partition, acks=all, through the real producer (retries and all); each one
        acknowledged goes into the ledger. Fails when one is not acknowledged within PRODUCE_TIMEOUT_S."""
        producer = Producer({
            "bootstrap.servers": self.cluster.bootstrap_servers, "acks": "all",
            "delivery.timeout.ms": int(PRODUCE_TIMEOUT_S * 1000), "request.timeout.ms": 10_000, "linger.ms": 0,
        })  # fmt: skip
        try:
            futures = []
            for partition in range(LEDGER_PARTITIONS):
                for _ in range(count):
                    value = b"ledger-%d" % next(_counter)
                    futures.append((value, producer.send(LEDGER_TOPIC, value=value, partition=partition)))
            for value, future in futures:
                metadata = future.result(timeout=PRODUCE_TIMEOUT_S + 5)
                self.acked[(metadata.partition, metadata.offset)] = value
        finally:
            producer.close()

    def check(self) -> None:
        """Every acknowledged record is readable at its offset (from the partition's current leader)."""
        for partition in range(LEDGER_PARTITIONS):
            wanted = {offset: value for (p, offset), value in self.acked.items() if p == partition}
            if not wanted:
                continue
            found = read_partition(self.cluster, LEDGER_TOPIC, partition, max(wanted) + 1)
            for offset, value in sorted(wanted.items()):
                assert found.get(offset) == value, (
                    f"{LEDGER_TOPIC}-{partition} offset {offset}: acknowledged {value!r}, read {found.get(offset)!r}"
                )


def read_partition(cluster: Cluster, topic: str, partition: int, end: int) -> dict[int, bytes | None]:
    """``offset -> value`` of every record below ``end`` (waits, bounded, until the high watermark passes it)."""
    out: dict[int, bytes | None] = {}
    deadline = time.monotonic() + READ_TIMEOUT_S
    offset = 0
    last = ""
    while offset < end:
        assert time.monotonic() < deadline, f"{topic}-{partition}: offsets from {offset} not readable in time: {last}"
        leader = live_leader(cluster, topic, partition)
        request = pb.FetchRequest(replica_id=-1, max_wait_ms=500, min_bytes=1, max_bytes=4 << 20, topics=[
            pb.FetchTopic(name=topic, partitions=[pb.FetchPartition(partition=partition, fetch_offset=offset,
                                                                    partition_max_bytes=4 << 20,
                                                                    current_leader_epoch=-1)])])  # fmt: skip
        try:
            response = cluster.broker_stub(leader).Fetch(request, timeout=CALL_TIMEOUT_S)
        except Exception as exc:  # the leader just moved or stopped: look again
            last = repr(exc)
            time.sleep(0.1)
            continue
        answer = response.topics[0].partitions[0]
        if answer.error.code:
            last = f"{answer.error.code} {answer.error.message}"
            time.sleep(0.1)
            continue
        if not answer.records and answer.high_watermark <= offset:
            last = f"high watermark {answer.high_watermark}"
        for header, records in iter_batches_with_records(answer.records):
            for record in records:
                if record.offset >= offset:
                    out[record.offset] = record.value
            offset = max(offset, header.next_offset)  # a compacted batch may hold fewer records, or none
    return out


def live_leader(cluster: Cluster, topic: str, partition: int) -> int:
    """The leader of ``topic-partition`` as a live broker's Metadata says (waits, bounded, for one)."""

    def find() -> tuple[int] | None:  # a tuple: broker 0 is a leader too
        for i, proc in enumerate(cluster.brokers):
            if not proc.alive():
                continue
            try:
                leader = cluster.partition_metadata(topic, partition, via=i).leader
            except Exception:
                continue
            if leader >= 0 and cluster.brokers[leader].alive():
                return (leader,)
        return None

    found: tuple[int] = cluster.wait_for(find, READ_TIMEOUT_S, f"a live leader of {topic}-{partition}")
    return found[0]


def check_healthy(cluster: Cluster, ledger: Ledger, *, stopped: Iterable[str] = ()) -> None:
    """The three checks of issue 15 (see the module docstring). ``stopped``: process names the test stopped
    on purpose (not expected alive)."""
    skip = set(stopped)
    for proc in [*cluster.controllers, *cluster.brokers]:
        if proc.name not in skip:
            assert proc.alive(), f"{proc.name} died (exit {proc.returncode}):\n{proc.errors()}"
    ledger.produce(1)  # a fresh acks=all produce succeeds, and joins the ledger
    ledger.check()


# ------------------------------------------------------------------------------------------ requests


def produce_raw(
    cluster: Cluster, topic: str, partition: int, records: bytes, *, acks: int = -1, timeout_ms: int = 5000,
    via: int | None = None,
) -> pb.ProducePartitionResponse:  # fmt: skip
    """One Produce of ``records`` (any bytes) to the partition's leader (or broker ``via``); its one answer."""
    target = live_leader(cluster, topic, partition) if via is None else via
    request = pb.ProduceRequest(acks=acks, timeout_ms=timeout_ms, topics=[
        pb.ProduceTopicData(name=topic, partitions=[pb.ProducePartitionData(partition=partition, records=records)])
    ])  # fmt: skip
    response = cluster.broker_stub(target).Produce(request, timeout=CALL_TIMEOUT_S)
    answer: pb.ProducePartitionResponse = response.topics[0].partitions[0]
    return answer


def good_batch(values: Sequence[bytes] = (b"fine",), **fields: Any) -> bytes:
    """A well-formed producer batch (now-ish timestamps), for attacks to damage."""
    return build_batch(list(values), timestamp_ms=int(time.time() * 1000), **fields)


def create_topic_raw(cluster: Cluster, name: str, partitions: int = 1, rf: int = 1, **kwargs: Any) -> Any:
    """CreateTopics through broker 0; the TopicResult (not asserted)."""
    request = controller_pb2.CreateTopicsRequest(topics=[controller_pb2.TopicToCreate(
        name=name, num_partitions=partitions, replication_factor=rf, **kwargs)], timeout_ms=20_000)  # fmt: skip
    return cluster.broker_stub(0).CreateTopics(request, timeout=30).topics[0]
