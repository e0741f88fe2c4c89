"""The sender's retry timing (odradek/sender.py): a P5 refusal (odradek/idempotence.py: an earlier in-flight
batch of the partition was not written in time) is resent without ``retry.backoff.ms``; every other
retriable error, and a refusal of a batch sent at the head of its partition, still waits the backoff."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from common.clock import ManualClock
from odradek.backoff import ExponentialBackoff
from odradek.config import ProducerConfig
from odradek.errors import KafkaError, error_from_code
from odradek.idempotence import Verdict
from odradek.sender import Sender

BACKOFF_MS = 60_000


@dataclass
class _Batch:
    """What ``Sender._retry_or_fail`` reads of a batch."""

    head_when_sent: bool
    created_ms: float = 0.0
    attempts: int = 0
    done: bool = False
    last_error: BaseException | None = None


@dataclass
class _Accumulator:
    reenqueued: list[tuple[list[Any], float]] = field(default_factory=list)

    def reenqueue(self, batches: list[Any], retry_at_ms: float) -> None:
        self.reenqueued.append((list(batches), retry_at_ms))


class _Idempotence:
    """Says retry with the same sequence (P4/P5), as ``IdempotenceState.on_error`` does for these cases."""

    def on_error(self, batch: Any, code: str, retriable: bool) -> Verdict:
        return Verdict.RETRY


def _sender(accumulator: _Accumulator, clock: ManualClock) -> Sender:
    config = ProducerConfig.from_mapping({"bootstrap.servers": "127.0.0.1:9092", "retry.backoff.ms": BACKOFF_MS,
                                          "retry.backoff.max.ms": BACKOFF_MS})  # fmt: skip
    return Sender(
        client=Any,  # type: ignore[arg-type]  # _retry_or_fail never calls the client
        accumulator=accumulator,  # type: ignore[arg-type]
        config=config,
        clock=clock,
        backoff=ExponentialBackoff(BACKOFF_MS, BACKOFF_MS, jitter=0.0),
        idempotence=_Idempotence(),  # type: ignore[arg-type]
    )


def _retry(code: str, head_when_sent: bool) -> tuple[list[Any], float]:
    clock = ManualClock()
    accumulator = _Accumulator()
    sender = _sender(accumulator, clock)
    now = clock.monotonic_ms()
    error = error_from_code(code, code.lower())
    assert isinstance(error, KafkaError)
    batch = _Batch(head_when_sent=head_when_sent, created_ms=now)
    sender._retry_or_fail([batch], error, now)  # type: ignore[list-item]
    assert len(accumulator.reenqueued) == 1, "the batch goes back to its queue exactly once"
    batches, retry_at_ms = accumulator.reenqueued[0]
    assert batches == [batch]
    assert batch.attempts == 1
    return batches, retry_at_ms - now


@pytest.mark.parametrize("code", ["OUT_OF_ORDER_SEQUENCE_NUMBER", "UNKNOWN_PRODUCER_ID"])
def test_p5_a_refusal_behind_an_unanswered_batch_is_resent_without_backoff(code: str) -> None:
    _, delay_ms = _retry(code, head_when_sent=False)
    assert delay_ms == 0


def test_a_retriable_broker_error_still_waits_the_backoff() -> None:
    _, delay_ms = _retry("NOT_ENOUGH_REPLICAS", head_when_sent=False)
    assert delay_ms == BACKOFF_MS


def test_a_refusal_at_the_head_of_its_partition_still_waits_the_backoff() -> None:
    _, delay_ms = _retry("UNKNOWN_PRODUCER_ID", head_when_sent=True)
    assert delay_ms == BACKOFF_MS
