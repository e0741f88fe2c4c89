"""Kafka's error names for the transaction APIs, and the exception the coordinator's core raises.

The core (:mod:`broker.txn.state`) answers with these names; the clients map them back to typed exceptions
(``ProducerFencedError``, ``InvalidTxnStateError``, ...). :class:`TxnError` is a
:class:`broker.errors.BrokerError`, so a handler that lets one escape still answers with its name.
"""

from __future__ import annotations

from broker.errors import BrokerError

CONCURRENT_TRANSACTIONS = "CONCURRENT_TRANSACTIONS"  # retriable: a transition is being written, or markers
COORDINATOR_LOAD_IN_PROGRESS = "COORDINATOR_LOAD_IN_PROGRESS"  # retriable: the partition is being loaded
COORDINATOR_NOT_AVAILABLE = "COORDINATOR_NOT_AVAILABLE"  # retriable: no leader for the partition
INVALID_PRODUCER_EPOCH = "INVALID_PRODUCER_EPOCH"
INVALID_PRODUCER_ID_MAPPING = "INVALID_PRODUCER_ID_MAPPING"  # the id is not the transactional id's
INVALID_REQUEST = "INVALID_REQUEST"
INVALID_TRANSACTION_TIMEOUT = "INVALID_TRANSACTION_TIMEOUT"
INVALID_TXN_STATE = "INVALID_TXN_STATE"
NOT_COORDINATOR = "NOT_COORDINATOR"  # retriable: ask FindCoordinator again
PRODUCER_FENCED = "PRODUCER_FENCED"  # fatal for the producer: a newer instance took the transactional id
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"
TRANSACTIONAL_ID_NOT_FOUND = "TRANSACTIONAL_ID_NOT_FOUND"
TRANSACTION_COORDINATOR_FENCED = "TRANSACTION_COORDINATOR_FENCED"  # markers from a coordinator epoch passed
UNKNOWN_TOPIC_OR_PARTITION = "UNKNOWN_TOPIC_OR_PARTITION"

RETRIABLE = frozenset(
    {CONCURRENT_TRANSACTIONS, COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR}
)


class TxnError(BrokerError):
    """A transaction request the coordinator refuses; ``code`` is one of the names above."""

    @property
    def retriable(self) -> bool:
        return self.code in RETRIABLE
