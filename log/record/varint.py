"""Zigzag varints and varlongs, as Kafka's ``ByteUtils`` writes them inside RecordBatch v2 records.

Wire layout of one signed value ``n``::

    zigzag    u = (n << 1) ^ (n >> 63)       small magnitudes become small unsigned numbers
    groups    7 bits of u per byte, least significant group first
    byte      bit 7 = 1 when another byte follows, bits 0..6 = the group

A *varint* carries an int32 (at most 5 bytes), a *varlong* an int64 (at most 10 bytes). The value -1
(a null key, value or header value) is the single byte ``0x01``.

Hot paths do not call these functions per field: they index :data:`UNSIGNED_VARINT` (the encodings
of every unsigned value below :data:`TABLE_SIZE`, i.e. all 1- and 2-byte varints) and inline the
1-byte decode. The functions here are the general, checked paths. Pure: no I/O.
"""

from __future__ import annotations

from log.errors import CorruptRecordError

INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1
INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
VARINT_MAX_BYTES = 5
VARLONG_MAX_BYTES = 10


def _encode_unsigned(u: int) -> bytes:
    """Encode a non-negative integer as a plain (non-zigzag) base-128 varint."""
    out = bytearray()
    while u > 0x7F:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


TABLE_SIZE = 1 << 14  # every unsigned value that fits 1 or 2 varint bytes
UNSIGNED_VARINT: tuple[bytes, ...] = tuple(_encode_unsigned(u) for u in range(TABLE_SIZE))
"""``UNSIGNED_VARINT[u]`` is the varint encoding of the unsigned (already zigzagged) ``u``."""

ZIGZAG_DECODE: tuple[int, ...] = tuple((u >> 1) ^ -(u & 1) for u in range(TABLE_SIZE))
"""``ZIGZAG_DECODE[u]`` is the signed value whose zigzag encoding is ``u``."""


def zigzag(n: int) -> int:
    """Map a signed int64 to the unsigned number Kafka encodes (0, -1, 1, -2 ... -> 0, 1, 2, 3 ...)."""
    return (n << 1) ^ (n >> 63)


def unzigzag(u: int) -> int:
    """Inverse of :func:`zigzag`."""
    return (u >> 1) ^ -(u & 1)


def encode_varint(n: int) -> bytes:
    """Encode an int32 as a zigzag varint (1..5 bytes)."""
    if not INT32_MIN <= n <= INT32_MAX:
        raise ValueError(f"varint value {n} is outside the int32 range")
    u = (n << 1) ^ (n >> 63)
    return UNSIGNED_VARINT[u] if u < TABLE_SIZE else _encode_unsigned(u)


def encode_varlong(n: int) -> bytes:
    """Encode an int64 as a zigzag varlong (1..10 bytes)."""
    if not INT64_MIN <= n <= INT64_MAX:
        raise ValueError(f"varlong value {n} is outside the int64 range")
    u = (n << 1) ^ (n >> 63)
    return UNSIGNED_VARINT[u] if u < TABLE_SIZE else _encode_unsigned(u)


def size_of_varint(n: int) -> int:
    """Number of bytes :func:`encode_varint` / :func:`encode_varlong` writes for ``n``."""
    u = (n << 1) ^ (n >> 63)
    size = 1
    while u > 0x7F:
        u >>= 7
        size += 1
    return size


def _decode(buf: bytes | bytearray | memoryview, pos: int, max_bytes: int, kind: str) -> tuple[int, int]:
    """Decode one zigzag value of at most ``max_bytes`` bytes at ``buf[pos]``: ``(value, next_pos)``."""
    n = len(buf)
    u = 0
    shift = 0
    for i in range(max_bytes):
        if pos + i >= n:
            raise CorruptRecordError(f"{kind} at position {pos} runs past the end of the buffer ({n} bytes)")
        b = buf[pos + i]
        u |= (b & 0x7F) << shift
        if b < 0x80:
            return (u >> 1) ^ -(u & 1), pos + i + 1
        shift += 7
    raise CorruptRecordError(f"{kind} at position {pos} is longer than {max_bytes} bytes")


def decode_varint(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int]:
    """Decode a zigzag varint (int32) at ``buf[pos]``; returns ``(value, next_pos)``.

    Raises :class:`CorruptRecordError` when it runs past the buffer, exceeds 5 bytes, or does not fit
    an int32.
    """
    b = buf[pos] if pos < len(buf) else 0x80
    if b < 0x80:  # fast path: one byte
        return (b >> 1) ^ -(b & 1), pos + 1
    value, end = _decode(buf, pos, VARINT_MAX_BYTES, "varint")
    if not INT32_MIN <= value <= INT32_MAX:
        raise CorruptRecordError(f"varint at position {pos} decodes to {value}, outside the int32 range")
    return value, end


def decode_varlong(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int]:
    """Decode a zigzag varlong (int64) at ``buf[pos]``; returns ``(value, next_pos)``."""
    b = buf[pos] if pos < len(buf) else 0x80
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    value, end = _decode(buf, pos, VARLONG_MAX_BYTES, "varlong")
    if not INT64_MIN <= value <= INT64_MAX:
        raise CorruptRecordError(f"varlong at position {pos} decodes to {value}, outside the int64 range")
    return value, end
