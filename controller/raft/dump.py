"""pysyncobj's "full dump" (its Raft snapshot) in our own format, written with fsync.

pysyncobj compacts its journal by asking for a full dump: the state machine at the last applied entry plus
that entry and the one before it (which become the first two journal entries afterwards). We give it a
custom ``serializer`` / ``deserializer`` pair (so no pickle of our objects, no fork, and an fsync) that
writes this layout (big-endian)::

    magic       8s   b"ODRQDUMP"
    version     u16  1
    last entry  idx u64, term u64, command_len u32, command   (the last applied Raft entry)
    prev entry  idx u64, term u64, command_len u32, command   (the entry before it)
    voters      count u16, then per voter: len u16 + UTF-8 "host:port"
    state_len   u64, then MetadataLogState.to_bytes()
    crc         u32  CRC-32 (zlib) of every byte before it

pysyncobj writes it to ``<dump>.tmp`` through :func:`write_dump_file` and renames it into place; the
journal fsyncs the directory before it drops the entries the dump covers. The same file is what a leader
streams to a follower that is too far behind (Raft's InstallSnapshot).
"""

from __future__ import annotations

import os
import struct
import zlib
from dataclasses import dataclass

from common.files import fsync_dir
from controller.raft.errors import QuorumStorageError
from controller.raft.journal import DurableJournal, Entry

MAGIC = b"ODRQDUMP"
VERSION = 1
_HEAD = struct.Struct(
    ">"
    "8s"  # magic: b"ODRQDUMP"
    "H"  # version: 1
)
_ENTRY = struct.Struct(
    ">"
    "Q"  # idx: Raft log index
    "Q"  # term: Raft term
    "I"  # command_len: bytes of pysyncobj command that follow
)
_COUNT = struct.Struct(">H")  # voters that follow / bytes of one voter address
_STATE_LEN = struct.Struct(">Q")  # bytes of state that follow
_CRC = struct.Struct(">I")  # CRC-32 of everything before it


@dataclass(frozen=True, slots=True)
class Dump:
    last: Entry
    prev: Entry
    voters: tuple[str, ...]
    state: bytes


def encode_dump(dump: Dump) -> bytes:
    parts = [_HEAD.pack(MAGIC, VERSION)]
    for command, idx, term in (dump.last, dump.prev):
        parts += [_ENTRY.pack(idx, term, len(command)), command]
    parts.append(_COUNT.pack(len(dump.voters)))
    for voter in dump.voters:
        raw = voter.encode("utf-8")
        parts += [_COUNT.pack(len(raw)), raw]
    parts += [_STATE_LEN.pack(len(dump.state)), dump.state]
    body = b"".join(parts)
    return body + _CRC.pack(zlib.crc32(body))


def decode_dump(data: bytes) -> Dump:
    """Parse and check a dump; :class:`QuorumStorageError` for anything else."""
    if len(data) < _HEAD.size + _CRC.size:
        raise QuorumStorageError(f"Raft dump of {len(data)} bytes is too short")
    body = data[: -_CRC.size]
    if zlib.crc32(body) != _CRC.unpack_from(data, len(body))[0]:
        raise QuorumStorageError("Raft dump CRC mismatch")
    magic, version = _HEAD.unpack_from(body)
    if magic != MAGIC or version != VERSION:
        raise QuorumStorageError(f"not a Raft dump of version {VERSION}: magic={magic!r} version={version}")
    try:
        pos = _HEAD.size
        entries: list[Entry] = []
        for _ in range(2):
            idx, term, size = _ENTRY.unpack_from(body, pos)
            pos += _ENTRY.size
            entries.append((body[pos : pos + size], idx, term))
            pos += size
        (count,) = _COUNT.unpack_from(body, pos)
        pos += _COUNT.size
        voters = []
        for _ in range(count):
            (size,) = _COUNT.unpack_from(body, pos)
            voters.append(body[pos + _COUNT.size : pos + _COUNT.size + size].decode("utf-8"))
            pos += _COUNT.size + size
        (size,) = _STATE_LEN.unpack_from(body, pos)
        state = body[pos + _STATE_LEN.size : pos + _STATE_LEN.size + size]
        pos += _STATE_LEN.size + size
    except (struct.error, UnicodeDecodeError) as e:
        raise QuorumStorageError(f"malformed Raft dump: {e}") from e
    if pos != len(body) or len(state) != size:
        raise QuorumStorageError("malformed Raft dump: length mismatch")
    return Dump(entries[0], entries[1], tuple(voters), state)


def read_dump_file(path: str) -> Dump | None:
    """The dump at ``path``, or ``None`` when there is none yet."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    return decode_dump(data)


def write_dump_file(path: str, dump: Dump, *, fsync: bool) -> None:
    """Write (and fsync) the file pysyncobj will rename into place."""
    with open(path, "wb") as f:
        f.write(encode_dump(dump))
        f.flush()
        if fsync:
            os.fsync(f.fileno())


def sync_file_and_dir(path: str) -> None:
    """fsync a file someone else wrote (a dump received from the leader) and its directory entry."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_dir(os.path.dirname(os.path.abspath(path)))


def align_journal_with_dump(journal: DurableJournal, dump: Dump) -> bool:
    """Close pysyncobj's restart window between a dump's rename and the journal compaction after it.

    On load, pysyncobj keeps the journal only if its first two entries are the dump's ``prev`` and
    ``last``; otherwise it clears the journal, which would also drop the entries after the dump that this
    node may have acknowledged. A crash after the rename but before the next tick compacted the journal
    leaves exactly that. If the journal holds ``prev`` and ``last`` further in, drop what comes before
    them now (what the interrupted compaction would have done). Returns whether it changed the journal.
    """
    if len(journal) < 2 or (journal[0] == dump.prev and journal[1] == dump.last):
        return False
    first_idx = journal[0][1]
    at = dump.prev[1] - first_idx
    if 0 < at < len(journal) - 1 and journal[at] == dump.prev and journal[at + 1] == dump.last:
        journal.deleteEntriesTo(at)
        return True
    return False
