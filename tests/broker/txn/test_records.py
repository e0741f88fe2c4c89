"""The ``__transaction_state`` codec (broker/txn/records.py): Kafka's TransactionLog key and value v0, byte for
byte, round trips for every written state, and clear errors for bytes that do not parse."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.txn.records import (
    RecordFormatError,
    decode_key,
    decode_record,
    decode_value,
    encode_key,
    encode_record,
    encode_value,
)
from broker.txn.state import TxnMetadata, TxnState

T0 = 1_700_000_000_000


def test_key_layout_is_kafkas() -> None:
    assert encode_key("tx-1") == b"\x00\x00" + b"\x00\x04" + b"tx-1"
    assert decode_key(b"\x00\x00\x00\x04tx-1") == "tx-1"


def test_value_layout_is_kafkas() -> None:
    m = TxnMetadata("tx", 7, 3, 60_000, TxnState.ONGOING, frozenset({("b", 2), ("a", 1), ("a", 0)}), T0, T0 + 5)
    expected = (
        struct.pack(">hqhib", 0, 7, 3, 60_000, 1)
        + struct.pack(">i", 2)  # two topics, sorted
        + struct.pack(">h", 1) + b"a" + struct.pack(">iii", 2, 0, 1)
        + struct.pack(">h", 1) + b"b" + struct.pack(">ii", 1, 2)
        + struct.pack(">qq", T0 + 5, T0)  # last update, then start
    )  # fmt: skip
    assert encode_value(m) == expected
    assert decode_value("tx", expected) == m


def test_empty_writes_null_partitions_and_dead_a_tombstone() -> None:
    empty = TxnMetadata("tx", 7, 0, 60_000, TxnState.EMPTY, frozenset(), -1, T0)
    value = encode_value(empty)
    assert value is not None
    assert value[17:21] == b"\xff\xff\xff\xff"
    assert decode_value("tx", value) == empty
    dead = TxnMetadata("tx", 7, 0, 60_000, TxnState.DEAD, frozenset(), -1, T0)
    assert encode_record(dead) == (encode_key("tx"), None)
    assert decode_record(encode_key("tx"), None) == ("tx", None)


def test_states_never_written_are_refused() -> None:
    fence = TxnMetadata("tx", 7, 0, 60_000, TxnState.PREPARE_EPOCH_FENCE, frozenset({("a", 0)}), T0, T0)
    with pytest.raises(ValueError, match="never written"):
        encode_value(fence)
    with pytest.raises(ValueError, match="no partitions"):
        encode_value(TxnMetadata("tx", 7, 0, 60_000, TxnState.EMPTY, frozenset({("a", 0)}), -1, T0))


@pytest.mark.parametrize(
    ("key", "value", "match"),
    [
        (None, None, "without a key"),
        (b"\x00\x01\x00\x01x", None, "key version 1"),
        (b"\x00\x00\x00\x05x", None, "bad string length"),
        (b"\x00\x00\x00\x00", None, "empty transactional id"),
        (b"\x00\x00\x00\x01x!", None, "after the last field"),
        (b"\x00\x00\x00\x01x", b"\x00\x00", "truncated"),
        (b"\x00\x00\x00\x01x", struct.pack(">hqhib", 1, 7, 0, 1, 0) + b"\xff" * 4 + b"\x00" * 16, "version 1"),
        (b"\x00\x00\x00\x01x", struct.pack(">hqhib", 0, 7, 0, 1, 7) + b"\xff" * 4 + b"\x00" * 16, "status 7"),
        (b"\x00\x00\x00\x01x", struct.pack(">hqhib", 0, -1, 0, 1, 0) + b"\xff" * 4 + b"\x00" * 16, "producer id -1"),
        (b"\x00\x00\x00\x01x", struct.pack(">hqhibi", 0, 7, 0, 1, 1, 99) + b"\x00" * 16, "bad array length"),
    ],
)
def test_bad_bytes_raise_a_clear_error(key: bytes | None, value: bytes | None, match: str) -> None:
    with pytest.raises(RecordFormatError, match=match):
        decode_record(key, value)


WRITTEN = [s for s in TxnState if s not in (TxnState.PREPARE_EPOCH_FENCE, TxnState.DEAD)]


@st.composite
def metadata(draw: st.DrawFn) -> TxnMetadata:
    state = draw(st.sampled_from(WRITTEN))
    parts = frozenset() if state == TxnState.EMPTY else draw(
        st.frozensets(st.tuples(st.text(min_size=1, max_size=5), st.integers(0, 2**31 - 1)), max_size=6)
    )  # fmt: skip
    return TxnMetadata(draw(st.text(min_size=1, max_size=20)), draw(st.integers(0, 2**63 - 1)),
                       draw(st.integers(0, 32767)), draw(st.integers(1, 2**31 - 1)), state, parts,
                       draw(st.integers(-1, 2**62)), draw(st.integers(0, 2**62)))  # fmt: skip


@given(metadata())
def test_round_trip(m: TxnMetadata) -> None:
    key, value = encode_record(m)
    assert decode_record(key, value) == (m.transactional_id, m)


@given(st.binary(max_size=64))
def test_garbage_never_raises_anything_but_record_format_error(data: bytes) -> None:
    try:
        txn_id, m = decode_record(encode_key("x"), data)
    except RecordFormatError:
        return
    assert m is not None
    assert decode_record(*encode_record(m)) == (txn_id, m)  # what parses can be written back
