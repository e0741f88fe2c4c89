"""The message browser: records of one partition from an offset, a timestamp, or the newest ones, and their keys,
values and headers shown as text, pretty JSON or hex.

A browse makes its own :class:`odradek.Consumer` (no group: it commits nothing and joins nothing), assigns
the partition, seeks, and polls until it has ``limit`` records, reached the end offset it saw at the
start, or ``BROWSE_TIMEOUT_S`` passed; then closes it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass

from odradek import Consumer, TopicPartition
from odradek.types import ConsumerRecord

BROWSE_TIMEOUT_S = 8.0
MAX_LIMIT = 500
FORMATS = ("auto", "text", "json", "hex")
HEX_PREVIEW_BYTES = 4096


@dataclass(frozen=True, slots=True)
class Rendered:
    """A key or value as shown: ``kind`` is null, json, text or hex; ``text`` the rendering."""

    kind: str
    text: str
    size: int


@dataclass(frozen=True, slots=True)
class Page:
    """One browse: the records and where the partition starts and ends (for paging)."""

    topic: str
    partition: int
    start: int
    records: list[ConsumerRecord]
    log_start_offset: int
    end_offset: int

    @property
    def next_offset(self) -> int:
        return self.records[-1].offset + 1 if self.records else self.start


def browse(
    client_config: Mapping[str, object], topic: str, partition: int, *, offset: int | None = None,
    timestamp_ms: int | None = None, limit: int = 50,
) -> Page:  # fmt: skip
    """Up to ``limit`` records of ``topic``-``partition`` from ``offset``, else from the first record at or after
    ``timestamp_ms``, else the newest ``limit`` records."""
    limit = max(1, min(limit, MAX_LIMIT))
    tp = TopicPartition(topic, partition)
    consumer = Consumer({**client_config, "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "max.poll.records": limit})  # fmt: skip
    try:
        consumer.assign([tp])
        begin = consumer.beginning_offsets([tp])[tp]
        end = consumer.end_offsets([tp])[tp]
        if offset is not None:
            start = min(max(offset, begin), end)
        elif timestamp_ms is not None:
            found = consumer.offsets_for_times({tp: timestamp_ms})[tp]
            start = end if found is None else found.offset
        else:
            start = max(begin, end - limit)
        consumer.seek(tp, start)
        records: list[ConsumerRecord] = []
        deadline = time.monotonic() + BROWSE_TIMEOUT_S
        while len(records) < limit and consumer.position(tp) < end and time.monotonic() < deadline:
            records += consumer.poll(timeout_ms=200)
        return Page(topic, partition, start, records[:limit], begin, end)
    finally:
        consumer.close()


def render(data: bytes | None, fmt: str = "auto") -> Rendered:
    """``data`` as ``fmt`` (auto: pretty JSON if it parses as JSON, else text if it is printable UTF-8, else hex)."""
    if data is None:
        return Rendered("null", "null", 0)
    if fmt in ("auto", "json"):
        pretty = _json(data)
        if pretty is not None:
            return Rendered("json", pretty, len(data))
    if fmt in ("auto", "text", "json"):
        text = _text(data)
        if text is not None or fmt == "text":
            return Rendered("text", text if text is not None else data.decode("utf-8", "replace"), len(data))
    return Rendered("hex", hex_dump(data), len(data))


def _json(data: bytes) -> str | None:
    """Pretty JSON of an object or array (a bare number or string reads better as text)."""
    if data.lstrip()[:1] not in (b"{", b"["):
        return None
    try:
        return json.dumps(json.loads(data), indent=2, ensure_ascii=False)
    except (ValueError, UnicodeDecodeError):
        return None


def _text(data: bytes) -> str | None:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return text if all(c.isprintable() or c in "\n\r\t" for c in text) else None


def hex_dump(data: bytes, width: int = 16) -> str:
    """Offset, hex bytes and printable ASCII, ``width`` bytes a line (the first ``HEX_PREVIEW_BYTES``)."""
    shown = data[:HEX_PREVIEW_BYTES]
    lines = []
    for at in range(0, len(shown), width):
        chunk = shown[at : at + width]
        ascii_ = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{at:08x}  {chunk.hex(' '):<{width * 3}} {ascii_}")
    if len(data) > len(shown):
        lines.append(f"... {len(data) - len(shown)} more bytes")
    return "\n".join(lines)
