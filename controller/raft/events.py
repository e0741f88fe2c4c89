"""What the metadata quorum tells its users: apply events (``on_apply``) and status (DescribeQuorum)."""

from __future__ import annotations

from dataclasses import dataclass

from controller.raft.state import LogEntry


@dataclass(frozen=True, slots=True)
class RecordsApplied:
    """Records a committed command added, in offset order (one entry for a LeaderChange marker)."""

    entries: tuple[LogEntry, ...]
    leader_change: bool


@dataclass(frozen=True, slots=True)
class StateReset:
    """The whole state was replaced from a full dump (at start, or a snapshot sent by the leader).

    Rebuild from :meth:`MetadataQuorum.snapshot` and :meth:`MetadataQuorum.records_from` its end offset.
    """

    log_start_offset: int
    end_offset: int


ApplyEvent = RecordsApplied | StateReset


@dataclass(frozen=True, slots=True)
class VoterStatus:
    node_id: int
    address: str
    connected: bool | None  # None for this node itself
    match_index: int | None  # Raft index the voter acknowledged; known on the Raft leader only


@dataclass(frozen=True, slots=True)
class QuorumStatus:
    """What DescribeQuorum reports. Raft indexes count pysyncobj entries, not metadata offsets."""

    node_id: int
    raft_term: int
    role: str
    leader_id: int | None
    leader_address: str | None
    active: bool
    active_node_id: int | None
    metadata_term: int
    commit_index: int
    last_applied: int
    end_offset: int
    log_start_offset: int
    voters: tuple[VoterStatus, ...]
    failure: str | None
