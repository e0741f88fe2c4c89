"""Compression codecs of RecordBatch v2: the records section is compressed as a whole.

The codec id lives in bits 0..2 of the batch ``attributes``::

    id  name    wire format of the compressed records section
     0  none    the records themselves
     1  gzip    gzip (RFC 1952); readers, like java.util.zip.GZIPInputStream, take concatenated members
     2  snappy  xerial-framed snappy (below), as Kafka's Java client (snappy-java) and librdkafka write it
     3  lz4     one LZ4 frame (see below)
     4  zstd    one zstd frame; the content size may be absent (Kafka's Java client omits it)

LZ4 frame, as Kafka's ``Lz4BlockOutputStream`` writes it for magic 2 and ``Lz4BlockInputStream``
reads it::

    magic        4  0x184D2204, little-endian
    FLG          1  0x60: version 01, blocks independent, no block/content checksum, no content size
    BD           1  0x40: maximum block size 64 KiB
    HC           1  (xxh32(FLG, BD) >> 8) & 0xFF  (magic 2 uses the correct descriptor checksum)
    blocks       .  u32le size (bit 31 set = stored uncompressed) + data, each at most 64 KiB
    end mark     4  0x00000000

Kafka's reader rejects dependent (linked) blocks and maximum block sizes outside 64 KiB..4 MiB, skips
a content size, and checks block checksums (and, in recent versions, the content checksum) when
present; so we write exactly the frame above and read any standard frame (kafka-python, for one,
stores the content size).

Snappy, xerial framing (snappy-java's ``SnappyOutputStream``; ``cramjam`` does the raw blocks)::

    magic        8  0x82 "SNAPPY" 0x00
    version      4  i32be 1
    compatible   4  i32be 1
    blocks       .  i32be compressed size + one raw snappy block, each of at most 32 KiB uncompressed

A records section without the magic is read as one raw snappy block (what some clients send).

Decompression is bounded: the output is capped (:data:`DEFAULT_MAX_DECOMPRESSED_BYTES`, overridable
per call), so a small hostile batch cannot make us allocate gigabytes. Corrupt, truncated, trailing
or oversized compressed data raises :class:`CorruptRecordError`. Pure: no I/O.
"""

from __future__ import annotations

import struct
import threading
import zlib

import cramjam
import lz4.frame
import zstandard

from log.errors import CorruptRecordError, UnsupportedCompressionError

NONE = 0
GZIP = 1
SNAPPY = 2
LZ4 = 3
ZSTD = 4

CODEC_NAMES: dict[int, str] = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
CODEC_IDS: dict[str, int] = {name: codec for codec, name in CODEC_NAMES.items()}
SUPPORTED_CODECS = (NONE, GZIP, SNAPPY, LZ4, ZSTD)

DEFAULT_MAX_DECOMPRESSED_BYTES = 64 * 1024 * 1024
GZIP_DEFAULT_LEVEL = 6  # java.util.zip.Deflater.DEFAULT_COMPRESSION
ZSTD_DEFAULT_LEVEL = 3  # Kafka's compression.zstd.level default
LZ4_DEFAULT_LEVEL = 0  # lz4's fast compressor: what Kafka uses at its default compression.lz4.level

_GZIP_WBITS = 16 + zlib.MAX_WBITS  # gzip container, not raw deflate or zlib
_FIRST_GUESS_MIN_BYTES = 1 << 20  # first output buffer for frames without a stated size
_FIRST_GUESS_RATIO = 16
_LZ4_STEP_MIN_BYTES = 256 * 1024
_ZSTD_STEP_BYTES = 1 << 20
_GZIP_FIRST_WINDOW_BYTES = 256  # a gzip member takes at least 20 bytes
_GZIP_MAX_WINDOW_BYTES = 1 << 20


class _ZstdContexts(threading.local):
    """zstd contexts are not thread-safe and cost ~15 us to create: one set per thread."""

    def __init__(self) -> None:
        self.compressors: dict[int, zstandard.ZstdCompressor] = {}
        self.decompressor = zstandard.ZstdDecompressor()


_zstd = _ZstdContexts()


def codec_name(codec: int) -> str:
    """The Kafka name of a codec id (``compression.type`` values)."""
    try:
        return CODEC_NAMES[codec]
    except KeyError:
        raise UnsupportedCompressionError(f"unknown compression codec id {codec}") from None


def codec_from_name(name: str) -> int:
    """The codec id of a ``compression.type`` name such as ``"lz4"`` (case-insensitive)."""
    try:
        return CODEC_IDS[name.strip().lower()]
    except KeyError:
        valid = ", ".join(repr(n) for n in CODEC_NAMES.values())
        raise UnsupportedCompressionError(
            f"unknown compression type {name!r}; valid names are {valid}"
        ) from None


