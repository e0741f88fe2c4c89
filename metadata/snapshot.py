"""Metadata snapshots: an image written as the shortest run of records that rebuilds it (like KRaft's).

``decode_snapshot(encode_snapshot(image)) == image``. The records come in an order that replays cleanly
into an empty image: the controller's term, features, brokers, then each topic followed by its
partitions, then configs, then the producer-id block. Each entity appears once, as it stands.

Wire format::

    magic          4s   b"OdMS"
    format         u8   0
    crc            u32  zlib CRC-32 of every byte after this field
    offset         i64  the offset of the last record the image includes (-1: none)
    record_count   u32
    record_count times:
        length     u32  the length of the record that follows
        record     length bytes, as ``metadata.record_codec.encode_record`` writes it

Anything else (bad magic, unknown format, CRC mismatch, truncation, trailing bytes, a record that does not
decode or does not fit) raises :class:`MetadataDecodeError`.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator

from metadata.errors import MetadataDecodeError, MetadataError
from metadata.image import MetadataImage, image_from_records
from metadata.record_codec import decode_record, encode_record
from metadata.records import (
    AccessControlEntry,
    Config,
    FeatureLevel,
    LeaderChange,
    MetadataRecord,
    Partition,
    ProducerIds,
    RegisterBroker,
    Topic,
    UserScramCredential,
)

MAGIC = b"OdMS"
FORMAT = 0

_HEADER = struct.Struct(
    ">"
    "4s"  # magic: b"OdMS"
    "B"  # format: 0
    "I"  # crc: CRC-32 of everything after the header
)
_BODY_HEADER = struct.Struct(
    ">"
    "q"  # offset: of the last record the image includes
    "I"  # record_count
)
_LENGTH = struct.Struct(">I")  # the length of one record
_MIN_SIZE = _HEADER.size + _BODY_HEADER.size


def snapshot_records(image: MetadataImage) -> Iterator[MetadataRecord]:
    """The records that rebuild ``image`` from an empty one, in replay order."""
    if image.term >= 0:
        yield LeaderChange(image.term, image.controller_id, image.controller_address)
    for name in sorted(image.features):
        yield FeatureLevel(name, image.features[name])
    for broker_id in sorted(image.brokers):
        b = image.brokers[broker_id]
        yield RegisterBroker(
            b.broker_id,
            b.incarnation_id,
            b.broker_epoch,
            b.endpoints,
            b.rack,
            b.fenced,
            b.in_controlled_shutdown,
        )
    for name in sorted(image.topics_by_name):
        topic = image.topics_by_name[name]
        yield Topic(name, topic.topic_id)
        for p in sorted(topic.partitions):
            reg = topic.partitions[p]
            yield Partition(
                topic.topic_id, p, reg.replicas, reg.isr, reg.leader, reg.leader_epoch, reg.partition_epoch,
                reg.elr, reg.last_known_elr,
            )  # fmt: skip
    for resource in sorted(image.configs):
        values = image.configs[resource]
        for key in sorted(values):
            yield Config(resource.resource_type, resource.resource_name, key, values[key])
    ids = image.producer_ids
    if ids.next_producer_id > 0:
        yield ProducerIds(ids.broker_id, ids.broker_epoch, ids.next_producer_id)
    for user in sorted(image.scram_credentials):
        creds = image.scram_credentials[user]
        for mechanism in sorted(creds):
            yield UserScramCredential(user, creds[mechanism])
    for acl_id in sorted(image.acls):
        yield AccessControlEntry(acl_id, image.acls[acl_id])


def encode_snapshot(image: MetadataImage) -> bytes:
    """``image`` as snapshot bytes (deterministic: equal images give equal bytes)."""
    records = [encode_record(r) for r in snapshot_records(image)]
    body = b"".join(
        [_BODY_HEADER.pack(image.offset, len(records))] + [_LENGTH.pack(len(r)) + r for r in records]
    )
    return _HEADER.pack(MAGIC, FORMAT, zlib.crc32(body)) + body


def decode_snapshot(data: bytes | bytearray | memoryview) -> MetadataImage:
    """The image ``encode_snapshot`` turned into ``data``; :class:`MetadataDecodeError` if it is not one."""
    view = memoryview(data)
    if len(view) < _MIN_SIZE:
        raise MetadataDecodeError(f"a metadata snapshot is at least {_MIN_SIZE} bytes, got {len(view)}")
    magic, fmt, crc = _HEADER.unpack_from(view)
    if magic != MAGIC:
        raise MetadataDecodeError(f"not a metadata snapshot: magic {bytes(magic)!r}")
    if fmt != FORMAT:
        raise MetadataDecodeError(f"metadata snapshot format {fmt} is not supported (only {FORMAT})")
    body = view[_HEADER.size :]
    if zlib.crc32(body) != crc:
        raise MetadataDecodeError("metadata snapshot is corrupt: CRC mismatch")
    offset, count = _BODY_HEADER.unpack_from(body)
    pos = _BODY_HEADER.size
    records: list[MetadataRecord] = []
    for i in range(count):
        if pos + _LENGTH.size > len(body):
            raise MetadataDecodeError(f"metadata snapshot ends inside record {i} of {count}")
        (length,) = _LENGTH.unpack_from(body, pos)
        pos += _LENGTH.size
        if pos + length > len(body):
            raise MetadataDecodeError(f"metadata snapshot ends inside record {i} of {count}")
        records.append(decode_record(body[pos : pos + length]))
        pos += length
    if pos != len(body):
        raise MetadataDecodeError(f"metadata snapshot has {len(body) - pos} bytes after its {count} records")
    try:
        return image_from_records(records, offset)
    except MetadataError as exc:
        raise MetadataDecodeError(f"metadata snapshot does not rebuild an image: {exc}") from exc
