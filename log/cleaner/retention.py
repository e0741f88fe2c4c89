"""Which records of a batch survive cleaning, and the bytes of the batch that keeps them. Pure.

The rules, Kafka's (``LogCleaner.shouldRetainRecord``, ``MemoryRecords.filterTo``, KIP-534):

* a record survives when it has a key and no later record of that key is in the offset map
  (``map[key] <= offset``); records without a key are removed (a compacted topic should hold none);
* a tombstone (null value) survives as long as its batch's delete horizon has not passed. A batch
  that keeps a tombstone and has no delete horizon yet gets one: ``now + delete.retention.ms``, stored
  as Kafka does in the batch itself (attribute bit 6 set, ``baseTimestamp`` = the horizon, each
  record's ``timestampDelta`` rebased on it), so tombstones live ``delete.retention.ms`` after the
  first cleaning that saw them, wherever the batch moves later;
* transactions (``log.cleaner.transactions``, Kafka's rules TX1-TX4): a batch of an aborted transaction
  is removed whole; a marker whose transaction has no batch left gets a delete horizon like a tombstone's
  and is removed by the first pass at or past it; other markers are kept unchanged. A marker is never
  emptied (Kafka empties a producer's last batch even when it is a marker; here that marker stays whole,
  since an empty control batch is no marker a follower or reader could decode, until the producer writes
  again);
* a batch whose every record survives and that needs no new horizon is kept byte for byte;
* otherwise the surviving records are written into a new batch with the original ``baseOffset``,
  ``lastOffsetDelta`` (so the last offset and the producer's last sequence stay), ``partitionLeaderEpoch``,
  producer id, epoch and base sequence, attributes and codec (recompressed); each record keeps its
  offset delta, timestamp, key, value and headers;
* a batch in the mapped range holding none of the map's offsets has no survivor: it is dropped without
  being decoded (the fast path that makes a pass over mostly superseded data cheap);
* a batch with no surviving record disappears, except the last batch of an idempotent producer
  (``producerId >= 0``) in the cleaned range, which stays as an empty batch (header only, 0 records,
  Kafka's ``writeEmptyHeader``) so the producer's last sequence can be rebuilt from the log.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from log.cleaner.offset_map import NO_OFFSET, OffsetMap
from log.cleaner.transactions import TransactionFilter
from log.record.builder import assemble_batch, encode_record
from log.record.compression import NONE
from log.record.control import read_marker
from log.record.header import (
    ATTR_COMPRESSION_MASK,
    ATTR_CONTROL,
    ATTR_DELETE_HORIZON,
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
    BatchHeader,
)
from log.record.reader import Record, read_batch

NO_TIMESTAMP = -1


def delete_horizon_ms(header: BatchHeader) -> int | None:
    """The batch's delete horizon (KIP-534), or None when it has none."""
    return header.base_timestamp if header.attributes & ATTR_DELETE_HORIZON else None


@dataclass(frozen=True, slots=True)
class RetentionContext:
    """What the filter needs besides the batch; one per cleaning pass."""

    offsets: OffsetMap
    now_ms: int
    delete_retention_ms: int
    last_batch_of_producer: Mapping[int, int]  # producer id -> last offset of its last batch in the range
    first_dirty_offset: int  # the map covers [first_dirty_offset, offsets.latest_offset]
    live_offsets: Sequence[int] = ()  # sorted offsets the map holds: the only survivors in that range
    transactions: TransactionFilter | None = None  # the pass's transactions (None: markers kept, as before)

    @classmethod
    def for_pass(
        cls,
        offsets: OffsetMap,
        now_ms: int,
        delete_retention_ms: int,
        last_batch_of_producer: Mapping[int, int],
        first_dirty_offset: int,
        transactions: TransactionFilter | None = None,
    ) -> RetentionContext:
        live = sorted(offsets.latest_offsets().values())
        return cls(offsets, now_ms, delete_retention_ms, last_batch_of_producer, first_dirty_offset, live,
                   transactions)  # fmt: skip

    def nothing_survives(self, header: BatchHeader) -> bool:
        """True when the batch lies in the mapped range and holds none of the map's offsets.

        In that range a record survives only if the map points at it (the map holds each key's latest
        offset there), so such a batch can be dropped without decoding it: the cleaner's fast path.
        """
        if header.base_offset < self.first_dirty_offset or header.last_offset > self.offsets.latest_offset:
            return False
        i = bisect_left(self.live_offsets, header.base_offset)
        return i == len(self.live_offsets) or self.live_offsets[i] > header.last_offset


@dataclass(frozen=True, slots=True)
class Filtered:
    """The outcome for one batch."""

    data: bytes | None  # the batch to write (the original, a rebuilt one or an empty header), or None
    records_read: int
    records_retained: int
    tombstone_horizon_ms: int | None  # delete horizon of a retained tombstone in the written batch


