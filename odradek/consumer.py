"""The Consumer: assign partitions, poll records, seek; positions are the consumer's own.

    c = Consumer({"bootstrap.servers": "127.0.0.1:9092", "auto.offset.reset": "earliest"})
    c.assign([TopicPartition("orders", 0)])
    for record in c.poll(timeout_ms=1000): ...
    c.close()

A partition without a position (just assigned, after ``seek_to_beginning``/``seek_to_end``, or after
OFFSET_OUT_OF_RANGE) gets one from its leader by ListOffsets: ``auto.offset.reset`` earliest or
latest; with ``none`` the next ``poll`` raises NoOffsetForPartitionError (OffsetOutOfRangeError after
an out-of-range fetch).

With a ``group.id`` the consumer can ``subscribe`` instead: the group's coordinator assigns it partitions
(KIP-848, see :mod:`odradek.group`), the rebalance listener hears of every change inside ``poll``, and
positions start from the group's committed offsets (else ``auto.offset.reset``). Partitions given to
``assign`` by a consumer with a ``group.id`` start from the group's committed offsets too, as in Kafka.
``commit``,
``commit_async`` and ``committed`` work for any consumer with a ``group.id`` (a consumer that only
``assign``s commits as a non-member, which the coordinator accepts while the group has no members).
``enable.auto.commit`` commits the positions every ``auto.commit.interval.ms`` from ``poll``, before
partitions are revoked, and on ``close``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from types import TracebackType
from typing import TypeVar

from common.clock import SYSTEM_CLOCK, Clock
from odradek.config import ConsumerConfig
from odradek.errors import (
    IllegalStateError,
    InvalidGroupIdError,
    KafkaError,
    KafkaTimeoutError,
    NoOffsetForPartitionError,
    OdradekError,
)
from odradek.fetcher import Fetcher, PartitionState, RecordColumns
from odradek.group.listener import ConsumerRebalanceListener, RebalanceListener
from odradek.group.manager import CommitCallback, GroupManager
from odradek.group.membership import MembershipSettings, Reconciliation, Subscription
from odradek.net import ClusterClient, ListedOffset
from odradek.types import ConsumerGroupMetadata, ConsumerRecord, OffsetAndTimestamp, TopicPartition
from proto import broker_pb2

_Polled = TypeVar("_Polled", ConsumerRecord, RecordColumns)

EARLIEST = -2
LATEST = -1
MAX_WAIT_SLICE_MS = 100.0
CLOSE_TIMEOUT_MS = 30000.0
MIN_COMMITTED_LOOKUP_MS = 500.0

log = logging.getLogger(__name__)


class Consumer:
    """A Kafka-style consumer of assigned partitions.

    Not thread-safe, like Kafka's KafkaConsumer: call it from one thread (gRPC threads only deliver
    fetch answers to it through a queue).
    """

    def __init__(self, config: Mapping[str, object], *, clock: Clock | None = None) -> None:
        self.config = cfg = ConsumerConfig.from_mapping(config)
        self._clock = clock or SYSTEM_CLOCK
        self._client = ClusterClient.for_config(
            cfg,
            max_message_bytes=max(cfg.fetch_max_bytes, cfg.max_partition_fetch_bytes),
            clock=self._clock,
            max_concurrent_calls=32,
            name="odradek-consumer",
        )
        self._fetcher = Fetcher(self._client, cfg)
        self._states: dict[TopicPartition, PartitionState] = {}
        self._isolation_level = 1 if cfg.isolation_level == "read_committed" else 0
        self._closed = False
        self._group: GroupManager | None = None
        self._subscription: Subscription | None = None
        self._listener: RebalanceListener = ConsumerRebalanceListener()
        self._needs_committed: set[TopicPartition] = set()  # assigned by the group: position from OffsetFetch
        self._next_auto_commit_ms = self._clock.monotonic_ms() + cfg.auto_commit_interval_ms

    # ------------------------------------------------------------------------------ assignment

    def subscribe(
        self,
        topics: Iterable[str] | re.Pattern[str] = (),
        listener: RebalanceListener | None = None,
        *,
        pattern: str | re.Pattern[str] | None = None,
    ) -> None:
        """Join the group (``group.id``) for these topics, or for every topic matching ``pattern`` (a regex,
        matched by the coordinator against the whole topic name); ``listener`` hears of partition changes.

        Calling it again changes the subscription. The partitions arrive from the coordinator during
        ``poll``; ``assign`` and ``subscribe`` exclude each other.
        """
        self._ensure_open()
        group = self._group_manager("subscribe()")
        if isinstance(topics, str):
            raise TypeError(f"subscribe() takes a list of topic names, not the string {topics!r}")
        names: tuple[str, ...] = ()
        if isinstance(topics, re.Pattern):
            pattern = topics
        else:
            names = tuple(sorted(set(topics)))
        if pattern is not None:
            if names:
                raise ValueError("subscribe() takes topics or a pattern, not both")
            regex = pattern.pattern if isinstance(pattern, re.Pattern) else pattern
            re.compile(regex)  # a bad pattern fails here, not at the coordinator
            subscription = Subscription(pattern=regex)
        elif names:
            subscription = Subscription(topics=names)
        else:
            raise ValueError("subscribe() needs at least one topic or a pattern (use unsubscribe() to leave)")
        if self._subscription is None and self._states:
            raise IllegalStateError("subscribe() and assign() exclude each other: unsubscribe() first")
        if listener is not None:
            for method in ("on_partitions_revoked", "on_partitions_assigned"):
                if not callable(getattr(listener, method, None)):
                    raise TypeError(f"the listener must have a {method}() method (see ConsumerRebalanceListener)")
            self._listener = listener
        self._subscription = subscription
        self._client.add_topics(names)
        group.subscribe(subscription)

    def unsubscribe(self) -> None:
        """Leave the group (revoking the partitions first) or drop the manual assignment."""
        if self._subscription is not None and self._group is not None:
            self._subscription = None
            self._leave_group(static=False)
        self.assign(())

    def subscription(self) -> set[str]:
        """The topics subscribed to (a pattern subscription: the topics currently assigned)."""
        if self._subscription is None:
            return set()
        return set(self._subscription.topics) or {tp.topic for tp in self._states}

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Consume exactly these partitions (replacing the previous assignment; kept ones keep their position).

        With a ``group.id``, a newly assigned partition starts at the group's committed offset, and at
        ``auto.offset.reset`` only when the group has none (as Kafka's consumer); ``seek`` overrides both."""
        self._ensure_open()
        if self._subscription is not None:
            raise IllegalStateError("assign() and subscribe() exclude each other: unsubscribe() first")
        before = set(self._states)
        self._set_assignment(partitions)
        if self.config.group_id:
            self._group_manager("assign()")
            self._needs_committed |= {tp for tp, state in self._states.items()
                                      if tp not in before and state.position is None}  # fmt: skip

    def _set_assignment(self, partitions: Iterable[TopicPartition]) -> None:
        wanted: list[TopicPartition] = []
        for tp in partitions:
            if not isinstance(tp, tuple) or len(tp) != 2 or not isinstance(tp[0], str) or type(tp[1]) is not int:
                raise TypeError(f"assign() takes TopicPartition(topic, partition) values, got {tp!r}")
            wanted.append(TopicPartition(*tp))
        states = {}
        for tp in sorted(set(wanted)):
            states[tp] = self._states.get(tp) or PartitionState(tp, self.config.max_partition_fetch_bytes)
        self._states = states
        self._needs_committed &= set(states)
        subscribed = self._subscription.topics if self._subscription is not None else ()
        self._client.set_topics([*(tp.topic for tp in states), *subscribed])

    def assignment(self) -> set[TopicPartition]:
        return set(self._states)

    def pause(self, *partitions: TopicPartition) -> None:
        for tp in partitions:
            self._state(tp).paused = True

    def resume(self, *partitions: TopicPartition) -> None:
        for tp in partitions:
            self._state(tp).paused = False

    def paused(self) -> set[TopicPartition]:
        return {tp for tp, state in self._states.items() if state.paused}

    # ------------------------------------------------------------------------------- positions

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """The next poll returns records of ``partition`` from ``offset`` on."""
        if type(offset) is not int or offset < 0:
            raise ValueError(f"seek offset must be a non-negative int, got {offset!r}")
        self._state(partition).seek(offset)
        self._needs_committed.discard(partition)

    def seek_to_beginning(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """Move to the log start offset of ``partitions`` (default: all assigned), looked up lazily."""
        for tp in self._targets(partitions):
            self._state(tp).request_reset("earliest")
            self._needs_committed.discard(tp)

    def seek_to_end(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """Move to the end (the high watermark) of ``partitions`` (default: all assigned), looked up lazily."""
        for tp in self._targets(partitions):
            self._state(tp).request_reset("latest")
            self._needs_committed.discard(tp)

    def position(self, partition: TopicPartition, timeout_ms: float | None = None) -> int:
        """The offset of the next record poll() returns, looking it up now if needed."""
        state = self._state(partition)
        deadline = self._clock.monotonic_ms() + (
            self.config.default_api_timeout_ms if timeout_ms is None else timeout_ms
        )
        while state.position is None:
            if self._group is not None and partition in self._needs_committed:
                remaining = deadline - self._clock.monotonic_ms()
                self._positions_from_committed(self._group, max(MIN_COMMITTED_LOOKUP_MS, remaining))
            self._reset_positions([state])
            if state.position is not None:
                break
            now = self._clock.monotonic_ms()
            if now >= deadline:
                raise KafkaTimeoutError(f"could not find the position of {partition} within the timeout")
            self._client.maybe_refresh()
            self._fetcher.wait((min(deadline, state.retry_at_ms) - now) / 1000 if state.retry_at_ms > now else 0.0)
        return state.position

    def highwater(self, partition: TopicPartition) -> int | None:
        """The high watermark the last fetch of ``partition`` reported (None before any)."""
        mark = self._state(partition).high_watermark
        return None if mark < 0 else mark

    # ------------------------------------------------------------------------------------ poll

    def poll(self, timeout_ms: float = 0) -> list[ConsumerRecord]:
        """Records from the assigned partitions: at most ``max.poll.records``, waiting up to ``timeout_ms``."""
        return self._poll(timeout_ms, self._fetcher.collect)

    def poll_columns(self, timeout_ms: float = 0) -> list[RecordColumns]:
        """:meth:`poll`, with the records as columns: one :class:`odradek.fetcher.RecordColumns` (topic,
        partition, timestamp type, and lists of offsets, timestamps, keys, values, headers) per batch or part
        of one, at most ``max.poll.records`` records in all. Positions, commits and errors are as for
        :meth:`poll`; no record object is made, which is what columnar readers (the Spark source) want."""
        return self._poll(timeout_ms, self._fetcher.collect_columns)

    def _poll(
        self, timeout_ms: float, collect: Callable[[Mapping[TopicPartition, PartitionState], int], list[_Polled]]
    ) -> list[_Polled]:
        self._ensure_open()
        if not self._states and self._subscription is None:
            raise IllegalStateError("the consumer is not assigned any partitions and not subscribed to any topic")
        deadline = self._clock.monotonic_ms() + max(0.0, timeout_ms)
        max_records = self.config.max_poll_records
        if self._group is None and self.config.group_id and self.config.enable_auto_commit:
            self._group_manager("poll()")  # assign() with a group.id auto-commits too, as in Kafka
        if self._group is not None:
            self._group.record_poll()
        while True:
            now = self._clock.monotonic_ms()
            if self._group is not None:
                self._group_step(now, deadline)
            self._client.maybe_refresh()
            self._fetcher.handle_answers(self._states, now)
            self._reset_positions([s for s in self._states.values() if s.position is None])
            records = collect(self._states, max_records)
            if records and self._fetcher.caught_up(self._states):
                # Nothing more to read yet: the next fetch would only wait at the leader, so it goes out when
                # poll() is called again, not between these records and the application. On a busy machine the
                # send wakes the broker, which often takes this CPU from the consumer until it has parked the
                # fetch (docs/LATENCY.md: 0.1-0.2 ms of every record's end-to-end latency). A consumer behind
                # the high watermark sends it now, as Kafka's does: its next answer is on the way while the
                # application works.
                return records
            self._fetcher.send_fetches(self._states, now)
            if records:
                return records
            remaining = deadline - self._clock.monotonic_ms()
            if remaining <= 0:
                return records
            self._fetcher.wait(min(remaining, self._idle_ms(now)) / 1000)

    def _idle_ms(self, now: float) -> float:
        wake = [s.retry_at_ms - now for s in self._states.values() if s.retry_at_ms > now]
        wake.append(self._client.metadata_due_in_ms(now))
        return max(1.0, min(min(wake), MAX_WAIT_SLICE_MS))

    def _reset_positions(self, states: list[PartitionState]) -> None:
        """Look up the positions of ``states`` (one ListOffsets round); failures back off."""
        now = self._clock.monotonic_ms()
        due = [s for s in states if s.position is None and s.retry_at_ms <= now and s.tp not in self._needs_committed]
        if not due:
            return
        timestamps: dict[TopicPartition, int] = {}
        for state in due:
            strategy = state.reset or self.config.auto_offset_reset
            if strategy == "none":
                raise NoOffsetForPartitionError(
                    f"{state.tp} has no position and auto.offset.reset is none; seek() first"
                )
            timestamps[state.tp] = EARLIEST if strategy == "earliest" else LATEST
        found, _ = self._client.list_offsets_once(timestamps, self._isolation_level)
        for state in due:
            listed = found.get(state.tp)
            if listed is not None and listed.offset >= 0:
                state.seek(listed.offset)
            else:
                state.retry_at_ms = now + self._client.backoff.backoff_ms(state.attempts)
                state.attempts += 1

    # --------------------------------------------------------------------------------- offsets

    def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int], timeout_ms: float | None = None
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """For each partition, the first offset whose timestamp is at or after the one given (None: no such record)."""
        for tp, ts in timestamps.items():
            if type(ts) is not int or ts < 0:
                raise ValueError(f"the timestamp for {tp} must be a non-negative int of milliseconds, got {ts!r}")
        listed = self._list(timestamps, timeout_ms)
        return {
            tp: None
            if lo.offset < 0
            else OffsetAndTimestamp(lo.offset, lo.timestamp, lo.leader_epoch if lo.leader_epoch >= 0 else None)
            for tp, lo in listed.items()
        }

    def beginning_offsets(
        self, partitions: Iterable[TopicPartition], timeout_ms: float | None = None
    ) -> dict[TopicPartition, int]:
        return {tp: lo.offset for tp, lo in self._list(dict.fromkeys(partitions, EARLIEST), timeout_ms).items()}

    def end_offsets(
        self, partitions: Iterable[TopicPartition], timeout_ms: float | None = None
    ) -> dict[TopicPartition, int]:
        return {tp: lo.offset for tp, lo in self._list(dict.fromkeys(partitions, LATEST), timeout_ms).items()}

    def _list(
        self, timestamps: Mapping[TopicPartition, int], timeout_ms: float | None
    ) -> dict[TopicPartition, ListedOffset]:
        self._ensure_open()
        timeout = self.config.default_api_timeout_ms if timeout_ms is None else timeout_ms
        return self._client.list_offsets(
            {TopicPartition(*tp): ts for tp, ts in timestamps.items()}, timeout, self._isolation_level
        )

    # ---------------------------------------------------------------------------------- groups

    def commit(self, offsets: Mapping[TopicPartition, int] | None = None, timeout_ms: float | None = None) -> None:
        """Commit ``offsets`` (the next offset to read, per partition; default: every position) and wait.

        Raises CommitFailedError when this consumer is no longer a member of the group (its partitions may
        have moved), FencedInstanceIdError, or KafkaTimeoutError.
        """
        self._ensure_open()
        group = self._group_manager("commit()")
        group.commit_sync(self._to_commit(offsets), timeout_ms)

    def commit_async(
        self, offsets: Mapping[TopicPartition, int] | None = None, callback: CommitCallback | None = None
    ) -> Future[None]:
        """Commit in the background; ``callback(offsets, error)`` runs in a later ``poll``/``commit``/``close``."""
        self._ensure_open()
        return self._group_manager("commit_async()").commit_async(self._to_commit(offsets), callback)

    def committed(self, partition: TopicPartition, timeout_ms: float | None = None) -> int | None:
        """The group's committed offset of ``partition`` (None: nothing committed)."""
        return self.committed_offsets([partition], timeout_ms)[TopicPartition(*partition)]

    def committed_offsets(
        self, partitions: Iterable[TopicPartition], timeout_ms: float | None = None
    ) -> dict[TopicPartition, int | None]:
        """The group's committed offsets of ``partitions`` (None where nothing is committed)."""
        self._ensure_open()
        wanted = [TopicPartition(*tp) for tp in partitions]
        return self._group_manager("committed()").committed(wanted, timeout_ms)

    def _to_commit(self, offsets: Mapping[TopicPartition, int] | None) -> dict[TopicPartition, int]:
        if offsets is None:
            return self._consumed()
        return {TopicPartition(*tp): offset for tp, offset in offsets.items()}

    def _consumed(self, partitions: Iterable[TopicPartition] | None = None) -> dict[TopicPartition, int]:
        """The positions to commit: what poll() has returned so far."""
        wanted = self._states if partitions is None else partitions
        out: dict[TopicPartition, int] = {}
        for tp in wanted:
            state = self._states.get(tp)
            if state is not None and state.position is not None:
                out[tp] = state.position
        return out

    def group_metadata(self) -> ConsumerGroupMetadata:
        """This consumer's group, member id and epoch, for ``Producer.send_offsets_to_transaction``."""
        group = self._group_manager("group_metadata()")
        who = group.identity()
        return ConsumerGroupMetadata(group.group_id, who.member_epoch, who.member_id, who.instance_id or None)

    def _group_manager(self, what: str) -> GroupManager:
        if self._group is None:
            cfg = self.config
            if not cfg.group_id:
                raise InvalidGroupIdError(f"{what} needs a group.id in the consumer config")
            settings = MembershipSettings(
                group_id=cfg.group_id,
                instance_id=cfg.group_instance_id,
                rack_id=cfg.client_rack,
                server_assignor=cfg.group_remote_assignor or "",
                rebalance_timeout_ms=cfg.max_poll_interval_ms,
                # only when set: otherwise the coordinator's group.consumer.session.timeout.ms applies (KIP-848)
                session_timeout_ms=cfg.session_timeout_ms if "session.timeout.ms" in cfg.given else 0,
                heartbeat_interval_ms=cfg.heartbeat_interval_ms,
                retry_backoff_ms=cfg.retry_backoff_ms,
                retry_backoff_max_ms=cfg.retry_backoff_max_ms,
            )
            self._group = GroupManager(
                self._client, settings, self._clock, default_api_timeout_ms=cfg.default_api_timeout_ms
            )
        return self._group

    # ------------------------------------------------------------------------- group plumbing

    def _group_step(self, now: float, deadline: float) -> None:
        """Inside poll: fatal errors, reconciliation (listener calls), committed positions, auto-commit."""
        group = self._group
        assert group is not None
        group.run_commit_callbacks()
        group.raise_if_fatal()
        self._reconcile(group)
        if self._needs_committed:
            self._positions_from_committed(group, max(MIN_COMMITTED_LOOKUP_MS, deadline - now))
        if self.config.enable_auto_commit and now >= self._next_auto_commit_ms:
            self._next_auto_commit_ms = now + self.config.auto_commit_interval_ms
            consumed = self._consumed()
            if consumed:
                group.commit_async(consumed, _log_auto_commit_failure)

    def _reconcile(self, group: GroupManager) -> None:
        """Run the listener for every pending change, revoking before assigning (PROTOCOL.md)."""
        while (work := group.take_reconciliation()) is not None:
            try:
                self._apply(work)
            finally:
                group.reconciled(work)

    def _apply(self, work: Reconciliation) -> None:
        listener = self._listener
        if work.lost:
            kept = [tp for tp in self._states if tp not in work.lost]
            self._set_assignment(kept)
            on_lost = getattr(listener, "on_partitions_lost", None) or listener.on_partitions_revoked  # Kafka's default
            on_lost(set(work.lost))
        if work.revoked:
            if self.config.enable_auto_commit:
                self._commit_quietly(self._consumed(work.revoked))
            try:
                listener.on_partitions_revoked(set(work.revoked))  # still assigned: it may commit them
            finally:
                self._set_assignment(tp for tp in self._states if tp not in work.revoked)
        if work.assigned:
            self._set_assignment([*self._states, *work.assigned])
            self._needs_committed |= set(work.assigned)
            listener.on_partitions_assigned(set(work.assigned))
            self._needs_committed -= {tp for tp in work.assigned if self._states[tp].position is not None}

    def _positions_from_committed(self, group: GroupManager, timeout_ms: float) -> None:
        wanted = sorted(tp for tp in self._needs_committed if tp in self._states)
        try:
            found = group.committed(wanted, timeout_ms)
        except KafkaError as exc:
            if not exc.retriable:
                raise
            return  # the coordinator is moving: the next poll asks again
        for tp in wanted:
            offset = found.get(tp)
            state = self._states.get(tp)
            if state is not None and state.position is None and offset is not None:
                state.seek(offset)
            self._needs_committed.discard(tp)  # no committed offset: auto.offset.reset decides

    def _commit_quietly(self, offsets: Mapping[TopicPartition, int]) -> None:
        if self._group is None or not offsets:
            return
        try:
            self._group.commit_sync(offsets)
        except OdradekError as exc:
            log.warning("group %r: could not commit %s: %s", self._group.group_id, sorted(offsets), exc)

    def _leave_group(self, static: bool) -> None:
        """Revoke every partition (listener, auto-commit), then leave: epoch -1, or -2 for a static close."""
        group = self._group
        assert group is not None
        group.leave(static)
        self._reconcile(group)
        group.wait_left(self.config.request_timeout_ms)

    # ---------------------------------------------------------------------------------- others

    def topics(self) -> list[str]:
        """The names of the cluster's topics (internal ones excluded)."""
        response = self._client.call_any("Metadata", broker_pb2.MetadataRequest(all_topics=True))
        return sorted(t.name for t in response.topics if not t.error.code and not t.is_internal)

    def partitions_for(self, topic: str) -> list[int]:
        info = self._client.wait_for_topic(topic, self.config.default_api_timeout_ms)
        return [p.partition for p in info.partitions]

    def close(self, timeout_ms: float = CLOSE_TIMEOUT_MS) -> None:
        """Commit (with ``enable.auto.commit``), leave the group (revoking the partitions), stop. A static
        member (``group.instance.id``) leaves with epoch -2: its partitions wait for it for the session timeout."""
        if self._closed:
            return
        try:
            group = self._group
            if group is not None:
                if self.config.enable_auto_commit:
                    self._commit_quietly(self._consumed())
                if self._subscription is not None:
                    self._subscription = None
                    self._leave_group(static=True)
                group.close(timeout_ms)
        finally:
            self._closed = True
            self._fetcher.close()
            self._client.close()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _ensure_open(self) -> None:
        if self._closed:
            raise IllegalStateError("the consumer is closed")

    def _state(self, tp: TopicPartition) -> PartitionState:
        state = self._states.get(tp)
        if state is None:
            raise IllegalStateError(f"{tp} is not assigned to this consumer")
        return state

    def _targets(self, partitions: Iterable[TopicPartition] | None) -> Iterable[TopicPartition]:
        return list(self._states) if partitions is None else list(partitions)


def _log_auto_commit_failure(offsets: Mapping[TopicPartition, int], error: Exception | None) -> None:
    if error is not None:
        log.warning("auto-commit of %d partitions failed: %s", len(offsets), error)
