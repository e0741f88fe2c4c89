"""Validating an append and assigning its offsets. Pure: buffers in, header patches out.

An append is one or several concatenated RecordBatch v2 batches (layout in ``log.record.header``).
Every batch is validated (header, CRC-32C) before anything is written, so a bad batch anywhere in
the append leaves the log untouched.

Leader appends are validated first (:func:`validate_leader_append`: every record of every batch decoded,
as a producer's, :mod:`log.record.validator`), then :func:`prepare_leader_append` patches only the 61-byte
header of each batch: ``baseOffset`` and
``partitionLeaderEpoch``, both outside the CRC; with ``LogAppendTime`` also the timestamp-type bit of
``attributes`` and ``maxTimestamp`` (with CreateTime too, when the producer's disagree with its records),
after which the CRC is recomputed by continuing the CRC of the patched header over the unchanged body
(no copy of the body). The body stays a ``memoryview`` of the caller's buffer: the caller must not change
it until the write is done.

Follower appends (:func:`prepare_follower_append`) keep offsets and epochs as the leader wrote them.
"""

from __future__ import annotations

from dataclasses import dataclass

from log.errors import CorruptRecordError, InvalidRecordError, RecordTooLargeError
from log.record.header import (
    ATTR_TIMESTAMP_TYPE,
    HEADER,
    HEADER_SIZE,
    BatchHeader,
    batch_size_at,
    parse_header,
    patch_base_offset,
    patch_partition_leader_epoch,
    set_crc,
    validate_batch,
)
from log.record.validator import RecordPolicy, validate_producer_batch

NO_TIMESTAMP = -1


@dataclass(frozen=True, slots=True)
class AppendInfo:
    """What an append did: Kafka's ``LogAppendInfo``, trimmed to what the broker answers with."""

    first_offset: int  # base offset of the first batch
    last_offset: int  # last offset of the last batch
    max_timestamp: int  # largest batch maxTimestamp (the append time with LogAppendTime), -1 if none
    offset_of_max_timestamp: int  # CreateTime: last offset of the batch holding it (records are not
    #                               decoded); LogAppendTime: first_offset (every record has that time)
    log_append_time: int  # -1 unless the topic uses LogAppendTime
    log_start_offset: int
    record_count: int
    size_bytes: int
    # The appended batches' headers as written (offsets assigned): the replica's producer state and epoch cache
    # read them instead of parsing the batches again.
    batch_headers: tuple[BatchHeader, ...] = ()


@dataclass(frozen=True, slots=True)
class PreparedBatch:
    """One batch ready to write: its final header and the pieces whose concatenation is the batch."""

    header: BatchHeader
    pieces: tuple[bytes | memoryview, ...]


@dataclass(frozen=True, slots=True)
class PreparedAppend:
    """A validated append with offsets assigned, ready for ``Segment.append``."""

    batches: list[PreparedBatch]
    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time: int
    record_count: int
    size_bytes: int

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    def info(self, log_start_offset: int) -> AppendInfo:
        return AppendInfo(
            first_offset=self.first_offset,
            last_offset=self.last_offset,
            max_timestamp=self.max_timestamp,
            offset_of_max_timestamp=self.offset_of_max_timestamp,
            log_append_time=self.log_append_time,
            log_start_offset=log_start_offset,
            record_count=self.record_count,
            size_bytes=self.size_bytes,
            batch_headers=tuple(batch.header for batch in self.batches),
        )


def segment_chunks(batches: list[PreparedBatch], segment_bytes: int) -> list[list[PreparedBatch]]:
    """``batches`` in order, cut into runs of at most ``segment_bytes`` each (one run when they fit): an append
    larger than a segment is written across segments, rolling between batches. RecordTooLargeError when one
    batch alone is larger than ``segment_bytes`` (Kafka's RecordBatchTooLarge: no segment can hold it)."""
    chunks: list[list[PreparedBatch]] = [[]]
    used = 0
    for batch in batches:
        size = batch.header.size_bytes
        if size > segment_bytes:
            raise RecordTooLargeError(
                f"a batch of {size} bytes exceeds segment.bytes={segment_bytes}: no segment can hold it "
                f"(the producer's batch.size must be smaller than the topic's segment.bytes)"
            )
        if chunks[-1] and used + size > segment_bytes:
            chunks.append([])
            used = 0
        chunks[-1].append(batch)
        used += size
    return chunks


def split_batches(buf: memoryview) -> list[tuple[int, BatchHeader]]:
    """Validate every batch of ``buf`` and return ``(position, header)`` for each; raise on any problem."""
    n = len(buf)
    if n == 0:
        raise InvalidRecordError("append contains no record batch")
    batches: list[tuple[int, BatchHeader]] = []
    pos = 0
    while pos < n:
        size = batch_size_at(buf, pos)
        if size is None:
            raise CorruptRecordError(f"append has {n - pos} trailing bytes at position {pos}, not a batch")
        try:
            header = validate_batch(buf, pos, n)
        except CorruptRecordError as e:
            raise CorruptRecordError(f"batch {len(batches)} of the append is corrupt: {e}") from e
        batches.append((pos, header))
        pos += header.size_bytes
    return batches


def as_bytes_view(batch: bytes | bytearray | memoryview) -> memoryview:
    view = memoryview(batch)
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")


