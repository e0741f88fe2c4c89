"""The consumer's ``read_committed`` filter: drop the batches of aborted transactions and every control batch.

A ``read_committed`` fetch answers up to the partition's last stable offset, with the list of transactions
aborted in that range (producer id, first offset). Kafka's fetcher walks the batches in offset order:

* R1. Before a batch of a producer is looked at, every listed aborted transaction whose first offset is at or
  before the batch's last offset marks its producer as aborting.
* R2. A transactional data batch of an aborting producer is dropped.
* R3. An ABORT marker of an aborting producer ends its aborting (its later batches belong to later
  transactions).
* R4. Control batches are never handed to the application.

Non-transactional batches always pass. Pure: fed batch headers (and a control batch's record key), in order.
Not thread-safe (the consumer's thread); one filter per completed fetch of one partition.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from log.record.header import BatchHeader
from log.record.reader import CONTROL_KEY, CONTROL_TYPE_ABORT


class AbortedTransactionFilter:
    """Decides, batch by batch, what a ``read_committed`` consumer skips (R1-R4)."""

    __slots__ = ("_pending", "_aborting")

    def __init__(self, aborted: Iterable[tuple[int, int]]) -> None:
        """``aborted``: ``(producer_id, first_offset)`` of each aborted transaction the fetch answer listed."""
        self._pending = [(first_offset, producer_id) for producer_id, first_offset in aborted]
        heapq.heapify(self._pending)
        self._aborting: set[int] = set()

    def skip(self, header: BatchHeader, control_key: bytes | None = None) -> bool:
        """Whether to skip the batch of ``header``; ``control_key``: the key of a control batch's record."""
        if header.producer_id >= 0:
            while self._pending and self._pending[0][0] <= header.last_offset:  # R1
                self._aborting.add(heapq.heappop(self._pending)[1])
            if header.is_control:
                if _is_abort(control_key):
                    self._aborting.discard(header.producer_id)  # R3
            elif header.is_transactional and header.producer_id in self._aborting:
                return True  # R2
        return header.is_control  # R4


def _is_abort(key: bytes | None) -> bool:
    if key is None or len(key) < CONTROL_KEY.size:
        return False
    _, control_type = CONTROL_KEY.unpack_from(key)
    return bool(control_type == CONTROL_TYPE_ABORT)
