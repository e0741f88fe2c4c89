"""The sparse offset index and the time index of one segment: in memory, appended to their files.

``<baseOffset:020d>.index``, Kafka's OffsetIndex layout, big-endian, 8 bytes an entry::

    offset  size  field
         0     4  relativeOffset  last offset of an indexed batch minus the segment's base offset
         4     4  position        file position in the .log where that batch starts

``<baseOffset:020d>.timeindex``, Kafka's TimeIndex layout, big-endian, 12 bytes an entry::

    offset  size  field
         0     8  timestamp       largest batch max timestamp of the segment up to this entry
         8     4  relativeOffset  last offset of the batch that holds it, minus the base offset

Both files are plain arrays of entries, no header. The segment adds an entry pair whenever more than
``index.interval.bytes`` of batches were appended since the last one (the time index only when its
timestamp grew), so a lookup lands at most one interval before the batch sought. In memory the
entries live in ``array`` columns searched with ``bisect``; the files are only appended to, truncated
or rewritten, and read once at load.

Load-time sanity check (:meth:`OffsetIndex.load`, :meth:`TimeIndex.load`): size a multiple of the
entry size, offsets and timestamps monotonic, positions inside the .log. A failure raises
:class:`IndexSanityError`, and the segment then rebuilds the index from its .log.

Not thread-safe: owned by one Segment, which the Log serializes.
"""

from __future__ import annotations

import os
import struct
from array import array
from bisect import bisect_left, bisect_right
from pathlib import Path

OFFSET_ENTRY = struct.Struct(
    ">"
    "i"  # relativeOffset
    "i"  # position
)
TIME_ENTRY = struct.Struct(
    ">"
    "q"  # timestamp
    "i"  # relativeOffset
)
NO_TIMESTAMP = -1


class IndexSanityError(Exception):
    """An index file failed its load-time check; the caller rebuilds it from the .log."""


class _IndexFile:
    """The file under an index: append-only writes at a known size, truncation, full rewrite."""

    def __init__(self, path: Path, entry: struct.Struct) -> None:
        self.path = path
        self._entry = entry
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)

    def read_all(self) -> bytes:
        size = os.fstat(self._fd).st_size
        return os.pread(self._fd, size, 0) if size else b""

    def write_at(self, entry_index: int, data: bytes) -> None:
        _pwrite_all(self._fd, data, entry_index * self._entry.size)

    def truncate(self, entries: int) -> None:
        os.ftruncate(self._fd, entries * self._entry.size)

    def flush(self) -> None:
        os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _pwrite_all(fd: int, data: bytes, position: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, position)
        view = view[written:]
        position += written


class _Index:
    """Two parallel columns (key, value) sorted by key, mirrored to a file of ``entry`` structs."""

    entry: struct.Struct
    key_type: str
    value_type: str

    def __init__(self, path: Path, base_offset: int, max_index_bytes: int) -> None:
        self.base_offset = base_offset
        self.max_entries = max_index_bytes // self.entry.size
        self._keys: array[int] = array(self.key_type)
        self._values: array[int] = array(self.value_type)
        self._file = _IndexFile(path, self.entry)
        self._rebuilding = False

    @property
    def path(self) -> Path:
        return self._file.path

    @property
    def entries(self) -> int:
        return len(self._keys)

    @property
    def is_full(self) -> bool:
        return len(self._keys) >= self.max_entries

    def _read_entries(self) -> list[tuple[int, int]]:
        data = self._file.read_all()
        if len(data) % self.entry.size:
            raise IndexSanityError(f"{self.path}: size {len(data)} is not a multiple of {self.entry.size}")
        return list(self.entry.iter_unpack(data))

    def _set(self, entries: list[tuple[int, int]]) -> None:
        self._keys = array(self.key_type, (k for k, _ in entries))
        self._values = array(self.value_type, (v for _, v in entries))

    def _append(self, key: int, value: int) -> None:
        n = len(self._keys)
        self._keys.append(key)
        self._values.append(value)
        if not self._rebuilding:
            self._file.write_at(n, self.entry.pack(key, value))

    def _truncate_entries(self, n: int) -> None:
        if n < len(self._keys):
            del self._keys[n:]
            del self._values[n:]
            self._file.truncate(n)

    def clear(self) -> None:
        """Drop every entry, in memory and in the file (which may hold stale entries)."""
        self._set([])
        self._file.truncate(0)

    def begin_rebuild(self) -> None:
        """Drop every entry; until :meth:`end_rebuild`, appends stay in memory."""
        self._set([])
        self._rebuilding = True

    def end_rebuild(self) -> None:
        """Write the rebuilt entries to the file in one go."""
        self._rebuilding = False
        self._file.write_at(0, b"".join(self.entry.pack(k, v) for k, v in self.items()))
        self._file.truncate(len(self._keys))  # after the write: usually nothing left to free

    def items(self) -> list[tuple[int, int]]:
        return list(zip(self._keys, self._values, strict=True))

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()

    def delete(self) -> None:
        self._file.close()
        self.path.unlink(missing_ok=True)


