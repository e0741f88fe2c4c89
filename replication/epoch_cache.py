"""The leader-epoch cache of one partition replica and its ``leader-epoch-checkpoint`` file (KIP-101).

The cache is the list of ``(leader_epoch, start_offset)`` entries: the first offset each leader epoch wrote.
Leaders answer OffsetsForLeaderEpoch from it; followers compare their own against the leader's answer to
decide where to truncate (``replication.truncation``).

Rules (Kafka's ``LeaderEpochFileCache``; ``tests/replication/test_epoch_cache.py`` cites them):

* EC1. Epochs and start offsets strictly increase along the list; an ``assign`` that would break this is
  ignored when it repeats the latest epoch, and otherwise first removes the entries it contradicts (a newer
  epoch at a smaller offset replaces the later entries, as after a truncation).
* EC2. ``end_offset_for(epoch)`` is the start offset of the first epoch greater than ``epoch``, or the log end
  offset when ``epoch`` is the latest; the epoch answered is the largest one ``<= epoch``. An epoch older than
  every entry answers ``(UNDEFINED_EPOCH, UNDEFINED_OFFSET)``.
* EC3. ``truncate_from_end(offset)`` drops entries starting at or after ``offset`` (the log was truncated there);
  ``truncate_from_start(offset)`` moves the first surviving entry up to ``offset`` (log start moved).

The file uses the checkpoint text format of ``log.checkpoint`` (Kafka's own layout for this file)::

    line     content                 meaning
    1        0                       format version
    2        N                       number of entries
    3..N+2   <epoch> <start_offset>  one entry, in increasing order

Order that matters: the cache entry for a new epoch is written (and the file replaced) before the first
batch of that epoch is appended, so the file never misses an epoch the log holds.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path

from log.checkpoint import read_checkpoint, write_checkpoint
from log.errors import StorageError

CHECKPOINT_NAME = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1


@dataclass(frozen=True, slots=True)
class EpochEntry:
    leader_epoch: int
    start_offset: int


@dataclass(frozen=True, slots=True)
class EpochEndOffset:
    """An OffsetsForLeaderEpoch answer: the largest epoch ``<=`` the one asked for, and where it ends."""

    leader_epoch: int
    end_offset: int

    @property
    def undefined(self) -> bool:
        return self.leader_epoch == UNDEFINED_EPOCH or self.end_offset == UNDEFINED_OFFSET


class LeaderEpochCache:
    """The entries of one replica (rules EC1-EC3). Pure, no I/O: :func:`load` and :func:`save` do the file.

    Not thread-safe: the owning partition calls it under its lock.
    """

    __slots__ = ("_entries",)

    def __init__(self, entries: list[EpochEntry] | None = None) -> None:
        self._entries: list[EpochEntry] = []
        for entry in entries or []:
            self.assign(entry.leader_epoch, entry.start_offset)

    @property
    def entries(self) -> tuple[EpochEntry, ...]:
        return tuple(self._entries)

    @property
    def latest_epoch(self) -> int:
        return self._entries[-1].leader_epoch if self._entries else UNDEFINED_EPOCH

    def assign(self, leader_epoch: int, start_offset: int) -> bool:
        """Record that ``leader_epoch`` starts at ``start_offset`` (EC1); True when the entries changed."""
        if leader_epoch < 0 or start_offset < 0:
            raise ValueError(f"epoch {leader_epoch} and offset {start_offset} must be >= 0")
        if self._entries and self._entries[-1].leader_epoch == leader_epoch:
            return False  # the latest epoch keeps its first start offset
        kept = [e for e in self._entries if e.leader_epoch < leader_epoch and e.start_offset < start_offset]
        kept.append(EpochEntry(leader_epoch, start_offset))
        changed = kept != self._entries
        self._entries = kept
        return changed

    def end_offset_for(self, leader_epoch: int, log_end_offset: int) -> EpochEndOffset:
        """EC2: the largest epoch ``<= leader_epoch`` and the offset where it ends."""
        if not self._entries or leader_epoch < self._entries[0].leader_epoch:
            return EpochEndOffset(UNDEFINED_EPOCH, UNDEFINED_OFFSET)
        index = bisect_right([e.leader_epoch for e in self._entries], leader_epoch) - 1
        found = self._entries[index]
        if index + 1 < len(self._entries):
            return EpochEndOffset(found.leader_epoch, self._entries[index + 1].start_offset)
        return EpochEndOffset(found.leader_epoch, log_end_offset)

    def truncate_from_end(self, end_offset: int) -> bool:
        """EC3: the log now ends at ``end_offset``; drop entries starting there or later."""
        kept = [e for e in self._entries if e.start_offset < end_offset]
        changed = len(kept) != len(self._entries)
        self._entries = kept
        return changed

    def truncate_from_start(self, start_offset: int) -> bool:
        """EC3: the log now starts at ``start_offset``; the entry covering it starts there."""
        below = [e for e in self._entries if e.start_offset <= start_offset]
        above = [e for e in self._entries if e.start_offset > start_offset]
        if not below or (len(below) == 1 and below[0].start_offset == start_offset):
            return False
        self._entries = [EpochEntry(below[-1].leader_epoch, start_offset), *above]
        return True

    def clear(self) -> None:
        self._entries = []


def load(directory: Path) -> LeaderEpochCache:
    """The cache kept in ``directory``'s checkpoint (empty when there is none); StorageError if malformed."""
    path = directory / CHECKPOINT_NAME
    raw = read_checkpoint(path)
    if raw is None:
        return LeaderEpochCache()
    try:
        entries = [EpochEntry(int(key), offset) for key, offset in raw.items()]
    except ValueError:
        raise StorageError(f"{path}: an epoch is not an integer") from None
    cache = LeaderEpochCache(entries)
    if list(cache.entries) != entries:
        raise StorageError(f"{path}: entries are not strictly increasing (EC1)")
    return cache


def save(directory: Path, cache: LeaderEpochCache) -> None:
    """Replace ``directory``'s checkpoint with ``cache``, atomically and durably."""
    write_checkpoint(directory / CHECKPOINT_NAME, {str(e.leader_epoch): e.start_offset for e in cache.entries})
