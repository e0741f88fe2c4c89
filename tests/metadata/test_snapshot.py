"""Metadata snapshots (metadata/snapshot.py): an image as the minimal run of records that rebuilds it."""

from __future__ import annotations

import struct
import zlib
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from metadata.errors import MetadataDecodeError
from metadata.image import MetadataImage
from metadata.record_codec import encode_record
from metadata.records import NoOp, PartitionChange, Topic
from metadata.snapshot import decode_snapshot, encode_snapshot, snapshot_records
from tests.metadata.strategies import SETTINGS, RecordsAndModel, record_sequences, replay_all, tid


@SETTINGS
@given(record_sequences())
def test_snapshot_rebuilds_the_image(sequence: RecordsAndModel) -> None:
    """Rule (KRaft snapshots): decode_snapshot(encode_snapshot(image)) == image, the bytes are a function
    of the image, and the snapshot holds one record per entity (the minimal sequence)."""
    records, _ = sequence
    image = replay_all(records)
    data = encode_snapshot(image)
    rebuilt = decode_snapshot(data)
    assert rebuilt == image
    assert encode_snapshot(rebuilt) == data
    entities = (
        (image.term >= 0)
        + len(image.features)
        + len(image.brokers)
        + len(image.topics_by_id)
        + sum(len(t.partitions) for t in image.topics_by_id.values())
        + sum(len(v) for v in image.configs.values())
        + (image.producer_ids.next_producer_id > 0)
        + len(image.acls)
        + sum(len(c) for c in image.scram_credentials.values())
    )
    assert len(list(snapshot_records(image))) == entities


def test_the_empty_image_snapshots() -> None:
    assert decode_snapshot(encode_snapshot(MetadataImage())) == MetadataImage()
    image = replay_all([NoOp()] * 3)
    assert decode_snapshot(encode_snapshot(image)).offset == 2


@SETTINGS
@given(record_sequences(max_steps=10), st.data())
def test_damaged_snapshots_are_refused(sequence: RecordsAndModel, data: Any) -> None:
    """Rule (STYLE §8, CRC checked on read): any truncation or flipped bit raises MetadataDecodeError."""
    encoded = encode_snapshot(replay_all(sequence[0]))
    cut = data.draw(st.integers(0, len(encoded) - 1), label="cut")
    with pytest.raises(MetadataDecodeError):
        decode_snapshot(encoded[:cut])
    damaged = bytearray(encoded)
    damaged[data.draw(st.integers(0, len(encoded) - 1), label="byte")] ^= 1 << data.draw(st.integers(0, 7))
    with pytest.raises(MetadataDecodeError):
        decode_snapshot(bytes(damaged))


@SETTINGS
@given(st.binary(max_size=200))
def test_garbage_snapshots_are_refused(data: bytes) -> None:
    with pytest.raises(MetadataDecodeError):
        decode_snapshot(data)


def _snapshot_of(records: list[bytes], offset: int = 0, trailer: bytes = b"") -> bytes:
    body = struct.pack(">qI", offset, len(records)) + b"".join(struct.pack(">I", len(r)) + r for r in records)
    body += trailer
    return b"OdMS\x00" + struct.pack(">I", zlib.crc32(body)) + body


def test_well_formed_but_wrong_snapshots_are_refused() -> None:
    """Rule: a snapshot with a valid CRC still has to decode record by record and rebuild an image."""
    good = [encode_record(Topic("a", tid(1)))]
    assert decode_snapshot(_snapshot_of(good, 4)).topic("a") is not None
    with pytest.raises(MetadataDecodeError, match="does not rebuild an image"):
        decode_snapshot(_snapshot_of([encode_record(PartitionChange(tid(1), 0, leader=1))]))
    with pytest.raises(MetadataDecodeError, match="bytes after"):
        decode_snapshot(_snapshot_of(good, trailer=b"x"))
    with pytest.raises(MetadataDecodeError, match="unknown metadata record type"):
        decode_snapshot(_snapshot_of([b"\xfe\x00"]))
    with pytest.raises(MetadataDecodeError, match="format 1"):
        decode_snapshot(b"OdMS\x01" + _snapshot_of(good)[5:])
    with pytest.raises(MetadataDecodeError, match="offset is -1 or more"):
        decode_snapshot(_snapshot_of(good, offset=-2))
