"""Exponential backoff with jitter, as Kafka's ``ExponentialBackoff``: pure, randomness injected."""

from __future__ import annotations

import random


class ExponentialBackoff:
    """``backoff_ms(attempts)``: ``initial * 2**attempts`` capped at ``maximum``, times a random factor in
    ``[1 - jitter, 1 + jitter]``. ``attempts`` counts failures so far, from 0. Thread-safe enough: the
    only shared state is the Random, whose methods are atomic under the GIL.
    """

    def __init__(
        self, initial_ms: int, maximum_ms: int, *, jitter: float = 0.2, rng: random.Random | None = None
    ) -> None:
        self._initial = max(0, initial_ms)
        self._maximum = max(self._initial, maximum_ms)
        self._jitter = jitter
        self._rng = rng or random.Random()

    def backoff_ms(self, attempts: int) -> float:
        if self._initial == 0:
            return 0.0
        exponent = min(max(attempts, 0), 62)
        term = min(float(self._initial) * float(1 << exponent), float(self._maximum))
        if self._jitter and self._initial < self._maximum:
            term *= self._rng.uniform(1 - self._jitter, 1 + self._jitter)
        return term
