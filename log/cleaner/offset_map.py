"""The cleaner's offset map: key -> offset of its latest record in the dirty section. Pure.

Kafka's ``SkimpyOffsetMap`` stores a 16-byte MD5 of each key and an 8-byte offset in a fixed buffer
(``log.cleaner.dedupe.buffer.size``). Here a dict keyed by the key bytes themselves does the job: no
hash collisions to reason about, and lookups cost one dict probe. The capacity is still counted in
entries the Kafka way (buffer size / 24 bytes x load factor, see :class:`~log.cleaner.plan.CleanerConfig`);
the memory per entry is the key's size plus Python's overhead (~100 bytes), not 24 bytes.

The map is filled batch by batch (:meth:`OffsetMap.add_batch`); when it is full it takes no more
batches, and :attr:`latest_offset` says how far it got: the cleaner then cleans up to there and the next
pass starts from there.
"""

from __future__ import annotations

from collections.abc import Mapping

from log.cleaner.keyscan import record_keys
from log.record.header import BatchHeader

NO_OFFSET = -1


class OffsetMap:
    """Latest offset per key, with a capacity in entries. Not thread-safe: one per cleaning pass."""

    def __init__(self, max_entries: int) -> None:
        if max_entries < 1:
            raise ValueError(f"an offset map needs room for at least one key, not {max_entries}")
        self.max_entries = max_entries
        self._offsets: dict[bytes, int] = {}
        self.latest_offset = NO_OFFSET  # last offset of the last batch added
        self.records_read = 0

    def __len__(self) -> int:
        return len(self._offsets)

    @property
    def is_full(self) -> bool:
        return len(self._offsets) >= self.max_entries

    def get(self, key: bytes) -> int:
        """The latest offset of ``key``, or -1 when the map has not seen it."""
        return self._offsets.get(key, NO_OFFSET)

    def latest_offsets(self) -> Mapping[bytes, int]:
        """The map itself, read-only, for lookups in a tight loop (``.get(key, -1)``)."""
        return self._offsets

    def put(self, key: bytes, offset: int) -> None:
        if offset < self.latest_offset:
            raise ValueError(f"offset {offset} goes back: the map reached {self.latest_offset}")
        self._offsets[key] = offset
        self.latest_offset = offset

    def add_batch(self, batch: bytes, header: BatchHeader, *, keys: bool = True) -> bool:
        """Note every keyed record of one batch; False (nothing added) when the map is full.

        Control batches (transaction markers) carry no user keys and are skipped; so are records
        without a key, which the cleaner removes, and every record with ``keys`` False (a batch of an
        aborted transaction: only its offsets count). A batch may take the map past its capacity: a pass
        always makes progress.
        """
        if self.is_full:
            return False
        if keys and not header.is_control and header.records_count:
            records = record_keys(batch, header)
            offsets = self._offsets
            for key, offset in records:
                if key is not None:
                    offsets[key] = offset
            self.records_read += len(records)
        self.latest_offset = max(self.latest_offset, header.last_offset)
        return True