def check_supported(codec: int) -> None:
    """Raise UnsupportedCompressionError unless this build can read and write ``codec``."""
    if codec not in CODEC_NAMES:
        raise UnsupportedCompressionError(f"unknown compression codec id {codec} (valid ids: 0..4)")


def compress(codec: int, data: bytes | bytearray | memoryview, level: int | None = None) -> bytes:
    """Compress a records section with ``codec``; ``NONE`` returns the bytes unchanged."""
    if codec == NONE:
        return bytes(data)
    check_supported(codec)
    if codec == GZIP:
        # zlib writes mtime=0 and no file name: the output is deterministic.
        level = GZIP_DEFAULT_LEVEL if level is None else level
        deflater = zlib.compressobj(level, zlib.DEFLATED, _GZIP_WBITS)
        return deflater.compress(data) + deflater.flush()
    if codec == SNAPPY:
        return _snappy_compress(data)
    if codec == LZ4:
        frame: bytes = lz4.frame.compress(
            data,
            compression_level=LZ4_DEFAULT_LEVEL if level is None else level,
            block_size=lz4.frame.BLOCKSIZE_MAX64KB,
            block_linked=False,
            content_checksum=False,
            store_size=False,
        )
        return frame
    level = ZSTD_DEFAULT_LEVEL if level is None else level
    compressor = _zstd.compressors.get(level)
    if compressor is None:
        compressor = _zstd.compressors[level] = zstandard.ZstdCompressor(level=level)
    return compressor.compress(data)


def decompress(
    codec: int, data: bytes | bytearray | memoryview, max_size_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES
) -> bytes:
    """Decompress a records section; at most ``max_size_bytes`` of output, else CorruptRecordError."""
    if codec == NONE:
        if len(data) > max_size_bytes:
            raise _too_large("none", max_size_bytes)
        return bytes(data)
    check_supported(codec)
    if codec == GZIP:
        return _gunzip(data, max_size_bytes)
    if codec == SNAPPY:
        return _snappy_decompress(data, max_size_bytes)
    if codec == LZ4:
        return _lz4_decompress(data, max_size_bytes)
    return _zstd_decompress(data, max_size_bytes)


def _too_large(name: str, limit: int) -> CorruptRecordError:
    return CorruptRecordError(f"{name} records section decompresses to more than the {limit}-byte limit")


def _gunzip(data: bytes | bytearray | memoryview, limit: int) -> bytes:
    """Inflate one or more concatenated gzip members (GZIPInputStream reads them all), in time linear in
    the input and the output.

    zlib hands back the input after a member's end as a copy (``unused_data``); fed the whole rest each
    time, many tiny members would cost the square of the input. So the first member (usually the only one)
    gets the whole input, and every later one windows that start small and double while the member goes
    on: what is copied back after a member is at most its last window.
    """
    view = memoryview(data).cast("B") if isinstance(data, memoryview) else memoryview(data)
    parts: list[bytes] = []
    total = 0
    pos, end = 0, len(view)
    members = 0
    while pos < end:
        inflater = zlib.decompressobj(_GZIP_WBITS)
        window = _GZIP_FIRST_WINDOW_BYTES if members else end
        while True:
            stop = min(end, pos + window)
            try:
                chunk = inflater.decompress(view[pos:stop], limit - total + 1)
            except zlib.error as exc:
                where = f" after {members} good member(s)" if members else ""
                raise CorruptRecordError(f"gzip records section is corrupt{where}: {exc}") from None
            total += len(chunk)
            if total > limit:
                raise _too_large("gzip", limit)
            if chunk:
                parts.append(chunk)
            if inflater.eof:
                pos = stop - len(inflater.unused_data)
                break
            pos = stop
            if pos >= end:
                raise CorruptRecordError("gzip records section is truncated")
            window = min(2 * window, _GZIP_MAX_WINDOW_BYTES)
        members += 1
    if not members:
        raise CorruptRecordError("gzip records section is empty")
    return parts[0] if len(parts) == 1 else b"".join(parts)


_XERIAL_HEADER = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
_XERIAL_MAGIC = _XERIAL_HEADER[:8]
_XERIAL_BLOCK_BYTES = 32 * 1024  # snappy-java's default block size
_BLOCK_SIZE = struct.Struct(">i")


def _snappy_compress(data: bytes | bytearray | memoryview) -> bytes:
    view = memoryview(data)
    out = bytearray(_XERIAL_HEADER)
    for start in range(0, len(view), _XERIAL_BLOCK_BYTES):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + _XERIAL_BLOCK_BYTES]))
        out += _BLOCK_SIZE.pack(len(block)) + block
    return bytes(out)


