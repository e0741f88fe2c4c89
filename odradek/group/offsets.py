"""OffsetCommit and OffsetFetch: requests from plain values, answers to plain values or typed errors.

Offsets committed are the *next* offset to read (Kafka's convention). A member commits with its member
id and latest epoch; a consumer that only uses ``assign()`` (or the admin resetting a group) commits
with an empty member id and epoch -1, which the coordinator accepts only into a group without members.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from odradek.errors import (
    CommitFailedError,
    FencedInstanceIdError,
    KafkaError,
    error_from_code,
)
from odradek.types import TopicPartition
from proto import broker_pb2

NO_MEMBER_EPOCH = -1
MEMBER_GONE_CODES = frozenset({"UNKNOWN_MEMBER_ID", "FENCED_MEMBER_EPOCH", "ILLEGAL_GENERATION"})


@dataclass(frozen=True, slots=True)
class MemberIdentity:
    """Who commits: a member (id and latest epoch) or nobody (empty id, epoch -1)."""

    member_id: str = ""
    member_epoch: int = NO_MEMBER_EPOCH
    instance_id: str = ""


def by_topic(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for tp in sorted(partitions):
        out.setdefault(tp.topic, []).append(tp.partition)
    return out


def commit_request(
    group_id: str, who: MemberIdentity, offsets: Mapping[TopicPartition, int], metadata: str = ""
) -> broker_pb2.OffsetCommitRequest:
    topics: dict[str, list[broker_pb2.OffsetCommitRequest.Partition]] = {}
    for tp, offset in sorted(offsets.items()):
        if type(offset) is not int or offset < 0:
            raise ValueError(f"the offset to commit for {tp} must be a non-negative int, got {offset!r}")
        topics.setdefault(tp.topic, []).append(
            broker_pb2.OffsetCommitRequest.Partition(
                partition=tp.partition, committed_offset=offset, committed_leader_epoch=-1, committed_metadata=metadata
            )
        )
    return broker_pb2.OffsetCommitRequest(
        group_id=group_id,
        member_id=who.member_id,
        member_epoch=who.member_epoch,
        instance_id=who.instance_id,
        topics=[broker_pb2.OffsetCommitRequest.Topic(name=name, partitions=parts) for name, parts in topics.items()],
    )


def commit_error(group_id: str, response: broker_pb2.OffsetCommitResponse) -> KafkaError | CommitFailedError | None:
    """The error of a commit answer (None: every partition committed).

    A member the coordinator no longer knows gets :class:`CommitFailedError` (Kafka's
    CommitFailedException): its partitions may already belong to another member.
    """
    code, message = response.error.code, response.error.message
    if code:
        return group_error(group_id, code, message, "committing offsets")
    failures = [
        (TopicPartition(t.name, p.partition), p.error) for t in response.topics for p in t.partitions if p.error.code
    ]
    if not failures:
        return None
    tp, first = failures[0]
    names = ", ".join(f"{t}: {e.code}" for t, e in failures)
    return error_from_code(first.code, f"committing offsets of group {group_id!r} failed for {names}")


def group_error(group_id: str, code: str, message: str, doing: str) -> KafkaError | CommitFailedError:
    where = f"{doing} for group {group_id!r}"
    if code in MEMBER_GONE_CODES:
        return CommitFailedError(
            f"{where} failed: this consumer is no longer a member of the group ({code}); its partitions may "
            "belong to another member now, and the records since the last commit may be delivered again"
        )
    if code == FencedInstanceIdError.code:
        return FencedInstanceIdError(
            f"{where}: another consumer with the same group.instance.id joined the group ({code})"
        )
    return error_from_code(code, f"{where}: {message or code}")


def fetch_request(
    group_id: str, who: MemberIdentity, partitions: Iterable[TopicPartition] | None
) -> broker_pb2.OffsetFetchRequest:
    """``partitions`` None: every partition the group committed."""
    return broker_pb2.OffsetFetchRequest(
        group_id=group_id,
        member_id=who.member_id,
        member_epoch=who.member_epoch,
        topics=[]
        if partitions is None
        else [broker_pb2.TopicPartitions(topic=t, partitions=ps) for t, ps in by_topic(partitions).items()],
    )


def fetch_result(group_id: str, response: broker_pb2.OffsetFetchResponse) -> dict[TopicPartition, int | None]:
    """Committed offsets by partition (None: nothing committed); raises the answer's error."""
    if response.error.code:
        raise group_error(group_id, response.error.code, response.error.message, "fetching committed offsets")
    out: dict[TopicPartition, int | None] = {}
    for t in response.topics:
        for p in t.partitions:
            tp = TopicPartition(t.name, p.partition)
            if p.error.code:
                raise error_from_code(
                    p.error.code, f"fetching the committed offset of {tp} for group {group_id!r}: {p.error.code}"
                )
            out[tp] = p.committed_offset if p.committed_offset >= 0 else None
    return out
