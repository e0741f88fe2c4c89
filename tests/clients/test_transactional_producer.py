"""The transactional producer against fake brokers: what it sends when the coordinator does not add a partition
to the transaction (docs/TRANSACTIONS.md C2)."""

from __future__ import annotations

import pytest

from odradek import Producer, TopicPartition
from odradek.errors import KafkaError, KafkaTimeoutError, TopicAuthorizationFailedError
from tests.clients.fake_broker import FakeCluster
from tests.clients.fake_coordinator import FakeCoordinator

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
