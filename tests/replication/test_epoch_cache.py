"""The leader-epoch cache and its checkpoint file (replication/epoch_cache.py, rules EC1-EC3, Kafka's
``LeaderEpochFileCache``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from log.errors import StorageError
from replication.epoch_cache import (
    CHECKPOINT_NAME,
    UNDEFINED_EPOCH,
    EpochEndOffset,
    EpochEntry,
    LeaderEpochCache,
    load,
    save,
)


def cache_of(*pairs: tuple[int, int]) -> LeaderEpochCache:
    return LeaderEpochCache([EpochEntry(e, o) for e, o in pairs])


def test_ec1_assign_keeps_the_first_start_offset_of_the_latest_epoch() -> None:
    cache = cache_of((0, 0))
    assert not cache.assign(0, 5)
    assert cache.entries == (EpochEntry(0, 0),)


def test_ec1_a_newer_epoch_at_a_smaller_offset_replaces_later_entries() -> None:
    cache = cache_of((0, 0), (1, 10), (2, 20))
    assert cache.assign(3, 15)
    assert cache.entries == (EpochEntry(0, 0), EpochEntry(1, 10), EpochEntry(3, 15))


@given(st.lists(st.tuples(st.integers(0, 20), st.integers(0, 100)), max_size=30))
def test_ec1_entries_strictly_increase_whatever_is_assigned(pairs: list[tuple[int, int]]) -> None:
    cache = LeaderEpochCache()
    for epoch, offset in pairs:
        cache.assign(epoch, offset)
        entries = cache.entries
        assert all(a.leader_epoch < b.leader_epoch for a, b in zip(entries, entries[1:], strict=False))
        assert all(a.start_offset < b.start_offset for a, b in zip(entries, entries[1:], strict=False))


def test_ec2_end_offset_is_the_next_epochs_start_or_the_log_end() -> None:
    cache = cache_of((1, 0), (3, 10), (5, 25))
    assert cache.end_offset_for(1, 40) == EpochEndOffset(1, 10)
    assert cache.end_offset_for(2, 40) == EpochEndOffset(1, 10)
    assert cache.end_offset_for(4, 40) == EpochEndOffset(3, 25)
    assert cache.end_offset_for(5, 40) == EpochEndOffset(5, 40)
    assert cache.end_offset_for(9, 40) == EpochEndOffset(5, 40)


def test_ec2_an_epoch_older_than_every_entry_is_undefined() -> None:
    assert cache_of((3, 0)).end_offset_for(2, 10).undefined
    assert LeaderEpochCache().end_offset_for(0, 0).leader_epoch == UNDEFINED_EPOCH


def test_ec3_truncate_from_end_drops_entries_at_or_after_the_new_end() -> None:
    cache = cache_of((0, 0), (1, 10), (2, 20))
    assert cache.truncate_from_end(10)
    assert cache.entries == (EpochEntry(0, 0),)
    assert not cache.truncate_from_end(10)


def test_ec3_truncate_from_start_moves_the_covering_entry_up() -> None:
    cache = cache_of((0, 0), (1, 10), (2, 20))
    assert cache.truncate_from_start(15)
    assert cache.entries == (EpochEntry(1, 15), EpochEntry(2, 20))
    assert not cache.truncate_from_start(15)


def test_checkpoint_round_trips(tmp_path: Path) -> None:
    cache = cache_of((0, 0), (4, 7))
    save(tmp_path, cache)
    assert (tmp_path / CHECKPOINT_NAME).read_text() == "0\n2\n0 0\n4 7\n"
    assert load(tmp_path).entries == cache.entries


def test_checkpoint_missing_is_empty(tmp_path: Path) -> None:
    assert load(tmp_path).entries == ()


def test_checkpoint_out_of_order_is_a_storage_error(tmp_path: Path) -> None:
    (tmp_path / CHECKPOINT_NAME).write_text("0\n2\n4 7\n0 0\n")
    with pytest.raises(StorageError, match="EC1"):
        load(tmp_path)
