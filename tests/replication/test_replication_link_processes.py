"""Replication over the ``REPLICATION`` listener (``broker/replication_link.py``) between broker processes.

Three brokers with a ``REPLICATION`` listener each: the followers fetch over it (their connections are seen
in the kernel's table), acks=all completes through it, and a failover moves the followers to the new
leader's listener with no acknowledged record lost. On the listener, what is not a follower's fetch is
refused and changes nothing: a consumer's fetch (INVALID_REQUEST), a fetch posing as a follower with a
wrong broker epoch (STALE_BROKER_EPOCH), a frame that does not parse or is over ``socket.request.max.bytes``
(the connection is closed); the followers go on replicating. With ``replica.fetch.tcp.enable=false`` the
followers fetch over gRPC and no connection is made to the listener.
"""

from __future__ import annotations

import socket
import struct
import time
from functools import partial
from pathlib import Path

import pytest

from broker.replication_link import FollowerLink, recv_exactly, split_host_port
from proto import broker_pb2 as pb
from tests.broker.cluster import Cluster, established_connections
from tests.broker.test_broker_processes import fetch_request
from tests.replication.test_replication_processes import CONTROLLER_CONFIG, TOPIC_CONFIG, produce_all, values_at

pytestmark = pytest.mark.slow

WAIT_S = 30.0


def links_to(cluster: Cluster, broker: int) -> int:
    return established_connections(cluster.replication_addresses[broker])


def test_followers_replicate_over_the_listener_and_follow_a_failover(tmp_path: Path) -> None:
    with Cluster(tmp_path, brokers=3, controller_config=CONTROLLER_CONFIG, replication=True) as cluster:
        cluster.create_topic("r", replication_factor=3, configs=TOPIC_CONFIG)
        acked = []
        for i in range(20):
            value = f"before-{i}".encode()
            assert produce_all(cluster, "r", value) == ""
            acked.append(value)
        leader = cluster.leader("r")
        followers = [i for i in range(3) if i != leader]
        cluster.wait_for(lambda: links_to(cluster, leader) == 2, WAIT_S, "both followers connected to the listener")
        assert [links_to(cluster, f) for f in followers] == [0, 0]  # nothing to fetch from a follower

        cluster.kill_broker(leader)
        survivor = followers[0]

        def new_leader() -> bool:
            now = cluster.leader("r", via=survivor)
            return now >= 0 and now != leader

        cluster.wait_for(new_leader, WAIT_S, "a new leader from the ISR")
        for i in range(20):
            value = f"after-{i}".encode()
            cluster.wait_for(partial(produce_all, cluster, "r", value, want=""), WAIT_S, f"acks=all of {value!r}")
            acked.append(value)
        now = cluster.leader("r", via=survivor)
        cluster.wait_for(lambda: links_to(cluster, now) >= 1, WAIT_S, "the other follower on the new leader's listener")
        got = values_at(cluster, now, "r")
        assert list(dict.fromkeys(v for v in got if v in acked)) == acked  # every acknowledged record, in order
        assert all(got.count(v) == 1 for v in acked[:20])

        cluster.start_broker(leader)  # the old leader comes back as a follower of the new one
        cluster.wait_for(lambda: len(cluster.partition_metadata("r", 0, via=now).isr) == 3, WAIT_S, "a full ISR")
        assert links_to(cluster, now) == 2
        assert produce_all(cluster, "r", b"last") == ""


def test_idle_partitions_in_fetch_sessions_stay_in_sync_and_follow_a_failover(tmp_path: Path) -> None:
    """Fetch sessions (broker/fetch_session.py): with several partitions per leader and most of them idle,
    the followers' incremental fetches leave the idle ones unread, yet they stay in the ISR over several
    ``replica.lag.time.max.ms``; a record on any of them is replicated at once (acks=all), and after a
    failover every acknowledged record is on the new leaders and the old leader rejoins every ISR."""
    topics = [f"s{i}" for i in range(6)]
    config = {"replica.lag.time.max.ms": "1500"}
    with Cluster(tmp_path, brokers=3, controller_config=CONTROLLER_CONFIG, broker_config=config,
                 replication=True) as cluster:  # fmt: skip
        acked: dict[str, list[bytes]] = {topic: [] for topic in topics}

        def produce_each(tag: str) -> None:
            for topic in topics:
                value = f"{topic}-{tag}".encode()
                cluster.wait_for(partial(produce_all, cluster, topic, value, want=""), WAIT_S, f"acks=all of {value!r}")
                acked[topic].append(value)

        def full_isr(via: int) -> bool:
            return all(len(cluster.partition_metadata(topic, 0, via=via).isr) == 3 for topic in topics)

        for topic in topics:
            cluster.create_topic(topic, replication_factor=3, configs=TOPIC_CONFIG)
        produce_each("first")
        cluster.wait_for(partial(full_isr, 0), WAIT_S, "every ISR full")
        time.sleep(4.0)  # idle for more than twice the lag
        assert full_isr(0), "an idle partition left the ISR"
        produce_each("after-idle")

        victim = cluster.leader(topics[0])
        survivor = next(i for i in range(3) if i != victim)
        cluster.kill_broker(victim)
        cluster.wait_for(lambda: all(cluster.leader(t, via=survivor) not in (-1, victim) for t in topics), WAIT_S,
                         "new leaders for every topic")  # fmt: skip
        produce_each("after-failover")
        for topic in topics:
            got = values_at(cluster, cluster.leader(topic, via=survivor), topic)
            assert [v for v in got if v in acked[topic]] == acked[topic], topic
        cluster.start_broker(victim)
        cluster.wait_for(partial(full_isr, survivor), WAIT_S, "the old leader back in every ISR")
        produce_each("last")


