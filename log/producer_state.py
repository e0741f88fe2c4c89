"""Idempotent producers' state of one partition: per producer id, its epoch and its last batches.

Pure (no I/O, no clock of its own): the partition drives it with batch headers (never decoded records)
and times. Kafka keeps this in its storage layer (``ProducerStateManager``), next to the log whose tail
it summarizes; so does Odradek, which is why it lives in ``log/`` and imports nothing but ``log``.

Sequence rules (Kafka's ``ProducerAppendInfo.checkProducerEpoch`` / ``checkSequence``), checked by a
leader for each batch with ``producerId >= 0``, before anything is written; the tests in
``tests/log/test_producer_state.py`` and ``tests/idempotence/test_sequence_model.py`` cite them:

* S1. ``producerEpoch`` and ``baseSequence`` must be set (>= 0), and the batch must not be transactional
  or a control batch (transactions are not supported): else INVALID_RECORD.
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

Updates (:meth:`ProducerStateManager.update`) replay written batches, as leader after the append, as
follower from replicated batches and at recovery from the log tail, so every replica ends up with the
same producers and sequences for the same log. Each update carries the time to stamp the entry with: the
owner passes its broker's clock, so entries expire ``producer.id.expiration.ms`` after this broker last saw
one of their batches (Kafka stamps them with the batch's timestamp, which a client writes: a timestamp far in
the future would keep an entry forever). Two replicas' expiries differ by their replication delay.

* S9. At most ``max_entries`` producers are kept (``producer.id.max.per.partition``; not Kafka's, which keeps
  every producer until it expires): a new producer beyond it evicts the one written to longest ago. Its next
  batch, if it ever comes, is UNKNOWN_PRODUCER_ID (S3), which an idempotent producer recovers from.

Thread-safety: none; the owning partition calls it under its own lock.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TypeVar

from log.errors import InvalidRecordError, LogError
from log.record.header import NO_PRODUCER_ID, BatchHeader

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
        self, entries: Iterable[ProducerEntry] = (), map_end_offset: int = 0, max_entries: int = DEFAULT_MAX_ENTRIES
    ) -> None:
        self._entries: dict[int, ProducerEntry] = {e.producer_id: e for e in entries}
        self.map_end_offset = map_end_offset
        self.max_entries = max_entries  # S9

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

    def check_append(self, headers: list[BatchHeader]) -> AppendCheck:
        """Rules S1-S7 for the batches of one append, in order; raises the rule's error (nothing changes).

        Returns a duplicate verdict when the append is exactly one batch that was written before (S5).
        """
        pending: dict[int, ProducerEntry] = {}  # S7: what this append would change, nothing shared
        seen: set[int] = set()
        duplicates = 0
        for i, header in enumerate(headers):
            pid = header.producer_id
            if pid == NO_PRODUCER_ID:
                continue
            _check_fields(i, header)
            first = pid not in seen  # S8: the producer's first batch in this append
            seen.add(pid)
            entry = pending.get(pid) or self._entries.get(pid)
            if _check_sequence(i, header, entry, first) is not None:
                duplicates += 1
                continue
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

    def update(self, header: BatchHeader, first_offset: int, timestamp_ms: int | None = None) -> None:
        """Reflect a written batch (leader after its append, follower, recovery). No checks: the log is the
        truth. A batch of an epoch older than the entry's is ignored (it cannot be written by a leader)."""
        end = first_offset + header.last_offset_delta + 1
        pid = header.producer_id
        if pid != NO_PRODUCER_ID and header.producer_epoch >= 0 and header.base_sequence >= 0:
            stamp = header.max_timestamp if timestamp_ms is None else timestamp_ms
            meta = batch_metadata(header, first_offset, stamp)
            entry = self._entries.pop(pid, None)  # re-inserted last: the dict's order is least recently written
            if entry is None:
                self._entries[pid] = ProducerEntry(pid, header.producer_epoch, (meta,), stamp)
                self._evict_beyond_bound()
            elif header.producer_epoch >= entry.producer_epoch:
                self._entries[pid] = entry.with_batch(header.producer_epoch, meta)
            else:
                self._entries[pid] = entry
        self.map_end_offset = max(self.map_end_offset, end)

    def _evict_beyond_bound(self) -> None:
        """S9: beyond ``max_entries`` the producers written to longest ago go first."""
        while len(self._entries) > self.max_entries:
            gone = next(iter(self._entries))
            del self._entries[gone]
            logger.warning("more than %d producers on one partition: forgetting producer %d, written to longest "
                           "ago (producer.id.max.per.partition)", self.max_entries, gone)  # fmt: skip

    def expire(self, now_ms: int, expiration_ms: int) -> list[int]:
        """Drop the producers whose last batch is ``expiration_ms`` old (``producer.id.expiration.ms``)."""
        gone = [pid for pid, e in self._entries.items() if now_ms - e.last_timestamp_ms >= expiration_ms]
        for pid in gone:
            del self._entries[pid]
        return gone

    def truncate_and_reload(self, entries: Iterable[ProducerEntry], map_end_offset: int) -> None:
        """Start again from a snapshot (after a truncation or at recovery)."""
        ordered = sorted(entries, key=lambda e: e.last_timestamp_ms)  # least recently written first (S9)
        self._entries = {e.producer_id: e for e in ordered}
        self._evict_beyond_bound()
        self.map_end_offset = map_end_offset


def _check_fields(i: int, header: BatchHeader) -> None:
    """S1."""
    if header.producer_epoch < 0 or header.base_sequence < 0:
        raise InvalidRecordError(
            f"batch {i} of the append has producer id {header.producer_id} but producer epoch "
            f"{header.producer_epoch} and base sequence {header.base_sequence}; both must be >= 0"
        )
    if header.is_transactional or header.is_control:
        raise InvalidRecordError(
            f"batch {i} of the append is transactional or a control batch; transactions are not supported"
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
