"""The partition directory: the files that belong in it, and what opening a log does with strays.

Files of one partition directory::

    name                                   what
    <B:020d>.log, .index, .timeindex,      the segment whose base offset is B (log.segment)
    .txnindex
    offsets.checkpoint                     recovery point and log start offset (log.checkpoint format)
    clean-shutdown                         marker written by Log.close(), removed by Log.open()
    *.deleted                              a file whose deletion was interrupted: removed
    *.cleaned                              incomplete log-cleaner output: removed
    <B:020d>.log.swap                      complete cleaner output not yet swapped in: the swap is
                                           finished (Kafka's rule: the segments it replaces, those with
                                           base offsets in [B, its end offset), are deleted, then it is
                                           renamed to <B:020d>.log and its indexes are rebuilt)
    <B:020d>.index.swap, .timeindex.swap   removed (indexes are rebuilt from the .log)
    *.tmp                                  an interrupted atomic write: removed
    .index / .timeindex / .txnindex        orphans of an interrupted segment deletion: removed

Anything else is left alone. :func:`prepare_directory` runs at open, before :func:`load_segments` opens the
segments (recovering the unflushed ones).
"""

from __future__ import annotations

import logging
import mmap
import os
from collections.abc import Iterable
from pathlib import Path

from common.files import TMP_SUFFIX, fsync_dir
from log.checkpoint import read_checkpoint
from log.config import LogConfig
from log.errors import StorageError
from log.recovery import PrefixScan
from log.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    Segment,
    file_stem,
    parse_base_offset,
)

logger = logging.getLogger(__name__)

CHECKPOINT_FILE = "offsets.checkpoint"
CLEAN_SHUTDOWN_FILE = "clean-shutdown"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
_SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)


def prepare_directory(directory: Path) -> list[int]:
    """Remove strays, finish interrupted swaps, and return the segment base offsets in order."""
    changed = False
    for path in sorted(directory.iterdir()):
        if path.name.endswith((DELETED_SUFFIX, CLEANED_SUFFIX, TMP_SUFFIX)):
            logger.info("removing stray file %s", path)
            path.unlink(missing_ok=True)
            changed = True
    for path in sorted(directory.glob("*" + SWAP_SUFFIX)):
        _complete_swap(directory, path)
        changed = True
    bases = set()
    for path in directory.iterdir():
        base = parse_base_offset(path.name)
        if base is not None and path.name == file_stem(base) + LOG_SUFFIX:
            bases.add(base)
    for path in sorted(directory.iterdir()):
        base = parse_base_offset(path.name)
        if base is not None and path.suffix in _SEGMENT_SUFFIXES[1:] and base not in bases:
            logger.info("removing orphan index %s", path)
            path.unlink()
            changed = True
    if changed:
        fsync_dir(directory)
    return sorted(bases)


def _complete_swap(directory: Path, swap: Path) -> None:
    base = parse_base_offset(swap.name)
    if base is None or swap.name != file_stem(base) + LOG_SUFFIX + SWAP_SUFFIX:
        swap.unlink()  # an index swap, or not ours at all under a .swap name: indexes are rebuilt
        return
    end = _valid_end_offset(swap, base)
    if end is None:
        logger.warning("removing %s: it holds no valid batch", swap)
        swap.unlink()
        return
    for path in sorted(directory.iterdir()):
        other = parse_base_offset(path.name)
        if other is not None and base <= other < end and path.suffix in _SEGMENT_SUFFIXES:
            path.unlink()
    logger.info("completing the swap of %s (offsets [%d, %d))", swap, base, end)
    os.replace(swap, directory / (file_stem(base) + LOG_SUFFIX))


def _valid_end_offset(path: Path, base: int) -> int | None:
    """The offset after the last valid batch of the file, or None if it holds none."""
    size = path.stat().st_size
    if size == 0:
        return None
    with path.open("rb") as f, mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ) as mapped:
        view = memoryview(mapped)
        try:
            scan = PrefixScan(view, base)
            for _ in scan:
                pass
            end, valid = scan.next_offset, scan.valid_bytes
            del scan
        finally:
            view.release()
    return end if valid > 0 else None


def read_offsets(directory: Path) -> dict[str, int]:
    """The offsets checkpoint (recovery point, log start); empty when missing or unreadable."""
    try:
        return read_checkpoint(directory / CHECKPOINT_FILE) or {}
    except StorageError as e:
        logger.warning("%s; recovering every segment and starting at the first one", e)
        return {}


def load_segments(
    directory: Path, bases: list[int], config: LogConfig, now: int, recovery_point: int, clean: bool
) -> list[Segment]:
    """Open the segments in order; a recovery cut in the unflushed part deletes every later segment."""
    segments: list[Segment] = []
    min_offset = bases[0] if bases else 0
    try:
        for i, base in enumerate(bases):
            unflushed = not clean and (i + 1 == len(bases) or bases[i + 1] > recovery_point)
            segment, cut = Segment.open(directory, base, config, now, recover=unflushed, min_offset=min_offset)
            if segments and segment.is_empty and base < segments[-1].next_offset:
                segment.delete()  # emptied by recovery and overlapping its predecessor
                cut = 1
            else:
                segments.append(segment)
                min_offset = segment.next_offset
            if cut and unflushed:
                _delete_segment_files(directory, reversed(bases[i + 1 :]))
                break
    except BaseException:
        for segment in segments:
            segment.close()
        raise
    return segments


def _delete_segment_files(directory: Path, bases: Iterable[int]) -> None:
    deleted = False
    for base in bases:
        logger.warning("%s: deleting segment %d after a recovery cut", directory, base)
        for suffix in _SEGMENT_SUFFIXES:
            (directory / (file_stem(base) + suffix)).unlink(missing_ok=True)
        deleted = True
    if deleted:
        fsync_dir(directory)
