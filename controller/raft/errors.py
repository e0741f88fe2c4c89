"""Errors of the metadata quorum, each carrying Kafka's error name in ``code``.

Outcomes of replicated commands are values (:class:`controller.raft.state.AppendResult`), never
exceptions; these exceptions are for calls that could not even be attempted (this node is not the
active controller), for configuration that must not run (no cluster secret) and for storage that
cannot be trusted (a corrupt journal or dump, a data directory that belongs to another node).
"""

from __future__ import annotations


class QuorumError(Exception):
    """Base of every error of the quorum layer. ``code`` is Kafka's error name."""

    code = "UNKNOWN_SERVER_ERROR"
    retriable = False


class NotActiveError(QuorumError):
    """This node is not the active controller; nothing was proposed.

    ``leader_id`` / ``leader_address`` name the Raft leader this node knows of (both ``None`` while an
    election is running or this node is cut off): the caller retries there.
    """

    code = "NOT_CONTROLLER"
    retriable = True

    def __init__(self, node_id: int, leader_id: int | None, leader_address: str | None) -> None:
        where = f"node {leader_id} at {leader_address}" if leader_id is not None else "unknown"
        super().__init__(f"node {node_id} is not the active controller (Raft leader: {where})")
        self.node_id = node_id
        self.leader_id = leader_id
        self.leader_address = leader_address


class InsecureConfigError(QuorumError, ValueError):
    """The quorum would accept unauthenticated peers (no cluster secret and no explicit opt-out)."""

    code = "INVALID_CONFIG"


class QuorumStorageError(QuorumError):
    """The data directory cannot be trusted: corrupt dump, journal of another format, wrong node id."""

    code = "KAFKA_STORAGE_ERROR"


class StateDecodeError(QuorumError, ValueError):
    """Bytes that are not a serialized :class:`~controller.raft.state.MetadataLogState`."""

    code = "CORRUPT_MESSAGE"
