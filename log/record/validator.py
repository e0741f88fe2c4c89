"""What a leader checks in a producer's batch before it writes it (Kafka's ``LogValidator``). Pure.

The header and CRC are checked first (:func:`log.record.header.validate_batch`): no other header field is
trusted before the length, magic and CRC are. The CRC only says that the bytes were not damaged on the
way; a buggy or hostile producer computes a valid CRC over garbage. So a leader then checks the batch as
a producer's (rules V1-V6; ``tests/log/test_record_validator.py`` cites them):

- V1. Not a control batch (clients do not write transaction markers: the transaction coordinator's
  WriteTxnMarkers does, through ``Log.append_marker``), and transactional only with a producer id:
  INVALID_RECORD. (Whether a transactional batch may be written is the producer state's question: S10, S11.)
- V2. Producer fields agree: ``producerId`` is -1 (no producer: the epoch and sequence are not looked at,
  as in Kafka; aiokafka, for one, writes sequence 0 there) or >= 0, and then ``producerEpoch`` and
  ``baseSequence`` are >= 0: INVALID_RECORD. (Kafka reads any negative id as "none"; Odradek refuses ids
  below -1, which no producer writes.)
- V3. At least one record, and ``recordsCount = lastOffsetDelta + 1`` (a producer's batch is dense):
  INVALID_RECORD.
- V4. The records section decompresses within ``max_decompressed_bytes`` (linear time, bounded memory:
  :mod:`log.record.compression`) and decodes record by record: every varint well formed and in range,
  every record ending exactly where its length says, offset deltas ``0, 1, ..., recordsCount - 1``,
  key and value lengths >= -1, header counts >= 0, header keys non-null UTF-8 and header values >= -1,
  exactly ``recordsCount`` records and nothing after them: CORRUPT_MESSAGE otherwise. Record attributes
  are ignored (unused in magic 2, as Kafka reads them).
- V5. With ``message.timestamp.type=CreateTime``, every record timestamp (but -1, "none") lies within
  ``[now - message.timestamp.before.max.ms, now + message.timestamp.after.max.ms]``: INVALID_TIMESTAMP.
- V6. A compacted topic takes no record without a key: INVALID_RECORD.

The result is the batch's true largest timestamp: Kafka's leader writes it into ``maxTimestamp`` when the
producer's differs (``log.append`` does so, recomputing the CRC).

The loop is the hot path of every produce: it reads each record's length, timestamp delta, offset delta,
key and value lengths and header count, with the 1- and 2-byte varints inline (the general decoders of
:mod:`log.record.varint` take the rest) and jumps over keys and values by their lengths: no object per
record, no copy of keys or values. Timestamp deltas are reduced to their minimum and maximum; the bounds
are checked on those once per batch (per record only when they fail, to find the record and to let -1
through).
"""

from __future__ import annotations

from dataclasses import dataclass

from log.errors import CorruptRecordError, InvalidRecordError, InvalidTimestampError
from log.record import compression as codecs
from log.record.header import (
    ATTR_COMPRESSION_MASK,
    HEADER_SIZE,
    NO_PRODUCER_ID,
    BatchHeader,
)
from log.record.varint import ZIGZAG_DECODE, decode_varint, decode_varlong

LONG_MAX = 2**63 - 1
NO_TIMESTAMP = -1
Buffer = bytes | bytearray | memoryview


@dataclass(frozen=True, slots=True)
class RecordPolicy:
    """What a leader allows in a producer's records (from the topic's configs and the broker's clock)."""

    now_ms: int
    timestamp_before_max_ms: int = LONG_MAX  # message.timestamp.before.max.ms
    timestamp_after_max_ms: int = LONG_MAX  # message.timestamp.after.max.ms
    log_append_time: bool = False  # message.timestamp.type=LogAppendTime: record timestamps are not checked
    require_keys: bool = False  # cleanup.policy includes compact
    max_decompressed_bytes: int = codecs.DEFAULT_MAX_DECOMPRESSED_BYTES