def filter_batch(batch: bytes, header: BatchHeader, ctx: RetentionContext) -> Filtered:
    """Apply the module's rules to one whole batch (``batch`` is its bytes, CRC-checked here)."""
    if header.is_control:
        return _filter_marker(batch, header, ctx)
    if ctx.transactions is not None and ctx.transactions.on_data(header):  # aborted (TX1)
        return _emptied(header, ctx, header.records_count)
    if ctx.nothing_survives(header):
        return _emptied(header, ctx, header.records_count)
    _, records = read_batch(batch)
    horizon = delete_horizon_ms(header)
    tombstones_expire = horizon is not None and ctx.now_ms >= horizon
    latest = ctx.offsets.latest_offsets().get
    kept: list[Record] = []
    has_tombstone = False
    for record in records:
        key = record.key
        if key is None or latest(key, NO_OFFSET) > record.offset:
            continue
        if record.value is None:
            if tombstones_expire:
                continue
            has_tombstone = True
        kept.append(record)
    if not kept:
        return _emptied(header, ctx, len(records))
    new_horizon = has_tombstone and horizon is None
    if new_horizon:
        horizon = ctx.now_ms + ctx.delete_retention_ms
    tombstone_horizon = horizon if has_tombstone else None
    if len(kept) == len(records) and not new_horizon:
        return Filtered(batch, len(records), len(kept), tombstone_horizon)
    return Filtered(rebuild_batch(header, kept, horizon), len(records), len(kept), tombstone_horizon)


def _filter_marker(batch: bytes, header: BatchHeader, ctx: RetentionContext) -> Filtered:
    """A control batch: kept, given a delete horizon, or removed (TX2, TX3)."""
    count = header.records_count
    kept = Filtered(batch, count, count, None)
    if ctx.transactions is None or count != 1:
        return kept
    _, marker = read_marker(batch)
    if not ctx.transactions.on_marker(header, marker.is_commit):
        return kept
    if ctx.last_batch_of_producer.get(header.producer_id) == header.last_offset:
        return kept  # the producer's last batch keeps its epoch in the log (Kafka keeps it too, emptied)
    horizon = delete_horizon_ms(header)
    if horizon is None:
        horizon = ctx.now_ms + ctx.delete_retention_ms
        _, records = read_batch(batch)
        return Filtered(rebuild_batch(header, records, horizon), count, count, horizon)
    if ctx.now_ms >= horizon:
        return Filtered(None, count, 0, None)
    return Filtered(batch, count, count, horizon)


def _emptied(header: BatchHeader, ctx: RetentionContext, records_read: int) -> Filtered:
    """No record survives: the batch goes, or stays empty as its producer's last batch."""
    if header.producer_id >= 0 and ctx.last_batch_of_producer.get(header.producer_id) == header.last_offset:
        return Filtered(empty_batch(header), records_read, 0, None)
    return Filtered(None, records_read, 0, None)


def rebuild_batch(header: BatchHeader, records: list[Record], horizon_ms: int | None) -> bytes:
    """A batch holding ``records`` with ``header``'s identity (see the module docstring)."""
    if not records:
        raise ValueError("rebuild_batch needs at least one record; use empty_batch")
    base_timestamp = horizon_ms if horizon_ms is not None else records[0].timestamp
    # LogAppendTime: every record reads as the batch's max timestamp, which stays.
    log_append = header.is_log_append_time
    max_timestamp = header.max_timestamp if log_append else max(record.timestamp for record in records)
    pieces: list[bytes] = []
    base_offset = header.base_offset
    for record in records:
        encoded, _ = encode_record(
            record.timestamp - base_timestamp, record.offset - base_offset, record.key, record.value, record.headers
        )
        pieces.extend(encoded)
    attributes = header.attributes & ~ATTR_DELETE_HORIZON
    if horizon_ms is not None:
        attributes |= ATTR_DELETE_HORIZON
    return assemble_batch(
        b"".join(pieces),
        compression=header.compression,
        attributes=attributes,
        base_offset=base_offset,
        partition_leader_epoch=header.partition_leader_epoch,
        last_offset_delta=header.last_offset_delta,
        base_timestamp=base_timestamp,
        max_timestamp=max_timestamp,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        records_count=len(records),
    )


def group_end_batch(header: BatchHeader) -> bytes:
    """The empty batch that ends a cleaned group whose last batch went (``log.cleaner.swap``): ``header``'s
    :func:`empty_batch`, or, when that batch was transactional or a marker, a plain one without producer (a
    transactional empty batch there could open a transaction on a replica replaying the log whose marker a
    later pass removes)."""
    if not (header.is_transactional or header.is_control):
        return empty_batch(header)
    return assemble_batch(
        b"",
        compression=NONE,
        attributes=header.attributes & ATTR_TIMESTAMP_TYPE,
        base_offset=header.base_offset,
        partition_leader_epoch=header.partition_leader_epoch,
        last_offset_delta=header.last_offset_delta,
        base_timestamp=NO_TIMESTAMP,
        max_timestamp=header.max_timestamp,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        records_count=0,
    )


def empty_batch(header: BatchHeader) -> bytes:
    """A header-only batch keeping ``header``'s offsets and producer fields (Kafka's ``writeEmptyHeader``)."""
    keep = ATTR_TIMESTAMP_TYPE | ATTR_TRANSACTIONAL | ATTR_CONTROL
    attributes = (header.attributes & keep) & ~ATTR_COMPRESSION_MASK
    return assemble_batch(
        b"",
        compression=NONE,
        attributes=attributes,
        base_offset=header.base_offset,
        partition_leader_epoch=header.partition_leader_epoch,
        last_offset_delta=header.last_offset_delta,
        base_timestamp=NO_TIMESTAMP,
        max_timestamp=header.max_timestamp,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        records_count=0,
    )
