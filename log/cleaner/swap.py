"""Swapping a cleaned segment in for the segments it replaces, crash-safe (Kafka's ``replaceSegments``).

The cleaned segment is written aside as ``<B>.log.cleaned``, ``<B>.index.cleaned`` and
``<B>.timeindex.cleaned`` (B: the base offset of the first replaced segment), fsynced, closed. Then,
under the Log's lock, :func:`install_cleaned` runs these steps, each named for the crash tests::

    step            what                                          a crash right after it leaves
    index-swap      .index/.timeindex .cleaned -> .swap            old segments (log.logdir removes
                                                                  .cleaned and index .swap files)
    commit          .log.cleaned -> .log.swap, fsync the dir       new: log.logdir finishes the swap
    delete-<base>   delete one replaced segment (.log first)       new (same rule)
    rename          .log.swap -> .log, index .swap -> final,      new (indexes rebuilt if missing)
                    fsync the dir

``log.logdir`` finishes an interrupted swap at open: it deletes every segment file whose base offset
lies in ``[B, end of the .log.swap)``, renames ``.log.swap`` to ``.log`` and rebuilds indexes. For that
rule to replace exactly the group, the cleaned segment always ends at the group's last offset: when
the group's last batch loses every record, the cleaner writes it as an empty batch (header only, 0
records, offsets kept; consumers skip it by its ``lastOffsetDelta``). A group ending in a segment that
was already empty can leave that empty segment behind after recovery: no record, no harm.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

from common.files import fsync_dir
from log.config import LogConfig
from log.logdir import CLEANED_SUFFIX, SWAP_SUFFIX
from log.segment import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, Segment, file_stem

StepHook = Callable[[str], None]
_INDEX_SUFFIXES = (INDEX_SUFFIX, TIME_INDEX_SUFFIX)


def _path(directory: Path, base_offset: int, suffix: str, extra: str = "") -> Path:
    return directory / (file_stem(base_offset) + suffix + extra)


def cleaned_paths(directory: Path, base_offset: int) -> list[Path]:
    return [_path(directory, base_offset, s, CLEANED_SUFFIX) for s in (LOG_SUFFIX, *_INDEX_SUFFIXES)]


def remove_cleaned(directory: Path, base_offset: int) -> None:
    """Discard the files of an aborted cleaning (before the commit step)."""
    for path in cleaned_paths(directory, base_offset):
        path.unlink(missing_ok=True)


def install_cleaned(
    directory: Path,
    base_offset: int,
    replaced: Sequence[Segment],
    config: LogConfig,
    now_ms: int,
    on_step: StepHook | None = None,
) -> Segment:
    """Run the steps above; returns the installed segment, opened from its final files.

    ``replaced`` are the Log's segments being replaced, oldest first; the first has ``base_offset``.
    ``on_step`` is called after each step (tests raise from it to simulate a crash there).
    """
    assert replaced, "a swap replaces at least one segment"
    assert replaced[0].base_offset == base_offset, "the cleaned segment keeps the first base offset"
    hook = on_step or (lambda _step: None)

    def rename(suffix: str, old: str, new: str) -> None:
        os.replace(_path(directory, base_offset, suffix, old), _path(directory, base_offset, suffix, new))

    for suffix in _INDEX_SUFFIXES:
        rename(suffix, CLEANED_SUFFIX, SWAP_SUFFIX)
    hook("index-swap")
    rename(LOG_SUFFIX, CLEANED_SUFFIX, SWAP_SUFFIX)
    fsync_dir(directory)
    hook("commit")
    for segment in replaced:
        segment.delete()
        hook(f"delete-{segment.base_offset}")
    for suffix in (LOG_SUFFIX, *_INDEX_SUFFIXES):
        rename(suffix, SWAP_SUFFIX, "")
    fsync_dir(directory)
    hook("rename")
    segment, _ = Segment.open(directory, base_offset, config, now_ms, recover=False, min_offset=base_offset)
    return segment
