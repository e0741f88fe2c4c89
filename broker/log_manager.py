"""The broker's data directory: partition directories, their topic ids, deletion, the HW checkpoint.

Layout of ``--data-dir`` (docs/INTERFACE.md "On disk", plus Kafka's own broker-level files)::

    name                                    what
    meta.properties                         ``node.id=<id>``: a directory belongs to one broker id for life
    replication-offset-checkpoint           high watermarks, log.checkpoint format, keys "<topic> <partition>"
    <topic>-<partition>/                    one partition's log (log.log), plus
        partition.metadata                  ``version: 0`` / ``topic_id: <uuid>`` (Kafka's file): which
                                            incarnation of the topic name the data belongs to
    <topic>-<partition>.<hex>-delete/       a partition being deleted (removed at the next start if a crash
                                            interrupted the deletion)
    <topic>-<partition>.<hex>-stray/        data this broker holds but the metadata does not assign to it
                                            (kept for an operator, like Kafka's stray logs; never served)

In the last two the topic is cut short when the whole name would pass 255 bytes (:func:`aside_dir_name`,
as Kafka does): a 249-character topic name is legal, and its directory must still be movable aside.

Order that matters: a deleted partition's directory is renamed (atomically) before its files are removed,
so a crash never leaves a half-deleted directory under a partition's name.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import threading
import uuid
from collections.abc import Mapping
from pathlib import Path

from common.clock import Clock
from common.files import fsync_dir
from log.checkpoint import read_checkpoint, write_checkpoint
from log.config import LogConfig
from log.errors import StorageError
from log.log import Log

logger = logging.getLogger(__name__)

META_PROPERTIES = "meta.properties"
HW_CHECKPOINT = "replication-offset-checkpoint"
PARTITION_METADATA = "partition.metadata"
DELETE_SUFFIX = "-delete"
STRAY_SUFFIX = "-stray"
MAX_NAME_BYTES = 255  # NAME_MAX of the file systems brokers run on
_PARTITION_DIR = re.compile(r"(?P<topic>[a-zA-Z0-9._-]{1,249})-(?P<partition>0|[1-9][0-9]{0,9})")

TopicPartition = tuple[str, int]


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def aside_dir_name(name: str, suffix: str, unique: str | None = None) -> str:
    """``<topic>-<partition>.<uuid>-delete`` (or ``-stray``) for the partition directory ``name``, with the
    topic cut short so that the name fits :data:`MAX_NAME_BYTES` (Kafka's ``logDirNameWithSuffixCappedLength``):
    a legal topic name of 249 characters would otherwise make a name longer than file systems allow."""
    unique = uuid.uuid4().hex if unique is None else unique
    topic, dash, partition = name.rpartition("-")
    tail = f"{dash}{partition}.{unique}{suffix}"
    return topic[: max(0, MAX_NAME_BYTES - len(tail.encode()))] + tail


def parse_partition_dir(name: str) -> TopicPartition | None:
    """``(topic, partition)`` of a partition directory name, None for anything else."""
    match = _PARTITION_DIR.fullmatch(name)
    if match is None or match["topic"] in (".", ".."):
        return None
    return match["topic"], int(match["partition"])


class LogManager:
    """Opens, creates and deletes partition logs under one data directory.

    Thread-safety: ``load``, ``open_log``, ``delete_log`` and ``quarantine`` are called by one thread at a time
    (the broker's start, then its metadata thread); ``write_high_watermarks`` may run on the maintenance
    thread at the same time, and takes its own lock.
    """

    def __init__(self, data_dir: str | Path, broker_id: int, clock: Clock) -> None:
        self.data_dir = Path(data_dir)
        self.broker_id = broker_id
        self._clock = clock
        self._checkpoint_lock = threading.Lock()

    # --- start ------------------------------------------------------------------------------------

    def prepare(self) -> None:
        """Create the directory, check ``meta.properties``, finish interrupted deletions."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._check_meta_properties()
        for path in self.data_dir.iterdir():
            if path.is_dir() and path.name.endswith(DELETE_SUFFIX):
                logger.info("removing %s, left by an interrupted deletion", path)
                shutil.rmtree(path, ignore_errors=True)

    def _check_meta_properties(self) -> None:
        path = self.data_dir / META_PROPERTIES
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            path.write_text(f"version=1\nnode.id={self.broker_id}\n", encoding="utf-8")
            fsync_dir(self.data_dir)
            return
        props = dict(line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#"))
        if props.get("node.id", str(self.broker_id)).strip() != str(self.broker_id):
            raise StorageError(
                f"{self.data_dir} belongs to broker {props['node.id'].strip()}, not to broker {self.broker_id}"
            )

    def partition_dirs(self) -> dict[TopicPartition, Path]:
        """Every partition directory under the data directory."""
        found = {}
        for path in sorted(self.data_dir.iterdir()):
            tp = parse_partition_dir(path.name) if path.is_dir() else None
            if tp is not None:
                found[tp] = path
        return found

    def load(self, config: LogConfig) -> dict[TopicPartition, Log]:
        """Open (and recover) every partition directory with ``config`` (topic configs come later)."""
        logs: dict[TopicPartition, Log] = {}
        try:
            for tp, path in self.partition_dirs().items():
                logs[tp] = Log.open(path, config, self._clock)
        except BaseException:
            for log in logs.values():
                log.close()
            raise
        return logs

    # --- partitions -------------------------------------------------------------------------------

    def topic_id(self, topic: str, partition: int) -> str | None:
        """The topic id in the partition's ``partition.metadata``, None when there is none."""
        path = self.data_dir / partition_dir_name(topic, partition) / PARTITION_METADATA
        try:
            text = path.read_text(encoding="utf-8")
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise StorageError(f"cannot read {path}: {exc}") from exc
        for line in text.splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "topic_id":
                return value.strip()
        return None

    def write_topic_id(self, topic: str, partition: int, topic_id: str) -> None:
        directory = self.data_dir / partition_dir_name(topic, partition)
        tmp = directory / (PARTITION_METADATA + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(f"version: 0\ntopic_id: {topic_id}\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, directory / PARTITION_METADATA)
        fsync_dir(directory)

    def open_log(self, topic: str, partition: int, topic_id: str, config: LogConfig) -> Log:
        """Open (creating if needed) the log of ``topic-partition``, recording ``topic_id`` with it."""
        directory = self.data_dir / partition_dir_name(topic, partition)
        log = Log.open(directory, config, self._clock)
        if self.topic_id(topic, partition) != topic_id:
            self.write_topic_id(topic, partition, topic_id)
        return log

    def delete_log(self, log: Log) -> None:
        """Close ``log`` and delete its directory (renamed first: see the module docstring)."""
        log.close()
        self._move_aside(log.dir, DELETE_SUFFIX, remove=True)

    def quarantine(self, log: Log) -> Path:
        """Close ``log`` and rename its directory to ``...-stray``: kept on disk, never served."""
        log.close()
        return self._move_aside(log.dir, STRAY_SUFFIX, remove=False)

    def _move_aside(self, directory: Path, suffix: str, *, remove: bool) -> Path:
        target = directory.with_name(aside_dir_name(directory.name, suffix))
        os.replace(directory, target)
        fsync_dir(self.data_dir)
        if remove:
            shutil.rmtree(target, ignore_errors=True)
        if remove:
            logger.info("deleted %s", directory)
        else:
            logger.warning("set %s aside as %s", directory, target)
        return target

    # --- high watermarks --------------------------------------------------------------------------

    def read_high_watermarks(self) -> dict[TopicPartition, int]:
        try:
            entries = read_checkpoint(self.data_dir / HW_CHECKPOINT) or {}
        except StorageError as exc:
            logger.warning("%s; high watermarks start at the log start offsets", exc)
            return {}
        result = {}
        for key, offset in entries.items():
            topic, _, partition = key.rpartition(" ")
            if topic and partition.isdigit():
                result[(topic, int(partition))] = offset
        return result

    def write_high_watermarks(self, high_watermarks: Mapping[TopicPartition, int]) -> None:
        with self._checkpoint_lock:
            entries = {f"{topic} {partition}": hw for (topic, partition), hw in sorted(high_watermarks.items())}
            write_checkpoint(self.data_dir / HW_CHECKPOINT, entries)
