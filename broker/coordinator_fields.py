"""The field encoding of the coordinators' internal topics (``__consumer_offsets``: ``broker/group/records.py``;
``__transaction_state``: ``broker/txn/records.py``): Kafka's protocol primitives, big-endian::

    int8 / int16 / int32 / int64   signed, big-endian
    string                         int16 length + UTF-8 bytes (at most 32767 bytes)
    [T]                            int32 count, then the elements (-1: null, where a field allows it)
    partitions                     [topic string, [partition int32]], topics and partitions sorted on write

One writer and one reader serve both codecs; a key or value that does not parse raises
:class:`RecordFormatError`, naming what was read and the byte where it went wrong.
"""

from __future__ import annotations

import struct
from collections import defaultdict
from collections.abc import Iterable

I8 = struct.Struct(">b")
I16 = struct.Struct(">h")
I32 = struct.Struct(">i")
I64 = struct.Struct(">q")
MAX_STRING_BYTES = 32767  # int16 length

TopicPartition = tuple[str, int]


class RecordFormatError(ValueError):
    """A coordinator record's key or value that does not parse."""


class FieldWriter:
    """Appends fields; :meth:`bytes` joins them. Every method returns the writer, so calls chain."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def pack(self, layout: struct.Struct, *values: int) -> FieldWriter:
        self._parts.append(layout.pack(*values))
        return self

    def i8(self, v: int) -> FieldWriter:
        return self.pack(I8, v)

    def i16(self, v: int) -> FieldWriter:
        return self.pack(I16, v)

    def i32(self, v: int) -> FieldWriter:
        return self.pack(I32, v)

    def i64(self, v: int) -> FieldWriter:
        return self.pack(I64, v)

    def string(self, s: str) -> FieldWriter:
        data = s.encode("utf-8")
        if len(data) > MAX_STRING_BYTES:
            raise ValueError(f"string of {len(data)} bytes is longer than {MAX_STRING_BYTES}")
        self._parts.append(I16.pack(len(data)))
        self._parts.append(data)
        return self

    def strings(self, items: Iterable[str]) -> FieldWriter:
        seq = list(items)
        self.i32(len(seq))
        for s in seq:
            self.string(s)
        return self

    def partitions(self, tps: Iterable[TopicPartition]) -> FieldWriter:
        by_topic: dict[str, list[int]] = defaultdict(list)
        for topic, number in tps:
            by_topic[topic].append(number)
        self.i32(len(by_topic))
        for topic in sorted(by_topic):
            self.string(topic)
            numbers = sorted(by_topic[topic])
            self.i32(len(numbers))
            for n in numbers:
                self.i32(n)
        return self

    def bytes(self) -> bytes:
        return b"".join(self._parts)


class FieldReader:
    """Reads fields from ``data`` in order; ``what`` names the key or value in errors."""

    def __init__(self, data: bytes, what: str) -> None:
        self._data = data
        self._pos = 0
        self._what = what

    def take(self, layout: struct.Struct) -> tuple[int, ...]:
        if self._pos + layout.size > len(self._data):
            raise RecordFormatError(f"{self._what}: truncated at byte {self._pos}")
        values = layout.unpack_from(self._data, self._pos)
        self._pos += layout.size
        return tuple(int(v) for v in values)

    def i8(self) -> int:
        return self.take(I8)[0]

    def i16(self) -> int:
        return self.take(I16)[0]

    def i32(self) -> int:
        return self.take(I32)[0]

    def i64(self) -> int:
        return self.take(I64)[0]

    def count(self, nullable: bool = False) -> int:
        """An array's element count; a null array (-1, where ``nullable``) reads as empty."""
        n = self.i32()
        if n == -1 and nullable:
            return 0
        if n < 0 or n > len(self._data) - self._pos:
            raise RecordFormatError(f"{self._what}: bad array length {n} at byte {self._pos - 4}")
        return n

    def string(self) -> str:
        n = self.i16()
        if n < 0 or self._pos + n > len(self._data):
            raise RecordFormatError(f"{self._what}: bad string length {n} at byte {self._pos - 2}")
        raw = self._data[self._pos : self._pos + n]
        self._pos += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise RecordFormatError(f"{self._what}: string is not UTF-8: {exc}") from None

    def strings(self) -> tuple[str, ...]:
        return tuple(self.string() for _ in range(self.count()))

    def partitions(self, nullable: bool = False) -> frozenset[TopicPartition]:
        result: set[TopicPartition] = set()
        for _ in range(self.count(nullable)):
            topic = self.string()
            for _ in range(self.count()):
                result.add((topic, self.i32()))
        return frozenset(result)

    def end(self) -> None:
        if self._pos != len(self._data):
            raise RecordFormatError(f"{self._what}: {len(self._data) - self._pos} bytes after the last field")
