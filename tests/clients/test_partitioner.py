"""Partitioning: Kafka's murmur2 for keys (the same partition as the Java client), KIP-480 sticky otherwise."""

from __future__ import annotations

import random
import warnings

import pytest
from hypothesis import given
from hypothesis import strategies as st

from odradek.partitioner import StickyPartitioner, murmur2, partition_for_key, to_positive

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)  # kafka-python 3.0.12 on Python 3.11
    from kafka.partitioner.default import murmur2 as kafka_python_murmur2

# Kafka's own vectors: clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java, testMurmur2.
KAFKA_VECTORS = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
]


@pytest.mark.parametrize(("key", "expected"), KAFKA_VECTORS)
def test_murmur2_matches_kafkas_vectors(key: bytes, expected: int) -> None:
    assert murmur2(key) == expected


@given(st.binary(max_size=300))
def test_murmur2_matches_kafka_python(key: bytes) -> None:
    """kafka-python returns the unsigned 32-bit value; ours is Java's signed int."""
    assert murmur2(key) & 0xFFFFFFFF == kafka_python_murmur2(key)
    assert -(2**31) <= murmur2(key) < 2**31


@given(st.binary(max_size=64), st.integers(min_value=1, max_value=1000))
def test_partition_for_key_is_javas_formula(key: bytes, partitions: int) -> None:
    expected = (kafka_python_murmur2(key) & 0x7FFFFFFF) % partitions
    assert partition_for_key(key, partitions) == expected
    assert partition_for_key(key, partitions) == to_positive(murmur2(key)) % partitions


def test_empty_key_hashes_too() -> None:
    assert murmur2(b"") & 0xFFFFFFFF == kafka_python_murmur2(b"")
    assert 0 <= partition_for_key(b"", 7) < 7


def test_sticky_stays_until_told_to_move() -> None:
    sticky = StickyPartitioner(random.Random(1))
    first = sticky.partition("t", 6, range(6))
    assert all(sticky.partition("t", 6, range(6)) == first for _ in range(100))
    second = sticky.on_new_batch("t", 6, range(6), first)
    assert second != first
    assert sticky.partition("t", 6, range(6)) == second


def test_sticky_switch_is_idempotent_for_the_same_full_partition() -> None:
    """Two threads that both saw the old partition full switch once, to the same new one."""
    sticky = StickyPartitioner(random.Random(2))
    first = sticky.partition("t", 4, range(4))
    moved = sticky.on_new_batch("t", 4, range(4), first)
    assert sticky.on_new_batch("t", 4, range(4), first) == moved


def test_sticky_prefers_partitions_with_a_leader() -> None:
    sticky = StickyPartitioner(random.Random(3))
    chosen = set()
    previous = sticky.partition("t", 8, [2, 5])
    chosen.add(previous)
    for _ in range(50):
        previous = sticky.on_new_batch("t", 8, [2, 5], previous)
        chosen.add(previous)
    assert chosen == {2, 5}


def test_sticky_uses_all_partitions_when_none_has_a_leader() -> None:
    sticky = StickyPartitioner(random.Random(4))
    seen = {sticky.partition("t", 3, [])}
    previous = next(iter(seen))
    for _ in range(60):
        previous = sticky.on_new_batch("t", 3, [], previous)
        seen.add(previous)
    assert seen == {0, 1, 2}


def test_sticky_single_partition_stays() -> None:
    sticky = StickyPartitioner(random.Random(5))
    assert sticky.partition("t", 1, [0]) == 0
    assert sticky.on_new_batch("t", 1, [0], 0) == 0


def test_sticky_rechooses_when_partitions_shrink_from_view() -> None:
    sticky = StickyPartitioner(random.Random(6))
    sticky.partition("t", 10, range(10))
    sticky.on_new_batch("t", 10, range(10), sticky.current("t") or 0)
    assert sticky.partition("t", 1, [0]) == 0


def test_sticky_spreads_over_time() -> None:
    sticky = StickyPartitioner(random.Random(7))
    counts = [0] * 4
    partition = sticky.partition("t", 4, range(4))
    for _ in range(4000):
        counts[partition] += 1
        partition = sticky.on_new_batch("t", 4, range(4), partition)
    assert min(counts) > 800