class OffsetIndex(_Index):
    """Sparse map from (relative) last offset of a batch to its position in the .log."""

    entry = OFFSET_ENTRY
    key_type = "i"
    value_type = "i"

    def load(self, log_size_bytes: int) -> None:
        """Read the file and check it; raises :class:`IndexSanityError` (the caller rebuilds)."""
        entries = self._read_entries()
        check_offset_entries(entries, log_size_bytes, str(self.path))
        self._set(entries)

    def append(self, offset: int, position: int) -> None:
        relative = offset - self.base_offset
        assert not self._keys or (relative > self._keys[-1] and position > self._values[-1]), (
            f"offset index must grow: ({offset}, {position}) after "
            f"({self.base_offset + self._keys[-1]}, {self._values[-1]})"
        )
        self._append(relative, position)

    def lookup(self, offset: int) -> int:
        """Position of the last indexed batch whose last offset is <= ``offset`` (0 if none)."""
        i = bisect_right(self._keys, offset - self.base_offset) - 1
        return self._values[i] if i >= 0 else 0

    def last_position(self) -> int:
        """Position of the last entry, -1 when empty."""
        return self._values[-1] if self._values else -1

    def last_offset(self) -> int:
        """Offset of the last entry, -1 when empty."""
        return self.base_offset + self._keys[-1] if self._keys else -1

    def truncate_to(self, offset: int) -> None:
        """Drop the entries of batches whose last offset is >= ``offset``."""
        self._truncate_entries(bisect_left(self._keys, offset - self.base_offset))


class TimeIndex(_Index):
    """Sparse map from the segment's growing max timestamp to the (relative) offset holding it."""

    entry = TIME_ENTRY
    key_type = "q"
    value_type = "i"

    def load(self) -> None:
        """Read the file and check it; raises :class:`IndexSanityError` (the caller rebuilds)."""
        entries = self._read_entries()
        check_time_entries(entries, str(self.path))
        self._set(entries)

    def last_entry(self) -> tuple[int, int]:
        """``(timestamp, offset)`` of the last entry, ``(-1, base_offset)`` when empty (Kafka's rule)."""
        if not self._keys:
            return NO_TIMESTAMP, self.base_offset
        return self._keys[-1], self.base_offset + self._values[-1]

    def maybe_append(self, timestamp: int, offset: int) -> bool:
        """Append ``(timestamp, offset)`` if ``timestamp`` is past the last entry's; True if appended."""
        if timestamp <= self.last_entry()[0]:
            return False
        relative = offset - self.base_offset
        assert not self._values or relative >= self._values[-1], (
            f"time index offsets must not go back: {offset} after {self.base_offset + self._values[-1]}"
        )
        self._append(timestamp, relative)
        return True

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """``(timestamp, offset)`` of the last entry with timestamp <= ``timestamp``, else ``(-1, base)``."""
        i = bisect_right(self._keys, timestamp) - 1
        if i < 0:
            return NO_TIMESTAMP, self.base_offset
        return self._keys[i], self.base_offset + self._values[i]

    def truncate_to(self, offset: int) -> None:
        """Drop the entries pointing at offsets >= ``offset``."""
        self._truncate_entries(bisect_left(self._values, offset - self.base_offset))


def check_offset_entries(entries: list[tuple[int, int]], log_size_bytes: int, name: str) -> None:
    """Offsets and positions strictly increasing, offsets >= 0, positions inside the .log."""
    last_offset, last_position = -1, -1  # so the first entry needs offset >= 0 and position >= 0
    for relative, position in entries:
        if relative <= last_offset or position <= last_position:
            raise IndexSanityError(
                f"{name}: entry ({relative}, {position}) does not follow ({last_offset}, {last_position})"
            )
        if position >= log_size_bytes:
            raise IndexSanityError(f"{name}: position {position} is past the log's {log_size_bytes} bytes")
        last_offset, last_position = relative, position


def check_time_entries(entries: list[tuple[int, int]], name: str) -> None:
    """Timestamps strictly increasing and >= 0, offsets non-decreasing and >= 0."""
    last_timestamp, last_offset = NO_TIMESTAMP, 0
    for timestamp, relative in entries:
        if timestamp <= last_timestamp or relative < last_offset:
            raise IndexSanityError(
                f"{name}: entry ({timestamp}, {relative}) does not follow ({last_timestamp}, {last_offset})"
            )
        last_timestamp, last_offset = timestamp, relative
