"""The pysyncobj side of the driver: the SyncObj subclass, the fsync-before-ack transport, a proposal.

Kept apart from :mod:`controller.raft.quorum` so that everything touching pysyncobj's classes is in one
small place. pysyncobj has no type hints; these classes are typed at their edges.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Protocol, TypeVar, cast

from pysyncobj import SyncObj, replicated
from pysyncobj.transport import TCPTransport

from controller.raft.patches import cap_leader_commit
from controller.raft.state import AppendResult

_F = TypeVar("_F", bound=Callable[..., Any])
_replicated = cast(Callable[[_F], _F], replicated)  # the same decorator, typed

ROLES = {0: "follower", 1: "candidate", 2: "leader"}  # pysyncobj's _RAFT_STATE values
_LEADER = 2


class Applier(Protocol):
    """Applies committed commands (on the Raft thread)."""

    def apply_append(
        self, request_id: bytes, term: int, payloads: list[bytes], expected_base_offset: int = -1
    ) -> AppendResult: ...

    def apply_leader_change(self, term: int, node_id: int, payload: bytes) -> AppendResult: ...


class Call:
    """One proposal's answer from pysyncobj: ``done`` runs on the Raft thread."""

    __slots__ = ("error", "event", "result")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.result: Any = None
        self.error: int | None = None

    def done(self, result: Any, error: int) -> None:
        self.result, self.error = result, error
        self.event.set()


class RaftNode(SyncObj):  # type: ignore[misc]
    """The pysyncobj object: two replicated commands, applied by the quorum on the Raft thread."""

    def __init__(self, applier: Applier, address: str, partners: list[str], conf: Any, transport: Any) -> None:
        self._applier = applier
        super().__init__(address, partners, conf, transportClass=transport)

    def read_before_election_check(self) -> None:
        """Handle the messages already received when the next tick would otherwise start an election.

        pysyncobj checks a follower's election deadline at the start of a tick and reads its sockets at the
        end. When the Raft thread was held up past the deadline (a slow fsync, a busy machine), the leader's
        heartbeats wait unread, and the follower starts an election in a higher term that deposes a healthy
        leader (pysyncobj has no pre-vote). Call this on the Raft thread before each tick.
        """
        if self._SyncObj__raftState == _LEADER or self._SyncObj__needLoadDumpFile:
            return  # a leader has no deadline; before the first tick the full dump is not loaded yet
        if self._SyncObj__raftElectionDeadline < time.monotonic() and self._SyncObj__transport.ready:
            self._poller.poll(0)

    def next_wait(self, due_s: float, longest_s: float) -> float:
        """How long the next tick may wait for a message before it must run again: until this node's next timer
        (a leader's next heartbeat, a follower's or candidate's election deadline), at most ``longest_s``.

        A message wakes the tick anyway (a proposal through pysyncobj's pipe, a peer's through its socket), so
        an idle voter wakes for its timers and its peers' heartbeats only, not every ``due_s``. When the timer
        is already due the tick about to run handles it: a leader sends its heartbeats, whose next are a period
        away; a follower starts an election, unless it is connected to no one, and then looks again in ``due_s``.
        Read on the Raft thread, before each tick.
        """
        now = time.monotonic()
        left: float
        if self._SyncObj__raftState == _LEADER:
            left = self._SyncObj__newAppendEntriesTime - now
            if left <= 0:
                left = self._SyncObj__conf.appendEntriesPeriod
        else:
            left = self._SyncObj__raftElectionDeadline - now
            if left <= 0:
                return due_s
        return min(left, longest_s)

    @_replicated
    def rep_append(
        self, request_id: bytes, term: int, payloads: list[bytes], expected_base_offset: int = -1
    ) -> AppendResult:
        return self._applier.apply_append(request_id, term, payloads, expected_base_offset)

    @_replicated
    def rep_leader_change(self, term: int, node_id: int, payload: bytes) -> AppendResult:
        return self._applier.apply_leader_change(term, node_id, payload)


class AckFlushingTransport(TCPTransport):  # type: ignore[misc]
    """pysyncobj's TCP transport, but entries are fsynced before a follower acknowledges them, and a
    follower's commit index follows Raft's rule (:func:`controller.raft.patches.cap_leader_commit`)."""

    def __init__(self, syncObj: Any, selfNode: Any, otherNodes: Any, *, before_ack: Callable[[], bool]) -> None:
        self._before_ack = before_ack
        super().__init__(syncObj, selfNode, otherNodes)

    def _onMessageReceived(self, node: Any, message: Any) -> None:
        # Every message from a connected partner arrives here (pysyncobj binds this method per connection).
        super()._onMessageReceived(node, cap_leader_commit(message))

    def send(self, node: Any, message: Any) -> bool:
        if type(message) is dict and message.get("type") == "next_node_idx" and not self._before_ack():
            return False
        return bool(super().send(node, message))
