"""Compression codecs of RecordBatch v2: formats Kafka reads and writes, bounded decompression."""

from __future__ import annotations

import gzip
import struct

import cramjam
import lz4.frame
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from log.errors import CorruptRecordError, UnsupportedCompressionError
from log.record import compression as codecs

DETERMINISTIC = settings(derandomize=True, database=None, deadline=None, max_examples=60)
CODECS = [codecs.NONE, codecs.GZIP, codecs.SNAPPY, codecs.LZ4, codecs.ZSTD]
COMPRESSING = [codecs.GZIP, codecs.SNAPPY, codecs.LZ4, codecs.ZSTD]
KIB = 1024


@DETERMINISTIC
@given(st.sampled_from(CODECS), st.binary(max_size=200 * KIB) | st.just(b"x" * 300 * KIB))
def test_round_trip(codec: int, data: bytes) -> None:
    assert codecs.decompress(codec, codecs.compress(codec, data)) == data


@pytest.mark.parametrize("codec", COMPRESSING)
def test_compress_accepts_buffers_and_compresses(codec: int) -> None:
    data = b"odradek " * 10_000
    for buf in (bytearray(data), memoryview(data)):
        packed = codecs.compress(codec, buf)
        assert len(packed) < len(data) // 10
        assert codecs.decompress(codec, memoryview(packed)) == data


def test_lz4_writes_the_frame_kafka_writes() -> None:
    """As Kafka's Lz4BlockOutputStream: FLG 0x60 (independent blocks, no checksums or size), BD 0x40."""
    data = bytes(range(256)) * 1000  # 256000 bytes: four 64 KiB blocks
    frame = codecs.compress(codecs.LZ4, data)
    magic, flg, bd, hc = struct.unpack_from("<IBBB", frame)
    assert (magic, flg, bd, hc) == (0x184D2204, 0x60, 0x40, 0x82)
    assert frame[-4:] == b"\x00\x00\x00\x00"  # end mark, no content checksum
    pos, blocks = 7, 0
    while (size := struct.unpack_from("<I", frame, pos)[0]) != 0:
        assert size & 0x7FFFFFFF <= 64 * KIB
        pos += 4 + (size & 0x7FFFFFFF)
        blocks += 1
    assert (blocks, pos + 4) == (4, len(frame))


@pytest.mark.parametrize(
    "options",
    [
        {"store_size": True},  # kafka-python stores the content size; Kafka skips it
        {"content_checksum": True, "block_checksum": True},
        {"block_linked": True, "block_size": lz4.frame.BLOCKSIZE_MAX4MB},
    ],
)
def test_lz4_reads_other_standard_frames(options: dict[str, object]) -> None:
    data = b"abcdefgh" * 40_000
    assert codecs.decompress(codecs.LZ4, lz4.frame.compress(data, **options)) == data


def test_zstd_reads_frames_without_content_size() -> None:
    """Kafka's Java producer streams zstd: its frames do not state their size."""
    data = b"0123456789" * 300_000
    compressor = zstandard.ZstdCompressor().compressobj()
    frame = compressor.compress(data[:7]) + compressor.compress(data[7:]) + compressor.flush()
    assert zstandard.get_frame_parameters(frame).content_size == zstandard.CONTENTSIZE_UNKNOWN
    assert codecs.decompress(codecs.ZSTD, frame) == data  # larger than the first-guess buffer


def test_gzip_is_deterministic_and_reads_concatenated_members() -> None:
    assert codecs.compress(codecs.GZIP, b"same") == codecs.compress(codecs.GZIP, b"same")
    assert codecs.compress(codecs.GZIP, b"same")[4:8] == b"\x00\x00\x00\x00"  # mtime 0
    two_members = gzip.compress(b"first ") + gzip.compress(b"second")
    assert codecs.decompress(codecs.GZIP, two_members) == b"first second"


@pytest.mark.parametrize("codec", [codecs.GZIP, codecs.LZ4, codecs.ZSTD])
def test_decompression_bomb_stops_at_the_limit(codec: int) -> None:
    bomb = codecs.compress(codec, bytes(4 * 1024 * KIB))
    assert len(bomb) < 64 * KIB
    with pytest.raises(CorruptRecordError, match="more than the 1048576-byte limit"):
        codecs.decompress(codec, bomb, max_size_bytes=1024 * KIB)
    assert len(codecs.decompress(codec, bomb, max_size_bytes=4 * 1024 * KIB)) == 4 * 1024 * KIB


