"""Checkpoint files: small text files of named offsets, replaced atomically; marker files.

A checkpoint uses Kafka's ``OffsetCheckpointFile`` text format, with a free-form key where Kafka
writes ``topic partition`` (a key may contain spaces, not newlines; the offset is the last field)::

    line     content            meaning
    1        0                  format version
    2        N                  number of entries
    3..N+2   <key> <offset>     one entry: key, a space, a decimal int64

The per-partition file ``offsets.checkpoint`` (see ``log.log``) holds the keys ``recovery-point`` and
``log-start-offset``; a broker-wide file can reuse the same functions with ``topic partition`` keys.

Writes are atomic: the text goes to ``<name>.tmp`` in the same directory, is fsynced, renamed over the
old file, and the directory is fsynced, so a crash leaves either the old or the new checkpoint (a stray
``.tmp`` is removed when the log opens). A malformed file raises :class:`StorageError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from common.files import fsync_dir, write_atomically
from log.errors import StorageError

VERSION = 0


def write_checkpoint(path: Path, entries: Mapping[str, int]) -> None:
    """Replace ``path`` with the entries, atomically and durably."""
    lines = [str(VERSION), str(len(entries))]
    for key, offset in entries.items():
        if "\n" in key or not key:
            raise ValueError(f"checkpoint key {key!r} must be non-empty and on one line")
        lines.append(f"{key} {int(offset)}")
    write_file(path, ("\n".join(lines) + "\n").encode())


def read_checkpoint(path: Path) -> dict[str, int] | None:
    """The entries of ``path``, or None if the file does not exist."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        raise StorageError(f"cannot read checkpoint {path}: {e}") from e
    return parse_checkpoint(text, str(path))


def parse_checkpoint(text: str, name: str = "checkpoint") -> dict[str, int]:
    """Parse the checkpoint format above; raises :class:`StorageError` naming what is wrong."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) < 2:
        raise StorageError(f"{name}: truncated checkpoint ({len(lines)} lines)")
    if lines[0].strip() != str(VERSION):
        raise StorageError(f"{name}: unsupported checkpoint version {lines[0]!r}")
    try:
        count = int(lines[1])
    except ValueError:
        raise StorageError(f"{name}: bad entry count {lines[1]!r}") from None
    if count != len(lines) - 2:
        raise StorageError(f"{name}: says {count} entries but has {len(lines) - 2}")
    entries: dict[str, int] = {}
    for line in lines[2:]:
        key, _, offset = line.rpartition(" ")
        try:
            entries[key] = int(offset)
        except ValueError:
            raise StorageError(f"{name}: malformed entry {line!r}") from None
        if not key:
            raise StorageError(f"{name}: malformed entry {line!r}")
    return entries


def write_marker(path: Path) -> None:
    """Create an empty marker file durably (the clean-shutdown marker)."""
    write_file(path, b"")


def remove_marker(path: Path) -> bool:
    """Remove a marker file durably; True if it existed."""
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    fsync_dir(path.parent)
    return True


def write_file(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` durably (``common.files.write_atomically``); StorageError (and no
    temporary file left) on failure."""
    try:
        write_atomically(path, data)
    except OSError as e:
        raise StorageError(f"cannot write {path}: {e}") from e
