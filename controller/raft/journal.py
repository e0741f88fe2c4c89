"""A crash-safe Raft journal for pysyncobj: CRC-framed entries in an append-only file, fsync on demand.

pysyncobj 0.3.17's own ``FileJournal`` writes through an mmap and never syncs: a power loss can leave a
header that points past the data written, and its log compaction rewrites the file in place. This
journal replaces it (installed through :func:`provide_journal`, see there) and keeps pysyncobj's
``Journal`` interface.

Files (in the node's data directory)::

    raft.journal        magic b"ODRQJNL1", then one frame per Raft entry:
                          body_len  u32  bytes of command that follow the fixed part
                          crc       u32  CRC-32 (zlib) of idx, term and command
                          idx       u64  Raft log index
                          term      u64  Raft term of the entry
                          command   bytes  pysyncobj's encoded command (opaque here)
    raft.journal.meta   JSON {"term", "voted_for", "commit_index"}, replaced atomically

Durability, the order that matters:

- ``add`` / ``clear`` reach the page cache at once (a killed process loses nothing) and the disk at
  the next :meth:`DurableJournal.flush`. ``deleteEntriesFrom`` deletes nothing; an ``add`` that
  conflicts with a held entry cuts the file there (Raft's rule; see both methods). The driver calls
  ``flush`` before this node acknowledges entries to a leader and, on the leader, after every tick,
  i.e. before the next tick counts the leader's own copy towards a commit. So every entry a majority
  acknowledged is on disk on a majority, and stays in its log until a leader contradicts it.
- ``setCurrentTerm`` (term and vote) is written and fsynced before it returns, which is before pysyncobj
  sends the vote that depends on it (Raft §5.1, Figure 2 "persistent state").
- ``deleteEntriesTo`` (log compaction, after pysyncobj renamed a new full dump into place) first fsyncs
  the directory, so the dump's rename is durable before the entries it replaces disappear, then writes
  the kept entries to a new file, fsyncs it and renames it over the journal.
- On open, the longest valid prefix of frames is kept and a torn or corrupt tail is cut off.
- The commit index is volatile in Raft; it is saved along with the term and vote, and on close. After a
  crash it may be older: entries up to it are applied at once, the rest when a leader confirms them.

Thread-safety: none; pysyncobj calls it from the driver's Raft thread only.
"""

from __future__ import annotations

import json
import logging
import os
import struct
import threading
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pysyncobj.syncobj as _pysyncobj

from common.files import fsync_dir, write_atomically
from controller.raft.errors import QuorumStorageError

log = logging.getLogger(__name__)

Entry = tuple[bytes, int, int]
"""A Raft entry as pysyncobj keeps it: ``(command, idx, term)``."""

MAGIC = b"ODRQJNL1"
_FRAME = struct.Struct(
    "<"
    "I"  # body_len: bytes of command after the fixed part
    "I"  # crc: CRC-32 of idx, term (packed as below) and command
    "Q"  # idx: Raft log index
    "Q"  # term: Raft term
)
_IDX_TERM = struct.Struct("<QQ")


def _frame(entry: Entry) -> bytes:
    command, idx, term = entry
    fixed = _IDX_TERM.pack(idx, term)
    return _FRAME.pack(len(command), zlib.crc32(command, zlib.crc32(fixed)), idx, term) + command


