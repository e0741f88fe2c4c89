"""The hand-written Fetch response encoder against kio's decoder (Kafka's schema), for every offered version."""

from __future__ import annotations

import pytest
from kio.serial import entity_reader

from broker.kafka.api import FileRegion
from broker.kafka.codec import response_class
from broker.kafka.fetch_codec import PartitionResult, encode_response


def decode(version: int, parts: list[bytes | FileRegion]) -> object:
    assert all(isinstance(p, bytes) for p in parts)
    data = b"".join(p for p in parts if isinstance(p, bytes))
    entity, size = entity_reader(response_class(1, version))(data, 0)
    assert size == len(data), "the whole answer is one response"
    return entity


@pytest.mark.parametrize("version", range(4, 13))
def test_a_partition_without_records_has_empty_not_null_records(version: int) -> None:
    """Kafka answers empty records, never null: librdkafka < 2.1 (Debian's kcat) rejects a null record set as
    "invalid MessageSetSize -1" and never sees the partition's end (``kcat -e`` would not finish)."""
    results = [PartitionResult("t", 0, high_watermark=5, log_start_offset=0),
               PartitionResult("t", 1, error="NOT_LEADER_OR_FOLLOWER")]  # fmt: skip
    answer = decode(version, encode_response(version, results))
    partitions = answer.responses[0].partitions  # type: ignore[attr-defined]
    assert [p.records for p in partitions] == [b"", b""]
    assert partitions[0].high_watermark == 5
    assert partitions[0].last_stable_offset == 5


@pytest.mark.parametrize("version", [4, 11, 12])
def test_records_and_read_committed_aborted_list(version: int) -> None:
    results = [PartitionResult("t", 0, high_watermark=9, log_start_offset=2, records=b"batch-bytes")]
    plain = decode(version, encode_response(version, results)).responses[0].partitions[0]  # type: ignore[attr-defined]
    assert plain.records == b"batch-bytes"
    assert plain.aborted_transactions is None
    committed = decode(version, encode_response(version, results, read_committed=True))
    assert committed.responses[0].partitions[0].aborted_transactions == ()  # type: ignore[attr-defined]
