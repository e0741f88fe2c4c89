"""Producer-state snapshots: the file codec, and loading a partition's state (snapshot + log tail replay).

A snapshot ``<offset:020d>.snapshot`` in the partition directory holds the producer entries that
summarize every batch below ``offset`` (Kafka's ``<offset>.snapshot`` files). Layout (big-endian)::

    header   SNAPSHOT_HEADER
             u16  version            2 (1: without the two transaction fields, still read)
             u32  crc                CRC-32C of every byte after this field
             i32  entry count
    entry    ENTRY, one per producer, by producer id
             i64  producer id
             i16  producer epoch
             i64  last timestamp     ms, what expiration compares
             u8   batch count        at most 5
             i64  current txn first offset   first offset of its open transaction here, -1 none (v2)
             i32  coordinator epoch  of the last marker written for it, -1 none (v2)
    batch    BATCH, ``batch count`` of them after their entry, oldest first
             i32  first sequence
             i32  last sequence
             i64  first offset
             i32  last offset delta
             i64  timestamp          ms

When (Kafka's rules): the partition writes one when the log rolls a segment and when it closes; on open it
loads the newest snapshot at or below the log end offset and replays the batch headers from there to the
log end (records are never decoded, but for the one record of a transaction marker). The replay also adds the
aborted transactions of the markers it meets to the ``.txnindex`` files, where a crash left them out; the
indexes are fsynced before a snapshot is written, so every entry below a snapshot's offset is on disk.
Snapshots beyond the log end (after a crash or a truncation) are deleted; only the newest
:data:`SNAPSHOTS_KEPT` are kept. A snapshot that fails its CRC is skipped (the next older one is used, else
the whole log is replayed). Writes are atomic (``.tmp``, fsync, rename).
"""

from __future__ import annotations

import logging
import struct
from pathlib import Path

from crc32c import crc32c

from common.files import fsync_dir
from log.checkpoint import write_file
from log.errors import StorageError
from log.log import Log
from log.producer_state import (
    DEFAULT_MAX_ENTRIES,
    MAX_BATCHES_PER_PRODUCER,
    BatchMetadata,
    ProducerEntry,
    ProducerStateManager,
)
from log.record.control import read_marker
from log.record.header import iter_batches
from log.segment import file_stem, parse_base_offset
from log.transactions import OpenTxn, TransactionTracker

logger = logging.getLogger(__name__)

SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOTS_KEPT = 2
VERSION = 2
SNAPSHOT_HEADER = struct.Struct(
    ">"
    "H"  # version
    "I"  # crc of the rest
    "i"  # entry count
)
ENTRY = struct.Struct(
    ">"
    "q"  # producer id
    "h"  # producer epoch
    "q"  # last timestamp
    "B"  # batch count
)
TXN_FIELDS = struct.Struct(
    ">"
    "q"  # current txn first offset
    "i"  # coordinator epoch
)
BATCH = struct.Struct(
    ">"
    "i"  # first sequence
    "i"  # last sequence
    "q"  # first offset
    "i"  # last offset delta
    "q"  # timestamp
)
_REPLAY_CHUNK_BYTES = 1 << 20


# ------------------------------------------------------------------------------------------ codec


def encode(entries: list[ProducerEntry], transactions: TransactionTracker | None = None) -> bytes:
    body = bytearray(struct.pack(">i", len(entries)))
    for e in entries:
        body += ENTRY.pack(e.producer_id, e.producer_epoch, e.last_timestamp_ms, len(e.batches))
        txn = None if transactions is None else transactions.open_transaction(e.producer_id)
        epoch = -1 if transactions is None else transactions.coordinator_epoch(e.producer_id)
        body += TXN_FIELDS.pack(-1 if txn is None else txn.first_offset, epoch)
        for b in e.batches:
            body += BATCH.pack(b.first_seq, b.last_seq, b.first_offset, b.last_offset - b.first_offset, b.timestamp_ms)
    crc = crc32c(bytes(body))
    return struct.pack(">HI", VERSION, crc) + bytes(body)


def decode(data: bytes, name: str = "snapshot") -> list[ProducerEntry]:
    """The entries of a snapshot; :class:`StorageError` naming what is wrong with a bad one."""
    return decode_with_transactions(data, name)[0]


def decode_with_transactions(data: bytes, name: str = "snapshot") -> tuple[list[ProducerEntry], TransactionTracker]:
    """The entries of a snapshot and its producers' open transactions and coordinator epochs."""
    if len(data) < SNAPSHOT_HEADER.size:
        raise StorageError(f"{name}: truncated producer-state snapshot ({len(data)} bytes)")
    version, crc, count = SNAPSHOT_HEADER.unpack_from(data, 0)
    if version not in (1, VERSION):
        raise StorageError(f"{name}: unsupported producer-state snapshot version {version}")
    if crc32c(data[6:]) != crc:
        raise StorageError(f"{name}: producer-state snapshot fails its CRC")
    entries: list[ProducerEntry] = []
    open_txns: list[OpenTxn] = []
    epochs: dict[int, int] = {}
    pos = SNAPSHOT_HEADER.size
    try:
        for _ in range(count):
            pid, epoch, last_ts, n = ENTRY.unpack_from(data, pos)
            pos += ENTRY.size
            if version >= 2:
                txn_first, coordinator_epoch = TXN_FIELDS.unpack_from(data, pos)
                pos += TXN_FIELDS.size
                if txn_first >= 0:
                    open_txns.append(OpenTxn(pid, epoch, txn_first, txn_first))
                if coordinator_epoch >= 0:
                    epochs[pid] = coordinator_epoch
            if n > MAX_BATCHES_PER_PRODUCER:
                raise StorageError(f"{name}: producer {pid} has {n} batches, more than {MAX_BATCHES_PER_PRODUCER}")
            batches = []
            for _ in range(n):
                first_seq, last_seq, first_offset, delta, ts = BATCH.unpack_from(data, pos)
                pos += BATCH.size
                batches.append(BatchMetadata(first_seq, last_seq, first_offset, first_offset + delta, ts))
            entries.append(ProducerEntry(pid, epoch, tuple(batches), last_ts))
    except struct.error as e:
        raise StorageError(f"{name}: truncated producer-state snapshot: {e}") from None
    if pos != len(data):
        raise StorageError(f"{name}: {len(data) - pos} trailing bytes in the producer-state snapshot")
    return entries, TransactionTracker(open_txns, epochs)


