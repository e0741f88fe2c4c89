"""The Admin client's group calls: list, describe (with committed offsets and lag), delete, alter and reset offsets.

Kafka's ``kafka-consumer-groups`` verbs. Every group call goes to the group's coordinator (found with
FindCoordinator, followed when it moves); ``list_groups`` asks every broker, since each answers only for
the groups it coordinates. Offsets are changed with an OffsetCommit from no member (epoch -1), which the
coordinator accepts only while the group has no members: like Kafka, resetting needs an inactive group.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterable, Mapping
from functools import partial
from typing import Any

from odradek.errors import (
    GroupIdNotFoundError,
    KafkaError,
    KafkaTimeoutError,
    NetworkError,
    NonEmptyGroupError,
    error_from_code,
)
from odradek.group.coordinator import CoordinatorClient
from odradek.group.offsets import MemberIdentity, commit_error, commit_request, fetch_request, fetch_result
from odradek.net import ClusterClient
from odradek.types import GroupDescription, GroupListing, MemberDescription, PartitionLag, TopicPartition
from proto import broker_pb2

EARLIEST = -2
LATEST = -1
ResetSpec = str | int | dt.datetime  # "earliest" | "latest" | an offset | a point in time


def _partitions(topics: Iterable[Any]) -> list[TopicPartition]:
    return sorted(TopicPartition(t.topic, p) for t in topics for p in t.partitions)


class GroupAdmin:
    """Group calls for :class:`odradek.Admin`. Thread-safe: calls are independent."""

    def __init__(self, client: ClusterClient, timeout_ms: float) -> None:
        self._client = client
        self._timeout_ms = timeout_ms

    def _coordinator(self, group_id: str) -> CoordinatorClient:
        if not group_id:
            raise ValueError("a group id must not be empty")
        return CoordinatorClient(self._client, group_id)

    # ------------------------------------------------------------------------------------ list

    def list_groups(self, states: Iterable[str] = ()) -> list[GroupListing]:
        """Every group of the cluster (each broker answers for the groups it coordinates)."""
        if self._client.cluster.updated_ms == 0.0:
            self._client.refresh()
        request = broker_pb2.ListGroupsRequest(states_filter=list(states))
        found: dict[str, GroupListing] = {}
        answered = 0
        deadline = self._client.clock.monotonic_ms() + self._timeout_ms
        for node_id in sorted(self._client.cluster.brokers):
            try:
                response = self._list_on(node_id, request, deadline)
            except NetworkError:
                continue  # a broker that is down coordinates nothing right now
            answered += 1
            for g in response.groups:
                found[g.group_id] = GroupListing(g.group_id, g.state, g.group_type or "consumer", node_id)
        if not answered:
            raise NetworkError("no broker answered ListGroups")
        return [found[g] for g in sorted(found)]

    def _list_on(self, node_id: int, request: broker_pb2.ListGroupsRequest, deadline: float) -> Any:
        """ListGroups on one broker; a retriable answer (COORDINATOR_LOAD_IN_PROGRESS while it loads a
        partition, COORDINATOR_NOT_AVAILABLE) is asked again after a backoff until ``deadline``, as Kafka's
        admin client does; then KafkaTimeoutError. Any other error is raised at once."""
        clock = self._client.clock
        attempt = 0
        while True:
            response = self._client.call_node(node_id, "ListGroups", request)
            code = response.error.code
            if not code:
                return response
            why = f"listing groups on broker {node_id}: {code} {response.error.message}".rstrip()
            error = error_from_code(code, why)
            if not error.retriable:
                raise error
            remaining = deadline - clock.monotonic_ms()
            if remaining <= 0:
                raise KafkaTimeoutError(f"listing groups on broker {node_id} did not succeed within "
                                        f"{self._timeout_ms:.0f} ms; last error: {error}")  # fmt: skip
            time.sleep(min(self._client.backoff.backoff_ms(attempt), remaining) / 1000)
            attempt += 1

    # -------------------------------------------------------------------------------- describe

    def describe_group(self, group_id: str) -> GroupDescription:
        """State, members with their assignments, and each partition's committed offset, end offset and lag."""
        coordinator = self._coordinator(group_id)
        response = coordinator.call(
            "ConsumerGroupDescribe",
            lambda: broker_pb2.ConsumerGroupDescribeRequest(group_ids=[group_id]),
            self._timeout_ms,
            error_code=lambda r: r.groups[0].error.code if r.groups else "",
        )
        if not response.groups:
            raise GroupIdNotFoundError(f"group {group_id!r} does not exist")
        g = response.groups[0]
        if g.error.code == GroupIdNotFoundError.code:
            raise GroupIdNotFoundError(f"group {group_id!r} does not exist")
        if g.error.code:
            raise error_from_code(g.error.code, f"describing group {group_id!r}: {g.error.message or g.error.code}")
        members = [
            MemberDescription(
                member_id=m.member_id,
                instance_id=m.instance_id or None,
                client_id=m.client_id,
                client_host=m.client_host,
                member_epoch=m.member_epoch,
                subscribed_topics=sorted(m.subscribed_topic_names),
                subscribed_pattern=m.subscribed_topic_regex or None,
                assignment=_partitions(m.assignment),
                target_assignment=_partitions(m.target_assignment),
                state=m.state,
                rack_id=m.rack_id,
            )
            for m in sorted(g.members, key=lambda m: m.member_id)
        ]
        committed = self.committed(group_id, coordinator)
        return GroupDescription(
            group_id=group_id,
            state=g.group_state,
            group_epoch=g.group_epoch,
            assignment_epoch=g.assignment_epoch,
            assignor=g.assignor_name,
            coordinator_id=coordinator.node_id,
            members=members,
            offsets=self._lags(members, committed),
        )

    def committed(
        self, group_id: str, coordinator: CoordinatorClient | None = None
    ) -> dict[TopicPartition, int | None]:
        """Every committed offset of the group."""
        coordinator = coordinator or self._coordinator(group_id)
        response = coordinator.call(
            "OffsetFetch", partial(fetch_request, group_id, MemberIdentity(), None), self._timeout_ms
        )
        return fetch_result(group_id, response)

    def _lags(
        self, members: list[MemberDescription], committed: Mapping[TopicPartition, int | None]
    ) -> list[PartitionLag]:
        owners = {tp: m.member_id for m in members for tp in m.assignment}
        partitions = sorted(set(owners) | set(committed))
        ends: dict[TopicPartition, int] = {}
        if partitions:
            try:
                listed = self._client.list_offsets(dict.fromkeys(partitions, LATEST), self._timeout_ms)
                ends = {tp: lo.offset for tp, lo in listed.items()}
            except KafkaError:
                ends = {}  # lag unknown; the committed offsets are still worth showing
        out = []
        for tp in partitions:
            offset, end = committed.get(tp), ends.get(tp)
            lag = None if offset is None or end is None else max(0, end - offset)
            out.append(PartitionLag(tp, offset, end, lag, owners.get(tp)))
        return out

    # ---------------------------------------------------------------------------------- delete

    def delete_groups(self, group_ids: Iterable[str]) -> None:
        """Delete groups without members, with their committed offsets; raises the first failure, naming all."""
        if isinstance(group_ids, str):
            raise TypeError(f"give a list of group ids, not the string {group_ids!r}")
        failures: list[tuple[str, str, str]] = []
        for group_id in group_ids:
            coordinator = self._coordinator(group_id)
            response = coordinator.call(
                "DeleteGroups",
                partial(broker_pb2.DeleteGroupsRequest, group_ids=[group_id]),
                self._timeout_ms,
                error_code=lambda r: r.results[0].error.code if r.results else "",
            )
            for result in response.results:
                if result.error.code:
                    failures.append((result.group_id, result.error.code, result.error.message))
        if failures:
            group_id, code, message = failures[0]
            if code == NonEmptyGroupError.code:
                message = f"group {group_id!r} still has members: stop its consumers first"
            names = "; ".join(f"{g!r}: {c}" for g, c, _ in failures)
            raise error_from_code(code, message if len(failures) == 1 else f"could not delete {names}")

    # --------------------------------------------------------------------------------- offsets

    def alter_group_offsets(self, group_id: str, offsets: Mapping[TopicPartition, int]) -> None:
        """Set committed offsets of a group that has no active members (else NonEmptyGroupError)."""
        coordinator = self._coordinator(group_id)
        wanted = {TopicPartition(*tp): offset for tp, offset in offsets.items()}
        response = coordinator.call(
            "OffsetCommit", partial(commit_request, group_id, MemberIdentity(), wanted), self._timeout_ms
        )
        if response.error.code == "UNKNOWN_MEMBER_ID":
            raise NonEmptyGroupError(
                f"offsets of group {group_id!r} can only be changed while it has no active members: stop them first"
            )
        error = commit_error(group_id, response)
        if error is not None:
            raise error

    def plan_reset(
        self, group_id: str, partitions: Iterable[TopicPartition], spec: ResetSpec
    ) -> dict[TopicPartition, int]:
        """The offsets a reset to ``spec`` would commit (offsets are kept within the log's range, as Kafka does)."""
        wanted = sorted({TopicPartition(*tp) for tp in partitions})
        if not wanted:
            raise ValueError("name at least one partition to reset")
        timeout = self._timeout_ms
        earliest = self._list(wanted, EARLIEST, timeout)
        latest = self._list(wanted, LATEST, timeout)
        if spec == "earliest":
            return earliest
        if spec == "latest":
            return latest
        if isinstance(spec, dt.datetime):
            if spec.tzinfo is None:
                raise ValueError(f"give the datetime with its time zone, got {spec.isoformat()}")
            at = self._list(wanted, int(spec.timestamp() * 1000), timeout)
            return {tp: latest[tp] if at[tp] < 0 else at[tp] for tp in wanted}  # nothing after it: the end
        if type(spec) is int:
            return {tp: min(max(spec, earliest[tp]), latest[tp]) for tp in wanted}
        raise ValueError(f"reset to earliest, latest, an offset or a datetime, not {spec!r}")

    def _list(self, partitions: list[TopicPartition], timestamp: int, timeout: float) -> dict[TopicPartition, int]:
        listed = self._client.list_offsets(dict.fromkeys(partitions, timestamp), timeout, fail_on_unknown_topic=True)
        return {tp: listed[tp].offset for tp in partitions}

    def reset_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition], spec: ResetSpec, *, execute: bool
    ) -> dict[TopicPartition, int]:
        """Plan (and with ``execute`` commit) a reset; refused while the group has members."""
        state = self._state(group_id)
        if state not in ("", "Empty", "Dead"):
            raise NonEmptyGroupError(
                f"offsets of group {group_id!r} can only be reset while it is inactive, but it is {state}"
            )
        plan = self.plan_reset(group_id, partitions, spec)
        if execute:
            self.alter_group_offsets(group_id, plan)
        return plan

    def _state(self, group_id: str) -> str:
        """The group's state ("" when the coordinator does not know it)."""
        try:
            return self.describe_group(group_id).state
        except GroupIdNotFoundError:
            return ""
