"""A follower's log under pysyncobj's own append_entries handler: re-sent entries, stale tails, conflicts.

pysyncobj 0.3.17 calls ``deleteEntriesFrom`` and then ``add`` for every append_entries that starts before
the follower's last entry, and it sends such messages all the time (its leader moves ``next_index`` back
on each acknowledgement, and a message carries at most ``appendEntriesBatchSizeBytes``). These tests feed
messages straight to a real pysyncobj follower, built as the driver builds it (our journal, our
transport), and check its log, its commit index and its votes against Raft's rules (Figure 2):

- AppendEntries 3/4: an existing entry is deleted only when a new one conflicts with it;
- AppendEntries 5: commitIndex = min(leaderCommit, index of the last new entry);
- RequestVote: a vote only for a candidate whose log is at least as up to date as the voter's.

No Raft thread runs and no partner listens: the follower only binds its port (a free one).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pysyncobj import SyncObjConf
from pysyncobj.node import TCPNode

from controller.ports import free_ports
from controller.raft.journal import DurableJournal, provide_journal
from controller.raft.node import AckFlushingTransport, RaftNode
from controller.raft.patches import cap_leader_commit, install_log_filter
from controller.raft.state import AppendResult
from controller.raft.tuning import QuorumTuning, syncobj_conf_kwargs

Entry = tuple[bytes, int, int]


def entry(idx: int, term: int, tag: str = "") -> Entry:
    return (b"cmd-%d%s" % (idx, tag.encode()), idx, term)


def log_of(terms: dict[int, int]) -> list[Entry]:
    """Entries 1..n, entry i of term ``terms[i]``."""
    return [entry(i, terms[i]) for i in sorted(terms)]


class NeverApplied:
    """The follower is never ticked, so nothing is applied."""

    def apply_append(
        self, request_id: bytes, term: int, payloads: list[bytes], expected_base_offset: int = -1
    ) -> AppendResult:
        raise AssertionError("applied without a tick")

    def apply_leader_change(self, term: int, node_id: int, payload: bytes) -> AppendResult:
        raise AssertionError("applied without a tick")


class RecordingTransport(AckFlushingTransport):  # type: ignore[misc]
    """The driver's transport; what the follower sends is recorded (nobody listens)."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        self.sent: list[dict[str, Any]] = []
        super().__init__(*args, **kw)

    def send(self, node: Any, message: Any) -> bool:
        self.sent.append(message)
        return bool(super().send(node, message))


class Follower:
    def __init__(self, root: Path, log: list[Entry], term: int, commit_index: int) -> None:
        self.path = str(root / "raft.journal")
        journal = DurableJournal(self.path, fsync=False)
        for e in log:
            journal.add(*e)
        journal.setCurrentTerm(term, None)
        journal.setRaftCommitIndex(commit_index)
        self.journal = journal
        me, self.leader, self.candidate = (f"127.0.0.1:{p}" for p in free_ports(3))
        conf = SyncObjConf(
            **syncobj_conf_kwargs(
                QuorumTuning(fsync=False),
                password=None,
                journal_path=self.path,
                dump_path=str(root / "raft.dump"),
                bind_address=me,
            )
        )
        transport = functools.partial(RecordingTransport, before_ack=lambda: True)
        with provide_journal(journal):
            self.raft = RaftNode(NeverApplied(), me, [self.leader, self.candidate], conf, transport)
        assert self.raft._SyncObj__raftLog is journal
        self.transport: RecordingTransport = self.raft._SyncObj__transport

    def receive(self, sender: str, message: dict[str, Any]) -> list[dict[str, Any]]:
        """Deliver ``message`` as the transport does; return what the follower sent back."""
        self.transport.sent.clear()
        self.transport._onMessageReceived(TCPNode(sender), message)
        return list(self.transport.sent)

    def append_entries(self, term: int, prev: Entry, entries: list[Entry], commit_index: int) -> list[dict[str, Any]]:
        return self.receive(
            self.leader,
            {
                "type": "append_entries",
                "term": term,
                "commit_index": commit_index,
                "entries": entries,
                "prevLogIdx": prev[1],
                "prevLogTerm": prev[2],
            },
        )

    def votes_for(self, term: int, last_log_index: int, last_log_term: int) -> bool:
        sent = self.receive(
            self.candidate,
            {"type": "request_vote", "term": term, "last_log_index": last_log_index, "last_log_term": last_log_term},
        )
        return any(m["type"] == "response_vote" for m in sent)

    @property
    def log(self) -> list[Entry]:
        return list(self.journal[:])

    @property
    def commit_index(self) -> int:
        return int(self.raft.raftCommitIndex)

    def on_disk(self) -> list[Entry]:
        self.journal.flush()
        again = DurableJournal(self.path, fsync=False)
        try:
            return list(again[:])
        finally:
            again._destroy()

    def close(self) -> None:
        self.raft.destroy()


