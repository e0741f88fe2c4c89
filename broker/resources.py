"""Process limits a broker raises at start: open files; and how its allocator keeps freed memory.

Every partition replica keeps a directory and, per segment, a ``.log`` file and two index files open; a
broker hosting thousands of replicas needs more descriptors than a login shell's default (1024 or a few
thousand). Kafka's documentation asks operators to raise ``RLIMIT_NOFILE`` (to 100,000 or more); a broker
started by hand rarely is, so it raises its own soft limit to its hard limit, and its hard limit to
:data:`WANTED_OPEN_FILES` when it may (root, or ``CAP_SYS_RESOURCE``). The controller caps the replicas of
a broker (``max.broker.partitions``), so a request cannot make it open files without bound either.

The allocator: glibc hands the top of a thread's heap back to the system (``madvise``) whenever more than
``M_TRIM_THRESHOLD`` is free there, and with its default threshold a broker's request thread did so about
once per record (a socket read allocates a 256 KiB buffer and shrinks it to what came), paying a system call
and page faults when the memory is touched again (docs/LATENCY.md, "The leader's CPU per record").
:func:`keep_freed_heap` raises the threshold, and fixes the size from which allocations are mapped on their
own above those buffers, once at start (a JVM with a fixed heap, as Kafka's -Xms = -Xmx, keeps its memory too).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import resource

logger = logging.getLogger(__name__)

WANTED_OPEN_FILES = 1 << 20
HEAP_TRIM_THRESHOLD = 64 << 20  # free memory kept at the top of a heap before it goes back to the system
HEAP_MMAP_THRESHOLD = 4 << 20  # allocations this large or larger are mapped on their own (and unmapped at free)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)


def raise_open_files_limit(wanted: int = WANTED_OPEN_FILES) -> tuple[int, int]:
    """Raise ``RLIMIT_NOFILE`` as far as allowed towards ``wanted``; returns the new ``(soft, hard)``."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < wanted:
        # not allowed without privilege, or above fs.nr_open: the soft limit still goes to the hard one below
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, wanted), wanted))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError) as exc:
            logger.warning("cannot raise the open files limit from %d to %d: %s", soft, hard, exc)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    logger.info("open files limit: %d (hard %d)", soft, hard)
    return soft, hard


def keep_freed_heap(trim: int = HEAP_TRIM_THRESHOLD, mmap: int = HEAP_MMAP_THRESHOLD) -> bool:
    """Set glibc's trim and mmap thresholds (the module docstring); False where there is no glibc ``mallopt``
    or it refused (another C library: nothing changes)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    done: bool = mallopt(_M_MMAP_THRESHOLD, mmap) == 1 and mallopt(_M_TRIM_THRESHOLD, trim) == 1
    logger.info("allocator: trim threshold %d, mmap threshold %d%s", trim, mmap, "" if done else " (not set)")
    return done