def test_snappy_blocks_are_checked_against_the_limit_before_decompressing() -> None:
    """Snappy's ratio is at most ~21:1, but a block states its length first: checked before any output."""
    frame = codecs.compress(codecs.SNAPPY, bytes(4 * 1024 * KIB))
    with pytest.raises(CorruptRecordError, match="more than the 1048576-byte limit"):
        codecs.decompress(codecs.SNAPPY, frame, max_size_bytes=1024 * KIB)
    assert len(codecs.decompress(codecs.SNAPPY, frame, max_size_bytes=4 * 1024 * KIB)) == 4 * 1024 * KIB
    claims_2_gib = b"\x80\x80\x80\x80\x08" + b"\x00" * 8  # uvarint length 2**31, then almost nothing
    with pytest.raises(CorruptRecordError, match="limit"):
        codecs.decompress(codecs.SNAPPY, claims_2_gib)


def test_default_limit_is_64_mib() -> None:
    assert codecs.DEFAULT_MAX_DECOMPRESSED_BYTES == 64 * 1024 * KIB
    streamed = zstandard.ZstdCompressor().compressobj()  # no content size: the decoder cannot trust one
    bomb = streamed.compress(bytes(codecs.DEFAULT_MAX_DECOMPRESSED_BYTES + 1)) + streamed.flush()
    with pytest.raises(CorruptRecordError, match="limit"):
        codecs.decompress(codecs.ZSTD, bomb)


def test_zstd_frame_claiming_a_huge_size_is_refused_before_allocating() -> None:
    frame = zstandard.ZstdCompressor().compress(bytes(2 * 1024 * KIB))
    with pytest.raises(CorruptRecordError, match="limit"):
        codecs.decompress(codecs.ZSTD, frame, max_size_bytes=KIB)


def test_uncompressed_section_is_also_bounded() -> None:
    with pytest.raises(CorruptRecordError, match="limit"):
        codecs.decompress(codecs.NONE, b"12345", max_size_bytes=4)


@pytest.mark.parametrize("codec", COMPRESSING)
def test_truncated_data_is_corrupt(codec: int) -> None:
    packed = codecs.compress(codec, b"some records " * 1000)
    for cut in (1, 3, len(packed) // 2):
        with pytest.raises(CorruptRecordError):
            codecs.decompress(codec, packed[:-cut])


@pytest.mark.parametrize("codec", COMPRESSING)
def test_trailing_garbage_is_corrupt(codec: int) -> None:
    packed = codecs.compress(codec, b"some records " * 1000)
    with pytest.raises(CorruptRecordError):
        codecs.decompress(codec, packed + b"\x01\x02\x03")


@DETERMINISTIC
@given(st.sampled_from(COMPRESSING), st.binary(min_size=1, max_size=64), st.integers(0, 2**32 - 1))
def test_garbage_raises_only_corrupt_record_error(codec: int, noise: bytes, seed: int) -> None:
    packed = bytearray(codecs.compress(codec, b"record data " * 50))
    for i, byte in enumerate(noise):  # overwrite a few bytes somewhere in the frame
        packed[(seed + i * 7919) % len(packed)] = byte
    try:
        out = codecs.decompress(codec, bytes(packed), max_size_bytes=64 * KIB)
    except CorruptRecordError:
        return
    assert len(out) <= 64 * KIB


def test_snappy_writes_xerial_frames_of_32_kib_blocks_and_reads_a_raw_block() -> None:
    """As snappy-java's SnappyOutputStream (what Kafka's Java client writes): magic, version 1, compatible
    version 1, then (i32 size, raw block) per 32 KiB of input. One raw block (no magic) is read too."""
    data = bytes(range(256)) * 300  # 76800 bytes: blocks of 32768, 32768, 11264
    frame = codecs.compress(codecs.SNAPPY, data)
    assert frame[:16] == b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    pos, sizes = 16, []
    while pos < len(frame):
        (size,) = struct.unpack_from(">i", frame, pos)
        sizes.append(len(cramjam.snappy.decompress_raw(frame[pos + 4 : pos + 4 + size])))
        pos += 4 + size
    assert (sizes, pos) == ([32768, 32768, 11264], len(frame))
    raw = bytes(cramjam.snappy.compress_raw(data))
    assert codecs.decompress(codecs.SNAPPY, raw) == data


@pytest.mark.parametrize("codec", [5, 6, 7, -1])
def test_unknown_codec_ids_are_unsupported(codec: int) -> None:
    with pytest.raises(UnsupportedCompressionError, match=f"unknown compression codec id {codec}"):
        codecs.decompress(codec, b"data")


def test_codec_names() -> None:
    assert [codecs.codec_from_name(n) for n in ("none", "gzip", "snappy", "lz4", "zstd")] == [0, 1, 2, 3, 4]
    assert codecs.codec_from_name(" ZSTD ") == codecs.ZSTD
    assert codecs.codec_name(codecs.LZ4) == "lz4"
    with pytest.raises(
        UnsupportedCompressionError, match="'brotli'.*'none', 'gzip', 'snappy', 'lz4', 'zstd'"
    ):
        codecs.codec_from_name("brotli")
    with pytest.raises(UnsupportedCompressionError, match="9"):
        codecs.codec_name(9)
