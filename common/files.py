"""Durable file replacement: the one ``write_atomically`` (and ``fsync_dir``) of the project, used by the
storage engine's checkpoints and snapshots and by the controller's Raft journal."""

from __future__ import annotations

import contextlib
import os

TMP_SUFFIX = ".tmp"  # the temporary file next to the one being replaced (recovery removes leftovers)


def fsync_dir(directory: str | os.PathLike[str]) -> None:
    """fsync a directory so that creations, renames and deletions in it are durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: str | os.PathLike[str], data: bytes, *, fsync: bool = True) -> None:
    """Replace ``path`` with ``data``: a temporary file (``path`` + :data:`TMP_SUFFIX`) written and, with
    ``fsync``, fsynced, renamed over ``path``, then (with ``fsync``) the directory fsynced. A reader sees the
    old file or the new one, never a part. OSError on failure, with no temporary file left."""
    path = os.fspath(path)
    tmp = path + TMP_SUFFIX
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        if fsync:
            fsync_dir(os.path.dirname(os.path.abspath(path)))
    except OSError:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise
