"""What a partition shows others: its role, the registration it follows, read answers and fetch positions."""

from __future__ import annotations

import enum
from typing import NamedTuple, Protocol

from log.log_reads import FetchData
from log.txn_index import AbortedTxn
from replication.epoch_cache import EpochEndOffset


class Role(enum.StrEnum):
    LEADER = "leader"
    FOLLOWER = "follower"
    NONE = "none"  # opened from disk, no metadata about it yet


class Registration(Protocol):
    """What a partition needs of the metadata image's ``PartitionRegistration``."""

    @property
    def replicas(self) -> tuple[int, ...]: ...
    @property
    def isr(self) -> tuple[int, ...]: ...
    @property
    def leader(self) -> int: ...
    @property
    def leader_epoch(self) -> int: ...
    @property
    def partition_epoch(self) -> int: ...


class PartitionRead(NamedTuple):
    """The answer to :meth:`Partition.read`: whole batches, unchanged, and the partition's offsets."""

    data: FetchData
    high_watermark: int
    log_start_offset: int
    log_end_offset: int
    leader_epoch: int
    high_watermark_moved: bool  # a follower's fetch moved the high watermark (complete delayed produces)
    diverging_epoch: EpochEndOffset | None = None  # the reader's last fetched epoch ends before its offset here
    last_stable_offset: int = -1  # L3 (consumers' reads; -1 for followers)
    aborted: tuple[AbortedTxn, ...] = ()  # read_committed: the aborted transactions of the records' range

    @property
    def records(self) -> bytes:
        return self.data.records


class FetchPosition(NamedTuple):
    """How far readers may read: ``offset`` (HW for consumers, LEO for followers) and the count of bytes
    appended up to it since the partition was opened (differences say how many bytes arrived)."""

    role: Role
    leader_epoch: int
    offset: int
    appended_bytes: int
    log_start_offset: int
    log_end_offset: int
