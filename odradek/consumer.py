"""The Consumer: assign partitions, poll records, seek; positions are the consumer's own.

    c = Consumer({"bootstrap.servers": "127.0.0.1:9092", "auto.offset.reset": "earliest"})
    c.assign([TopicPartition("orders", 0)])
    for record in c.poll(timeout_ms=1000): ...
    c.close()

A partition without a position (just assigned, after ``seek_to_beginning``/``seek_to_end``, or after
OFFSET_OUT_OF_RANGE) gets one from its leader by ListOffsets: ``auto.offset.reset`` earliest or
latest; with ``none`` the next ``poll`` raises NoOffsetForPartitionError (OffsetOutOfRangeError after
an out-of-range fetch).

Consumer groups (``subscribe``, ``commit``, ``committed``) arrive with their own issue: until then those
calls raise NotSupportedYetError. The group keys are accepted by the config already.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import TracebackType

from odradek.clock import SYSTEM_CLOCK, Clock
from odradek.config import ConsumerConfig
from odradek.errors import IllegalStateError, KafkaTimeoutError, NoOffsetForPartitionError, NotSupportedYetError
from odradek.fetcher import Fetcher, PartitionState
from odradek.net import ClusterClient, ListedOffset
from odradek.types import ConsumerRecord, OffsetAndTimestamp, TopicPartition
from proto import broker_pb2

EARLIEST = -2
LATEST = -1
MAX_WAIT_SLICE_MS = 100.0
_GROUPS = "consumer groups arrive with their own issue"


class Consumer:
    """A Kafka-style consumer of assigned partitions.

    Not thread-safe, like Kafka's KafkaConsumer: call it from one thread (gRPC threads only deliver
    fetch answers to it through a queue).
    """

    def __init__(self, config: Mapping[str, object], *, clock: Clock | None = None) -> None:
        self.config = cfg = ConsumerConfig.from_mapping(config)
        self._clock = clock or SYSTEM_CLOCK
        self._client = ClusterClient(
            bootstrap_servers=cfg.bootstrap_servers,
            client_id=cfg.client_id,
            request_timeout_ms=cfg.request_timeout_ms,
            retry_backoff_ms=cfg.retry_backoff_ms,
            retry_backoff_max_ms=cfg.retry_backoff_max_ms,
            metadata_max_age_ms=cfg.metadata_max_age_ms,
            max_message_bytes=max(cfg.fetch_max_bytes, cfg.max_partition_fetch_bytes),
            clock=self._clock,
            max_concurrent_calls=32,
            name="odradek-consumer",
        )
        self._fetcher = Fetcher(self._client, cfg)
        self._states: dict[TopicPartition, PartitionState] = {}
        self._isolation_level = 1 if cfg.isolation_level == "read_committed" else 0
        self._closed = False

    # ------------------------------------------------------------------------------ assignment

    def subscribe(self, topics: Iterable[str], *args: object, **kwargs: object) -> None:
        raise NotSupportedYetError(f"subscribe() needs consumer group support ({_GROUPS}); use assign() for now")

    def unsubscribe(self) -> None:
        self.assign(())

    def subscription(self) -> set[str]:
        return set()

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Consume exactly these partitions (replacing the previous assignment; kept ones keep their position)."""
        self._ensure_open()
        wanted: list[TopicPartition] = []
        for tp in partitions:
            if not isinstance(tp, tuple) or len(tp) != 2 or not isinstance(tp[0], str) or type(tp[1]) is not int:
                raise TypeError(f"assign() takes TopicPartition(topic, partition) values, got {tp!r}")
            wanted.append(TopicPartition(*tp))
        states = {}
        for tp in sorted(set(wanted)):
            states[tp] = self._states.get(tp) or PartitionState(tp, self.config.max_partition_fetch_bytes)
        self._states = states
        self._client.set_topics(tp.topic for tp in states)

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

    def seek_to_beginning(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """Move to the log start offset of ``partitions`` (default: all assigned), looked up lazily."""
        for tp in self._targets(partitions):
            self._state(tp).request_reset("earliest")

    def seek_to_end(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """Move to the end (the high watermark) of ``partitions`` (default: all assigned), looked up lazily."""
        for tp in self._targets(partitions):
            self._state(tp).request_reset("latest")

    def position(self, partition: TopicPartition, timeout_ms: float | None = None) -> int:
        """The offset of the next record poll() returns, looking it up now if needed."""
        state = self._state(partition)
        deadline = self._clock.monotonic_ms() + (
            self.config.default_api_timeout_ms if timeout_ms is None else timeout_ms
        )
        while state.position is None:
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
        self._ensure_open()
        if not self._states:
            raise IllegalStateError("the consumer is not assigned any partitions (and subscribe() comes with groups)")
        deadline = self._clock.monotonic_ms() + max(0.0, timeout_ms)
        max_records = self.config.max_poll_records
        while True:
            now = self._clock.monotonic_ms()
            self._client.maybe_refresh()
            self._fetcher.handle_answers(self._states, now)
            self._reset_positions([s for s in self._states.values() if s.position is None])
            records = self._fetcher.collect(self._states, max_records)
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
        due = [s for s in states if s.position is None and s.retry_at_ms <= now]
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

    def commit(self, offsets: Mapping[TopicPartition, int] | None = None, *args: object, **kwargs: object) -> None:
        raise NotSupportedYetError(f"commit() needs group.id support ({_GROUPS}); track positions with position()")

    def committed(self, partitions: object, *args: object, **kwargs: object) -> None:
        raise NotSupportedYetError(f"committed() needs group.id support ({_GROUPS})")

    # ---------------------------------------------------------------------------------- others

    def topics(self) -> list[str]:
        """The names of the cluster's topics (internal ones excluded)."""
        response = self._client.call_any("Metadata", broker_pb2.MetadataRequest(all_topics=True))
        return sorted(t.name for t in response.topics if not t.error.code and not t.is_internal)

    def partitions_for(self, topic: str) -> list[int]:
        info = self._client.wait_for_topic(topic, self.config.default_api_timeout_ms)
        return [p.partition for p in info.partitions]

    def close(self) -> None:
        if self._closed:
            return
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
