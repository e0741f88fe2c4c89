"""Idempotent producers' state of one partition: per producer id, its epoch and its last batches.

Pure (no I/O, no clock of its own): the partition drives it with batch headers (never decoded records)
and times. Kafka keeps this in its storage layer (``ProducerStateManager``), next to the log whose tail
it summarizes; so does Odradek, which is why it lives in ``log/`` and imports nothing but ``log``.

Sequence rules (Kafka's ``ProducerAppendInfo.checkProducerEpoch`` / ``checkSequence``), checked by a
leader for each batch with ``producerId >= 0``, before anything is written; the tests in
``tests/log/test_producer_state.py`` and ``tests/idempotence/test_sequence_model.py`` cite them:

* S1. ``producerEpoch`` and ``baseSequence`` must be set (>= 0), and the batch must not be a control batch
  (markers are written by the transaction coordinator's WriteTxnMarkers only, :meth:`ProducerStateManager.
  check_marker`): else INVALID_RECORD.
* S2. An epoch older than the producer's current one: INVALID_PRODUCER_EPOCH.
* S3. A producer id without state: the batch must start at sequence 0, else UNKNOWN_PRODUCER_ID.
* S4. A newer epoch starts over: its first batch must start at sequence 0, else OUT_OF_ORDER_SEQUENCE_NUMBER.
* S5. Same epoch, a batch whose sequences were all written before, inside one of the producer's last
  :data:`MAX_BATCHES_PER_PRODUCER` runs, is a duplicate: answered with its original offsets, nothing
  appended. A run is one batch, or consecutive batches of the producer that follow each other in sequence
  *and* in offset (nothing of another producer in between), merged: within a run, offset - sequence is
  constant, so the original offset of any sequence in it is exact. (Kafka keeps the last 5 batches and
  matches them exactly; a run keeps the same promise for a whole stream of one producer's appends, which
  an Odradek request of several batches a partition needs.) An append of several batches is a duplicate
  only whole, inside one run (a retried request resent as it was); partly written before, it is
  OUT_OF_ORDER_SEQUENCE_NUMBER: an append is all or nothing.
* S6. Same epoch, otherwise the batch must start right after the last one (sequences wrap from
  2**31 - 1 to 0), else OUT_OF_ORDER_SEQUENCE_NUMBER.
* S7. A batch's checks and its update touch only the entry of its own producer id; a rejected append
  changes no entry (the check works on a private copy of what the append would change).
* S8. A refusal says whether the batch is only *ahead*: the first batch of its producer in the append, of
  the producer's current or a newer epoch, starting after the sequence the producer is due to send next
  (after the last written one; at 0 for a producer without state or in a new epoch). Written in order, the
  batches before it would make it acceptable: they may still be on their way, and a leader may hold it
  until they are written (``replication.partition``, bounded). Anything else refused is final.

Transactions (docs/TRANSACTIONS.md; the partition's open transactions and LSO are :mod:`log.transactions`'s
rules L1-L6, kept here in :attr:`ProducerStateManager.transactions`):

* S10. A non-transactional batch of a producer whose transaction is open on this partition:
  INVALID_TXN_STATE (Kafka's rule).
* S11. A transactional batch that would open a transaction here (its producer has none open) must come with
  its producer's *verification guard* (KIP-890 part 1): :meth:`ProducerStateManager.begin_verification`
  hands one out (the same one to concurrent appends of the producer's epoch) before the leader asks the
  transaction coordinator whether the partition is in the producer's ongoing transaction; the append passes
  it back. A marker of the producer voids it, so an append verified before an abort but written after its
  marker is refused
  (INVALID_TXN_STATE) instead of opening a transaction nobody will end.
* S12. A marker (L2): not from an older coordinator epoch than the last seen for its producer
  (TRANSACTION_COORDINATOR_FENCED), not of an older producer epoch (PRODUCER_FENCED). A marker of a newer
  epoch (a fence's abort) moves the producer to it: its next batch starts at sequence 0 (S4), and batches of
  the older epoch are fenced (S2).

Updates (:meth:`ProducerStateManager.update`) replay written batches, as leader after the append, as
follower from replicated batches and at recovery from the log tail, so every replica ends up with the
same producers and sequences for the same log. Each update carries the time to stamp the entry with: the
owner passes its broker's clock, so entries expire ``producer.id.expiration.ms`` after this broker last saw
one of their batches (Kafka stamps them with the batch's timestamp, which a client writes: a timestamp far in
the future would keep an entry forever). Two replicas' expiries differ by their replication delay.

* S9. At most ``max_entries`` producers are kept (``producer.id.max.per.partition``; not Kafka's, which keeps
  every producer until it expires): a new producer beyond it evicts the one written to longest ago. Its next
  batch, if it ever comes, is UNKNOWN_PRODUCER_ID (S3), which an idempotent producer recovers from. A producer
  whose transaction is open is never evicted nor expired (L6): the bound may then be exceeded, with a
  warning, until the transaction ends.

Thread-safety: none; the owning partition calls it under its own lock.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TypeVar

from log.errors import InvalidRecordError, LogError
from log.record.control import EndTransactionMarker
from log.record.header import NO_PRODUCER_ID, BatchHeader
from log.transactions import TransactionTracker
from log.txn_index import AbortedTxn

logger = logging.getLogger(__name__)

MAX_BATCHES_PER_PRODUCER = 5  # runs kept per producer (Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN)
DEFAULT_MAX_ENTRIES = 1000  # producers kept per partition (S9)
SEQUENCE_MOD = 1 << 31
NO_OFFSET = -1


class OutOfOrderSequenceError(LogError):
    code = "OUT_OF_ORDER_SEQUENCE_NUMBER"
    ahead = False  # S8: only batches before it are missing (set on the instance)


class InvalidProducerEpochError(LogError):
    code = "INVALID_PRODUCER_EPOCH"


class InvalidTxnStateError(LogError):
    code = "INVALID_TXN_STATE"


class UnknownProducerIdError(LogError):
    code = "UNKNOWN_PRODUCER_ID"
    ahead = False  # S8: only batches before it are missing (set on the instance)


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """Where one producer batch, or a run of them (S5), went: its sequence range and offset range, which
    have the same length (one offset per sequence)."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp_ms: int


