"""The transactional producer's coordinator calls at unit level (a fake coordinator; no broker): how
AddPartitionsToTxn retries CONCURRENT_TRANSACTIONS (docs/TRANSACTIONS.md C2)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pytest

import odradek.transactions as transactions
from common.clock import SystemClock
from odradek.backoff import ExponentialBackoff
from odradek.errors import (
    InvalidProducerEpochError,
    KafkaError,
    NotEnoughReplicasError,
    ProducerFencedError,
    TransactionalIdAuthorizationFailedError,
)
from odradek.idempotence import IdempotenceState
from odradek.transactions import ADD_PARTITIONS_RETRY_BACKOFF_MS, State, TransactionManager
from odradek.types import TopicPartition
from proto import broker_pb2

RESPONSES = {"InitProducerId": broker_pb2.InitProducerIdResponse, "EndTxn": broker_pb2.EndTxnResponse,
             "AddPartitionsToTxn": broker_pb2.AddPartitionsToTxnResponse}  # fmt: skip


class Coordinator:
    """Answers each AddPartitionsToTxn with the next of ``add_answers`` (an error code; "" is success)."""

    def __init__(self, add_answers: list[str]) -> None:
        self.add_answers = add_answers
        self.end_answers: list[str] = []  # EndTxn's, the same way
        self.calls: list[str] = []

    def call(self, method: str, make: Any, remaining: float, error_code: Any = None) -> Any:
        self.calls.append(method)
        response = RESPONSES[method]()
        if method == "InitProducerId":
            response.producer_id, response.producer_epoch = 7, 0
        if method == "AddPartitionsToTxn" and self.add_answers:
            response.error.code = self.add_answers.pop(0)
        if method == "EndTxn" and self.end_answers:
            response.error.code = self.end_answers.pop(0)
        return response


@pytest.fixture
def sleeps() -> list[float]:
    """The manager's backoff waits, in ms (its ``sleep`` takes seconds). Only the manager's own: patching
    ``time.sleep`` would also catch every other thread of the test process (py4j's worker thread of the Spark
    tests' session sleeps 1 s in a loop: it then spins without sleeping and fills the list)."""
    return []


@pytest.fixture
def manager(
    monkeypatch: pytest.MonkeyPatch, sleeps: list[float]
) -> Iterator[Callable[[Coordinator], TransactionManager]]:
    """``manager(coordinator)``: an initialized manager talking to ``coordinator``; closed at the end of the
    test (its adder thread ends)."""
    made: list[TransactionManager] = []

    def make(coordinator: Coordinator) -> TransactionManager:
        monkeypatch.setattr(transactions, "CoordinatorClient", lambda *args: coordinator)
        client: Any = SimpleNamespace(backoff=ExponentialBackoff(100, 1000, jitter=0))
        txn = TransactionManager(client, "t", 60000, IdempotenceState(), SystemClock(), max_block_ms=10000,
                                 sleep=lambda seconds: sleeps.append(round(seconds * 1000, 6)))  # fmt: skip
        made.append(txn)
        txn.init_transactions()
        return txn

    yield make
    for txn in made:
        txn.close()


def add(txn: TransactionManager, partition: int) -> None:
    txn.before_send(TopicPartition("out", partition))
    txn._wait_for_adds()


def test_first_add_of_a_transaction_retries_concurrent_transactions_every_20_ms(
    manager: Callable[[Coordinator], TransactionManager], sleeps: list[float]
) -> None:
    """The previous transaction is still completing (its markers are being written): Kafka's producer retries
    the next transaction's first AddPartitionsToTxn after 20 ms, not after retry.backoff.ms (100, doubling)."""
    coordinator = Coordinator(["CONCURRENT_TRANSACTIONS"] * 3)
    txn = manager(coordinator)
    txn.begin_transaction()
    add(txn, 0)
    assert sleeps == [ADD_PARTITIONS_RETRY_BACKOFF_MS] * 3 == [20.0] * 3
    assert coordinator.calls.count("AddPartitionsToTxn") == 4
    txn.commit_transaction(flush=lambda: None)
    coordinator.add_answers = ["CONCURRENT_TRANSACTIONS"]
    txn.begin_transaction()  # the next transaction's first add: 20 ms again
    add(txn, 0)
    assert sleeps == [20.0] * 4


def test_later_adds_keep_retry_backoff_ms(
    manager: Callable[[Coordinator], TransactionManager], sleeps: list[float]
) -> None:
    """Once the transaction has partitions, CONCURRENT_TRANSACTIONS is not the previous one completing: the
    usual exponential backoff (retry.backoff.ms 100, doubling) applies, as in Kafka."""
    coordinator = Coordinator([])
    txn = manager(coordinator)
    txn.begin_transaction()
    add(txn, 0)
    coordinator.add_answers = ["CONCURRENT_TRANSACTIONS"] * 2
    add(txn, 1)
    assert sleeps == [100.0, 200.0]


@pytest.mark.parametrize(
    ("error", "raised"),
    [(TransactionalIdAuthorizationFailedError("not allowed"), TransactionalIdAuthorizationFailedError),
     (InvalidProducerEpochError("a leader refused the epoch"), InvalidProducerEpochError),
     (NotEnoughReplicasError("the ISR is too small"), NotEnoughReplicasError)],
)  # fmt: skip
def test_a_record_that_fails_during_the_commits_flush_is_never_committed(
    manager: Callable[[Coordinator], TransactionManager], error: KafkaError, raised: type[KafkaError]
) -> None:
    """C4 / C6: the sender reports a record's failure while ``commit_transaction`` flushes (a fatal error: the
    producer is FATAL; another, the refused epoch included: the transaction is ABORTABLE). The commit raises that
    error and sends no EndTxn: a commit without the record would lose it for every read_committed reader (the
    chaos harness found a refused record's transaction committed after a broker was cut off)."""
    coordinator = Coordinator([])
    txn = manager(coordinator)
    txn.begin_transaction()
    add(txn, 0)
    with pytest.raises(raised):
        txn.commit_transaction(flush=lambda: txn.on_record_error(error))
    assert "EndTxn" not in coordinator.calls
    if raised is TransactionalIdAuthorizationFailedError:  # C6: every later call raises it too
        with pytest.raises(TransactionalIdAuthorizationFailedError):
            txn.begin_transaction()
    else:  # the transaction must be aborted first
        with pytest.raises(raised):
            txn.commit_transaction(flush=lambda: None)
        txn.abort_transaction(abort_unsent=lambda: None, flush=lambda: None)
        assert coordinator.calls.count("EndTxn") == 1
        txn.begin_transaction()


def test_a_refused_epoch_is_fatal_only_when_the_coordinator_says_so(
    manager: Callable[[Coordinator], TransactionManager],
) -> None:
    """KIP-588: a partition leader's refusal of the epoch makes the transaction abortable; the abort asks the
    coordinator, whose PRODUCER_FENCED (a newer instance took the transactional id) makes the producer FATAL."""
    coordinator = Coordinator([])
    coordinator.end_answers = ["PRODUCER_FENCED"]
    txn = manager(coordinator)
    txn.begin_transaction()
    add(txn, 0)
    txn.on_record_error(InvalidProducerEpochError("a leader refused the epoch"))
    assert txn.state is State.ABORTABLE
    with pytest.raises(ProducerFencedError):
        txn.abort_transaction(abort_unsent=lambda: None, flush=lambda: None)
    assert coordinator.calls.count("EndTxn") == 1  # the coordinator was asked
    with pytest.raises(ProducerFencedError):  # C6
        txn.begin_transaction()
