"""The Fetch response, v4-v12, encoded by hand so that record bytes can be file regions (sendfile).

Layout (Kafka's FetchResponse.json; v12 is flexible: compact arrays and strings, uvarint length + 1,
0 for null, and an empty tagged-field section after every struct)::

    int32   throttle_time_ms
    int16   error_code                      v7+
    int32   session_id                      v7+
    array   responses
      string  topic
      array   partitions
        int32   partition_index
        int16   error_code
        int64   high_watermark
        int64   last_stable_offset
        int64   log_start_offset            v5+
        array?  aborted_transactions        null, or (int64 producer_id, int64 first_offset) each
        int32   preferred_read_replica      v11+
        bytes?  records                     empty (never null) when none, as Kafka sends
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from broker.kafka.api import FileRegion
from broker.kafka.codec import error_code

I16 = struct.Struct(">h")
I32 = struct.Struct(">i")
PARTITION_HEAD = struct.Struct(
    ">i"  # partition_index
    "h"  # error_code
    "q"  # high_watermark
    "q"  # last_stable_offset
)
I64 = struct.Struct(">q")
FIRST_FLEXIBLE = 12
NO_READ_REPLICA = -1


@dataclass(slots=True)
class PartitionResult:
    topic: str
    partition: int
    error: str = ""
    high_watermark: int = -1
    log_start_offset: int = -1
    records: bytes | FileRegion | None = None
    last_stable_offset: int = -1  # -1: the high watermark (read_uncommitted)
    aborted: tuple[tuple[int, int], ...] = ()  # read_committed: (producer_id, first_offset)

    @property
    def size(self) -> int:
        if self.records is None:
            return 0
        return self.records.size if isinstance(self.records, FileRegion) else len(self.records)


def uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_response(
    version: int, results: list[PartitionResult], *, read_committed: bool = False, error: str = "",
    session_id: int = 0,
) -> list[bytes | FileRegion]:  # fmt: skip
    """The response body as parts (bytes, and file regions for record bytes)."""
    flexible = version >= FIRST_FLEXIBLE
    parts: list[bytes | FileRegion] = []
    head = bytearray(I32.pack(0))  # throttle_time_ms
    if version >= 7:
        head += I16.pack(error_code(error)) + I32.pack(session_id)
    topics: list[tuple[str, list[PartitionResult]]] = []
    for r in results:
        if not topics or topics[-1][0] != r.topic:
            topics.append((r.topic, []))
        topics[-1][1].append(r)
    head += _array_length(len(topics), flexible)
    for topic, partitions in topics:
        name = topic.encode()
        head += (uvarint(len(name) + 1) if flexible else I16.pack(len(name))) + name
        head += _array_length(len(partitions), flexible)
        for r in partitions:
            lso = r.last_stable_offset if r.last_stable_offset >= 0 else r.high_watermark
            head += PARTITION_HEAD.pack(r.partition, error_code(r.error), r.high_watermark, lso)
            if version >= 5:
                head += I64.pack(r.log_start_offset)
            if read_committed:
                head += _array_length(len(r.aborted), flexible)
                for producer_id, first_offset in r.aborted:
                    head += I64.pack(producer_id) + I64.pack(first_offset)
                    if flexible:
                        head += b"\x00"  # aborted transaction tagged fields
            else:
                head += _null_array(flexible)
            if version >= 11:
                head += I32.pack(NO_READ_REPLICA)
            size = r.size
            if r.records is None:  # empty, not null: Kafka sends empty records, and librdkafka < 2.1 rejects -1
                head += uvarint(1) if flexible else I32.pack(0)
            else:
                head += uvarint(size + 1) if flexible else I32.pack(size)
                parts.append(bytes(head))
                parts.append(r.records)
                head = bytearray()
            if flexible:
                head += b"\x00"  # partition tagged fields
        if flexible:
            head += b"\x00"  # topic tagged fields
    if flexible:
        head += b"\x00"  # response tagged fields
    parts.append(bytes(head))
    return parts


def _array_length(n: int, flexible: bool) -> bytes:
    return uvarint(n + 1) if flexible else I32.pack(n)


def _null_array(flexible: bool) -> bytes:
    return b"\x00" if flexible else I32.pack(-1)
