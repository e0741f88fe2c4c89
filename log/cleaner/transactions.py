"""Which transactional batches a cleaning pass removes, and which markers (Kafka's
``CleanedTransactionMetadata``). Pure: fed the batch headers in offset order, and the aborted transactions
(``.txnindex`` entries, :class:`log.txn_index.AbortedTxn`) of the range they come from.

The rules, Kafka's (``LogCleaner``):

* TX1. A data batch of an aborted transaction (a transactional batch of a producer whose aborted transaction
  began at or before the batch and is not yet closed by its ABORT marker in what was read) is removed whole,
  and its records do not enter the offset map: an aborted record must never hide a committed one of its key.
* TX2. A COMMIT marker may go once the pass met no batch of its transaction (every record of it is gone);
  an ABORT marker likewise once the pass met no batch of its aborted transaction. So a marker outlives its
  transaction's records by at least one pass (the two-pass rule: the pass that removes the records keeps the
  marker, the next one finds it alone).
* TX3. A marker that may go is first given a delete horizon, ``now + delete.retention.ms``, stored in its
  batch as a tombstone's (KIP-534); it is removed by the first pass at or past that horizon. A reader that
  saw the transaction's records therefore still finds its marker for ``delete.retention.ms``.
* TX4. What bounds the pass: the cleaner stops at the last stable offset (``UnifiedLog.cleanable_upper_bound``),
  so every transaction it meets is decided and its marker lies below the bound or past it, never missing.

One instance per pass (shared by the pass's groups, as Kafka's is), and another for building the offset map.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from log.record.control import read_marker
from log.record.header import BatchHeader
from log.txn_index import AbortedTxn


class TransactionFilter:
    """TX1 and TX2 over the batches of one pass, in offset order. Not thread-safe (one cleaner thread)."""

    def __init__(self, aborted: Iterable[AbortedTxn]) -> None:
        unique = {(e.producer_id, e.first_offset): e for e in aborted}
        self._upcoming = deque(sorted(unique.values(), key=lambda e: (e.first_offset, e.producer_id)))
        self._aborted: dict[int, bool] = {}  # producer id -> a batch of its ongoing aborted transaction was met
        self._committed: set[int] = set()  # producer ids with a batch of an ongoing committed transaction met

    def _begin_up_to(self, offset: int) -> None:
        while self._upcoming and self._upcoming[0].first_offset <= offset:
            self._aborted[self._upcoming.popleft().producer_id] = False

    def on_batch(self, batch: bytes, header: BatchHeader) -> bool:
        """Any batch read (a marker only moves the state); True when it is a data batch of an aborted
        transaction."""
        if not header.is_control:
            return self.on_data(header)
        if header.records_count == 1:
            _, marker = read_marker(batch)
            self.on_marker(header, marker.is_commit)
        return False

    def on_data(self, header: BatchHeader) -> bool:
        """A data batch read; True when it belongs to an aborted transaction (TX1: remove it)."""
        self._begin_up_to(header.last_offset)
        if not header.is_transactional:
            return False
        if header.producer_id in self._aborted:
            self._aborted[header.producer_id] = True
            return True
        self._committed.add(header.producer_id)
        return False

    def on_marker(self, header: BatchHeader, commit: bool) -> bool:
        """A COMMIT (``commit``) or ABORT marker read; True when it may go (TX2)."""
        self._begin_up_to(header.last_offset)
        if commit:
            met = header.producer_id in self._committed
            self._committed.discard(header.producer_id)
            return not met
        return not self._aborted.pop(header.producer_id, False)