def raw_exchange(address: str, data: bytes, timeout_s: float = 10.0) -> bytes:
    """Send ``data`` on a new connection and read until the broker closes it (what it answered, if anything);
    a close with bytes of ours still unread arrives as a reset."""
    host, port = split_host_port(address)
    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        sock.sendall(data)
        received = b""
        try:
            while chunk := sock.recv(65536):
                received += chunk
        except ConnectionResetError:
            pass
        return received


def test_the_listener_refuses_what_is_not_a_follower_fetch(tmp_path: Path) -> None:
    config = {"socket.request.max.bytes": "65536"}
    with Cluster(tmp_path, brokers=2, broker_config=config, replication=True) as cluster:
        cluster.create_topic("h", replication_factor=2)
        for i in range(5):
            assert produce_all(cluster, "h", f"v{i}".encode()) == ""
        leader = cluster.leader("h")
        follower = 1 - leader
        address = cluster.replication_addresses[leader]
        link = FollowerLink(address, None, 1 << 20)
        try:
            answer = link.call(fetch_request("h", 0, 0), 10.0)  # a consumer's fetch (replica_id -1)
            assert answer.error.code == "INVALID_REQUEST"
            assert "follower fetches only" in answer.error.message
            assert [p.error.code for t in answer.topics for p in t.partitions] == ["INVALID_REQUEST"]
            assert not any(p.records for t in answer.topics for p in t.partitions)

            posing = fetch_request("h", 0, 0)
            posing.replica_id, posing.replica_epoch = follower, 123456789  # not the follower's broker epoch
            answer = link.call(posing, 10.0)
            assert answer.error.code == "STALE_BROKER_EPOCH"
            assert [p.error.code for t in answer.topics for p in t.partitions] == ["STALE_BROKER_EPOCH"]
        finally:
            link.close()

        # a frame that does not parse, one over socket.request.max.bytes: closed, unanswered
        assert raw_exchange(address, struct.pack(">I", 6) + b"\xff\xff\xff\xff\xff\xff") == b""
        assert raw_exchange(address, struct.pack(">I", 65537) + b"x" * 100) == b""
        # an empty frame is a FetchRequest with every field at its default: broker 0, epoch 0 (not its epoch)
        empty = raw_exchange_one(address, struct.pack(">I", 0))
        assert pb.FetchResponse.FromString(empty).error.code == "STALE_BROKER_EPOCH"

        # nothing changed for the follower: it is still in the ISR and replicating over the listener
        assert produce_all(cluster, "h", b"after") == ""
        assert len(cluster.partition_metadata("h", 0, via=leader).isr) == 2
        assert values_at(cluster, leader, "h") == [*(f"v{i}".encode() for i in range(5)), b"after"]
        cluster.wait_for(lambda: links_to(cluster, leader) == 1, WAIT_S, "the follower's one connection")


def raw_exchange_one(address: str, data: bytes, timeout_s: float = 10.0) -> bytes:
    """Send ``data`` and read one answer frame's payload."""
    host, port = split_host_port(address)
    deadline = time.monotonic() + timeout_s
    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        sock.sendall(data)
        head = recv_exactly(sock, 4, deadline)
        assert head is not None, "the broker closed the connection without an answer"
        body = recv_exactly(sock, struct.unpack(">I", head)[0], deadline)
        assert body is not None, "the broker closed the connection inside its answer"
        return bytes(body)


def test_followers_use_grpc_when_tcp_replication_is_off(tmp_path: Path) -> None:
    config = {"replica.fetch.tcp.enable": "false"}
    with Cluster(tmp_path, brokers=2, broker_config=config, replication=True) as cluster:
        cluster.create_topic("g", replication_factor=2)
        for i in range(5):
            assert produce_all(cluster, "g", f"v{i}".encode()) == ""
        leader = cluster.leader("g")
        assert len(cluster.partition_metadata("g", 0, via=leader).isr) == 2
        assert links_to(cluster, leader) == 0  # acks=all and the full ISR came through gRPC
