"""Hostile Fetch requests (issue 15): odd offsets, epochs, sizes and ids, and a client posing as a follower.
Each asserts the error names what is wrong, then :func:`check_healthy`."""

from __future__ import annotations

import pytest

from proto import broker_pb2 as pb
from tests.broker.cluster import Cluster
from tests.hostile.health import CALL_TIMEOUT_S, LEDGER_TOPIC, Ledger, check_healthy, live_leader

pytestmark = pytest.mark.hostile


def fetch(
    cluster: Cluster, *, offset: int = 0, epoch: int = -1, max_bytes: int = 1 << 20, partition_max_bytes: int = 1 << 20,
    min_bytes: int = 1, max_wait_ms: int = 0, replica_id: int = -1, replica_epoch: int = -1,
    topic: str = LEDGER_TOPIC, partition: int = 0, via: int | None = None,
) -> pb.FetchResponse:  # fmt: skip
    target = live_leader(cluster, LEDGER_TOPIC, partition) if via is None else via
    request = pb.FetchRequest(
        replica_id=replica_id, replica_epoch=replica_epoch, max_wait_ms=max_wait_ms, min_bytes=min_bytes,
        max_bytes=max_bytes, topics=[pb.FetchTopic(name=topic, partitions=[pb.FetchPartition(
            partition=partition, fetch_offset=offset, partition_max_bytes=partition_max_bytes,
            current_leader_epoch=epoch)])],
    )  # fmt: skip
    response: pb.FetchResponse = cluster.broker_stub(target).Fetch(request, timeout=CALL_TIMEOUT_S)
    return response


def answer(response: pb.FetchResponse) -> pb.FetchPartitionResponse:
    return response.topics[0].partitions[0]


@pytest.mark.parametrize("offset", [-1, -(2**63), 2**63 - 1, 10**12])
def test_offsets_out_of_the_log_are_offset_out_of_range(cluster: Cluster, ledger: Ledger, offset: int) -> None:
    result = answer(fetch(cluster, offset=offset))
    assert result.error.code == "OFFSET_OUT_OF_RANGE"
    assert f"offset {offset} is out of range" in result.error.message
    assert result.log_start_offset == 0
    assert result.log_end_offset > 0  # the answer says where the log is
    check_healthy(cluster, ledger)


def test_leader_epochs_from_the_past_and_the_future_are_named(cluster: Cluster, ledger: Ledger) -> None:
    epoch = cluster.partition_metadata(LEDGER_TOPIC, 0).leader_epoch
    assert answer(fetch(cluster, epoch=epoch + 1000)).error.code == "UNKNOWN_LEADER_EPOCH"
    if epoch > 0:
        assert answer(fetch(cluster, epoch=epoch - 1)).error.code == "FENCED_LEADER_EPOCH"
    assert answer(fetch(cluster, epoch=-(2**31))).error.code == "FENCED_LEADER_EPOCH"
    check_healthy(cluster, ledger)


@pytest.mark.parametrize(("max_bytes", "partition_max_bytes"), [(-1, -1), (0, 0), (1, 1), (2**31 - 1, 2**31 - 1)])
def test_odd_sizes_give_at_least_one_batch_and_at_most_the_caps(
    cluster: Cluster, ledger: Ledger, max_bytes: int, partition_max_bytes: int
) -> None:
    result = answer(fetch(cluster, max_bytes=max_bytes, partition_max_bytes=partition_max_bytes))
    assert not result.error.code, result.error
    assert 0 < len(result.records) <= 57671680 + 1048588  # fetch.max.bytes plus one whole batch at most
    check_healthy(cluster, ledger)


def test_a_min_bytes_never_reached_answers_after_max_wait_ms(cluster: Cluster, ledger: Ledger) -> None:
    end = answer(fetch(cluster)).high_watermark
    result = answer(fetch(cluster, offset=end, min_bytes=2**31 - 1, max_wait_ms=300))
    assert not result.error.code
    assert result.records == b""
    check_healthy(cluster, ledger)


@pytest.mark.parametrize(("topic", "partition", "code"), [
    ("no-such-topic", 0, "UNKNOWN_TOPIC_OR_PARTITION"), (LEDGER_TOPIC, 3, "UNKNOWN_TOPIC_OR_PARTITION"),
    (LEDGER_TOPIC, -1, "UNKNOWN_TOPIC_OR_PARTITION"), ("", 0, "UNKNOWN_TOPIC_OR_PARTITION"),
    ("x" * 100_000, 0, "UNKNOWN_TOPIC_OR_PARTITION"),
])  # fmt: skip
def test_partitions_that_do_not_exist_are_unknown(
    cluster: Cluster, ledger: Ledger, topic: str, partition: int, code: str
) -> None:
    result = answer(fetch(cluster, topic=topic, partition=partition, via=0))
    assert result.error.code == code
    check_healthy(cluster, ledger)


def test_a_fetch_posing_as_a_follower_is_stale_broker_epoch_and_moves_no_high_watermark(
    cluster: Cluster, ledger: Ledger
) -> None:
    """A replica id must come with that broker's current broker epoch: a client claiming to be a follower that
    already has the whole log (a fetch offset at the log end) would otherwise move the high watermark."""
    leader = live_leader(cluster, LEDGER_TOPIC, 0)
    follower = next(b for b in cluster.partition_metadata(LEDGER_TOPIC, 0).replicas if b != leader)
    before = answer(fetch(cluster))
    for replica_epoch in (-1, 0, 2**62):
        result = answer(fetch(cluster, offset=before.log_end_offset, replica_id=follower,
                              replica_epoch=replica_epoch))  # fmt: skip
        assert result.error.code == "STALE_BROKER_EPOCH"
        assert f"broker {follower}" in result.error.message
        assert result.records == b""
    result = answer(fetch(cluster, replica_id=leader + 100, replica_epoch=1))
    assert result.error.code == "STALE_BROKER_EPOCH"
    assert "not registered" in result.error.message
    assert answer(fetch(cluster)).high_watermark == before.high_watermark
    check_healthy(cluster, ledger)
