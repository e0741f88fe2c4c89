"""Workarounds for pysyncobj 0.3.17 (pinned in pyproject.toml), each scoped to our SyncObj instances.

The journal hook lives in journal.py, the read before a follower's election check in
``controller.raft.node.RaftNode.read_before_election_check``; these are the others:

- :func:`cap_leader_commit`: a follower sets its commit index to min(leader's commit index, its own
  last log index), but Raft (Figure 2, AppendEntries step 5) caps it at the index of the last new
  entry, i.e. the last one the message proved to match the leader's log. The two differ when the
  follower holds entries after the message's last one, which our journal keeps (Raft deletes entries
  only on a conflict; see ``DurableJournal.deleteEntriesFrom``): those may be stale, written by an
  old leader and never committed, and must not be applied. The driver's transport rewrites the
  ``commit_index`` of every append_entries it receives with Raft's cap before pysyncobj reads it.
- :class:`DemoteResendNoise`: pysyncobj logs CRITICAL "truncating already-applied log entries" whenever
  its leader re-sends entries a follower already has, which it does on nearly every acknowledgement (it
  moves ``next_index`` back to the acknowledged index + 1 while later entries are in flight). Our journal
  deletes nothing there (it keeps identical entries in place and logs CRITICAL itself if a committed
  entry is really replaced), so this message is demoted to DEBUG (dropped unless DEBUG is enabled).
- :func:`close_finished_transmissions`: its ``Serializer`` opens the full dump to stream it to a lagging
  follower and drops the file object without closing it when the stream ends, is cancelled or a new
  dump is made (a ResourceWarning, and a descriptor held until garbage collection). We keep a reference
  to every open stream and close the ones pysyncobj dropped, after each of its calls.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, BinaryIO


def cap_leader_commit(message: Any) -> Any:
    """``message`` with Raft's cap on the commit index a follower may take from it (module docstring).

    For an append_entries with a previous entry: ``commit_index`` becomes at most the index of its last
    entry (``prevLogIdx`` + the entries; a chunked 'transmission' carries one entry, in its 'finish'
    part). Every other message is returned as it is. pysyncobj then takes min(this, its last log index),
    which equals Raft's min(leader's commit index, index of the last new entry) when the entries matched,
    and leaves the commit index alone when they did not (it answers with a reset and returns first).
    """
    if type(message) is not dict or message.get("type") != "append_entries":
        return message
    prev, commit = message.get("prevLogIdx"), message.get("commit_index")
    if type(prev) is not int or type(commit) is not int:  # no previous entry: a snapshot, or a reset
        return message
    transmission = message.get("transmission")
    if transmission is None:
        entries = message.get("entries", [])
        if not isinstance(entries, list):
            return message
        last_new = prev + len(entries)
    else:
        last_new = prev + 1 if transmission == "finish" else prev
    return {**message, "commit_index": last_new} if commit > last_new else message


class DemoteResendNoise(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if str(record.msg).startswith("truncating already-applied log entries"):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            # The logger let it through as CRITICAL; as DEBUG it goes on only where DEBUG is enabled.
            return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)
        return True


def install_log_filter() -> None:
    logger = logging.getLogger("pysyncobj.syncobj")
    if not any(isinstance(f, DemoteResendNoise) for f in logger.filters):
        logger.addFilter(DemoteResendNoise())


def close_finished_transmissions(raft: Any) -> Callable[[], None]:
    """Wrap the methods of ``raft``'s serializer that may drop a transmission's open file.

    Returns a function that closes every stream still open (call it once ``raft`` is destroyed).
    """
    serializer = raft._SyncObj__serializer
    held: dict[int, BinaryIO] = {}

    def sweep() -> None:
        live = {
            id(t["file"]): t["file"]
            for t in serializer._Serializer__transmissions.values()
            if isinstance(t, dict) and "file" in t
        }
        for key, stream in held.items():
            if key not in live:
                stream.close()
        held.clear()
        held.update(live)

    def wrap(method: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any) -> Any:
            try:
                return method(*args)
            finally:
                sweep()

        return call

    def close_all() -> None:
        for stream in held.values():
            stream.close()
        held.clear()

    for name in ("getTransmissionData", "cancelTransmisstion", "checkSerializing"):
        setattr(serializer, name, wrap(getattr(serializer, name)))
    return close_all
