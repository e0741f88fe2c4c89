"""Long polls must not starve short requests (issue 15): a handful of clients holding Fetch long polls on a
broker, or FetchMetadata long polls on a controller, took every worker thread of it, and heartbeats,
metadata and produce requests waited behind them (the broker got fenced).

Shown first against the old servers (these tests fail there: the short request times out), now against
servers whose long polls wait on an event loop without a thread (``controller.rpc_server``). The broker runs
with ``num.io.threads=8``; the controller with its default pool (64 workers before, ``num.io.threads`` now),
so N long polls above either count would have taken them all.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import grpc
import pytest

from proto import broker_pb2 as pb
from proto import controller_pb2
from tests.broker.cluster import Cluster
from tests.hostile.health import CALL_TIMEOUT_S, Ledger, check_healthy, good_batch, produce_raw

pytestmark = pytest.mark.hostile

BROKER_LONG_POLLS = 40  # > num.io.threads=8
CONTROLLER_LONG_POLLS = 100  # > the controller's 64 workers
LONG_POLL_MS = 25_000
SHORT_TIMEOUT_S = 5.0


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, Ledger]]:
    with Cluster(tmp_path_factory.mktemp("long-polls"), brokers=1, broker_config={"num.io.threads": "8"}) as c:
        ledger = Ledger(c).create(replication_factor=1)
        ledger.produce(3)
        c.create_topic("quiet", 1, 1)
        yield c, ledger


def cancel_all(calls: list[grpc.Future]) -> None:
    for call in calls:
        call.cancel()


def test_fetch_long_polls_do_not_starve_a_broker(small: tuple[Cluster, Ledger]) -> None:
    cluster, ledger = small
    stub = cluster.broker_stub(0)
    request = pb.FetchRequest(replica_id=-1, max_wait_ms=LONG_POLL_MS, min_bytes=1, max_bytes=1 << 20, topics=[
        pb.FetchTopic(name="quiet", partitions=[pb.FetchPartition(partition=0, fetch_offset=0,
                                                                  partition_max_bytes=1 << 20,
                                                                  current_leader_epoch=-1)])])  # fmt: skip
    calls = [stub.Fetch.future(request, timeout=LONG_POLL_MS / 1000 + 10) for _ in range(BROKER_LONG_POLLS)]
    try:
        cluster.wait_for(lambda: _metadata_ok(cluster), SHORT_TIMEOUT_S * 2, "the long polls to arrive")
        assert sum(not c.done() for c in calls) == BROKER_LONG_POLLS, "the long polls are all still waiting"
        metadata = stub.Metadata(pb.MetadataRequest(all_topics=True), timeout=SHORT_TIMEOUT_S)
        assert {t.name for t in metadata.topics} >= {"quiet", "ledger"}
        written = produce_raw(cluster, "ledger", 0, good_batch(), acks=1, via=0)
        assert not written.error.code, written.error
        woken = produce_raw(cluster, "quiet", 0, good_batch([b"wake up"]), acks=1, via=0)
        assert not woken.error.code
        answers = [c.result(timeout=SHORT_TIMEOUT_S) for c in calls]  # data arrived: every long poll answers
        assert all(a.topics[0].partitions[0].records for a in answers)
    finally:
        cancel_all(calls)
    check_healthy(cluster, ledger)


def test_fetch_metadata_long_polls_do_not_starve_a_controller(small: tuple[Cluster, Ledger]) -> None:
    """Brokers heartbeat to the controller every 500 ms and are fenced after 2 s without one: the broker must
    stay unfenced (its produce still works) while the long polls wait."""
    cluster, ledger = small
    stub = cluster.controller_stub(0)
    end = stub.FetchMetadata(controller_pb2.FetchMetadataRequest(from_offset=0, max_records=1),
                             timeout=CALL_TIMEOUT_S).end_offset  # fmt: skip
    request = controller_pb2.FetchMetadataRequest(from_offset=end + 1_000_000, max_wait_ms=LONG_POLL_MS)
    calls = [stub.FetchMetadata.future(request, timeout=LONG_POLL_MS / 1000 + 10) for _ in range(CONTROLLER_LONG_POLLS)]
    try:
        quorum = stub.DescribeQuorum(controller_pb2.DescribeQuorumRequest(), timeout=SHORT_TIMEOUT_S)
        assert quorum.leader_id == 0
        for _ in range(4):  # 4 s: twice the session timeout, heartbeats included
            written = produce_raw(cluster, "ledger", 1, good_batch(), acks=-1, via=0)
            assert not written.error.code, written.error
            threading.Event().wait(1.0)
        described = cluster.broker_stub(0).DescribeCluster(pb.DescribeClusterRequest(), timeout=SHORT_TIMEOUT_S)
        assert [b.fenced for b in described.brokers] == [False]
        assert sum(not c.done() for c in calls) == CONTROLLER_LONG_POLLS
    finally:
        cancel_all(calls)
    check_healthy(cluster, ledger)


def _metadata_ok(cluster: Cluster) -> bool:
    return bool(cluster.broker_stub(0).Metadata(pb.MetadataRequest(topics=["quiet"]), timeout=SHORT_TIMEOUT_S).topics)