def validate_producer_batch(buf: Buffer, pos: int, header: BatchHeader, policy: RecordPolicy, index: int = 0) -> int:
    """Check the batch at ``buf[pos:]`` (header and CRC already validated: ``header``) by rules V1-V6.

    Returns the largest record timestamp (-1 when every record has none). ``index`` is the batch's place
    in its append, for the messages. Raises InvalidRecordError, CorruptRecordError or InvalidTimestampError.
    """
    where = f"batch {index} of the append"
    check_producer_header(header, where)
    data, start, end = _records_section(buf, pos, header, policy.max_decompressed_bytes, where)
    try:
        low, high = _scan(data, start, end, header.records_count, policy.require_keys, where)
    except IndexError:
        raise CorruptRecordError(f"{where}: its records run past the end of their section") from None
    except CorruptRecordError as exc:  # the general varint decoders do not know which batch they read
        if str(exc).startswith(where):
            raise
        raise CorruptRecordError(f"{where}: {exc}") from None
    base = header.base_timestamp
    if not policy.log_append_time:
        _check_timestamps(data, start, header, policy, base + low, base + high, where)
    return base + high


def check_producer_header(header: BatchHeader, where: str) -> None:
    """Rules V1-V3: what the header alone says about a producer's batch."""
    if header.is_control:
        raise InvalidRecordError(f"{where} is a control batch: clients are not allowed to write control records")
    if header.is_transactional and header.producer_id < 0:
        raise InvalidRecordError(f"{where} is transactional without a producer id")
    pid, epoch, seq = header.producer_id, header.producer_epoch, header.base_sequence
    if pid != NO_PRODUCER_ID and (pid < 0 or epoch < 0 or seq < 0):
        raise InvalidRecordError(
            f"{where} has producer id {pid}, producer epoch {epoch} and base sequence {seq}: a producer id is -1 "
            f"or >= 0, and with one the epoch and sequence must be >= 0"
        )
    if header.records_count <= 0 or header.last_offset_delta != header.records_count - 1:
        raise InvalidRecordError(
            f"{where} has {header.records_count} records but lastOffsetDelta={header.last_offset_delta}; "
            f"a producer batch must have count = lastOffsetDelta + 1 >= 1"
        )


def _records_section(buf: Buffer, pos: int, header: BatchHeader, limit: int, where: str) -> tuple[bytes, int, int]:
    """The bytes to decode and their bounds: the batch's own (no copy for ``bytes`` or a whole view of
    ``bytes``), or the decompressed section."""
    start, end = pos + HEADER_SIZE, pos + header.size_bytes
    codec = header.attributes & ATTR_COMPRESSION_MASK
    if codec != codecs.NONE:
        try:
            section = codecs.decompress(codec, memoryview(buf)[start:end], limit)
        except CorruptRecordError as exc:
            raise CorruptRecordError(f"{where}: {exc}") from None
        return section, 0, len(section)
    if isinstance(buf, bytes):
        return buf, start, end
    if isinstance(buf, memoryview) and isinstance(buf.obj, bytes) and buf.nbytes == len(buf.obj):
        return buf.obj, start, end
    return bytes(memoryview(buf)[start:end]), 0, end - start


def _scan(data: bytes, pos: int, end: int, count: int, require_keys: bool, where: str) -> tuple[int, int]:
    """Decode ``count`` records filling ``data[pos:end]`` (V4, V6); ``(a lower bound of the timestamp
    deltas, the largest timestamp delta)``. IndexError when a field runs past the data (the caller turns
    it into CORRUPT_MESSAGE).

    Every record must end exactly where its length says: that one check also catches a length below the
    6 bytes its fields take, or past the section (the section must end after the last record). A 1-byte
    timestamp delta is at least -64, so only longer ones move the lower bound below -64 (the exact
    minimum is needed only when that bound fails V5, and :func:`_check_timestamps` reads it then).
    """
    zz = ZIGZAG_DECODE
    low = -64
    high = -LONG_MAX
    for i in range(count):
        b = data[pos]  # length
        if b < 0x80:
            record_end = pos + 1 + zz[b]
            pos += 1
        elif data[pos + 1] < 0x80:
            record_end = pos + 2 + zz[(b & 0x7F) | (data[pos + 1] << 7)]
            pos += 2
        else:
            length, pos = decode_varint(data, pos)
            record_end = pos + length
        b = data[pos + 1]  # timestampDelta, after the attributes byte
        if b < 0x80:
            delta = zz[b]
            pos += 2
        else:
            delta, pos = decode_varlong(data, pos + 1)
            if delta < low:
                low = delta
        if delta > high:
            high = delta
        b = data[pos]  # offsetDelta: i
        if b < 0x80:
            if b != i << 1:
                _bad_offset_delta(where, i, zz[b])
            pos += 1
        elif data[pos + 1] < 0x80:
            if (b & 0x7F) | (data[pos + 1] << 7) != i << 1:
                _bad_offset_delta(where, i, zz[(b & 0x7F) | (data[pos + 1] << 7)])
            pos += 2
        else:
            delta, pos = decode_varint(data, pos)
            if delta != i:
                _bad_offset_delta(where, i, delta)
        b = data[pos]  # keyLength
        if b == 1:
            if require_keys:
                raise InvalidRecordError(f"Compacted topic cannot accept message without key ({where}, record {i})")
            pos += 1
        elif b < 0x80:
            pos += 1 + (zz[b] if not b & 1 else _bad_length(where, i, "key", zz[b]))
        else:
            n, pos = decode_varint(data, pos)
            if n >= 0:
                pos += n
            elif n != -1:
                _bad_length(where, i, "key", n)
            elif require_keys:
                raise InvalidRecordError(f"Compacted topic cannot accept message without key ({where}, record {i})")
        b = data[pos]  # valueLength
        if b < 0x80:
            pos += 1 + (zz[b] if not b & 1 else 0 if b == 1 else _bad_length(where, i, "value", zz[b]))
        elif data[pos + 1] < 0x80 and not b & 1:
            pos += 2 + zz[(b & 0x7F) | (data[pos + 1] << 7)]
        else:
            n, pos = decode_varint(data, pos)
            if n > 0:
                pos += n
            elif n < -1:
                _bad_length(where, i, "value", n)
        if data[pos] == 0:  # headersCount
            pos += 1
        else:
            pos = _skip_headers(data, pos, record_end, where, i)
        if pos != record_end:
            raise CorruptRecordError(
                f"{where}: record {i} should end at byte {record_end} of its section but its fields end at byte "
                f"{pos} (or its length runs past the section)"
            )
    if pos != end:
        raise CorruptRecordError(f"{where}: its records section has {end - pos} bytes after its {count} records")
    return low, high


