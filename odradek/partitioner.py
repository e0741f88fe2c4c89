"""Choosing a partition: Kafka's murmur2 for keyed records, sticky partitioning for the others.

Keyed records go to ``toPositive(murmur2(keyBytes)) % numPartitions``, byte for byte what Kafka's Java
client computes (``BuiltInPartitioner.partitionForKey``), so a key lands on the same partition whichever
client produced it. Records without a key (or all records with ``partitioner.ignore.keys``) follow
KIP-480's sticky partitioner: they stick to one partition until its batch is full or sent, then
switch to another one chosen at random among the partitions that have a leader (all partitions when
none has), so batches fill up instead of spreading one record per partition.
"""

from __future__ import annotations

import random
import struct
import threading
from collections.abc import Sequence

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF
_WORDS: dict[int, struct.Struct] = {}


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2``: a 32-bit MurmurHash2 with Kafka's seed, returned as a signed int32."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    n4 = length >> 2
    if n4:
        words = _WORDS.get(n4)
        if words is None:
            words = _WORDS[n4] = struct.Struct(f"<{n4}I")
        for k in words.unpack_from(data):
            k = (k * _M) & _MASK
            k ^= k >> 24
            k = (k * _M) & _MASK
            h = ((h * _M) & _MASK) ^ k
    tail = length & 3
    if tail:
        base = length - tail
        if tail == 3:
            h ^= data[base + 2] << 16
        if tail >= 2:
            h ^= data[base + 1] << 8
        h ^= data[base]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(number: int) -> int:
    """Kafka's ``Utils.toPositive``: clear the sign bit of an int32."""
    return number & 0x7FFFFFFF


def partition_for_key(key: bytes, num_partitions: int) -> int:
    """The partition Kafka's Java client picks for ``key``."""
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


class StickyPartitioner:
    """KIP-480's sticky choice for records without a key, per topic.

    ``partition`` returns the topic's current sticky partition (choosing one the first time). When a
    record for it would open a new batch (the current one is full or was sent), the producer calls
    ``on_new_batch`` with that partition, which moves the topic to another partition, chosen at random
    among ``available`` (those with a leader; all when none has one), excluding the previous one when
    there is a choice.

    Thread-safe: the fast path is one dict lookup; switching takes a lock.
    """

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()
        self._lock = threading.Lock()
        self._current: dict[str, int] = {}

    def partition(self, topic: str, num_partitions: int, available: Sequence[int]) -> int:
        current = self._current.get(topic)
        if current is not None and current < num_partitions:
            return current
        with self._lock:
            return self._switch(topic, num_partitions, available, -1)

    def on_new_batch(self, topic: str, num_partitions: int, available: Sequence[int], previous: int) -> int:
        """The partition to use instead of ``previous``, whose batch is full or gone."""
        with self._lock:
            current = self._current.get(topic)
            if current is not None and current != previous and current < num_partitions:
                return current  # another thread switched already
            return self._switch(topic, num_partitions, available, previous)

    def _switch(self, topic: str, num_partitions: int, available: Sequence[int], previous: int) -> int:
        pool = [p for p in available if p < num_partitions] or list(range(num_partitions))
        if len(pool) > 1 and previous in pool:
            pool.remove(previous)
        choice = pool[self._rng.randrange(len(pool))]
        self._current[topic] = choice
        return choice

    def current(self, topic: str) -> int | None:
        return self._current.get(topic)