# ------------------------------------------------------------------------------------------ files


def snapshot_path(directory: Path, offset: int) -> Path:
    return directory / (file_stem(offset) + SNAPSHOT_SUFFIX)


def list_snapshots(directory: Path) -> list[int]:
    """The offsets of the snapshot files in ``directory``, oldest first."""
    offsets = []
    for path in directory.iterdir():
        offset = parse_base_offset(path.name)
        if offset is not None and path.name == file_stem(offset) + SNAPSHOT_SUFFIX:
            offsets.append(offset)
    return sorted(offsets)


def write_snapshot(directory: Path, state: ProducerStateManager) -> int:
    """Write the state as ``<map_end_offset>.snapshot`` (atomically), drop older surplus ones; the offset."""
    offset = state.map_end_offset
    write_file(snapshot_path(directory, offset), encode(list(state), state.transactions))
    try:
        for old in list_snapshots(directory)[:-SNAPSHOTS_KEPT]:
            snapshot_path(directory, old).unlink(missing_ok=True)
        fsync_dir(directory)
    except OSError as e:
        raise StorageError(f"cannot drop old producer-state snapshots in {directory}: {e}") from e
    return offset


def delete_snapshots_above(directory: Path, offset: int) -> None:
    """Remove snapshots that name an offset past ``offset`` (the log was cut there)."""
    removed = False
    for found in list_snapshots(directory):
        if found > offset:
            snapshot_path(directory, found).unlink(missing_ok=True)
            removed = True
    if removed:
        fsync_dir(directory)


# ------------------------------------------------------------------------------------ load, replay


def load(log: Log, now_ms: int | None = None, max_entries: int = DEFAULT_MAX_ENTRIES) -> ProducerStateManager:
    """The state of ``log``: its newest usable snapshot at or below the log end, then the tail replayed (its
    producers stamped ``now_ms``, the time of the replay; None: their batches' timestamps, for tools), keeping
    at most ``max_entries`` producers (S9)."""
    state = ProducerStateManager(max_entries=max_entries)
    reload_to(log, state, now_ms)
    return state


def reload_to(log: Log, state: ProducerStateManager, now_ms: int | None = None) -> None:
    """Rebuild ``state`` for the log as it is now (after open, a truncation or a restart at an offset)."""
    end = log.log_end_offset
    delete_snapshots_above(log.dir, end)
    start_from = log.log_start_offset
    entries: list[ProducerEntry] = []
    transactions = None
    for offset in reversed(list_snapshots(log.dir)):
        path = snapshot_path(log.dir, offset)
        try:
            entries, transactions = decode_with_transactions(path.read_bytes(), str(path))
        except (OSError, StorageError) as e:
            logger.warning("%s: skipping producer-state snapshot %d: %s", log.dir, offset, e)
            continue
        start_from = max(offset, log.log_start_offset)
        break
    state.truncate_and_reload(entries, start_from, transactions)
    replay(log, state, start_from, now_ms)


def replay(log: Log, state: ProducerStateManager, from_offset: int, now_ms: int | None = None) -> int:
    """Feed the headers of the batches from ``from_offset`` to the log end into ``state`` (stamped ``now_ms``,
    see :func:`load`); the batches read."""
    offset = max(from_offset, log.log_start_offset)
    count = 0
    while offset < log.log_end_offset:
        chunk = log.read(offset, _REPLAY_CHUNK_BYTES).records
        if not chunk:
            break
        before = offset
        for pos, header in iter_batches(chunk, validate=False):
            if header.next_offset > offset:
                if pos + header.size_bytes > len(chunk):
                    break  # a batch cut by the chunk's size: read again from it
                marker = read_marker(chunk, pos)[1] if header.is_control and header.is_transactional else None
                aborted = state.update(header, header.base_offset, now_ms, marker)
                if aborted is not None:
                    log.append_aborted(aborted)  # skipped when the index has it already
                count += 1
                offset = header.next_offset
        if offset == before:  # no batch moved on: a malformed header (the log's recovery cuts such a tail)
            logger.warning("%s: producer-state replay stopped at offset %d", log.dir, offset)
            break
    state.map_end_offset = max(state.map_end_offset, log.log_end_offset)
    return count


def take_snapshot(log: Log, state: ProducerStateManager) -> int | None:
    """:func:`write_snapshot` for the log's directory; a disk error is logged, not raised: the snapshot only
    shortens recovery (the log tail is replayed from an older one), and the append it follows is done."""
    try:
        log.flush_txn_indexes()  # what the snapshot summarizes is indexed on disk (see the module docstring)
        return write_snapshot(log.dir, state)
    except StorageError as e:
        logger.error("%s: %s", log.dir, e)
        return None
