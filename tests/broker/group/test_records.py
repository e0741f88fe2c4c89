"""The __consumer_offsets codecs (broker/group/records.py): every record round-trips; bad bytes raise."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.group.records import (
    CoordinatorRecord,
    CurrentAssignmentKey,
    CurrentAssignmentValue,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadataKey,
    MemberMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    RecordFormatError,
    decode_key,
    decode_record,
    encode_key,
)

names = st.text(max_size=20)
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
tps = st.frozensets(st.tuples(st.text(min_size=1, max_size=8), st.integers(0, 2**31 - 1)), max_size=8)

offset_records = st.builds(
    CoordinatorRecord,
    st.builds(OffsetCommitKey, names, names, int32),
    st.none() | st.builds(OffsetCommitValue, int64, int32, names, int64),
)
group_records = st.builds(
    CoordinatorRecord, st.builds(GroupMetadataKey, names), st.none() | st.builds(GroupMetadataValue, int32)
)
member_records = st.builds(
    CoordinatorRecord,
    st.builds(MemberMetadataKey, names, names),
    st.none()
    | st.builds(
        MemberMetadataValue,
        names,
        names,
        names,
        names,
        st.lists(names, max_size=4).map(tuple),
        names,
        int32,
        int32,
        names,
    ),  # fmt: skip
)
assignment_records = st.builds(
    CoordinatorRecord,
    st.builds(CurrentAssignmentKey, names, names),
    st.none() | st.builds(CurrentAssignmentValue, int32, int32, st.integers(0, 3), tps, tps),
)
records = offset_records | group_records | member_records | assignment_records


@settings(deadline=None)  # the machine is shared: no per-example time limit
@given(records)
def test_every_record_round_trips(record: CoordinatorRecord) -> None:
    key, value = record.encode()
    assert decode_record(key, value) == record


@settings(deadline=None)  # the machine is shared: no per-example time limit
@given(records, st.data())
def test_truncated_or_padded_values_raise(record: CoordinatorRecord, data: st.DataObject) -> None:
    key, value = record.encode()
    if value is None:
        return
    cut = data.draw(st.integers(0, len(value) - 1))
    with pytest.raises(RecordFormatError):
        decode_record(key, value[:cut])
    with pytest.raises(RecordFormatError):
        decode_record(key, value + b"\x00")


def test_kafka_offset_key_version_0_reads_as_an_offset_commit() -> None:
    key = encode_key(OffsetCommitKey("g", "t", 3))
    assert decode_key(b"\x00\x00" + key[2:]) == OffsetCommitKey("g", "t", 3)


def test_unknown_key_version_and_missing_key_raise() -> None:
    with pytest.raises(RecordFormatError, match="key version 9"):
        decode_key(b"\x00\x09")
    with pytest.raises(RecordFormatError, match="without a key"):
        decode_record(None, b"")