class DurableJournal:
    """pysyncobj's ``Journal`` interface over an fsync-able append-only file (module docstring)."""

    def __init__(self, path: str, *, fsync: bool = True) -> None:
        self.path = path
        self._meta_path = path + ".meta"
        self._dir = os.path.dirname(os.path.abspath(path))
        self._fsync = fsync
        self._entries: list[Entry] = []
        self._positions: list[int] = []
        self._dirty = False
        self._end = 0
        self._fd = self._open()
        self._meta: dict[str, Any] = self._load_meta()
        self._meta_dirty = False
        self.fsync_count = 0

    # --- file handling ---------------------------------------------------------------------------

    def _open(self) -> int:
        if not os.path.exists(self.path):
            write_atomically(self.path, MAGIC, fsync=self._fsync)
        with open(self.path, "rb") as f:
            data = f.read()
        if data[: len(MAGIC)] != MAGIC:
            raise QuorumStorageError(f"{self.path} is not an Odradek Raft journal (magic {data[:8]!r})")
        valid_end = self._scan(data)
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND)
        if valid_end < len(data):
            log.warning("journal %s: cut %d bytes of torn or corrupt tail", self.path, len(data) - valid_end)
            os.ftruncate(fd, valid_end)
            if self._fsync:
                os.fdatasync(fd)
        self._end = valid_end
        return fd

    def _scan(self, data: bytes) -> int:
        pos = len(MAGIC)
        while pos + _FRAME.size <= len(data):
            size, crc, idx, term = _FRAME.unpack_from(data, pos)
            body_start = pos + _FRAME.size
            command = data[body_start : body_start + size]
            if len(command) < size or zlib.crc32(command, zlib.crc32(_IDX_TERM.pack(idx, term))) != crc:
                break
            if self._entries and idx != self._entries[-1][1] + 1:
                break
            self._entries.append((command, idx, term))
            self._positions.append(pos)
            pos = body_start + size
        return pos

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]
        self._end += len(data)
        self._dirty = True

    def flush(self) -> None:
        """fsync what was written since the last flush (no-op when nothing was, or fsync is off)."""
        if self._dirty and self._fsync:
            try:
                os.fdatasync(self._fd)
            except OSError as e:  # never retried: the page cache may have dropped the data (fsyncgate)
                raise QuorumStorageError(f"fsync of {self.path} failed: {e}") from e
            self.fsync_count += 1
        self._dirty = False

    # --- pysyncobj's Journal interface -----------------------------------------------------------

    def add(self, command: bytes | str, idx: int, term: int) -> None:
        """Append an entry; one this journal already holds is kept, one that conflicts replaces the tail.

        Raft (Figure 2, AppendEntries steps 3 and 4): an existing entry is deleted, with all that follow
        it, only when a new one at its index differs (a different term); an entry already present is not
        appended again. pysyncobj re-adds a message's entries after :meth:`deleteEntriesFrom` (which keeps
        them): the same entries cost nothing here, and the file is not touched.
        """
        entry = (command if isinstance(command, bytes) else command.encode("utf-8"), idx, term)
        if self._entries and self._entries[0][1] <= idx <= self._entries[-1][1]:
            pos = idx - self._entries[0][1]
            if self._entries[pos] == entry:
                return
            self._truncate(pos, entry)
        if self._entries and idx != self._entries[-1][1] + 1:
            raise QuorumStorageError(f"journal gap: entry {idx} after {self._entries[-1][1]}")
        self._positions.append(self._end)
        self._write(_frame(entry))
        self._entries.append(entry)

    def _truncate(self, pos: int, replacement: Entry) -> None:
        """A conflicting entry arrived for position ``pos``: the entries from there on go, in the file too."""
        first = self._entries[pos]
        if first[1] <= self.getRaftCommitIndex():
            log.critical(
                "journal %s: committed entry %d (term %d) replaced by one of term %d: Raft safety violated",
                self.path, first[1], first[2], replacement[2],
            )  # fmt: skip
        os.ftruncate(self._fd, self._positions[pos])
        self._end = self._positions[pos]
        del self._entries[pos:]
        del self._positions[pos:]
        self._dirty = True

    def clear(self) -> None:
        os.ftruncate(self._fd, len(MAGIC))
        self._end = len(MAGIC)
        self._entries = []
        self._positions = []
        self._dirty = True

    def deleteEntriesFrom(self, entryFrom: int) -> None:
        """Keep every entry: only a conflicting :meth:`add` deletes (Raft Figure 2, AppendEntries step 3).

        pysyncobj 0.3.17 calls this on every append_entries whose previous entry is not this node's last
        one, before it adds the message's entries, whether they conflict or not. It does so all the time:
        its leader moves ``next_index`` back to the acknowledged index + 1 while later entries are in
        flight, so it re-sends entries this node already has, and a message carries at most
        ``appendEntriesBatchSizeBytes`` of them. Deleting from there would drop entries this node already
        acknowledged, committed and applied ones included, from the log pysyncobj votes with: a node
        missing a committed entry could then be elected. So nothing is deleted here; :meth:`add` compares
        each re-sent entry with the one held and deletes from the first that differs.

        Entries kept after the message's last one may be stale (written by an old leader, not yet
        contradicted): pysyncobj must not count them towards the commit index, which it caps at this
        log's last index. :func:`controller.raft.patches.cap_leader_commit` (applied by the driver's
        transport to every append_entries) caps it at the message's last entry instead, Raft's rule.
        """

    def deleteEntriesTo(self, entryTo: int) -> None:
        if self._fsync:
            fsync_dir(self._dir)  # the full dump's rename, before the entries it covers go
        kept = self._entries[entryTo:]
        frames = [_frame(e) for e in kept]
        tmp = self.path + ".compact"
        with open(tmp, "wb") as f:
            f.write(MAGIC)
            for frame in frames:
                f.write(frame)
            f.flush()
            if self._fsync:
                os.fsync(f.fileno())
        os.replace(tmp, self.path)
        if self._fsync:
            fsync_dir(self._dir)
        os.close(self._fd)
        self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND)
        self._entries = kept
        self._positions = []
        pos = len(MAGIC)
        for frame in frames:
            self._positions.append(pos)
            pos += len(frame)
        self._end = pos
        self._dirty = False

    def __getitem__(self, item: Any) -> Any:
        return self._entries[item]

    def __len__(self) -> int:
        return len(self._entries)

    def _destroy(self) -> None:
        self.flush()
        self._store_meta()
        os.close(self._fd)

    def setRaftCommitIndex(self, raftCommitIndex: int) -> None:
        if self._meta.get("commit_index") != raftCommitIndex:
            self._meta["commit_index"] = raftCommitIndex
            self._meta_dirty = True

    def getRaftCommitIndex(self) -> int:
        return int(self._meta.get("commit_index", 1))

    def setCurrentTerm(self, term: int, votedForNodeId: str | None) -> None:
        self._meta["term"] = term
        self._meta["voted_for"] = votedForNodeId
        self._meta_dirty = True
        self._store_meta()

    def getCurrentTerm(self) -> int:
        return int(self._meta.get("term", 0))

    def getVotedForNodeId(self) -> str | None:
        voted = self._meta.get("voted_for")
        return None if voted is None else str(voted)

    def onOneSecondTimer(self) -> None:
        """Saves nothing: the commit index is volatile in Raft (Figure 2); it is saved with the term and vote
        and on close.

        pysyncobj calls this on its Raft thread right before a follower checks its election deadline. The
        two fsyncs of a save here took half a second on a busy disk: the follower then started an election
        while its leader's heartbeats waited unread in the socket, and deposed a healthy leader.
        """

    # --- meta ------------------------------------------------------------------------------------

    def _load_meta(self) -> dict[str, Any]:
        if not os.path.exists(self._meta_path):
            return {}
        try:
            with open(self._meta_path, "rb") as f:
                meta = json.loads(f.read())
        except (OSError, ValueError) as e:
            raise QuorumStorageError(f"unreadable Raft meta {self._meta_path}: {e}") from e
        if not isinstance(meta, dict):
            raise QuorumStorageError(f"unreadable Raft meta {self._meta_path}: {meta!r}")
        return meta

    def _store_meta(self) -> None:
        if self._meta_dirty:
            write_atomically(self._meta_path, json.dumps(self._meta).encode(), fsync=self._fsync)
            self._meta_dirty = False


# --- installing the journal into pysyncobj -------------------------------------------------------
#
# SyncObj.__init__ builds its journal with the module-level ``createJournal(conf.journalFile)`` of
# pysyncobj.syncobj and offers no other hook. We wrap that function once: for a path registered by
# provide_journal it returns our journal, for any other path it defers to the original, so other
# SyncObj users in the process are unaffected. The driver checks afterwards that the hook was used.

_original_create: Callable[..., Any] | None = None
_pending: dict[str, DurableJournal] = {}
_hook_lock = threading.Lock()


def _create_journal(journalFile: str | None = None) -> Any:
    with _hook_lock:
        journal = _pending.pop(journalFile, None) if journalFile is not None else None
    if journal is not None:
        return journal
    assert _original_create is not None
    return _original_create(journalFile)


@contextmanager
def provide_journal(journal: DurableJournal) -> Iterator[None]:
    """While active, a SyncObj constructed with ``journalFile=journal.path`` gets ``journal``."""
    global _original_create
    with _hook_lock:
        if _original_create is None:
            _original_create = _pysyncobj.createJournal
            _pysyncobj.createJournal = _create_journal
        _pending[journal.path] = journal
    try:
        yield
    finally:
        with _hook_lock:
            _pending.pop(journal.path, None)
