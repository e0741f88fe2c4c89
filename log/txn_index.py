"""The aborted-transaction index of one segment: ``<baseOffset:020d>.txnindex``, Kafka's ``TransactionIndex``.

One entry per transaction aborted by an ABORT marker in the segment, in the order of the markers,
big-endian, 34 bytes an entry, no file header::

    offset  size  field
         0     2  version           0
         2     8  producerId        the producer whose transaction was aborted
        10     8  firstOffset       the transaction's first offset on this partition
        18     8  lastOffset        the offset of its ABORT marker
        26     8  lastStableOffset  the partition's LSO once the abort was written (entries with a smaller one
                                    may overlap later fetches)

A ``read_committed`` fetch of ``[fetch_offset, upper_bound)`` collects, over the segments from the one
holding ``fetch_offset`` on, the entries with ``lastOffset >= fetch_offset`` and ``firstOffset < upper_bound``
(Kafka's ``collectAbortedTxns``); a segment's search ends the whole search once an entry's
``lastStableOffset`` reaches ``upper_bound``: no later segment can hold a transaction that began before it.

The file is created with its first entry (most segments have none), only appended to, truncated, or
deleted with its segment. Load-time sanity check: a whole number of entries, version 0, ``firstOffset <=
lastOffset``, ``lastOffset`` growing and inside the segment: a failure raises :class:`IndexSanityError` and
the owner rebuilds the index from the segment (the markers are in the log).

Not thread-safe: owned by one segment, which its log serializes.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from log.index import IndexSanityError

ENTRY = struct.Struct(
    ">"
    "h"  # version
    "q"  # producerId
    "q"  # firstOffset
    "q"  # lastOffset
    "q"  # lastStableOffset
)
ENTRY_SIZE = ENTRY.size
assert ENTRY_SIZE == 34
VERSION = 0
SUFFIX = ".txnindex"


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """One aborted transaction on a partition (Kafka's ``AbortedTxn``)."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def encode(self) -> bytes:
        return ENTRY.pack(VERSION, self.producer_id, self.first_offset, self.last_offset, self.last_stable_offset)


def decode_entries(data: bytes, name: str = "txnindex") -> list[AbortedTxn]:
    """Every entry of an index file's bytes, checked (see the module docstring)."""
    if len(data) % ENTRY_SIZE:
        raise IndexSanityError(f"{name}: size {len(data)} is not a multiple of {ENTRY_SIZE}")
    entries: list[AbortedTxn] = []
    for pos in range(0, len(data), ENTRY_SIZE):
        version, pid, first, last, lso = ENTRY.unpack_from(data, pos)
        if version != VERSION:
            raise IndexSanityError(f"{name}: entry {pos // ENTRY_SIZE} has version {version}")
        if pid < 0 or first < 0 or first > last or lso < 0:
            raise IndexSanityError(f"{name}: entry {pos // ENTRY_SIZE} is ({pid}, {first}, {last}, {lso})")
        if entries and last <= entries[-1].last_offset:
            raise IndexSanityError(f"{name}: entry {pos // ENTRY_SIZE} ends at {last}, not after {entries[-1]}")
        entries.append(AbortedTxn(pid, first, last, lso))
    return entries


def collect_aborted(
    entries: Iterable[AbortedTxn], fetch_offset: int, upper_bound: int
) -> tuple[list[AbortedTxn], bool]:
    """The entries a fetch of ``[fetch_offset, upper_bound)`` must know of, and whether the search is complete
    (an entry's last stable offset reached ``upper_bound``)."""
    found: list[AbortedTxn] = []
    for entry in entries:
        if entry.last_offset >= fetch_offset and entry.first_offset < upper_bound:
            found.append(entry)
        if entry.last_stable_offset >= upper_bound:
            return found, True
    return found, False


class TransactionIndex:
    """The aborted transactions of one segment: in memory, appended to ``path`` (created when first needed)."""

    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self._entries: list[AbortedTxn] = []

    @property
    def entries(self) -> list[AbortedTxn]:
        return list(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def load(self, next_offset: int) -> None:
        """Read the file, if any, and check it against the segment's offsets ``[base_offset, next_offset)``."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            data = b""
        entries = decode_entries(data, str(self.path))
        if entries and not (self.base_offset <= entries[0].last_offset and entries[-1].last_offset < next_offset):
            raise IndexSanityError(
                f"{self.path}: markers at {entries[0].last_offset}..{entries[-1].last_offset} outside the segment "
                f"[{self.base_offset}, {next_offset})"
            )
        self._entries = entries

    def load_within(self, next_offset: int) -> int:
        """Load after a crash: a partial last entry (a write cut short) and the entries whose marker lies at or
        past the segment's end (their batches were lost, or recovery cut them) are dropped from the file too;
        anything else wrong raises :class:`IndexSanityError`. Returns how many entries were dropped."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            data = b""
        whole = len(data) - len(data) % ENTRY_SIZE
        entries = decode_entries(data[:whole], str(self.path))
        keep = len(entries)
        while keep and entries[keep - 1].last_offset >= next_offset:
            keep -= 1
        if entries[:keep] and entries[0].last_offset < self.base_offset:
            raise IndexSanityError(f"{self.path}: a marker at {entries[0].last_offset} is below the segment")
        self._entries = entries[:keep]
        if keep * ENTRY_SIZE != len(data):
            os.truncate(self.path, keep * ENTRY_SIZE)
        return len(entries) - keep + (1 if whole != len(data) else 0)

    def append(self, aborted: AbortedTxn) -> None:
        """Add the transaction whose ABORT marker was just written (markers come in offset order)."""
        if self._entries and aborted.last_offset <= self._entries[-1].last_offset:
            raise ValueError(f"aborted transaction {aborted} does not end after {self._entries[-1]}")
        if aborted.first_offset > aborted.last_offset or aborted.last_offset < self.base_offset:
            raise ValueError(f"aborted transaction {aborted} does not belong to segment {self.base_offset}")
        self._write_at(len(self._entries), aborted.encode())
        self._entries.append(aborted)

    def collect(self, fetch_offset: int, upper_bound: int) -> tuple[list[AbortedTxn], bool]:
        return collect_aborted(self._entries, fetch_offset, upper_bound)

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker lies at or after ``offset`` (the log is truncated there)."""
        keep = len(self._entries)
        while keep and self._entries[keep - 1].last_offset >= offset:
            keep -= 1
        if keep == len(self._entries):
            return
        del self._entries[keep:]
        if self.path.exists():
            os.truncate(self.path, keep * ENTRY_SIZE)

    @property
    def last_offset(self) -> int:
        """The offset of the last indexed marker, -1 when there is none."""
        return self._entries[-1].last_offset if self._entries else -1

    def reset(self, entries: Iterable[AbortedTxn] = ()) -> None:
        """Replace every entry (a new segment, or a rebuild); the file is removed until it has an entry."""
        self._entries = []
        self.path.unlink(missing_ok=True)
        for entry in entries:
            self.append(entry)

    def flush(self) -> None:
        if self.path.exists():
            fd = os.open(self.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def delete(self) -> None:
        self.path.unlink(missing_ok=True)
        self._entries = []

    def rename(self, path: Path) -> None:
        if self.path.exists():
            os.replace(self.path, path)
        self.path = path

    def _write_at(self, index: int, data: bytes) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            view = memoryview(data)
            position = index * ENTRY_SIZE
            while view:
                written = os.pwrite(fd, view, position)
                view, position = view[written:], position + written
        finally:
            os.close(fd)
