"""Process limits a broker raises at start: open files.

Every partition replica keeps a directory and, per segment, a ``.log`` file and two index files open; a
broker hosting thousands of replicas needs more descriptors than a login shell's default (1024 or a few
thousand). Kafka's documentation asks operators to raise ``RLIMIT_NOFILE`` (to 100,000 or more); a broker
started by hand rarely is, so it raises its own soft limit to its hard limit, and its hard limit to
:data:`WANTED_OPEN_FILES` when it may (root, or ``CAP_SYS_RESOURCE``). The controller caps the replicas of
a broker (``max.broker.partitions``), so a request cannot make it open files without bound either.
"""

from __future__ import annotations

import contextlib
import logging
import resource

logger = logging.getLogger(__name__)

WANTED_OPEN_FILES = 1 << 20


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
