"""Zigzag varints and varlongs (Kafka's ByteUtils.writeVarint/readVarint and the Long variants)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from log.errors import CorruptRecordError
from log.record.varint import (
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
    TABLE_SIZE,
    UNSIGNED_VARINT,
    ZIGZAG_DECODE,
    decode_varint,
    decode_varlong,
    encode_varint,
    encode_varlong,
    size_of_varint,
    unzigzag,
    zigzag,
)

DETERMINISTIC = settings(derandomize=True, database=None, deadline=None, max_examples=300)

# Encodings Kafka's ByteUtilsTest pins down (zigzag, then 7 bits a byte, low group first).
KNOWN_VARINTS = [
    (0, "00"),
    (-1, "01"),
    (1, "02"),
    (63, "7e"),
    (-64, "7f"),
    (64, "8001"),
    (-65, "8101"),
    (8191, "fe7f"),
    (-8192, "ff7f"),
    (8192, "808001"),
    (INT32_MAX, "feffffff0f"),
    (INT32_MIN, "ffffffff0f"),
]


@pytest.mark.parametrize(("value", "hex_bytes"), KNOWN_VARINTS)
def test_known_varint_encodings(value: int, hex_bytes: str) -> None:
    assert encode_varint(value).hex() == hex_bytes
    assert decode_varint(bytes.fromhex(hex_bytes)) == (value, len(hex_bytes) // 2)
    assert size_of_varint(value) == len(hex_bytes) // 2


def test_known_varlong_extremes() -> None:
    assert encode_varlong(INT64_MAX).hex() == "feffffffffffffffff01"
    assert encode_varlong(INT64_MIN).hex() == "ffffffffffffffffff01"
    assert decode_varlong(bytes.fromhex("ffffffffffffffffff01")) == (INT64_MIN, 10)


@DETERMINISTIC
@given(st.integers(INT32_MIN, INT32_MAX), st.binary(max_size=3))
def test_varint_round_trip_with_trailing_bytes(value: int, trailing: bytes) -> None:
    encoded = encode_varint(value)
    assert len(encoded) == size_of_varint(value) <= 5
    assert decode_varint(b"\xaa" + encoded + trailing, 1) == (value, 1 + len(encoded))


@DETERMINISTIC
@given(st.integers(INT64_MIN, INT64_MAX))
def test_varlong_round_trip(value: int) -> None:
    encoded = encode_varlong(value)
    assert len(encoded) == size_of_varint(value) <= 10
    assert decode_varlong(encoded) == (value, len(encoded))
    assert unzigzag(zigzag(value)) == value


def test_tables_agree_with_the_encoder() -> None:
    for u in (0, 1, 127, 128, 300, TABLE_SIZE - 1):
        assert UNSIGNED_VARINT[u] == encode_varlong(unzigzag(u))
        assert ZIGZAG_DECODE[u] == unzigzag(u)
    assert len(UNSIGNED_VARINT[TABLE_SIZE - 1]) == 2  # the tables hold exactly the 1- and 2-byte values


@pytest.mark.parametrize("value", [INT32_MAX + 1, INT32_MIN - 1])
def test_encode_varint_rejects_values_outside_int32(value: int) -> None:
    with pytest.raises(ValueError, match="int32"):
        encode_varint(value)
    assert len(encode_varlong(value)) == 5  # but a varlong carries them


def test_encode_varlong_rejects_values_outside_int64() -> None:
    with pytest.raises(ValueError, match="int64"):
        encode_varlong(INT64_MAX + 1)


@pytest.mark.parametrize(
    ("hex_bytes", "message"),
    [
        ("", "past the end"),
        ("80", "past the end"),
        ("ffff", "past the end"),
        ("808080808000", "longer than 5 bytes"),  # 6 bytes: too long for an int32
        ("feffffff1f", "outside the int32 range"),  # 5 bytes but 33 significant bits
    ],
)
def test_decode_varint_rejects_malformed_input(hex_bytes: str, message: str) -> None:
    with pytest.raises(CorruptRecordError, match=message):
        decode_varint(bytes.fromhex(hex_bytes))


def test_decode_varlong_rejects_eleven_bytes_and_overflow() -> None:
    with pytest.raises(CorruptRecordError, match="longer than 10 bytes"):
        decode_varlong(b"\x80" * 10 + b"\x00")
    with pytest.raises(CorruptRecordError, match="int64"):
        decode_varlong(b"\xff" * 9 + b"\x7f")


def test_decode_reads_from_memoryview_and_bytearray() -> None:
    raw = b"\x00" + encode_varint(-8193)
    assert decode_varint(memoryview(raw), 1) == (-8193, 4)
    assert decode_varint(bytearray(raw), 1) == (-8193, 4)
