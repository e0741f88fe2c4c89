"""Finishing a transaction from another process (a two-phase commit: Spark's exactly-once sink).

A transaction coordinator ends a transaction for whoever names its transactional id, producer id and epoch
(EndTxn): :meth:`Producer.transaction_handle` gives them once the records are flushed, and
:func:`end_transaction` commits or aborts with them, anywhere. A handle whose producer was fenced since (a newer
``init_transactions`` with the same id, or the coordinator's timeout abort) gets ProducerFencedError.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

from odradek.config import ProducerConfig
from odradek.errors import KafkaTimeoutError, error_from_code
from odradek.group.coordinator import TRANSACTION_KEY_TYPE, CoordinatorClient
from odradek.net import ClusterClient
from proto import broker_pb2

RETRY_CODES = frozenset({"CONCURRENT_TRANSACTIONS", "COORDINATOR_LOAD_IN_PROGRESS", "REQUEST_TIMED_OUT"})


@dataclass(frozen=True, slots=True)
class TransactionHandle:
    """An open transaction: enough to end it (picklable)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int


def end_transaction(
    config: Mapping[str, object], handle: TransactionHandle, commit: bool, timeout_ms: float = 60_000
) -> None:
    """EndTxn(commit or abort) for ``handle``, retried while the coordinator is busy or moves, within
    ``timeout_ms``. ``config``: a producer config (its ``bootstrap.servers`` and security keys are used)."""
    cfg = ProducerConfig.from_mapping({k: v for k, v in config.items() if k != "transactional.id"})
    client = ClusterClient.for_config(cfg, name="odradek-end-transaction")
    try:
        coordinator = CoordinatorClient(client, handle.transactional_id, TRANSACTION_KEY_TYPE)
        request = broker_pb2.EndTxnRequest(transactional_id=handle.transactional_id, producer_id=handle.producer_id,
                                           producer_epoch=handle.producer_epoch, committed=commit)  # fmt: skip
        deadline = time.monotonic() + timeout_ms / 1000
        attempt = 0
        while True:
            remaining_ms = (deadline - time.monotonic()) * 1000
            if remaining_ms <= 0:
                raise KafkaTimeoutError(f"EndTxn for {handle.transactional_id!r} did not succeed in {timeout_ms} ms")
            response = coordinator.call("EndTxn", lambda: request, remaining_ms)
            code = response.error.code
            if not code:
                return
            if code not in RETRY_CODES:
                raise error_from_code(code, f"ending the transaction of {handle.transactional_id!r}: "
                                      f"{response.error.message or code}")  # fmt: skip
            time.sleep(min(client.backoff.backoff_ms(attempt), remaining_ms) / 1000)
            attempt += 1
    finally:
        client.close()
