"""The quorum's files: the durable Raft journal, the full dump, the cluster secret (no Raft running)."""

from __future__ import annotations

import os
from pathlib import Path

import pysyncobj.syncobj as pysyncobj_module
import pytest

from controller.raft.dump import Dump, align_journal_with_dump, decode_dump, encode_dump, read_dump_file
from controller.raft.errors import InsecureConfigError, QuorumStorageError
from controller.raft.journal import MAGIC, DurableJournal, provide_journal
from controller.raft.tuning import QuorumTuning, check_secret, load_cluster_secret


def entry(idx: int, term: int = 1) -> tuple[bytes, int, int]:
    return (b"cmd-%d" % idx, idx, term)


def filled(path: Path, count: int, term: int = 1) -> DurableJournal:
    journal = DurableJournal(str(path))
    for i in range(1, count + 1):
        journal.add(*entry(i, term))
    return journal


def reopen(journal: DurableJournal) -> DurableJournal:
    journal._destroy()
    return DurableJournal(journal.path)


def test_entries_and_meta_survive_reopen(tmp_path: Path) -> None:
    journal = filled(tmp_path / "j", 5)
    journal.setCurrentTerm(3, "127.0.0.1:1")
    journal.setRaftCommitIndex(4)
    again = reopen(journal)
    assert list(again[:]) == [entry(i) for i in range(1, 6)]
    assert (again.getCurrentTerm(), again.getVotedForNodeId(), again.getRaftCommitIndex()) == (
        3,
        "127.0.0.1:1",
        4,
    )
    again._destroy()


def test_vote_is_on_disk_when_set_current_term_returns(tmp_path: Path) -> None:
    """Raft §5.1: term and vote are persisted before the vote is sent (no close in between)."""
    journal = DurableJournal(str(tmp_path / "j"))
    journal.setCurrentTerm(7, "127.0.0.1:2")
    other = DurableJournal(str(tmp_path / "j"))  # what a process restarted after a crash would read
    assert (other.getCurrentTerm(), other.getVotedForNodeId()) == (7, "127.0.0.1:2")
    other._destroy()
    journal._destroy()


@pytest.mark.parametrize("tail", [b"\x05\x00", b"\xff" * 30, None])
def test_torn_or_corrupt_tail_is_cut_on_open(tmp_path: Path, tail: bytes | None) -> None:
    """Recovery: the longest valid prefix of frames is kept, the rest cut off the file."""
    journal = filled(tmp_path / "j", 4)
    journal._destroy()
    path = tmp_path / "j"
    good_size = path.stat().st_size
    with open(path, "r+b") as f:
        if tail is None:  # damage the last frame's command: its CRC no longer matches
            f.seek(good_size - 1)
            f.write(b"X")
        else:
            f.seek(0, os.SEEK_END)
            f.write(tail)
    again = DurableJournal(str(path))
    expected = 3 if tail is None else 4
    assert list(again[:]) == [entry(i) for i in range(1, expected + 1)]
    again.add(*entry(expected + 1))
    again = reopen(again)
    assert len(again) == expected + 1
    again._destroy()


def test_foreign_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "j").write_bytes(b"PYSYNCOBJ\0\0\0")
    with pytest.raises(QuorumStorageError, match="not an Odradek Raft journal"):
        DurableJournal(str(tmp_path / "j"))


def test_resent_entries_do_not_touch_the_file(tmp_path: Path) -> None:
    """deleteEntriesFrom + add of some of the same entries (pysyncobj's re-send of a prefix) deletes
    nothing: not the re-sent entries, not the ones after them, not in the file."""
    journal = filled(tmp_path / "j", 6)
    journal.flush()
    before = (tmp_path / "j").read_bytes()
    journal.deleteEntriesFrom(2)  # pysyncobj: prevLogIdx 2, entries 3 and 4
    assert list(journal[:]) == [entry(i) for i in range(1, 7)]
    for i in (3, 4):
        journal.add(*entry(i))
    assert list(journal[:]) == [entry(i) for i in range(1, 7)]
    journal.flush()
    assert journal.fsync_count == 1  # nothing new to sync
    assert (tmp_path / "j").read_bytes() == before
    again = reopen(journal)
    assert list(again[:]) == [entry(i) for i in range(1, 7)]
    again._destroy()


def test_conflicting_entry_really_truncates(tmp_path: Path) -> None:
    """Raft AppendEntries step 3: an entry that conflicts deletes it and all that follow it."""
    journal = filled(tmp_path / "j", 6)
    journal.deleteEntriesFrom(3)  # pysyncobj: prevLogIdx 3, entries from 4
    journal.add(*entry(4, term=2))
    assert list(journal[:]) == [entry(1), entry(2), entry(3), entry(4, term=2)]
    journal.add(*entry(5, term=2))
    again = reopen(journal)
    assert list(again[:]) == [entry(1), entry(2), entry(3), entry(4, term=2), entry(5, term=2)]
    again._destroy()


def test_compaction_keeps_the_tail(tmp_path: Path) -> None:
    journal = filled(tmp_path / "j", 8)
    journal.deleteEntriesTo(5)
    assert [e[1] for e in journal[:]] == [6, 7, 8]
    journal.add(*entry(9))
    again = reopen(journal)
    assert [e[1] for e in again[:]] == [6, 7, 8, 9]
    assert not (tmp_path / "j.compact").exists()
    again._destroy()


