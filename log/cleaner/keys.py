"""The append-time rule of compacted topics: every record needs a key (Kafka's ``LogValidator``).

Kafka rejects a produce to a compacted topic holding a record without a key with INVALID_RECORD
("Compacted topic cannot accept message without key"). Checking it means decoding the records, which
the broker otherwise never does on the hot path (DESIGN.md). We decide as Kafka does: the leader
decodes batches of compacted topics only (``Log.append`` calls :func:`require_keys` when
``cleanup.policy`` includes ``compact``), one extra CRC pass plus a record decode per produced batch.
Compacted topics are changelogs and offset stores, where this cost is small next to the cleaner's;
other topics pay nothing. Followers do not check (the leader did). Control batches are skipped.
"""

from __future__ import annotations

from log.errors import InvalidRecordError
from log.record.header import iter_batches
from log.record.reader import read_batch


def require_keys(buf: bytes | bytearray | memoryview, where: str) -> None:
    """Raise InvalidRecordError if a non-control record of ``buf`` (whole, validated batches) has no key."""
    for index, (pos, header) in enumerate(iter_batches(buf, validate=False)):
        if header.is_control:
            continue
        _, records = read_batch(buf, pos)
        for record in records:
            if record.key is None:
                raise InvalidRecordError(
                    f"Compacted topic cannot accept message without key in topic partition {where} "
                    f"(batch {index} of the append, record at offset delta {record.offset - header.base_offset})"
                )