def _snappy_decompress(data: bytes | bytearray | memoryview, limit: int) -> bytes:
    """Xerial-framed (or one raw) snappy; each block's stated size is checked against ``limit`` first."""
    view = memoryview(data)
    if bytes(view[:8]) != _XERIAL_MAGIC:
        return _snappy_block(view, limit, limit)
    if len(view) < len(_XERIAL_HEADER):
        raise CorruptRecordError("snappy records section has a truncated xerial header")
    parts: list[bytes] = []
    total, pos = 0, len(_XERIAL_HEADER)
    while pos < len(view):
        if pos + 4 > len(view):
            raise CorruptRecordError(f"snappy records section has a torn block size at {pos}")
        (size,) = _BLOCK_SIZE.unpack_from(view, pos)
        pos += 4
        if size < 0 or pos + size > len(view):
            raise CorruptRecordError(f"snappy block of {size} bytes at {pos} runs past the records section")
        block = _snappy_block(view[pos : pos + size], limit - total, limit)
        total += len(block)
        parts.append(block)
        pos += size
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _snappy_block(block: memoryview, room: int, limit: int) -> bytes:
    """One raw block, refused before decompressing when its stated length exceeds ``room`` (of ``limit``)."""
    try:
        size = cramjam.snappy.decompress_raw_len(block)
    except Exception as exc:
        raise CorruptRecordError(f"snappy block is corrupt: {exc}") from None
    if size > room:
        raise _too_large("snappy", limit)
    try:
        return bytes(cramjam.snappy.decompress_raw(block))
    except Exception as exc:
        raise CorruptRecordError(f"snappy block is corrupt: {exc}") from None


def _lz4_decompress(data: bytes | bytearray | memoryview, limit: int) -> bytes:
    """Decode one LZ4 frame in bounded steps, so a bomb stops at ``limit`` bytes of output."""
    decompressor = lz4.frame.LZ4FrameDecompressor()
    step = min(limit + 1, max(_LZ4_STEP_MIN_BYTES, _FIRST_GUESS_RATIO * len(data)))
    parts: list[bytes] = []
    total = 0
    pending: bytes | bytearray | memoryview = data
    try:
        while True:
            chunk = decompressor.decompress(pending, max_length=min(step, limit - total + 1))
            pending = b""
            total += len(chunk)
            if total > limit:
                raise _too_large("lz4", limit)
            parts.append(chunk)
            if decompressor.eof or decompressor.needs_input:
                break
    except RuntimeError as exc:  # lz4.frame reports malformed input as RuntimeError
        raise CorruptRecordError(f"lz4 records section is corrupt: {exc}") from None
    if not decompressor.eof:
        raise CorruptRecordError("lz4 records section is truncated (no end mark)")
    if decompressor.unused_data:
        extra = len(decompressor.unused_data)
        raise CorruptRecordError(f"lz4 records section has {extra} bytes after its frame")
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _zstd_decompress(data: bytes | bytearray | memoryview, limit: int) -> bytes:
    """Decode one zstd frame; no buffer is ever larger than its actual output (at most ``limit`` bytes).

    A frame that states its content size is checked against the limit first. Without one (Kafka's
    Java producer streams its frames) we try a buffer sized from the input; if the output is larger, the
    frame is streamed in 1 MiB steps to learn its size (stopping past ``limit``), then decoded into a
    buffer of exactly that size. A buffer of ``limit`` bytes is never allocated on a hostile frame's word.
    """
    try:
        content_size = zstandard.get_frame_parameters(data).content_size
    except zstandard.ZstdError as exc:
        raise CorruptRecordError(f"zstd records section has a bad frame header: {exc}") from None
    if content_size != zstandard.CONTENTSIZE_UNKNOWN:
        if content_size > limit:
            raise _too_large("zstd", limit)
        return _zstd_once(data, 0)
    guess = min(limit, max(_FIRST_GUESS_MIN_BYTES, _FIRST_GUESS_RATIO * len(data)))
    try:
        return _zstd.decompressor.decompress(data, max_output_size=guess, allow_extra_data=False)
    except zstandard.ZstdError:
        pass  # too small a buffer, or corrupt: streaming tells which
    return _zstd_once(data, _zstd_streamed_size(data, limit))


def _zstd_once(data: bytes | bytearray | memoryview, max_output_size: int) -> bytes:
    try:
        return _zstd.decompressor.decompress(data, max_output_size=max_output_size, allow_extra_data=False)
    except zstandard.ZstdError as exc:
        raise CorruptRecordError(f"zstd records section is corrupt or truncated: {exc}") from None


def _zstd_streamed_size(data: bytes | bytearray | memoryview, limit: int) -> int:
    """The output size of the frame, found by streaming it in bounded steps; too large past ``limit``."""
    total = 0
    try:
        reader = _zstd.decompressor.stream_reader(bytes(data), read_across_frames=False)
        while True:
            chunk = reader.read(min(_ZSTD_STEP_BYTES, limit + 1 - total))
            if not chunk:
                return max(total, 1)
            total += len(chunk)
            if total > limit:
                raise _too_large("zstd", limit)
    except zstandard.ZstdError as exc:
        raise CorruptRecordError(f"zstd records section is corrupt or truncated: {exc}") from None