@dataclass(frozen=True, slots=True)
class ProducerEntry:
    """One producer's state: its epoch and its last runs of batches (S5), oldest first, at most 5."""

    producer_id: int
    producer_epoch: int
    batches: tuple[BatchMetadata, ...]
    last_timestamp_ms: int

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1

    def find_duplicate(self, first_seq: int, last_seq: int) -> BatchMetadata | None:
        """Where the sequences ``first_seq..last_seq`` were written, if inside one kept run (S5)."""
        if last_seq < first_seq:
            return None  # wraps past 2**31 - 1: never inside one run
        for run in self.batches:
            if run.first_offset >= 0 and run.first_seq <= first_seq and last_seq <= run.last_seq:
                start = run.first_offset + (first_seq - run.first_seq)
                return BatchMetadata(first_seq, last_seq, start, start + (last_seq - first_seq), run.timestamp_ms)
        return None

    def with_batch(self, epoch: int, batch: BatchMetadata) -> ProducerEntry:
        """The entry after ``batch`` of ``epoch`` was written: merged into the last run when it follows it in
        sequence and offset (S5), else a new run; a newer epoch drops the older runs."""
        kept = self.batches if epoch == self.producer_epoch else ()
        if kept:
            last = kept[-1]
            if (
                last.first_offset >= 0
                and batch.first_seq == last.last_seq + 1
                and batch.first_offset == last.last_offset + 1
                and batch.first_seq <= batch.last_seq
            ):
                merged = BatchMetadata(last.first_seq, batch.last_seq, last.first_offset, batch.last_offset,
                                       max(last.timestamp_ms, batch.timestamp_ms))  # fmt: skip
                kept = kept[:-1]
                batch = merged
        batches = (*kept, batch)[-MAX_BATCHES_PER_PRODUCER:]
        return ProducerEntry(self.producer_id, epoch, batches, max(self.last_timestamp_ms, batch.timestamp_ms))


@dataclass(frozen=True, slots=True)
class AppendCheck:
    """The leader's verdict on an append: ``duplicate`` is set when it must not be written (S5)."""

    duplicate: BatchMetadata | None = None


def next_seq(seq: int, count: int = 1) -> int:
    return (seq + count) % SEQUENCE_MOD


def batch_metadata(header: BatchHeader, first_offset: int, timestamp_ms: int) -> BatchMetadata:
    """The metadata of a written batch whose first offset is ``first_offset``."""
    return BatchMetadata(
        header.base_sequence, header.last_sequence, first_offset, first_offset + header.last_offset_delta, timestamp_ms
    )


