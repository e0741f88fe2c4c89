"""The transactional producer against fake brokers: what it sends when the coordinator does not add a partition
to the transaction (docs/TRANSACTIONS.md C2)."""

from __future__ import annotations

import pytest

from odradek import Producer, TopicPartition
from odradek.errors import (
    InvalidProducerEpochError,
    KafkaError,
    KafkaTimeoutError,
    ProducerFencedError,
    TopicAuthorizationFailedError,
)
from tests.clients.fake_broker import FakeCluster
from tests.clients.fake_coordinator import FakeCoordinator
from tests.support.launcher import wait_until

ADD = ("AddPartitionsToTxn", TopicPartition("", 0))  # where the fake broker takes AddPartitionsToTxn's answers


@pytest.mark.parametrize(
    ("answers", "raised"),
    [(["TOPIC_AUTHORIZATION_FAILED"], TopicAuthorizationFailedError),  # an error: the transaction is abortable
     (["CONCURRENT_TRANSACTIONS"] * 10_000, KafkaTimeoutError)],  # no success within max.block.ms
)  # fmt: skip
def test_records_of_a_partition_the_coordinator_did_not_add_fail_unsent(
    cluster: FakeCluster, answers: list[str], raised: type[KafkaError]
) -> None:
    """C2: a record is sent only once the coordinator added its partition to the transaction. Sent anyway, it
    could join the previous transaction, still open on that partition when its coordinator was cut off before
    writing the markers, and be committed with it (the chaos harness's partial-transaction: 2 of 6 records of a
    transaction read by a read_committed consumer). It fails unsent with the AddPartitionsToTxn's error, the
    commit raises it and sends no EndTxn, and after the abort the next transaction goes through."""
    cluster.groups = FakeCoordinator(cluster.topics, node=1)
    cluster.create_topic("t")
    cluster.inject(*ADD, *answers)
    config = {"bootstrap.servers": cluster.bootstrap, "transactional.id": "tx", "max.block.ms": 1000,
              "linger.ms": 0, "client.id": "txn-unsent"}  # fmt: skip
    with Producer(config) as p:
        p.init_transactions()
        p.begin_transaction()
        future = p.send("t", b"never sent")
        with pytest.raises(raised):
            p.commit_transaction()
        with pytest.raises(raised):
            future.result(5)
        assert cluster.calls_of("Produce") == []
        assert cluster.calls_of("EndTxn") == []
        with cluster.lock:
            cluster.injected.clear()
        p.abort_transaction()
        p.begin_transaction()
        after = p.send("t", b"sent")
        p.commit_transaction()
        assert after.result(5).offset == 0
        assert len(cluster.calls_of("EndTxn")) == 1


@pytest.mark.parametrize("code", ["PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH"])
def test_a_record_refused_for_its_epoch_makes_the_transaction_abortable(cluster: FakeCluster, code: str) -> None:
    """KIP-588: a partition leader's refusal of the producer's epoch is abortable, not fatal (a leader cut off
    from the others answers from its own coordinator's stale state); the producer looks at the leaders again
    (that leader may be deposed), aborts, takes the next epoch from the coordinator and goes on."""
    cluster.groups = FakeCoordinator(cluster.topics, node=1)
    cluster.create_topic("t")
    config = {"bootstrap.servers": cluster.bootstrap, "transactional.id": "tx", "linger.ms": 0,
              "client.id": "txn-epoch"}  # fmt: skip
    with Producer(config) as p:
        p.init_transactions()
        p.begin_transaction()
        p.send("t", b"first")  # the topic's metadata is known from here on
        p.commit_transaction()
        p.begin_transaction()
        cluster.inject("Produce", TopicPartition("t", 0), code)
        refreshes = len(cluster.calls_of("Metadata"))
        future = p.send("t", b"refused")
        with pytest.raises(InvalidProducerEpochError):
            future.result(5)
        with pytest.raises(InvalidProducerEpochError):
            p.commit_transaction()
        wait_until(lambda: len(cluster.calls_of("Metadata")) > refreshes, 5, "a metadata refresh")
        p.abort_transaction()
        assert [(r.producer_id, r.producer_epoch) for r in cluster.calls_of("InitProducerId")] == [(-1, -1),
                                                                                                  (1000, 0)]
        p.begin_transaction()
        after = p.send("t", b"sent")
        p.commit_transaction()
        assert after.result(5).offset == 1


def test_records_of_a_partition_the_coordinator_fenced_fail_unsent_as_fenced(cluster: FakeCluster) -> None:
    """C2 / C6: the coordinator answers AddPartitionsToTxn with PRODUCER_FENCED (a newer instance took the id):
    the producer is FATAL and the partition's records fail unsent with that error, not as a partition leader's
    refusal of the epoch (which only makes the transaction abortable)."""
    cluster.groups = FakeCoordinator(cluster.topics, node=1)
    cluster.create_topic("t")
    cluster.inject(*ADD, "PRODUCER_FENCED")
    config = {"bootstrap.servers": cluster.bootstrap, "transactional.id": "tx", "linger.ms": 0,
              "client.id": "txn-fenced"}  # fmt: skip
    with Producer(config) as p:
        p.init_transactions()
        p.begin_transaction()
        future = p.send("t", b"never sent")
        with pytest.raises(ProducerFencedError):
            future.result(5)
        with pytest.raises(ProducerFencedError):
            p.commit_transaction()
        with pytest.raises(ProducerFencedError):
            p.abort_transaction()
        assert cluster.calls_of("Produce") == []