@pytest.fixture
def follower(tmp_path: Path) -> Iterator[Any]:
    made: list[Follower] = []

    def make(log: list[Entry], term: int, commit_index: int) -> Follower:
        root = tmp_path / f"follower-{len(made)}"
        root.mkdir()
        f = Follower(root, log, term, commit_index)
        made.append(f)
        return f

    yield make
    for f in made:
        f.close()


def acknowledged(sent: list[dict[str, Any]]) -> int | None:
    """The index the follower acknowledged (next_node_idx - 1), None if it refused the message."""
    [reply] = [m for m in sent if m["type"] == "next_node_idx"]
    return int(reply["next_node_idx"]) - 1 if reply["success"] else None


# --- re-sent entries ------------------------------------------------------------------------------


def test_a_resent_prefix_keeps_the_entries_after_it(follower: Any) -> None:
    """The leader of term 2 re-sends 6..7 (next_index moved back) to a follower holding 1..10 of term 2,
    all acknowledged, 1..8 committed and applied: nothing may go, the file is not touched."""
    f = follower(log_of(dict.fromkeys(range(1, 11), 2)), term=2, commit_index=8)
    before = f.on_disk()
    sent = f.append_entries(2, prev=entry(5, 2), entries=[entry(6, 2), entry(7, 2)], commit_index=8)
    assert acknowledged(sent) == 7
    assert f.log == before
    assert f.commit_index == 8
    assert f.on_disk() == before
    # It still votes as the holder of 1..10: not for a candidate that lacks 9 and 10.
    assert not f.votes_for(3, last_log_index=8, last_log_term=2)
    assert f.votes_for(3, last_log_index=10, last_log_term=2)


def test_entries_acknowledged_to_an_earlier_leader_survive_a_partial_resend(follower: Any) -> None:
    """A follower acknowledged 6..10 of term 2 (possibly committed by that leader: a majority has them,
    this node included). The leader of term 3 sends 6..7 only (its batch limit): 8..10 do not conflict
    with anything sent, so they stay, in the log the follower votes with."""
    f = follower(log_of({**dict.fromkeys(range(1, 6), 1), **dict.fromkeys(range(6, 11), 2)}), term=2, commit_index=5)
    sent = f.append_entries(3, prev=entry(5, 1), entries=[entry(6, 2), entry(7, 2)], commit_index=5)
    assert acknowledged(sent) == 7
    assert [e[1] for e in f.log] == list(range(1, 11))
    assert not f.votes_for(4, last_log_index=7, last_log_term=2)  # a candidate without 8..10
    assert f.votes_for(5, last_log_index=10, last_log_term=2)


def test_a_heartbeat_before_the_last_entry_deletes_nothing(follower: Any) -> None:
    f = follower(log_of(dict.fromkeys(range(1, 8), 1)), term=1, commit_index=3)
    sent = f.append_entries(1, prev=entry(4, 1), entries=[], commit_index=3)
    assert acknowledged(sent) == 4
    assert [e[1] for e in f.log] == list(range(1, 8))


# --- stale tails and Raft's commit rule -----------------------------------------------------------


def test_a_stale_tail_is_kept_but_never_committed(follower: Any) -> None:
    """The follower's 8..10 (term 2) were never committed; the leader of term 3 replaced them with its own
    entries and committed up to 9. A message with 6..7 proves nothing about 8..10: the follower must not
    commit (apply) them, Raft's rule is min(leaderCommit, last new entry) = 7. They go when the leader's
    8 arrives."""
    stale = {**dict.fromkeys(range(1, 6), 1), **dict.fromkeys(range(6, 11), 2)}
    f = follower(log_of(stale), term=2, commit_index=5)
    sent = f.append_entries(3, prev=entry(5, 1), entries=[entry(6, 2), entry(7, 2)], commit_index=9)
    assert acknowledged(sent) == 7
    assert f.commit_index == 7
    assert [e[1] for e in f.log] == list(range(1, 11))  # not contradicted yet

    new = [entry(8, 3, "'"), entry(9, 3, "'")]
    sent = f.append_entries(3, prev=entry(7, 2), entries=new, commit_index=9)
    assert acknowledged(sent) == 9
    assert f.log == log_of(stale)[:7] + new
    assert f.commit_index == 9
    assert f.on_disk() == f.log  # the file lost 8..10 too