def test_clear_and_gap(tmp_path: Path) -> None:
    journal = filled(tmp_path / "j", 3)
    journal.clear()
    journal.add(*entry(10))
    with pytest.raises(QuorumStorageError, match="gap"):
        journal.add(*entry(12))
    again = reopen(journal)
    assert list(again[:]) == [entry(10)]
    assert (tmp_path / "j").read_bytes().startswith(MAGIC)
    again._destroy()


def test_flush_syncs_only_when_something_was_written(tmp_path: Path) -> None:
    journal = DurableJournal(str(tmp_path / "j"))
    journal.flush()
    assert journal.fsync_count == 0
    journal.add(*entry(1))
    journal.flush()
    journal.flush()
    assert journal.fsync_count == 1
    journal._destroy()


def test_provide_journal_only_answers_for_its_path(tmp_path: Path) -> None:
    ours = DurableJournal(str(tmp_path / "ours"))
    with provide_journal(ours):
        assert pysyncobj_module.createJournal(ours.path) is ours
        other = pysyncobj_module.createJournal(None)
    assert type(other).__name__ == "MemoryJournal"
    ours._destroy()


# --- the full dump -------------------------------------------------------------------------------


def dump_at(last: int) -> Dump:
    return Dump(entry(last), entry(last - 1), ("127.0.0.1:1", "127.0.0.1:2"), b"state-bytes")


def test_dump_round_trips_and_detects_damage(tmp_path: Path) -> None:
    dump = dump_at(5)
    assert decode_dump(encode_dump(dump)) == dump
    damaged = bytearray(encode_dump(dump))
    damaged[15] ^= 0x40
    with pytest.raises(QuorumStorageError, match="CRC"):
        decode_dump(bytes(damaged))
    assert read_dump_file(str(tmp_path / "missing")) is None


def test_align_finishes_a_compaction_interrupted_after_the_dump_rename(tmp_path: Path) -> None:
    """The journal still starts before the dump: drop up to the dump's prev entry, keep what follows."""
    journal = filled(tmp_path / "j", 10)
    assert align_journal_with_dump(journal, dump_at(6)) is True
    assert [e[1] for e in journal[:]] == [5, 6, 7, 8, 9, 10]
    assert align_journal_with_dump(journal, dump_at(6)) is False  # already aligned
    journal._destroy()


@pytest.mark.parametrize("last", [12, 2])
def test_align_leaves_journals_it_cannot_align(tmp_path: Path, last: int) -> None:
    """Journal behind the dump (lost unsynced entries) or the dump's entries at its very start: untouched."""
    journal = filled(tmp_path / "j", 10)
    assert align_journal_with_dump(journal, dump_at(last)) is False
    assert len(journal) == 10
    journal._destroy()


# --- configuration -------------------------------------------------------------------------------


def test_no_secret_is_refused_unless_explicitly_insecure() -> None:
    with pytest.raises(InsecureConfigError, match="no cluster secret"):
        check_secret(None, allow_insecure=False)
    check_secret(None, allow_insecure=True)
    with pytest.raises(InsecureConfigError, match="at least"):
        check_secret("short", allow_insecure=True)
    check_secret(b"long-enough-secret", allow_insecure=False)


def test_secret_comes_from_a_file_or_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "secret").write_text("from-the-file\nignored\n")
    monkeypatch.setenv("ODRADEK_CLUSTER_SECRET", "from-the-env")
    assert load_cluster_secret(str(tmp_path / "secret")) == "from-the-file"
    assert load_cluster_secret() == "from-the-env"
    monkeypatch.delenv("ODRADEK_CLUSTER_SECRET")
    assert load_cluster_secret() is None
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(InsecureConfigError, match="empty"):
        load_cluster_secret(str(tmp_path / "empty"))


def test_tuning_rejects_timeouts_pysyncobj_would_assert_on() -> None:
    with pytest.raises(ValueError, match="heartbeat"):
        QuorumTuning(heartbeat_interval_s=0.2, election_timeout_min_s=0.3)
    with pytest.raises(ValueError, match="connection_timeout_s"):
        QuorumTuning(connection_timeout_s=0.5)


def test_the_commit_index_is_saved_with_the_term_and_on_close_only(tmp_path: Path) -> None:
    """pysyncobj's once-a-second timer runs on the Raft thread just before a follower's election check: it
    writes (and fsyncs) nothing. The commit index is volatile in Raft; it goes with the term and vote."""
    journal = filled(tmp_path / "j", 5)
    journal.setCurrentTerm(2, None)
    meta = (tmp_path / "j.meta").read_bytes()
    journal.setRaftCommitIndex(4)
    journal.onOneSecondTimer()
    assert (tmp_path / "j.meta").read_bytes() == meta
    crashed = DurableJournal(journal.path)  # what a restart after a crash reads now
    assert (crashed.getCurrentTerm(), crashed.getRaftCommitIndex()) == (2, 1)
    crashed._destroy()
    journal.setCurrentTerm(3, "127.0.0.1:1")
    crashed = DurableJournal(journal.path)
    assert (crashed.getCurrentTerm(), crashed.getRaftCommitIndex()) == (3, 4)
    crashed._destroy()
    journal.setRaftCommitIndex(5)
    again = reopen(journal)  # a clean close saves it
    assert again.getRaftCommitIndex() == 5
    again._destroy()
