"""The metadata quorum's public names in one place (the code lives in :mod:`controller.raft`)."""

from controller.raft.errors import InsecureConfigError, NotActiveError, QuorumError, QuorumStorageError
from controller.raft.events import ApplyEvent, QuorumStatus, RecordsApplied, StateReset, VoterStatus
from controller.raft.quorum import MetadataQuorum
from controller.raft.state import AppendResult, Fold, LogEntry, MetadataLogState, NeedsSnapshot, SnapshotView
from controller.raft.tuning import QuorumTuning, load_cluster_secret

__all__ = [
    "AppendResult",
    "ApplyEvent",
    "Fold",
    "InsecureConfigError",
    "LogEntry",
    "MetadataLogState",
    "MetadataQuorum",
    "NeedsSnapshot",
    "NotActiveError",
    "QuorumError",
    "QuorumStatus",
    "QuorumStorageError",
    "QuorumTuning",
    "RecordsApplied",
    "SnapshotView",
    "StateReset",
    "VoterStatus",
    "load_cluster_secret",
]
