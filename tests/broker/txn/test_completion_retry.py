"""The coordinator's last step of a decided transaction (TC8: Complete* written after the markers) is written
again while its failure is retriable and the shard is still this broker's: a write that found the ISR below
``min.insync.replicas`` right after a failover left the id in Prepare* for good before (every request
answering CONCURRENT_TRANSACTIONS; found by ``tests/transactions/test_exactly_once_processes.py``).

Unit level: the coordinator's ``_execute`` (the write) and its runtime are stand-ins."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

from broker.txn import errors as E
from broker.txn.coordinator import TransactionCoordinator
from broker.txn.errors import TxnError


def coordinator(failures: list[str], current: list[bool]) -> tuple[Any, list[int]]:
    """A coordinator whose writes fail with ``failures`` in turn, then succeed; ``current[0]`` says whether
    the shard is still its own. Returns it and the list of write times."""
    made: Any = TransactionCoordinator.__new__(TransactionCoordinator)
    made.broker_id = 0
    made._stopping = threading.Event()
    made.clock = SimpleNamespace(time_ms=lambda: 1000 + len(writes))
    made._runtime = SimpleNamespace(is_current=lambda _shard: current[0])
    writes: list[int] = []

    def execute(_shard: object, decide: Any) -> None:
        manager = SimpleNamespace(markers_written=lambda txn_id, now: writes.append(now))
        decide(manager)
        if len(writes) <= len(failures):
            raise TxnError(failures[len(writes) - 1], "the write failed")

    made._execute = execute
    return made, writes


def test_a_retriable_failure_is_written_again_until_it_succeeds() -> None:
    made, writes = coordinator([E.COORDINATOR_NOT_AVAILABLE, E.CONCURRENT_TRANSACTIONS], [True])
    made._complete_until_done(SimpleNamespace(failure=""), "t")
    assert writes == [1000, 1001, 1002]  # three writes, each with the time of its own attempt


def test_a_final_failure_is_not_retried() -> None:
    made, writes = coordinator([E.INVALID_TXN_STATE, E.COORDINATOR_NOT_AVAILABLE], [True])
    made._complete_until_done(SimpleNamespace(failure=""), "t")
    assert writes == [1000]


def test_no_retry_once_the_shard_moved_or_failed_to_load() -> None:
    made, writes = coordinator([E.COORDINATOR_NOT_AVAILABLE] * 5, [False])
    made._complete_until_done(SimpleNamespace(failure=""), "t")
    assert writes == [1000]  # the next coordinator completes it (TC11)
    made, writes = coordinator([E.COORDINATOR_NOT_AVAILABLE] * 5, [True])
    made._complete_until_done(SimpleNamespace(failure="cannot load __transaction_state-0"), "t")
    assert writes == [1000]


def test_stopping_ends_the_retries() -> None:
    made, writes = coordinator([E.COORDINATOR_NOT_AVAILABLE] * 100, [True])
    made._stopping.set()
    made._complete_until_done(SimpleNamespace(failure=""), "t")
    assert writes == [1000]
