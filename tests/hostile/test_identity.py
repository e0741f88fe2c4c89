"""Identity checks that need no security layer (issue 15): a second RegisterBroker for a live broker id is
DUPLICATE_BROKER_REGISTRATION and changes nothing; a Fetch claiming a replica id must carry that broker's
broker epoch (``tests/hostile/test_fetch.py``). Each ends with :func:`check_healthy`."""

from __future__ import annotations

import threading
import uuid

import pytest

from proto import broker_pb2 as pb
from proto import controller_pb2
from tests.broker.cluster import Cluster
from tests.hostile.health import CALL_TIMEOUT_S, Ledger, check_healthy

pytestmark = pytest.mark.hostile


def test_registering_a_live_broker_id_again_is_duplicate_broker_registration(cluster: Cluster, ledger: Ledger) -> None:
    """Another process claiming broker 1's id (with its own incarnation and endpoint) is refused while broker 1's
    session is alive; broker 1 keeps its registration, its epoch and its leaderships."""
    before = {b.node_id: (b.host, b.port, b.fenced) for b in describe(cluster)}
    impostor = controller_pb2.RegisterBrokerRequest(broker_id=1, incarnation_id=str(uuid.uuid4()),
                                                    endpoints={"PLAINTEXT": "127.0.0.1:1"})  # fmt: skip
    for _ in range(3):
        response = cluster.controller_stub(0).RegisterBroker(impostor, timeout=CALL_TIMEOUT_S)
        assert response.error.code == "DUPLICATE_BROKER_REGISTRATION"
        assert "broker id 1" in response.error.message
        threading.Event().wait(1.0)  # past a session timeout: the live broker's heartbeats keep it alive
    assert {b.node_id: (b.host, b.port, b.fenced) for b in describe(cluster)} == before
    check_healthy(cluster, ledger)


def describe(cluster: Cluster) -> list[pb.BrokerNode]:
    return list(cluster.broker_stub(0).DescribeCluster(pb.DescribeClusterRequest(), timeout=CALL_TIMEOUT_S).brokers)
