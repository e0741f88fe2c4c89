"""Workarounds for pysyncobj 0.3.17 (pinned in pyproject.toml), each scoped to our SyncObj instances.

The journal hook lives in journal.py; these are the two others:

- :class:`DemoteResendNoise`: pysyncobj logs CRITICAL "truncating already-applied log entries" whenever
  its leader re-sends entries a follower already has, which it does on nearly every acknowledgement (it
  moves ``next_index`` back to the acknowledged index + 1 while later entries are in flight). Our journal
  keeps identical entries in place and logs CRITICAL itself if a committed entry is really replaced, so
  this message is demoted to DEBUG.
- :func:`close_finished_transmissions`: its ``Serializer`` opens the full dump to stream it to a lagging
  follower and drops the file object without closing it when the stream ends, is cancelled or a new
  dump is made (a ResourceWarning, and a descriptor held until garbage collection). We keep a reference
  to every open stream and close the ones pysyncobj dropped, after each of its calls.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, BinaryIO


class DemoteResendNoise(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if str(record.msg).startswith("truncating already-applied log entries"):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
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