def _bad_offset_delta(where: str, i: int, delta: int) -> None:
    raise CorruptRecordError(f"{where}: record {i} has offset delta {delta}, expected {i}")


def _bad_length(where: str, i: int, field: str, length: int) -> int:
    raise CorruptRecordError(f"{where}: record {i} has {field} length {length}; only -1 (null) or >= 0 is valid")


def _skip_headers(data: bytes, pos: int, record_end: int, where: str, i: int) -> int:
    """headersCount and the headers of record ``i``: keys non-null UTF-8, values null or bytes."""
    count, pos = decode_varint(data, pos)
    if count < 0:
        raise CorruptRecordError(f"{where}: record {i} has header count {count}")
    for h in range(count):
        n, pos = decode_varint(data, pos)
        if n < 0:
            raise CorruptRecordError(f"{where}: record {i} header {h} has key length {n}; a header key is not null")
        if pos + n > record_end:
            raise CorruptRecordError(f"{where}: record {i} header {h} key runs past its record")
        try:
            data[pos : pos + n].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptRecordError(f"{where}: record {i} header {h} key is not UTF-8: {exc}") from None
        pos += n
        n, pos = decode_varint(data, pos)
        if n < -1:
            raise CorruptRecordError(f"{where}: record {i} header {h} has value length {n}")
        if n > 0:
            pos += n
        if pos > record_end:
            raise CorruptRecordError(f"{where}: record {i} header {h} runs past its record")
    return pos


def _check_timestamps(
    data: bytes, start: int, header: BatchHeader, policy: RecordPolicy, low: int, high: int, where: str
) -> None:
    """V5 on the batch's smallest and largest timestamps; when they fail, the first record out of range
    (records without a timestamp, -1, pass) names the error."""
    earliest = policy.now_ms - policy.timestamp_before_max_ms
    latest = policy.now_ms + policy.timestamp_after_max_ms
    if earliest <= low and high <= latest:
        return
    for i, timestamp in enumerate(_timestamps(data, start, header)):
        if timestamp != NO_TIMESTAMP and not earliest <= timestamp <= latest:
            raise InvalidTimestampError(
                f"Timestamp {timestamp} of message with offset delta {i} ({where}) is out of range. The "
                f"timestamp should be within [{earliest}, {latest}] (message.timestamp.before.max.ms="
                f"{policy.timestamp_before_max_ms}, message.timestamp.after.max.ms={policy.timestamp_after_max_ms})"
            )


def _timestamps(data: bytes, pos: int, header: BatchHeader) -> list[int]:
    """Every record's timestamp (the records were checked by :func:`_scan`): the slow path of V5."""
    out = []
    for _ in range(header.records_count):
        length, pos = decode_varint(data, pos)
        delta, _ = decode_varlong(data, pos + 1)
        out.append(header.base_timestamp + delta)
        pos += length
    return out