class ProducerStateManager:
    """The producer entries of one partition, and the offset up to which they summarize its log.

    ``map_end_offset``: every batch below it is reflected, none at or above it (what a snapshot names).
    """

    def __init__(
        self,
        entries: Iterable[ProducerEntry] = (),
        map_end_offset: int = 0,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        transactions: TransactionTracker | None = None,
    ) -> None:
        self._entries: dict[int, ProducerEntry] = {e.producer_id: e for e in entries}
        self.map_end_offset = map_end_offset
        self.max_entries = max_entries  # S9
        self.transactions = TransactionTracker() if transactions is None else transactions  # L1-L6
        self._guards: dict[int, tuple[int, int]] = {}  # S11: producer id -> (epoch, token)
        self._next_token = 1

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[ProducerEntry]:
        return iter(sorted(self._entries.values(), key=lambda e: e.producer_id))

    def entry(self, producer_id: int) -> ProducerEntry | None:
        return self._entries.get(producer_id)

    @property
    def entries(self) -> Mapping[int, ProducerEntry]:
        return dict(self._entries)

    # ------------------------------------------------------------------------------------ leader

    def check_append(self, headers: list[BatchHeader], verified: Mapping[int, int] | None = None) -> AppendCheck:
        """Rules S1-S7, S10, S11 for the batches of one append, in order; raises the rule's error (nothing
        changes). ``verified``: producer id -> the verification guard its leader obtained (S11).

        Returns a duplicate verdict when the append is exactly one batch that was written before (S5).
        """
        pending: dict[int, ProducerEntry] = {}  # S7: what this append would change, nothing shared
        seen: set[int] = set()
        opened: set[int] = set()  # producers whose transaction this append opens (S11)
        duplicates = 0
        for i, header in enumerate(headers):
            pid = header.producer_id
            if pid == NO_PRODUCER_ID:
                if header.is_transactional:
                    raise InvalidRecordError(f"batch {i} of the append is transactional without a producer id")
                continue
            _check_fields(i, header)
            first = pid not in seen  # S8: the producer's first batch in this append
            seen.add(pid)
            entry = pending.get(pid) or self._entries.get(pid)
            if _check_sequence(i, header, entry, first) is not None:
                duplicates += 1
                continue
            self._check_transaction(i, header, pid in opened, verified)
            if header.is_transactional:
                opened.add(pid)
            # Offsets are not known before the append; the tentative entry only carries sequences.
            fresh = ProducerEntry(pid, header.producer_epoch, (), 0) if entry is None else entry
            meta = batch_metadata(header, NO_OFFSET, header.max_timestamp)
            pending[pid] = fresh.with_batch(header.producer_epoch, meta)
        if not duplicates:
            return AppendCheck()
        whole = self._whole_duplicate(headers) if duplicates == len(headers) else None
        if whole is None:
            raise OutOfOrderSequenceError(
                f"{duplicates} of the {len(headers)} batches of the append were written before, not as one "
                "run: a retried request must be resent as it was"
            )
        return AppendCheck(whole)

    def _check_transaction(
        self, i: int, header: BatchHeader, opened_here: bool, verified: Mapping[int, int] | None
    ) -> None:
        """S10, S11 for one (non-duplicate) batch."""
        pid = header.producer_id
        is_open = opened_here or self.transactions.open_transaction(pid) is not None
        if not header.is_transactional:
            if is_open:
                raise InvalidTxnStateError(
                    f"batch {i}: producer {pid} has a transaction open on this partition but sent a "
                    "non-transactional batch"
                )
            return
        if is_open:
            return
        guard = self._guards.get(pid)
        token = None if verified is None else verified.get(pid)
        if guard is None or token is None or guard != (header.producer_epoch, token):
            raise InvalidTxnStateError(
                f"batch {i}: producer {pid} epoch {header.producer_epoch} has no verified transaction on this "
                "partition (AddPartitionsToTxn first; or its transaction ended meanwhile)"
            )

    def needs_verification(self, headers: Iterable[BatchHeader]) -> list[tuple[int, int]]:
        """S11: ``(producer id, epoch)`` of the transactional batches that would open a transaction here."""
        found: dict[int, int] = {}
        for header in headers:
            pid = header.producer_id
            if header.is_transactional and pid >= 0 and self.transactions.open_transaction(pid) is None:
                found.setdefault(pid, header.producer_epoch)
        return list(found.items())

    def begin_verification(self, producer_id: int, producer_epoch: int) -> int:
        """S11: the producer's guard for ``producer_epoch``; pass it back with the append. Appends verified
        concurrently share one guard (as Kafka's ``VerificationGuard``): a new one is made only when there is
        none for this epoch (a marker, or another epoch, voided it)."""
        current = self._guards.get(producer_id)
        if current is not None and current[0] == producer_epoch:
            return current[1]
        token = self._next_token
        self._next_token += 1
        self._guards.pop(producer_id, None)
        self._guards[producer_id] = (producer_epoch, token)
        while len(self._guards) > 2 * self.max_entries:  # bounded: the oldest guard goes
            del self._guards[next(iter(self._guards))]
        return token

    def check_marker(self, producer_id: int, producer_epoch: int, marker: EndTransactionMarker) -> None:
        """S12 for a marker about to be written (raises its error; nothing changes)."""
        entry = self._entries.get(producer_id)
        current = -1 if entry is None else entry.producer_epoch
        self.transactions.check_marker(producer_id, producer_epoch, marker, current)

    def _whole_duplicate(self, headers: list[BatchHeader]) -> BatchMetadata | None:
        """S5 for an append of several batches: one producer, contiguous sequences, all inside one run."""
        first, last = headers[0], headers[-1]
        entry = self._entries.get(first.producer_id)
        if entry is None:
            return None
        for before, after in zip(headers, headers[1:], strict=False):
            if after.producer_id != first.producer_id or after.base_sequence != next_seq(before.last_sequence):
                return None
        return entry.find_duplicate(first.base_sequence, last.last_sequence)

    # ----------------------------------------------------------------------------------- updates

    def update(
        self,
        header: BatchHeader,
        first_offset: int,
        timestamp_ms: int | None = None,
        marker: EndTransactionMarker | None = None,
    ) -> AbortedTxn | None:
        """Reflect a written batch (leader after its append, follower, recovery). No checks: the log is the
        truth. A batch of an epoch older than the entry's is ignored (it cannot be written by a leader). A
        control batch comes with its ``marker``; an ABORT returns the entry for the aborted-transaction index."""
        end = first_offset + header.last_offset_delta + 1
        pid = header.producer_id
        stamp = header.max_timestamp if timestamp_ms is None else timestamp_ms
        aborted = None
        if header.is_control:
            if marker is not None and pid != NO_PRODUCER_ID and header.producer_epoch >= 0:
                aborted = self._update_marker(header, first_offset, marker, stamp)
        elif pid != NO_PRODUCER_ID and header.producer_epoch >= 0 and header.base_sequence >= 0:
            meta = batch_metadata(header, first_offset, stamp)
            entry = self._entries.pop(pid, None)  # re-inserted last: the dict's order is least recently written
            if entry is None:
                self._entries[pid] = ProducerEntry(pid, header.producer_epoch, (meta,), stamp)
                self._evict_beyond_bound()
            elif header.producer_epoch >= entry.producer_epoch:
                self._entries[pid] = entry.with_batch(header.producer_epoch, meta)
            else:
                self._entries[pid] = entry
            if header.is_transactional and self.transactions.open_transaction(pid) is None:
                self._guards.pop(pid, None)  # S11: used
            self.transactions.on_batch(header, first_offset)
        self.map_end_offset = max(self.map_end_offset, end)
        return aborted

    def _update_marker(
        self, header: BatchHeader, offset: int, marker: EndTransactionMarker, stamp: int
    ) -> AbortedTxn | None:
        """L1, L4, S12: the producer's transaction is closed; a newer epoch starts over."""
        pid = header.producer_id
        _, aborted = self.transactions.on_marker(pid, marker, offset)
        self._guards.pop(pid, None)  # S11: a verification from before the marker is void
        entry = self._entries.pop(pid, None)
        if entry is None or header.producer_epoch > entry.producer_epoch:
            last = stamp if entry is None else max(entry.last_timestamp_ms, stamp)
            entry = ProducerEntry(pid, header.producer_epoch, (), last)
        else:
            entry = ProducerEntry(pid, entry.producer_epoch, entry.batches, max(entry.last_timestamp_ms, stamp))
        self._entries[pid] = entry
        self._evict_beyond_bound()
        return aborted

    def update_high_watermark(self, high_watermark: int) -> None:
        """L3."""
        self.transactions.update_high_watermark(high_watermark)

    def _evict_beyond_bound(self) -> None:
        """S9: beyond ``max_entries`` the producers written to longest ago go first."""
        while len(self._entries) > self.max_entries:
            gone = next((pid for pid in self._entries if self.transactions.open_transaction(pid) is None), None)
            if gone is None:  # L6: every producer has a transaction open here
                logger.warning("%d producers on one partition, all in a transaction: above "
                               "producer.id.max.per.partition (%d) until one ends", len(self._entries),
                               self.max_entries)  # fmt: skip
                return
            del self._entries[gone]
            self.transactions.expire_producer(gone)
            logger.warning("more than %d producers on one partition: forgetting producer %d, written to longest "
                           "ago (producer.id.max.per.partition)", self.max_entries, gone)  # fmt: skip

    def expire(self, now_ms: int, expiration_ms: int) -> list[int]:
        """Drop the producers whose last batch is ``expiration_ms`` old (``producer.id.expiration.ms``)."""
        gone = [
            pid
            for pid, e in self._entries.items()
            if now_ms - e.last_timestamp_ms >= expiration_ms and self.transactions.open_transaction(pid) is None
        ]
        for pid in gone:
            del self._entries[pid]
            self.transactions.expire_producer(pid)
        return gone

    def truncate_and_reload(
        self, entries: Iterable[ProducerEntry], map_end_offset: int, transactions: TransactionTracker | None = None
    ) -> None:
        """Start again from a snapshot (after a truncation or at recovery): its producers and their open
        transactions and coordinator epochs."""
        ordered = sorted(entries, key=lambda e: e.last_timestamp_ms)  # least recently written first (S9)
        self._entries = {e.producer_id: e for e in ordered}
        self.transactions = TransactionTracker() if transactions is None else transactions
        self._guards.clear()
        self._evict_beyond_bound()
        self.map_end_offset = map_end_offset


