"""The transactions of one partition: which are open, the last stable offset, and the aborted ones a fetch needs.

Pure (no I/O, no clock): the partition drives a :class:`TransactionTracker` with the batch headers it writes
(as leader, as follower and at recovery, so every replica agrees) and with its high watermark. Kafka keeps the
same facts in ``ProducerStateManager`` (``ongoingTxns``, ``unreplicatedTxns``) and ``UnifiedLog``.

* L1. A transactional (non-control) batch of a producer without an open transaction opens one at its first
  offset; later batches of the same producer extend it. A marker closes the producer's open transaction
  (none open: an empty transaction at the marker's offset, as Kafka's ``appendEndTxnMarker``).
* L2. A marker's coordinator epoch must be at least the last one seen for its producer, else
  TRANSACTION_COORDINATOR_FENCED (a deposed coordinator); its producer epoch at least the producer's
  current one, else PRODUCER_FENCED. A transactional batch of an older epoch than the producer's current one
  (an open transaction of a fenced instance) is refused by the producer state's own rules (S2).
* L3. The first unstable offset is the first offset of the earliest transaction that is open, or closed by a
  marker not yet below the high watermark (a marker above it may still be lost with the leader).
  The last stable offset (LSO) is ``min(first unstable offset, high watermark)``: below it every transaction
  is decided, everywhere. The LSO never exceeds the high watermark.
* L4. Closing a transaction by ABORT yields the :class:`~log.txn_index.AbortedTxn` for the index, whose
  ``last_stable_offset`` is the first offset of the earliest *other* open transaction, or the marker's offset
  + 1 if there is none (Kafka's ``lastStableOffset(completedTxn)``).
* L5. A truncation to offset ``t`` reopens the transactions whose marker was at or after ``t`` (if they began
  before it) and forgets those that began at or after ``t``. A truncation below the high watermark may
  also drop markers that were forgotten already: the owner then rebuilds the tracker from the log.
* L6. There are no more open transactions than producers in the producer state, which is bounded (S9): the
  producer state never evicts a producer whose transaction is open here.

Thread-safety: none; the owning partition calls it under its own lock.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from log.errors import LogError
from log.record.control import EndTransactionMarker
from log.record.header import BatchHeader
from log.txn_index import AbortedTxn


class TransactionCoordinatorFencedError(LogError):
    code = "TRANSACTION_COORDINATOR_FENCED"


class ProducerFencedError(LogError):
    code = "PRODUCER_FENCED"


@dataclass(frozen=True, slots=True)
class OpenTxn:
    """One producer's transaction on this partition: its first offset and the last offset written so far."""

    producer_id: int
    producer_epoch: int
    first_offset: int
    last_offset: int


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction closed by the marker at ``last_offset``."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


class TransactionTracker:
    """Open transactions (by producer id), closed ones whose marker is not yet replicated, coordinator epochs."""

    def __init__(self, open_txns: Iterable[OpenTxn] = (), coordinator_epochs: dict[int, int] | None = None) -> None:
        self._open: dict[int, OpenTxn] = {t.producer_id: t for t in open_txns}
        self._unreplicated: list[CompletedTxn] = []  # in marker order
        self._coordinator_epochs: dict[int, int] = dict(coordinator_epochs or {})
        self._high_watermark = 0

    @property
    def open_transactions(self) -> list[OpenTxn]:
        """The open transactions, earliest first."""
        return sorted(self._open.values(), key=lambda t: t.first_offset)

    def open_transaction(self, producer_id: int) -> OpenTxn | None:
        return self._open.get(producer_id)

    def coordinator_epoch(self, producer_id: int) -> int:
        return self._coordinator_epochs.get(producer_id, -1)

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def coordinator_epochs(self) -> dict[int, int]:
        return dict(self._coordinator_epochs)

    # ------------------------------------------------------------------------------------------ writes

    def check_marker(self, producer_id: int, producer_epoch: int, marker: EndTransactionMarker,
                     current_producer_epoch: int) -> None:  # fmt: skip
        """L2, before a marker is written; ``current_producer_epoch`` is the producer state's (-1: none)."""
        seen = self._coordinator_epochs.get(producer_id, -1)
        if marker.coordinator_epoch < seen:
            raise TransactionCoordinatorFencedError(
                f"marker for producer {producer_id} from coordinator epoch {marker.coordinator_epoch}, "
                f"but epoch {seen} wrote here before"
            )
        if producer_epoch < current_producer_epoch:
            raise ProducerFencedError(
                f"marker for producer {producer_id} epoch {producer_epoch}, older than its epoch "
                f"{current_producer_epoch} here"
            )

    def on_batch(self, header: BatchHeader, first_offset: int) -> None:
        """L1 for a written data batch (control batches go to :meth:`on_marker`)."""
        if not header.is_transactional or header.is_control:
            return
        last = first_offset + header.last_offset_delta
        txn = self._open.get(header.producer_id)
        if txn is None:
            self._open[header.producer_id] = OpenTxn(header.producer_id, header.producer_epoch, first_offset, last)
        else:
            self._open[header.producer_id] = OpenTxn(txn.producer_id, max(txn.producer_epoch, header.producer_epoch),
                                                     txn.first_offset, last)  # fmt: skip

    def on_marker(
        self, producer_id: int, marker: EndTransactionMarker, offset: int
    ) -> tuple[CompletedTxn, AbortedTxn | None]:
        """L1, L4 for a written marker at ``offset``: the closed transaction, and its index entry if aborted."""
        txn = self._open.pop(producer_id, None)
        first = offset if txn is None else txn.first_offset
        completed = CompletedTxn(producer_id, first, offset, not marker.is_commit)
        self._coordinator_epochs[producer_id] = max(marker.coordinator_epoch, self.coordinator_epoch(producer_id))
        if offset >= self._high_watermark:
            self._unreplicated.append(completed)
        if marker.is_commit:
            return completed, None
        others = [t.first_offset for t in self._open.values()]
        lso = min(others) if others else offset + 1
        return completed, AbortedTxn(producer_id, first, offset, lso)

    def update_high_watermark(self, high_watermark: int) -> None:
        """L3: markers below the high watermark no longer hold the LSO back."""
        self._high_watermark = high_watermark
        if self._unreplicated and self._unreplicated[0].last_offset < high_watermark:
            self._unreplicated = [t for t in self._unreplicated if t.last_offset >= high_watermark]

    def truncate_to(self, offset: int) -> None:
        """L5."""
        self._open = {pid: t for pid, t in self._open.items() if t.first_offset < offset}
        for txn in self._unreplicated:
            if txn.last_offset >= offset and txn.first_offset < offset and txn.producer_id not in self._open:
                self._open[txn.producer_id] = OpenTxn(txn.producer_id, -1, txn.first_offset, offset - 1)
        self._unreplicated = [t for t in self._unreplicated if t.last_offset < offset]
        self._high_watermark = min(self._high_watermark, offset)

    def expire_producer(self, producer_id: int) -> None:
        """The producer's state expired: forget its coordinator epoch (never an open transaction's)."""
        if producer_id not in self._open:
            self._coordinator_epochs.pop(producer_id, None)

    # ------------------------------------------------------------------------------------------ reads

    def first_unstable_offset(self) -> int | None:
        """L3."""
        firsts = [t.first_offset for t in self._open.values()] + [t.first_offset for t in self._unreplicated]
        return min(firsts) if firsts else None

    def last_stable_offset(self, high_watermark: int) -> int:
        """L3."""
        first = self.first_unstable_offset()
        return high_watermark if first is None else min(first, high_watermark)
