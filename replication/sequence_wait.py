"""The held-batch wait of idempotent producers (``log.producer_state`` S8).

Kafka's broker handles one connection's requests one at a time; a gRPC server hands a connection's calls
to a pool of threads, so two requests the producer sent in order (``odradek.sender``) may reach the
partition in the other order, the earlier one a moment later. A producer's batch that is only *ahead of
its turn* (its refusal says ``ahead``) is therefore held, the partition's lock released, until the batches
before it are written, for at most ``wait_ms`` of the partition's clock; every leader append wakes the held
ones to check again, and so does a role change (which the next check sees). A gap that stays (its batches
lost, or refused) is then refused as usual.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TypeVar

from common.clock import Clock
from log.producer_state import OutOfOrderSequenceError, UnknownProducerIdError

logger = logging.getLogger(__name__)

T = TypeVar("T")

SEQUENCE_WAIT_MS = 500.0
SEQUENCE_POLL_S = 0.05  # a held batch reads the clock again at least this often (a ManualClock moves by hand)


class HeldBatchWait:
    """Runs an append attempt again while its refusal is only "ahead of its turn" (S8), within a bound.

    Two more bounds (issue 15): the hold ends by the request's own deadline when it has one (one deadline per
    request across everything it waits on), and at most as many batches as ``slots`` allows are held at once
    across the broker (a held batch keeps its request's worker thread: without the bound, a producer sending
    batches out of turn could keep every worker waiting); a batch that finds no slot is refused at once.

    Thread-safety: :meth:`attempt` and :meth:`wake` are called with ``condition``'s lock held (the owning
    partition's lock); waiting releases it. ``slots`` is shared by the broker's partitions.
    """

    def __init__(
        self, condition: threading.Condition, clock: Clock, wait_ms: float = SEQUENCE_WAIT_MS,
        slots: threading.Semaphore | None = None,
    ) -> None:  # fmt: skip
        self._condition = condition
        self._clock = clock
        self.wait_ms = wait_ms
        self._slots = slots

    def attempt(self, append: Callable[[], T], what: object, deadline_ms: float | None = None) -> T:
        """``append()`` until it succeeds, raises anything but an "ahead" refusal, or ``wait_ms`` passed (or
        ``deadline_ms`` of the monotonic clock, if sooner)."""
        deadline: float | None = None
        holding = False
        try:
            while True:
                try:
                    return append()
                except (OutOfOrderSequenceError, UnknownProducerIdError) as refusal:
                    if not refusal.ahead:
                        raise
                    now = self._clock.monotonic_ms()
                    if deadline is None:
                        deadline = now + self.wait_ms if deadline_ms is None else min(now + self.wait_ms, deadline_ms)
                    if now >= deadline:
                        logger.debug("%s: a batch ahead of its turn waited until its deadline in vain: %s", what,
                                     refusal)  # fmt: skip
                        raise
                    if not holding and self._slots is not None:
                        holding = self._slots.acquire(blocking=False)
                        if not holding:
                            logger.debug("%s: too many batches held already; refused at once: %s", what, refusal)
                            raise
                    self._condition.wait(min((deadline - now) / 1000, SEQUENCE_POLL_S))
        finally:
            if holding and self._slots is not None:
                self._slots.release()

    def wake(self) -> None:
        """An append or a role change: the held batches check again."""
        self._condition.notify_all()