def _check_fields(i: int, header: BatchHeader) -> None:
    """S1."""
    if header.is_control:
        raise InvalidRecordError(
            f"batch {i} of the append is a control batch: only the transaction coordinator writes markers"
        )
    if header.producer_epoch < 0 or header.base_sequence < 0:
        raise InvalidRecordError(
            f"batch {i} of the append has producer id {header.producer_id} but producer epoch "
            f"{header.producer_epoch} and base sequence {header.base_sequence}; both must be >= 0"
        )


def _check_sequence(i: int, header: BatchHeader, entry: ProducerEntry | None, first: bool) -> BatchMetadata | None:
    """S2-S6 for one batch against its producer's (tentative) entry; the duplicate's metadata, or None.
    ``first``: the producer's first batch in the append, whose refusal may be only ahead (S8)."""
    pid, epoch, seq = header.producer_id, header.producer_epoch, header.base_sequence
    if entry is None:
        if seq != 0:
            raise _ahead(
                UnknownProducerIdError(
                    f"batch {i}: producer {pid} has no state here and its batch starts at sequence {seq}, not 0"
                ),
                first,
            )
        return None
    if epoch < entry.producer_epoch:
        raise InvalidProducerEpochError(
            f"batch {i}: producer {pid} epoch {epoch} is older than its current epoch {entry.producer_epoch}"
        )
    if epoch > entry.producer_epoch:
        if seq != 0:
            raise _ahead(
                OutOfOrderSequenceError(
                    f"batch {i}: producer {pid} starts its new epoch {epoch} at sequence {seq}, not 0"
                ),
                first,
            )
        return None
    duplicate = entry.find_duplicate(seq, header.last_sequence)
    if duplicate is not None:
        return duplicate
    expected = next_seq(entry.last_seq)
    if seq != expected:
        error = OutOfOrderSequenceError(
            f"batch {i}: producer {pid} epoch {epoch} sent sequence {seq}, expected {expected}"
        )
        raise _ahead(error, first and (seq - expected) % SEQUENCE_MOD < SEQUENCE_MOD // 2)
    return None


_Refusal = TypeVar("_Refusal", OutOfOrderSequenceError, UnknownProducerIdError)


def _ahead(error: _Refusal, ahead: bool) -> _Refusal:
    """``error``, marked as a batch that is only ahead of its turn when ``ahead`` (S8)."""
    error.ahead = ahead
    return error


class ExpirySchedule:
    """When to expire producers: every ``producer.id.expiration.check.interval.ms``, those idle for
    ``producer.id.expiration.ms`` (by their batches' timestamps)."""

    def __init__(self, expiration_ms: int, check_interval_ms: int, now_ms: int) -> None:
        self.expiration_ms = expiration_ms
        self.check_interval_ms = check_interval_ms
        self._next_check_ms = now_ms + check_interval_ms

    def maybe_expire(self, state: ProducerStateManager, now_ms: int) -> list[int]:
        """The producer ids expired now (none unless a check is due)."""
        if now_ms < self._next_check_ms:
            return []
        self._next_check_ms = now_ms + self.check_interval_ms
        return state.expire(now_ms, self.expiration_ms)
