"""The ``leader-epoch-checkpoint`` of a partition's log directory: load (or rebuild), save (the I/O edge of
:mod:`replication.epoch_cache`).

Order that matters: a leader saves its new epoch's entry before it accepts the first write of that epoch;
a follower saves after truncating its log, so the file never names an epoch start beyond the log end that a
crash could leave (a stale entry past the end is dropped on load, EC3).
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
    if changed:
        epoch_cache.save(log.dir, cache)
    return cache


def rebuild(log: Log) -> LeaderEpochCache:
    """Scan every batch: each epoch starts at the first batch that carries it (batches without one, -1,
    are skipped)."""
    cache = LeaderEpochCache()
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        chunk = log.read(offset, _SCAN_CHUNK_BYTES).records
        if not chunk:
            break
        for _, header in iter_batches(chunk, validate=False):
            if header.partition_leader_epoch >= 0 and header.partition_leader_epoch > cache.latest_epoch:
                cache.assign(header.partition_leader_epoch, max(header.base_offset, log.log_start_offset))
            offset = header.next_offset
    return cache


def save(log: Log, cache: LeaderEpochCache) -> None:
    epoch_cache.save(log.dir, cache)
