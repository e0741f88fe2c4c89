"""The broker's clean-shutdown file (Kafka's ``.kafka_cleanshutdown``): which broker epoch shut down cleanly.

KIP-966: a broker that registers again tells the controller the epoch of the registration it shut down
cleanly with (``previous_broker_epoch``); without it the controller assumes an unclean shutdown (the
broker may have lost its unflushed tail) and takes it out of the eligible leader replicas
(``controller/core/elections.py`` ELR2). The file lives in ``--data-dir``::

    .odradek_cleanshutdown    {"version": 0, "broker_epoch": <epoch>}

Order that matters: it is written (atomically, durably) only after every log closed cleanly, and read and
removed (durably) at start before the broker registers, so a crash of this life finds no file next time.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from common.files import fsync_dir
from log.checkpoint import write_file

logger = logging.getLogger(__name__)

FILE_NAME = ".odradek_cleanshutdown"


def record(data_dir: str | Path, broker_epoch: int) -> None:
    """Every log is closed cleanly: remember ``broker_epoch`` for the next start."""
    if broker_epoch < 0:
        return  # never registered: nothing to vouch for
    body = json.dumps({"version": 0, "broker_epoch": broker_epoch}).encode()
    write_file(Path(data_dir) / FILE_NAME, body)


def take_previous_epoch(data_dir: str | Path) -> int | None:
    """The epoch the last life shut down cleanly with (None: it did not, or no file), removing the file."""
    path = Path(data_dir) / FILE_NAME
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        epoch = json.loads(raw)["broker_epoch"]
        found = epoch if isinstance(epoch, int) and epoch >= 0 else None
    except (ValueError, KeyError, TypeError):
        logger.warning("%s is malformed: treated as an unclean shutdown", path)
        found = None
    path.unlink()
    fsync_dir(path.parent)
    return found
