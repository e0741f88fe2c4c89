"""The transaction checkers (``chaos.checker_txn``) on hand-made histories: each anomaly caught alone, and a
clean history (committed, aborted and unknown-outcome transactions, either way) passing every checker."""

from __future__ import annotations

from chaos.checker import check
from tests.chaos.histories import Builder, txn_clean


def kinds(h: Builder) -> dict[str, int]:
    return {a.kind: a.count for a in check(h.ops)}


def test_clean_transactional_history_has_no_anomaly() -> None:
    """The read_committed readers skip the aborted transaction and the unknown one that aborted (no poll-skip
    for them), the read_uncommitted reader reads everything."""
    assert kinds(txn_clean()) == {}


def test_aborted_read() -> None:
    h = txn_clean(rc_readers=1)
    h.reset("rc-reader-1", 0.05)  # transaction 1 was aborted
    committed = [(0, 0, "t0-0-0"), (1, 0, "t0-0-1"), (0, 4, "t0-2-0"), (1, 4, "t0-2-1")]
    h.poll("rc-reader-1", [*committed[:2], (0, 2, "t0-1-0"), *committed[2:]], 8.0)
    found = check(h.ops)
    assert [a.kind for a in found] == ["aborted-read"]
    assert found[0].examples[0]["reader"] == "rc-reader-1"
    assert found[0].examples[0]["values_read"] == ["t0-1-0"]


def test_aborted_values_read_uncommitted_are_fine() -> None:
    h = txn_clean()
    h.poll("reader-1", [(0, 2, "t0-1-0"), (1, 2, "t0-1-1")], 9.0)
    assert kinds(h) == {}


def test_lost_committed_write() -> None:
    h = txn_clean(rc_readers=1)
    h.reset("rc-reader-1", 0.05)  # reads transaction 2 whole, but of transaction 0 only partition 0
    h.poll("rc-reader-1", [(0, 0, "t0-0-0"), (0, 4, "t0-2-0"), (1, 4, "t0-2-1")], 8.0)
    found = check(h.ops)
    assert [a.kind for a in found] == ["lost-committed-write"]
    assert (found[0].examples[0]["reader"], found[0].examples[0]["values_not_read"]) == ("rc-reader-1", ["t0-0-1"])


def test_duplicate_committed_write_read_twice_by_one_reader() -> None:
    h = txn_clean()
    h.reset("rc-reader-0", 8.0)  # a legitimate restart: no nonmonotonic-poll, but the value comes twice
    h.poll("rc-reader-0", [(0, 0, "t0-0-0")], 9.0)
    found = check(h.ops)
    assert [a.kind for a in found] == ["duplicate-committed-write"]
    assert found[0].examples[0]["values_read_twice"] == ["t0-0-0"]


def test_duplicate_committed_write_at_two_offsets() -> None:
    h = txn_clean()
    for reader in ("reader-0", "rc-reader-0", "rc-reader-1"):
        h.poll(reader, [(0, 8, "t0-0-0")], 10.0)  # the log holds it again at offset 8
    assert kinds(h) == {"duplicate": 1, "duplicate-committed-write": 2}


def test_unknown_transaction_seen_in_part_by_one_reader() -> None:
    h = txn_clean(rc_readers=1)
    h.reset("rc-reader-1", 0.05)  # of the unknown transaction 2, only partition 0
    h.poll("rc-reader-1", [(0, 0, "t0-0-0"), (1, 0, "t0-0-1"), (0, 4, "t0-2-0")], 8.0)
    found = check(h.ops)
    assert [a.kind for a in found] == ["partial-transaction"]
    assert found[0].examples[0]["values_read_by"] == {"rc-reader-0": 2, "rc-reader-1": 1}


def test_unknown_transaction_seen_by_one_reader_and_not_another() -> None:
    h = txn_clean(rc_readers=1)
    h.reset("rc-reader-1", 0.05)  # the unknown transaction 2 not at all, whereas rc-reader-0 read it
    h.poll("rc-reader-1", [(0, 0, "t0-0-0"), (1, 0, "t0-0-1")], 8.0)
    assert kinds(h) == {"partial-transaction": 1}


def test_read_committed_reader_skipping_a_committed_record_is_a_poll_skip() -> None:
    h = txn_clean(rc_readers=1)
    h.reset("rc-reader-1", 0.05)  # jumps from offset 0 to 4 of partition 0 ... past a plain record at 2
    h.poll("reader-0", [(0, 9, "a0")], 6.5)
    h.poll("rc-reader-1", [(0, 0, "t0-0-0"), (1, 0, "t0-0-1"), (0, 4, "t0-2-0"), (1, 4, "t0-2-1")], 8.0)
    h.poll("rc-reader-1", [(0, 10, "a1")], 9.0)  # ... and from 4 to 10, past offset 9 that reader-0 read
    h.poll("rc-reader-0", [(0, 9, "a0"), (0, 10, "a1")], 9.5)
    h.poll("reader-0", [(0, 10, "a1")], 9.6)
    assert kinds(h) == {"poll-skip": 1}
