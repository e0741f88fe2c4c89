"""The ``leader-epoch-checkpoint`` of a partition's log directory: load (or rebuild), save (the I/O edge of
:mod:`replication.epoch_cache`).

Order that matters: a replica saves a new epoch's entry before it appends the first batch of that epoch,
as leader and as follower (EC4, ``replication.unified_log``); after truncating its log it cuts and saves
the cache. A crash can leave an entry past the log end, which loading drops (EC3), never a batch whose
epoch the file lacks. After an unclean shutdown the epochs of the batches recovery re-scanned are read
again (EC5), in case the file is older than the log.
"""

from __future__ import annotations

import logging

from log.errors import StorageError
from log.log import Log
from log.record.header import iter_batches
from replication import epoch_cache
from replication.epoch_cache import LeaderEpochCache

logger = logging.getLogger(__name__)

_SCAN_CHUNK_BYTES = 1 << 20


def load_or_rebuild(log: Log) -> LeaderEpochCache:
    """The checkpointed cache, cut to the log's range (EC3); rebuilt from the batches' epochs when the file
    is missing (a log written before this file existed) or malformed. Saved again if it changed."""
    try:
        cache = epoch_cache.load(log.dir)
        missing = not (log.dir / epoch_cache.CHECKPOINT_NAME).exists()
    except StorageError as e:
        logger.warning("%s: %s; rebuilding the leader-epoch cache from the log", log.dir, e)
        cache, missing = LeaderEpochCache(), True
    changed = False
    if missing and log.log_end_offset > log.log_start_offset:
        cache = rebuild(log)
        changed = True
    changed |= cache.truncate_from_end(log.log_end_offset)
    changed |= cache.truncate_from_start(log.log_start_offset)
    if log.recovery_point < log.log_end_offset:  # EC5: not shut down cleanly; recovery re-scanned from there
        changed |= _assign_from_batches(log, cache, log.recovery_point)
    if changed:
        epoch_cache.save(log.dir, cache)
    return cache


def rebuild(log: Log) -> LeaderEpochCache:
    """Scan every batch: each epoch starts at the first batch that carries it (batches without one, -1,
    are skipped)."""
    cache = LeaderEpochCache()
    _assign_from_batches(log, cache, log.log_start_offset)
    return cache


def _assign_from_batches(log: Log, cache: LeaderEpochCache, from_offset: int) -> bool:
    """Assign the epochs newer than the cache's latest that the batches from ``from_offset`` carry; True
    when the cache changed (Kafka's ``LogSegment.recover`` does this for the segments it recovers)."""
    changed = False
    offset = max(from_offset, log.log_start_offset)
    while offset < log.log_end_offset:
        chunk = log.read(offset, _SCAN_CHUNK_BYTES).records
        if not chunk:
            break
        for _, header in iter_batches(chunk, validate=False):
            if header.partition_leader_epoch >= 0 and header.partition_leader_epoch > cache.latest_epoch:
                changed |= cache.assign(header.partition_leader_epoch, max(header.base_offset, log.log_start_offset))
            offset = header.next_offset
    return changed


def save(log: Log, cache: LeaderEpochCache) -> None:
    epoch_cache.save(log.dir, cache)
