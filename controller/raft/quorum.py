"""MetadataQuorum: the replicated ``__cluster_metadata`` log on pysyncobj (the thin driver).

The rules live in :class:`controller.raft.state.MetadataLogState`; this module runs pysyncobj around it:
one Raft thread ticks pysyncobj, applies committed commands to the state, fsyncs the journal and
proposes the LeaderChange marker when this node becomes Raft leader.

How the active controller is fenced:

1. A node that becomes Raft leader of term T proposes ``leader_change(T, node_id, payload)``.
2. It is *active* once that marker is applied on it and it is still Raft leader of T; only then does
   :meth:`MetadataQuorum.append` accept calls, stamping every command with T.
3. The state machine rejects commands whose term is not the newest applied marker's, so a deposed leader
   (still calling itself leader until ``leader_fallback_timeout_s``) can never get a record in.

Exactly once: :meth:`MetadataQuorum.append` proposes under a fresh random request id and, when pysyncobj
gives no answer (a timeout, a leader change, a full queue), proposes again under the same id until the
deadline. The state machine answers a repeated id with the first result and adds nothing.

Restarts: everything is rebuilt from ``data_dir`` (journal + full dump; see journal.py and dump.py).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pysyncobj import FAIL_REASON, SyncObjConf, SyncObjException

from common.files import write_atomically
from controller.raft.dump import (
    Dump,
    align_journal_with_dump,
    decode_dump,
    read_dump_file,
    sync_file_and_dir,
    write_dump_file,
)
from controller.raft.errors import NotActiveError, QuorumError, QuorumStorageError, StateDecodeError
from controller.raft.events import ApplyEvent, QuorumStatus, RecordsApplied, StateReset, VoterStatus
from controller.raft.journal import DurableJournal, provide_journal
from controller.raft.node import ROLES, AckFlushingTransport, Call, RaftNode
from controller.raft.patches import close_finished_transmissions, install_log_filter
from controller.raft.state import (
    REQUEST_TIMED_OUT,
    AppendResult,
    Fold,
    LogEntry,
    MetadataLogState,
    NeedsSnapshot,
    SnapshotView,
)
from controller.raft.tuning import QuorumTuning, check_secret, syncobj_conf_kwargs

log = logging.getLogger(__name__)

install_log_filter()

_VIEW_REFRESH_S = 0.05


@dataclass(frozen=True, slots=True)
class _RaftView:
    term: int = 0
    role: str = "follower"
    leader_address: str | None = None
    commit_index: int = 0
    last_applied: int = 0
    connected: frozenset[str] = frozenset()
    match_index: Mapping[str, int] = field(default_factory=dict)


class _FatalError(Exception):
    """Applying a committed command failed: this node must stop rather than diverge."""


class MetadataQuorum:
    """One voter of the metadata quorum. See the module docstring for the protocol.

    Thread-safety: every public method may be called from any thread, except that ``append`` and
    ``close`` must not be called from ``on_apply`` (they would wait for the thread that runs it). The
    state is guarded by one lock; pysyncobj is driven by one Raft thread of our own (``autoTick`` off).

    ``on_apply(event)`` is called on the Raft thread, in apply order, after the state changed and outside
    the lock (it may read this object). It must be quick: Raft heartbeats wait while it runs. If it
    raises, the node halts (stops ticking and leaves the quorum) instead of skipping a record.

    ``peers`` maps node id to ``host:port`` for every voter, with or without this node.
    ``password`` is the cluster secret (see :func:`controller.raft.tuning.load_cluster_secret`); ``None``
    is refused unless ``allow_insecure``.
    """

    def __init__(
        self,
        node_id: int,
        raft_address: str,
        peers: Mapping[int, str],
        data_dir: str | os.PathLike[str],
        password: str | bytes | None,
        *,
        fold: Fold,
        leader_change_payload: Callable[[int, int], bytes],
        on_apply: Callable[[ApplyEvent], None] | None = None,
        tuning: QuorumTuning | None = None,
        allow_insecure: bool = False,
        bind_address: str | None = None,
    ) -> None:
        check_secret(password, allow_insecure=allow_insecure)
        voters = dict(peers)
        if voters.setdefault(node_id, raft_address) != raft_address:
            raise ValueError(f"peers says node {node_id} is at {voters[node_id]}, not {raft_address}")
        if len(set(voters.values())) != len(voters) or min(voters) < 0:
            raise ValueError(f"voter ids must be >= 0 and addresses distinct: {voters}")
        self.node_id = node_id
        self.raft_address = raft_address
        self.voters: Mapping[int, str] = dict(sorted(voters.items()))
        self._node_by_address = {addr: nid for nid, addr in voters.items()}
        self._data_dir = os.fspath(data_dir)
        self._password = password
        self._leader_change_payload = leader_change_payload
        self._on_apply = on_apply
        self._tuning = tuning = tuning or QuorumTuning()
        self._bind_address = bind_address or raft_address
        self._cond = threading.Condition()
        self._state = MetadataLogState(
            fold,
            max_records_before_snapshot=tuning.state_max_records_before_snapshot,
            records_kept_after_snapshot=tuning.state_records_kept_after_snapshot,
            dedup_window=tuning.state_dedup_window,
        )
        self._in_flight = threading.BoundedSemaphore(tuning.max_in_flight_appends)
        self._calls: set[Call] = set()
        self.proposals = 0  # proposals sent by append(), copies included (a figure for tests and bench)
        self._calls_lock = threading.Lock()
        self._raft: Any = None
        self._close_transmissions: Callable[[], None] = lambda: None
        self._journal: DurableJournal | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._started = False
        self._closed = False
        self._fatal: BaseException | None = None
        # Written by the Raft thread only, read anywhere (one attribute store each).
        self._active_term: int | None = None
        self._marker_term: int | None = None
        self._view = _RaftView()
        self._next_view_refresh = 0.0

    # --- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        """Open ``data_dir``, bind the Raft port and start the Raft thread (returns at once)."""
        if self._started:
            raise RuntimeError("a MetadataQuorum starts once")
        self._started = True
        os.makedirs(self._data_dir, exist_ok=True)
        self._check_identity()
        journal = DurableJournal(self._path("raft.journal"), fsync=self._tuning.fsync)
        try:
            dump = read_dump_file(self._path("raft.dump"))
            if dump is not None:
                self._check_state(dump.state)
                if align_journal_with_dump(journal, dump):
                    log.warning("node %d: finished a journal compaction cut short by a crash", self.node_id)
            self._raft = self._build_raft(journal)
        except BaseException:
            journal._destroy()
            raise
        self._journal = journal
        self._thread = threading.Thread(target=self._run, name=f"metadata-quorum-{self.node_id}", daemon=True)
        self._thread.start()

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop the Raft thread, close sockets and files. Pending appends end with REQUEST_TIMED_OUT.

        Not from ``on_apply``: the Raft thread cannot wait for itself.
        """
        if threading.current_thread() is self._thread:
            raise RuntimeError("close() from on_apply: the Raft thread cannot join itself")
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                log.error("node %d: Raft thread did not stop within %.1f s", self.node_id, timeout_s)
        if self._raft is not None and self._fatal is None and not (self._thread and self._thread.is_alive()):
            self._raft.destroy()
            self._close_transmissions()
        with self._cond:
            self._active_term = None
            self._cond.notify_all()
        self._fail_pending_calls()

    def __enter__(self) -> MetadataQuorum:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _path(self, name: str) -> str:
        return os.path.join(self._data_dir, name)

    def _check_state(self, data: bytes) -> None:
        """Refuse to start on a dump whose state does not decode (pysyncobj would swallow the error)."""
        try:
            self._state.load_bytes(data)
        except StateDecodeError as e:
            raise QuorumStorageError(f"{self._path('raft.dump')}: {e}") from e

    def _check_identity(self) -> None:
        path = self._path("quorum.json")
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                stored = json.load(f).get("node_id")
            if stored != self.node_id:
                raise QuorumStorageError(f"{self._data_dir} is node {stored}'s, not node {self.node_id}'s")
            return
        write_atomically(path, json.dumps({"node_id": self.node_id}).encode(), fsync=self._tuning.fsync)

    def _build_raft(self, journal: DurableJournal) -> Any:
        conf = SyncObjConf(
            **syncobj_conf_kwargs(
                self._tuning,
                password=self._password,
                journal_path=journal.path,
                dump_path=self._path("raft.dump"),
                bind_address=self._bind_address,
            ),
            serializer=self._serialize,
            deserializer=self._deserialize,
        )
        transport = functools.partial(AckFlushingTransport, before_ack=self._flush_before_ack)
        partners = [addr for nid, addr in self.voters.items() if nid != self.node_id]
        with provide_journal(journal):
            try:
                raft = RaftNode(_Applier(self), self.raft_address, partners, conf, transport)
            except SyncObjException as e:
                raise QuorumError(f"node {self.node_id} cannot bind {self._bind_address}: {e}") from e
        if getattr(raft, "_SyncObj__raftLog", None) is not journal:  # the hook in journal.py was bypassed
            raft.destroy()
            raise QuorumStorageError("pysyncobj ignored the durable journal: unsupported pysyncobj version")
        # pysyncobj runs on-tick callbacks after the tick's new proposals were sent, before it waits for
        # the acknowledgements: the leader's fsync overlaps the followers' round trip.
        raft.addOnTickCallback(self._flush_before_ack)
        self._close_transmissions = close_finished_transmissions(raft)
        return raft

    # --- the Raft thread -------------------------------------------------------------------------

    def _run(self) -> None:
        raft, journal = self._raft, self._journal
        assert journal is not None
        while not self._stop.is_set() and self._fatal is None:
            try:
                raft.read_before_election_check()
                raft.doTick(raft.next_wait(self._tuning.tick_interval_s, self._tuning.idle_tick_s))
                if self._fatal is None:
                    journal.flush()  # the leader's own entries, before the next tick counts them
                    self._after_tick(raft)
            except (_FatalError, QuorumStorageError) as e:
                self._fatal = e.__cause__ if isinstance(e, _FatalError) and e.__cause__ else e
            except Exception:
                log.exception("node %d: Raft tick failed", self.node_id)
                time.sleep(self._tuning.tick_interval_s)
        if self._fatal is not None:
            log.critical("node %d halted, leaving the quorum: %r", self.node_id, self._fatal)
            raft.destroy()
            self._close_transmissions()
            with self._cond:
                self._active_term = None
                self._cond.notify_all()
            self._fail_pending_calls()

    def _after_tick(self, raft: Any) -> None:
        is_leader = bool(raft._isLeader())
        term = int(raft.raftCurrentTerm)
        if is_leader and self._marker_term != term:
            payload = self._leader_change_payload(term, self.node_id)
            done = functools.partial(self._marker_done, term)
            raft.rep_leader_change(term, self.node_id, payload, callback=done)
            self._marker_term = term
        self._refresh_view(raft, is_leader, term)
        with self._cond:
            state = self._state
            active = is_leader and state.term == term and state.active_node_id == self.node_id
            if (term if active else None) != self._active_term:
                self._active_term = term if active else None
                log.info("node %d: %s (term %d)", self.node_id, "active" if active else "not active", term)
                self._cond.notify_all()

    def _marker_done(self, term: int, result: Any, error: int) -> None:
        if error != FAIL_REASON.SUCCESS and self._marker_term == term:
            self._marker_term = None  # propose again at the next tick if still leader of this term

    def _refresh_view(self, raft: Any, is_leader: bool, term: int) -> None:
        leader = raft._getLeader()
        leader_address = None if leader is None else str(leader.address)
        now = time.monotonic()
        view = self._view
        if now < self._next_view_refresh and (view.term, view.leader_address) == (term, leader_address):
            self._view = _RaftView(
                term,
                view.role,
                leader_address,
                raft.raftCommitIndex,
                raft.raftLastApplied,
                view.connected,
                view.match_index,
            )
            return
        self._next_view_refresh = now + _VIEW_REFRESH_S
        st = raft.getStatus()
        role = ROLES.get(st["state"], "unknown")
        if (role, term) != (view.role, view.term):
            log.info("node %d: %s in term %d, leader %s", self.node_id, role, term, leader_address)
        partners = [a for a in self.voters.values() if a != self.raft_address]
        self._view = _RaftView(
            term=term,
            role=role,
            leader_address=leader_address,
            commit_index=st["commit_idx"],
            last_applied=st["last_applied"],
            connected=frozenset(a for a in partners if st.get("partner_node_status_server_" + a) == 2),
            match_index={a: st["match_idx_server_" + a] for a in partners if "match_idx_server_" + a in st},
        )

    def _flush_before_ack(self) -> bool:
        """fsync new entries; the transport calls it before acknowledging entries: on disk first."""
        assert self._journal is not None
        try:
            self._journal.flush()
        except QuorumStorageError as e:
            self._fatal = e
            return False
        return True

    # --- applying committed commands (Raft thread, called by pysyncobj) ---------------------------

    def _apply_append(
        self, request_id: bytes, term: int, payloads: list[bytes], expected_base_offset: int = -1
    ) -> AppendResult:
        self._raise_if_fatal()
        with self._cond:
            before = self._state.end_offset
            try:
                result = self._state.apply_append(request_id, term, payloads, expected_base_offset)
            except Exception as e:
                self._fatal = e
                raise _FatalError("fold failed") from e
            self._cond.notify_all()
        if result.ok and result.base_offset == before:
            entries = tuple(LogEntry(before + i, term, p) for i, p in enumerate(payloads))
            self._emit(RecordsApplied(entries, leader_change=False))
        return result

    def _apply_leader_change(self, term: int, node_id: int, payload: bytes) -> AppendResult:
        self._raise_if_fatal()
        with self._cond:
            try:
                result = self._state.apply_leader_change(term, node_id, payload)
            except Exception as e:
                self._fatal = e
                raise _FatalError("fold failed") from e
            self._cond.notify_all()
        if result.ok:
            self._emit(RecordsApplied((LogEntry(result.base_offset, term, payload),), True))
        return result

    def _emit(self, event: ApplyEvent) -> None:
        if self._on_apply is None:
            return
        try:
            self._on_apply(event)
        except Exception as e:
            self._fatal = e
            raise _FatalError("on_apply failed") from e

    def _raise_if_fatal(self) -> None:
        if self._fatal is not None:
            raise _FatalError("node halted") from self._fatal

    def _serialize(self, path: str, data: tuple[Any, Any, Any]) -> None:
        """pysyncobj's full dump: our state at its last applied entry (Raft thread)."""
        self._raise_if_fatal()
        last, prev, cluster = data
        with self._cond:
            state = self._state.to_bytes()
        voters = tuple(sorted(str(getattr(node, "id", node)) for node in cluster))
        write_dump_file(path, Dump(tuple(last), tuple(prev), voters, state), fsync=self._tuning.fsync)

    def _deserialize(self, path: str) -> tuple[Any, Any, Any]:
        """Load a full dump (at start, or one the leader sent). pysyncobj swallows errors: we halt."""
        try:
            with open(path, "rb") as f:
                dump = decode_dump(f.read())
            if self._tuning.fsync:
                sync_file_and_dir(path)  # before pysyncobj clears the journal it replaces
            with self._cond:
                self._state.load_bytes(dump.state)
                event = StateReset(self._state.log_start_offset, self._state.end_offset)
                self._cond.notify_all()
            self._emit(event)
        except BaseException as e:
            if self._fatal is None:
                self._fatal = e
            raise
        return dump.last, dump.prev, list(dump.voters)

    # --- appending -------------------------------------------------------------------------------

    def append(
        self, payloads: Sequence[bytes], *, timeout_s: float, expected_base_offset: int = -1
    ) -> AppendResult:
        """Commit ``payloads`` as consecutive records; returns once they are committed and applied here.

        Raises :class:`NotActiveError` (nothing proposed) unless this node is the active controller, and
        ``ValueError`` for an empty or oversized batch. The result is ``ok`` with the offsets; or
        ``NOT_CONTROLLER``: fenced, nothing was written, because the term this call stamped is no longer
        the active one (this node was deposed, perhaps re-elected since in a newer term: reload the
        image from the log before deciding again); or ``REQUEST_TIMED_OUT``: the outcome is unknown,
        the records may still commit (a later reader sees them in the log); or ``UNEXPECTED_BASE_OFFSET``:
        ``expected_base_offset`` (>= 0) was given and the log no longer ended there (nothing written).
        """
        batch = self._check_batch(payloads)
        if threading.current_thread() is self._thread:
            raise RuntimeError("append() from on_apply would deadlock the Raft thread")
        term = self._active_term
        if term is None or self._closed:
            raise self._not_active()
        deadline = time.monotonic() + timeout_s
        if not self._in_flight.acquire(timeout=max(0.0, timeout_s)):
            return AppendResult.failure(REQUEST_TIMED_OUT)
        try:
            return self._propose_until_decided(os.urandom(16), term, batch, deadline, expected_base_offset)
        finally:
            self._in_flight.release()

    def _propose_until_decided(
        self, request_id: bytes, term: int, batch: list[bytes], deadline: float, expected_base_offset: int
    ) -> AppendResult:
        """Propose, and propose again under the same request id until an answer or the deadline.

        pysyncobj answers nearly every proposal eventually (applied, discarded, leader changed), so a
        silent proposal is usually a slow one: the wait before proposing a copy doubles each time, so a
        slow quorum is not flooded with copies. An error answer is retried after a short back-off.
        """
        wait_s, backoff_s = self._tuning.append_retry_interval_s, 0.02
        while not self._closed and self._fatal is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            call = Call()
            with self._calls_lock:
                self._calls.add(call)
            try:
                self._raft.rep_append(request_id, term, batch, expected_base_offset, callback=call.done)
                self.proposals += 1
                answered = call.event.wait(min(remaining, wait_s))
            finally:
                with self._calls_lock:
                    self._calls.discard(call)
            if answered and call.error == FAIL_REASON.SUCCESS and isinstance(call.result, AppendResult):
                return call.result
            if answered:  # failed fast (queue full, no leader, leader changed, discarded)
                time.sleep(max(0.0, min(backoff_s, deadline - time.monotonic())))
                backoff_s = min(backoff_s * 2, 0.2)
            else:
                wait_s *= 2
        return AppendResult.failure(REQUEST_TIMED_OUT)

    def _check_batch(self, payloads: Sequence[bytes]) -> list[bytes]:
        batch = list(payloads)
        if not batch or not all(isinstance(p, bytes) for p in batch):
            raise ValueError("append needs a non-empty sequence of bytes")
        if len(batch) > self._tuning.max_records_per_append:
            raise ValueError(f"{len(batch)} records > max_records_per_append={self._tuning.max_records_per_append}")
        size = sum(len(p) for p in batch)
        if size > self._tuning.max_append_bytes:
            raise ValueError(f"{size} bytes > max_append_bytes {self._tuning.max_append_bytes}")
        return batch

    def _fail_pending_calls(self) -> None:
        with self._calls_lock:
            calls, self._calls = self._calls, set()
        for call in calls:
            call.done(None, FAIL_REASON.REQUEST_DENIED)

    def _not_active(self) -> NotActiveError:
        leader = self.leader()
        return NotActiveError(self.node_id, *(leader if leader else (None, None)))

    # --- queries ---------------------------------------------------------------------------------

    def is_active(self) -> bool:
        """Raft leader of the current term with its own marker for that term applied."""
        return self._active_term is not None and not self._closed

    def leader(self) -> tuple[int, str] | None:
        """``(node_id, address)`` of the Raft leader this node knows of (may be stale), or ``None``."""
        address = self._view.leader_address
        if address is None or self._closed or address not in self._node_by_address:
            return None
        return self._node_by_address[address], address

    def wait_until_active(self, timeout_s: float) -> bool:
        with self._cond:
            self._cond.wait_for(lambda: self.is_active() or self._closed, timeout_s)
            return self.is_active()

    def wait_for_offset(self, offset: int, timeout_s: float) -> bool:
        """Wait until the record at ``offset`` is applied here (``end_offset > offset``): long polls."""
        with self._cond:
            self._cond.wait_for(lambda: self._state.end_offset > offset or self._closed, timeout_s)
            return self._state.end_offset > offset

    def records_from(
        self, offset: int, *, max_records: int = 1000, max_bytes: int = 1 << 20
    ) -> list[LogEntry] | NeedsSnapshot:
        """Local, committed records (see :meth:`MetadataLogState.records_from`); not linearizable."""
        with self._cond:
            return self._state.records_from(offset, max_records=max_records, max_bytes=max_bytes)

    def snapshot(self) -> SnapshotView:
        with self._cond:
            return self._state.snapshot()

    @property
    def end_offset(self) -> int:
        with self._cond:
            return self._state.end_offset

    @property
    def log_start_offset(self) -> int:
        with self._cond:
            return self._state.log_start_offset

    def status(self) -> QuorumStatus:
        view = self._view
        with self._cond:
            state = self._state
            metadata_term, active_node_id = state.term, state.active_node_id
            end_offset, log_start = state.end_offset, state.log_start_offset
        leader = self.leader()
        voters = tuple(
            VoterStatus(
                nid,
                addr,
                None if nid == self.node_id else addr in view.connected,
                view.match_index.get(addr),
            )
            for nid, addr in self.voters.items()
        )
        return QuorumStatus(
            node_id=self.node_id,
            raft_term=view.term,
            role="stopped" if self._closed or self._fatal else view.role,
            leader_id=leader[0] if leader else None,
            leader_address=leader[1] if leader else None,
            active=self.is_active(),
            active_node_id=active_node_id,
            metadata_term=metadata_term,
            commit_index=view.commit_index,
            last_applied=view.last_applied,
            end_offset=end_offset,
            log_start_offset=log_start,
            voters=voters,
            failure=None if self._fatal is None else repr(self._fatal),
        )

    def force_log_compaction(self) -> None:
        """Ask pysyncobj for a full dump and journal compaction at its next tick (tests, operators)."""
        if self._raft is not None:
            self._raft.forceLogCompaction()


class _Applier:
    """What pysyncobj's replicated methods call: the quorum's apply functions, nothing else."""

    def __init__(self, quorum: MetadataQuorum) -> None:
        self._quorum = quorum

    def apply_append(
        self, request_id: bytes, term: int, payloads: list[bytes], expected_base_offset: int = -1
    ) -> AppendResult:
        return self._quorum._apply_append(request_id, term, payloads, expected_base_offset)

    def apply_leader_change(self, term: int, node_id: int, payload: bytes) -> AppendResult:
        return self._quorum._apply_leader_change(term, node_id, payload)