def test_a_refused_message_commits_nothing(follower: Any) -> None:
    f = follower(log_of({**dict.fromkeys(range(1, 6), 1), **dict.fromkeys(range(6, 9), 2)}), term=2, commit_index=3)
    sent = f.append_entries(3, prev=entry(7, 3), entries=[entry(8, 3)], commit_index=8)  # 7 is of term 2 here
    assert acknowledged(sent) is None
    assert f.commit_index == 3
    assert [e[1] for e in f.log] == list(range(1, 9))


def test_a_conflict_deletes_from_there_on(follower: Any) -> None:
    f = follower(log_of({**dict.fromkeys(range(1, 4), 1), **dict.fromkeys(range(4, 9), 2)}), term=2, commit_index=3)
    sent = f.append_entries(4, prev=entry(3, 1), entries=[entry(4, 2), entry(5, 4, "'")], commit_index=5)
    assert acknowledged(sent) == 5
    assert f.log == [entry(1, 1), entry(2, 1), entry(3, 1), entry(4, 2), entry(5, 4, "'")]
    assert f.commit_index == 5
    assert f.on_disk() == f.log


# --- the cap itself -------------------------------------------------------------------------------


def test_cap_leader_commit() -> None:
    ae = {"type": "append_entries", "term": 3, "commit_index": 9, "prevLogIdx": 5, "prevLogTerm": 1}
    assert cap_leader_commit({**ae, "entries": [entry(6, 2), entry(7, 2)]})["commit_index"] == 7
    assert cap_leader_commit({**ae, "entries": []})["commit_index"] == 5
    assert cap_leader_commit({**ae, "commit_index": 4, "entries": [entry(6, 2)]})["commit_index"] == 4
    assert cap_leader_commit({**ae, "transmission": "finish", "data": b""})["commit_index"] == 6
    assert cap_leader_commit({**ae, "transmission": "start", "data": b""})["commit_index"] == 5
    original = {**ae, "entries": [entry(6, 2)]}
    cap_leader_commit(original)
    assert original["commit_index"] == 9  # a copy is changed, not the message
    # Messages without a previous entry (a snapshot, a reset) and other types pass unchanged.
    snapshot = {"type": "append_entries", "term": 3, "commit_index": 9, "serialized": None}
    assert cap_leader_commit(snapshot) is snapshot
    unknown_prev = {**ae, "prevLogIdx": None, "prevLogTerm": None, "entries": []}
    assert cap_leader_commit(unknown_prev) is unknown_prev
    vote = {"type": "request_vote", "term": 3, "last_log_index": 1, "last_log_term": 1}
    assert cap_leader_commit(vote) is vote
    assert cap_leader_commit(["status"]) == ["status"]


def test_a_committed_entry_replaced_is_reported(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    journal = DurableJournal(str(tmp_path / "j"), fsync=False)
    for e in log_of(dict.fromkeys(range(1, 5), 1)):
        journal.add(*e)
    journal.setRaftCommitIndex(3)
    with caplog.at_level(logging.CRITICAL, logger="controller.raft.journal"):
        journal.add(*entry(3, 2))
    assert "Raft safety violated" in caplog.text
    assert list(journal[:]) == [entry(1, 1), entry(2, 1), entry(3, 2)]
    journal._destroy()


def test_pysyncobjs_resend_message_is_debug_only(follower: Any, caplog: pytest.LogCaptureFixture) -> None:
    """pysyncobj logs CRITICAL "truncating already-applied log entries" for every re-send: nothing is
    truncated (the journal deletes nothing), so the message shows only where DEBUG is enabled."""
    f = follower(log_of(dict.fromkeys(range(1, 11), 2)), term=2, commit_index=8)
    f.raft._SyncObj__raftLastApplied = 8  # as if 1..8 were applied
    install_log_filter()  # as importing the driver does
    pysyncobj_log = logging.getLogger("pysyncobj.syncobj")
    level = pysyncobj_log.level
    caplog.set_level(logging.DEBUG)  # the capturing handler takes everything that reaches it
    try:
        pysyncobj_log.setLevel(logging.WARNING)  # as the controller process sets it
        assert acknowledged(f.append_entries(2, prev=entry(5, 2), entries=[entry(6, 2)], commit_index=8)) == 6
        assert not [r for r in caplog.records if "truncating" in r.getMessage()]
        pysyncobj_log.setLevel(logging.DEBUG)
        assert acknowledged(f.append_entries(2, prev=entry(5, 2), entries=[entry(6, 2)], commit_index=8)) == 6
        [record] = [r for r in caplog.records if "truncating" in r.getMessage()]
        assert record.levelno == logging.DEBUG
    finally:
        pysyncobj_log.setLevel(level)
    assert len(f.log) == 10