@dataclass(frozen=True, slots=True)
class ValidatedAppend:
    """A producer's append that passed :func:`validate_leader_append`: its batches (position, header, true
    largest record timestamp) in ``buf``, and the config it was checked against. Pure data: a leader checks
    before it takes any lock, then appends it (:func:`prepare_leader_append`)."""

    buf: memoryview
    batches: tuple[tuple[int, BatchHeader, int], ...]
    config: object  # the LogConfig it was validated with (a Log validates again under another config)

    @property
    def headers(self) -> list[BatchHeader]:
        return [header for _, header, _ in self.batches]


def validate_leader_append(
    buf: memoryview, max_message_bytes: int, policy: RecordPolicy, config: object
) -> ValidatedAppend:
    """Validate every batch of ``buf`` as a producer's (Kafka's ``LogValidator``): whole batches, header and
    CRC (:func:`split_batches`), at most ``max_message_bytes`` each (:class:`RecordTooLargeError`), then rules
    V1-V6 of :mod:`log.record.validator` with ``policy`` (every record decoded: CORRUPT_MESSAGE,
    INVALID_RECORD, INVALID_TIMESTAMP). Nothing else of a batch is trusted before this."""
    checked = []
    for i, (pos, header) in enumerate(split_batches(buf)):
        if header.size_bytes > max_message_bytes:
            raise RecordTooLargeError(
                f"batch {i} of the append is {header.size_bytes} bytes, above max.message.bytes={max_message_bytes}"
            )
        checked.append((pos, header, validate_producer_batch(buf, pos, header, policy, i)))
    return ValidatedAppend(buf, tuple(checked), config)


def prepare_leader_append(
    validated: ValidatedAppend, next_offset: int, leader_epoch: int, log_append_time_ms: int | None
) -> PreparedAppend:
    """Assign offsets from ``next_offset`` to a validated append and stamp its headers, as Kafka's leader:
    ``baseOffset`` and ``partitionLeaderEpoch``; with LogAppendTime (``log_append_time_ms``) the append time;
    with CreateTime the CreateTime bit and the batch's true largest record timestamp, when the producer's
    differ."""
    buf = validated.buf
    prepared: list[PreparedBatch] = []
    offset = next_offset
    for pos, header, max_timestamp in validated.batches:
        head = bytearray(buf[pos : pos + HEADER_SIZE])
        patch_base_offset(head, 0, offset)
        patch_partition_leader_epoch(head, 0, leader_epoch)
        body = buf[pos + HEADER_SIZE : pos + header.size_bytes]
        if log_append_time_ms is not None:
            _restamp(head, body, header.attributes | ATTR_TIMESTAMP_TYPE, log_append_time_ms)
        elif header.is_log_append_time or header.max_timestamp != max_timestamp:
            _restamp(head, body, header.attributes & ~ATTR_TIMESTAMP_TYPE, max_timestamp)
        prepared.append(PreparedBatch(parse_header(head), (bytes(head), body)))
        offset += header.last_offset_delta + 1
    return _summarize(prepared, log_append_time_ms)


def _restamp(head: bytearray, body: memoryview, attributes: int, max_timestamp: int) -> None:
    """Set the attributes (timestamp type) and maxTimestamp, then recompute the CRC over head + body."""
    fields = list(HEADER.unpack_from(head, 0))
    fields[5] = attributes
    fields[8] = max_timestamp
    HEADER.pack_into(head, 0, *fields)
    set_crc(head, body)


def prepare_follower_append(buf: memoryview, log_end_offset: int) -> PreparedAppend:
    """Validate ``buf``, whose batches already carry offsets and epochs (replication).

    The first batch must start at or after ``log_end_offset`` and every batch after the previous
    one's end; otherwise :class:`InvalidRecordError` (Kafka's UnexpectedAppendOffset /
    OffsetsOutOfOrder) and nothing is written.
    """
    batches = split_batches(buf)
    expected = log_end_offset
    prepared: list[PreparedBatch] = []
    for i, (pos, header) in enumerate(batches):
        if header.base_offset < expected:
            what = "the log end offset" if i == 0 else f"the end of batch {i - 1}"
            raise InvalidRecordError(
                f"follower append batch {i} starts at offset {header.base_offset}, below {what} ({expected})"
            )
        prepared.append(PreparedBatch(header, (buf[pos : pos + header.size_bytes],)))
        expected = header.next_offset
    return _summarize(prepared, None)


def _summarize(batches: list[PreparedBatch], log_append_time_ms: int | None) -> PreparedAppend:
    max_timestamp, offset_of_max = NO_TIMESTAMP, batches[0].header.base_offset
    for batch in batches:
        if batch.header.max_timestamp > max_timestamp:
            max_timestamp, offset_of_max = batch.header.max_timestamp, batch.header.last_offset
    if log_append_time_ms is not None:
        # Every record carries the append time: the first offset holds the max timestamp.
        offset_of_max = batches[0].header.base_offset
    return PreparedAppend(
        batches=batches,
        first_offset=batches[0].header.base_offset,
        last_offset=batches[-1].header.last_offset,
        max_timestamp=max_timestamp,
        offset_of_max_timestamp=offset_of_max,
        log_append_time=-1 if log_append_time_ms is None else log_append_time_ms,
        record_count=sum(b.header.records_count for b in batches),
        size_bytes=sum(b.header.size_bytes for b in batches),
    )
