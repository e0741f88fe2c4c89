"""A partition replica's log with what lives beside it: producer state and the leader-epoch cache (Kafka's
``UnifiedLog``: the ``Log`` of ``log/``, the ``ProducerStateManager`` of ``log.producer_state`` and the
``LeaderEpochFileCache`` of ``replication.epoch_cache``, kept in step on every append, truncation and
retention).

On a leader append the idempotent producers' batch headers are checked first (``log.producer_state``
S1-S7: a refusal writes nothing, a retried batch already written is answered with its original offsets
and not appended again, S5), then the batches are appended and the producers' entries updated with the
offsets the log gave them. A follower append updates the same state from the replicated headers, so a
follower that becomes leader knows every producer (and their epochs, EC1).

Producer-state snapshots are taken when the log rolls and at close (Kafka's ``takeSnapshot``); expiry runs
with appends (``producer.id.expiration.ms``, checked every ``producer.id.expiration.check.interval.ms``), by
this broker's clock: entries are stamped with the broker's time when their batches are written, replicated
or replayed, never with a timestamp a client wrote (which could keep one alive forever). At most
``producer.id.max.per.partition`` entries are kept; a new producer beyond it evicts the one written to
longest ago (``log.producer_state``).

Transactions (docs/TRANSACTIONS.md): the producer state also holds the partition's open transactions
(``log.transactions``, L1-L6). A transactional batch that would open a transaction needs a verification
guard (S11, :meth:`UnifiedLog.begin_verification`); markers come only through :meth:`UnifiedLog.append_marker`
(the WriteTxnMarkers path), as leader, or replicated. An ABORT marker adds its transaction to the
``.txnindex`` of the segment holding it, right after the marker is written (leader, follower, replay at load).
The partition passes its high watermark in (:meth:`UnifiedLog.update_high_watermark`) and reads the last
stable offset back.

Ordering that matters:

* EC4: the epoch cache entry of a batch's new leader epoch is saved (durably) *before* the batch is
  appended, as leader and as follower (Kafka's ``maybeAssignEpochStartOffset`` before the segment append):
  a kill -9 between the two leaves an entry past the log end, which loading drops (EC3), never a batch
  whose epoch the cache lacks. An append that fails restores the entries it added.
* EC5: opening a log that was not shut down cleanly also reads the epochs of the batches recovery
  re-scanned (from the recovery point on; Kafka's ``LogSegment.recover``), so a cache file older than the
  log (written by a version without EC4, or lost) cannot miss an epoch the log holds.
* a truncation cuts the log first, then reloads the producer state and cuts and saves the epoch cache.

Thread-safety: none of its own; the owning :class:`~replication.partition.Partition` calls it under its
lock (the :class:`~log.log.Log` itself is thread-safe, so readers use ``log`` directly).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from common.clock import Clock
from log import producer_state_file
from log.append import AppendInfo, ValidatedAppend
from log.config import LogConfig
from log.log import Log
from log.producer_state import BatchMetadata, ExpirySchedule, ProducerEntry, ProducerStateManager
from log.record.control import EndTransactionMarker, build_marker_batch, read_marker
from log.record.header import iter_batches
from log.transactions import OpenTxn
from log.txn_index import AbortedTxn
from replication import epoch_store
from replication.epoch_cache import EpochEndOffset, EpochEntry, LeaderEpochCache
from replication.truncation import TruncationDecision, decide

PRODUCER_ID_EXPIRATION_MS = 86_400_000  # producer.id.expiration.ms (Kafka's default, KIP-854)
PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_MS = 600_000  # producer.id.expiration.check.interval.ms
PRODUCER_ID_MAX = 1000  # producer.id.max.per.partition (not Kafka's: Kafka keeps every producer until it expires)


class UnifiedLog:
    """One replica's :class:`Log`, its producer state and its leader-epoch cache; see the module docstring."""

    def __init__(
        self,
        log: Log,
        clock: Clock,
        *,
        producer_id_expiration_ms: int = PRODUCER_ID_EXPIRATION_MS,
        producer_id_expiration_check_interval_ms: int = PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_MS,
        producer_id_max: int = PRODUCER_ID_MAX,
    ) -> None:
        self._log = log
        self._clock = clock
        self._epochs = epoch_store.load_or_rebuild(log)  # leader-epoch-checkpoint (EC1-EC3)
        # Idempotent producers (log.producer_state): rebuilt from a snapshot and the log tail.
        self._producers: ProducerStateManager = producer_state_file.load(log, clock.time_ms(), producer_id_max)
        self._producer_expiry = ExpirySchedule(
            producer_id_expiration_ms, producer_id_expiration_check_interval_ms, clock.time_ms()
        )
        self._segment_base = log.active_segment_base_offset

    # ------------------------------------------------------------------------------------- state

    @property
    def log(self) -> Log:
        return self._log

    @property
    def log_end_offset(self) -> int:
        return self._log.log_end_offset

    @property
    def log_start_offset(self) -> int:
        return self._log.log_start_offset

    @property
    def config(self) -> LogConfig:
        return self._log.config

    @property
    def closed(self) -> bool:
        return self._log.closed

    def reopen(self, config: LogConfig) -> None:
        """Use ``config`` from now on: the log is closed (clean) and opened again with it."""
        directory = self._log.dir
        self._log.close()
        self._log = Log.open(directory, config, self._clock)
        self._segment_base = self._log.active_segment_base_offset

    # ------------------------------------------------------------------------------------ appends

    def validate(self, records: bytes | memoryview) -> ValidatedAppend:
        """Validate a producer's batches as the leader must before anything else (``Log.validate``: every
        record decoded); no lock needed."""
        return self._log.validate(records)

    def append_as_leader(
        self, validated: ValidatedAppend, leader_epoch: int, verified: Mapping[int, int] | None = None
    ) -> AppendInfo:
        """Check the producers' batches of a validated append (S1-S7, raising their errors with nothing
        written), then append them stamped with ``leader_epoch``; a whole retried batch answers with its
        original offsets (S5) and no ``batch_headers`` (nothing written). Producer entries are stamped with
        this broker's clock, never with a timestamp a client wrote (they expire by broker time)."""
        headers = validated.headers
        verdict = self._producers.check_append(headers, verified)  # S1-S11: a refusal writes nothing
        if verdict.duplicate is not None:
            return self._duplicate_info(verdict.duplicate)
        if leader_epoch > self._epochs.latest_epoch:
            with self._epochs_saved_first([(leader_epoch, self._log.log_end_offset)]):  # EC4
                info = self._log.append(validated, leader_epoch=leader_epoch)
        else:  # the epoch is known (every append but an epoch's first): no context manager on the way
            info = self._log.append(validated, leader_epoch=leader_epoch)
        offset = info.first_offset
        now = self._clock.time_ms()
        for header in headers:
            self._producers.update(header, offset, now)
            offset += header.last_offset_delta + 1
        self._after_producer_updates()
        return info

    def append_as_follower(self, records: bytes) -> AppendInfo:
        """Append a leader's batches as they are (offsets and epochs kept); note their epochs (EC1) and
        producers (stamped with this broker's clock)."""
        new_epochs, latest = [], self._epochs.latest_epoch
        for _, header in iter_batches(records, validate=False):  # headers only: the append validates
            if header.partition_leader_epoch > latest:
                latest = header.partition_leader_epoch
                new_epochs.append((latest, header.base_offset))
        if new_epochs:
            with self._epochs_saved_first(new_epochs):  # EC4
                info = self._log.append_as_follower(records)
        else:
            info = self._log.append_as_follower(records)
        now = self._clock.time_ms()
        markers = _markers(records)
        for header in info.batch_headers:
            aborted = self._producers.update(header, header.base_offset, now, markers.get(header.base_offset))
            if aborted is not None:
                self._log.append_aborted(aborted)
        self._after_producer_updates()
        return info

    # ------------------------------------------------------------------------------- transactions

    def needs_verification(self, validated: ValidatedAppend) -> list[tuple[int, int]]:
        """S11: the ``(producer id, epoch)`` whose transactional batches would open a transaction here."""
        return self._producers.needs_verification(validated.headers)

    def begin_verification(self, producer_id: int, producer_epoch: int) -> int:
        """S11: a guard to pass back to :meth:`append_as_leader` once the coordinator confirmed."""
        return self._producers.begin_verification(producer_id, producer_epoch)

    def append_marker(
        self, producer_id: int, producer_epoch: int, marker: EndTransactionMarker, leader_epoch: int
    ) -> AppendInfo:
        """Write the marker of the producer's transaction as leader (S12 checked first: a refusal writes
        nothing); an ABORT is indexed. Returns where it went."""
        self._producers.check_marker(producer_id, producer_epoch, marker)
        batch = build_marker_batch(producer_id, producer_epoch, marker, self._clock.time_ms())
        new_epochs = [(leader_epoch, self._log.log_end_offset)] if leader_epoch > self._epochs.latest_epoch else []
        with self._epochs_saved_first(new_epochs):  # EC4
            info = self._log.append_marker(batch, leader_epoch=leader_epoch)
        header = info.batch_headers[0]
        aborted = self._producers.update(header, info.first_offset, self._clock.time_ms(), marker)
        if aborted is not None:
            self._log.append_aborted(aborted)
        self._after_producer_updates()
        return info

    def update_high_watermark(self, high_watermark: int) -> None:
        """L3: the partition's high watermark moved (markers below it no longer hold the LSO back)."""
        self._producers.update_high_watermark(high_watermark)

    def last_stable_offset(self, high_watermark: int) -> int:
        """L3."""
        return self._producers.transactions.last_stable_offset(high_watermark)

    def collect_aborted(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """The aborted transactions a read_committed fetch of ``[fetch_offset, upper_bound)`` needs."""
        return self._log.collect_aborted(fetch_offset, upper_bound)

    def open_transactions(self) -> list[OpenTxn]:
        return self._producers.transactions.open_transactions

    def cleanable_upper_bound(self, high_watermark: int) -> int:
        """Where the log cleaner must stop: the LSO, as Kafka's (``log.cleaner.transactions`` TX4): every
        transaction below it is decided, so the cleaner may remove aborted records and, once safe, markers."""
        return self.last_stable_offset(high_watermark)

    def _duplicate_info(self, batch: BatchMetadata) -> AppendInfo:
        """A retried batch already in the log (S5): its original offsets, nothing appended."""
        count = batch.last_offset - batch.first_offset + 1
        return AppendInfo(
            batch.first_offset, batch.last_offset, -1, batch.first_offset, -1, self._log.log_start_offset, count, 0
        )

    def _after_producer_updates(self) -> None:
        self._producers.map_end_offset = self._log.log_end_offset
        base = self._log.active_segment_base_offset
        if base != self._segment_base:  # the log rolled: snapshot (Kafka's takeSnapshot on roll)
            self._segment_base = base
            producer_state_file.take_snapshot(self._log, self._producers)
        self._producer_expiry.maybe_expire(self._producers, self._clock.time_ms())

    @contextmanager
    def _epochs_saved_first(self, new_epochs: list[tuple[int, int]]) -> Iterator[None]:
        """EC4: assign and save ``new_epochs`` ``(epoch, start offset)``, then run the append; if it raises,
        the entries as they were are restored (and saved). The callers skip it when there is no new epoch."""
        before = list(self._epochs.entries)
        changed = False
        for epoch, start in new_epochs:
            if start < self._log.log_end_offset:  # a batch below the log end: the append refuses it
                break
            changed |= self._epochs.assign(epoch, start)
        if changed:
            epoch_store.save(self._log, self._epochs)
        try:
            yield
        except BaseException:
            if changed:
                self._epochs = LeaderEpochCache(before)
                epoch_store.save(self._log, self._epochs)
            raise

    def producer_entries(self) -> dict[int, ProducerEntry]:
        return dict(self._producers.entries)

    # ------------------------------------------------------------------------------------ epochs

    def assign_epoch(self, leader_epoch: int, start_offset: int) -> None:
        """``leader_epoch`` starts at ``start_offset`` (EC1); the file is saved when that changed it."""
        if self._epochs.assign(leader_epoch, start_offset):
            epoch_store.save(self._log, self._epochs)

    @property
    def latest_epoch(self) -> int:
        return self._epochs.latest_epoch

    @property
    def epoch_entries(self) -> tuple[EpochEntry, ...]:
        return self._epochs.entries

    def end_offset_for(self, leader_epoch: int) -> EpochEndOffset:
        """EC2: the largest epoch ``<= leader_epoch`` in this log and the offset where it ends."""
        return self._epochs.end_offset_for(leader_epoch, self._log.log_end_offset)

    def decide_truncation(self, asked_epoch: int, answer: EpochEndOffset) -> TruncationDecision:
        """TR2-TR6: where to truncate given the leader's OffsetsForLeaderEpoch ``answer``."""
        return decide(self._epochs, asked_epoch, answer, self._log.log_start_offset, self._log.log_end_offset)

    # ------------------------------------------------------------------ truncation and retention

    def truncate_to(self, offset: int) -> bool:
        """Cut the log at ``offset``, then the producer state and the epoch cache; True when the log changed."""
        high_watermark = self._producers.transactions.high_watermark
        truncated = self._log.truncate_to(offset)
        if truncated:
            producer_state_file.reload_to(self._log, self._producers, self._clock.time_ms())
            self._producers.update_high_watermark(min(high_watermark, self._log.log_end_offset))
        if self._epochs.truncate_from_end(self._log.log_end_offset):
            epoch_store.save(self._log, self._epochs)
        return truncated

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop the whole log; it starts (empty) at ``offset``; no producers, no epochs."""
        self._log.truncate_fully_and_start_at(offset)
        producer_state_file.reload_to(self._log, self._producers, self._clock.time_ms())
        self._epochs.clear()
        epoch_store.save(self._log, self._epochs)

    def delete_retention(self, high_watermark: int) -> int:
        """Retention (time, size, log start), never past ``high_watermark``; the segments deleted."""
        count = self._log.delete_retention(high_watermark=high_watermark)
        if count and self._epochs.truncate_from_start(self._log.log_start_offset):
            epoch_store.save(self._log, self._epochs)
        return count

    # ------------------------------------------------------------------------------ flush, close

    def flush(self) -> None:
        if not self._log.closed:
            self._log.flush()

    def close(self) -> None:
        """Snapshot the producers and close the log (clean-shutdown marker); safe twice."""
        if not self._log.closed:
            producer_state_file.take_snapshot(self._log, self._producers)
        self._log.close()


def _markers(records: bytes) -> dict[int, EndTransactionMarker]:
    """The markers of the control batches in replicated ``records``, by base offset (the append validated them)."""
    found: dict[int, EndTransactionMarker] = {}
    for pos, header in iter_batches(records, validate=False):
        if header.is_control and header.is_transactional:
            found[header.base_offset] = read_marker(records, pos)[1]
    return found
