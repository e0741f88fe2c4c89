"""The consumer's group driver: the heartbeat thread around :class:`Membership`, commits and committed offsets.

Threads: one daemon heartbeat thread per consumer sends ConsumerGroupHeartbeats (never two in flight),
and leaves the group when the application stops polling for ``max.poll.interval.ms``. The application
thread runs the rebalance listener (``poll`` looks for reconciliation work at least every 100 ms while
it waits), commits, and reads committed offsets. Both touch the membership only under
``GroupManager._lock``; no network call is made while holding it.

Asynchronous commits run in order on one worker thread; their callbacks are queued and run on the
application thread (by ``poll``, ``commit`` and ``close``), as Kafka does.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial

from common.clock import Clock
from odradek.errors import (
    CommitFailedError,
    FencedInstanceIdError,
    KafkaError,
    KafkaTimeoutError,
    NetworkError,
    OdradekError,
    StaleMemberEpochError,
    error_from_code,
)
from odradek.group.coordinator import REDISCOVER_CODES, CoordinatorClient
from odradek.group.membership import (
    COORDINATOR_CODES,
    HeartbeatRequest,
    HeartbeatResponse,
    Membership,
    MembershipSettings,
    MemberState,
    Reconciliation,
    Subscription,
    topic_partitions,
)
from odradek.group.offsets import (
    MemberIdentity,
    commit_error,
    commit_request,
    fetch_request,
    fetch_result,
)
from odradek.net import ClusterClient
from odradek.types import TopicPartition
from proto import broker_pb2

log = logging.getLogger(__name__)

CommitCallback = Callable[[Mapping[TopicPartition, int], Exception | None], None]
IDLE_WAKE_MS = 100.0  # the heartbeat thread looks at the poll timer at least this often
MAX_STALE_EPOCH_RETRIES = 5


def heartbeat_proto(group_id: str, request: HeartbeatRequest) -> broker_pb2.ConsumerGroupHeartbeatRequest:
    message = broker_pb2.ConsumerGroupHeartbeatRequest(
        group_id=group_id,
        member_id=request.member_id,
        member_epoch=request.member_epoch,
        instance_id=request.instance_id,
        rack_id=request.rack_id,
        rebalance_timeout_ms=request.rebalance_timeout_ms,
        server_assignor=request.server_assignor,
        session_timeout_ms=request.session_timeout_ms,
    )
    if request.subscription is not None:
        message.subscription_changed = True
        message.subscribed_topic_names.extend(request.subscription.topics)
        message.subscribed_topic_regex = request.subscription.pattern
    if request.owned is not None:
        message.owned_partitions_sent = True
        by_topic: dict[str, list[int]] = {}
        for tp in sorted(request.owned):
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        message.owned_partitions.extend(broker_pb2.TopicPartitions(topic=t, partitions=p) for t, p in by_topic.items())
    return message


def heartbeat_response(response: broker_pb2.ConsumerGroupHeartbeatResponse) -> HeartbeatResponse:
    assignment = None
    if response.has_assignment:
        assignment = topic_partitions((t.topic, t.partitions) for t in response.assignment)
    return HeartbeatResponse(
        error_code=response.error.code,
        error_message=response.error.message,
        member_id=response.member_id,
        member_epoch=response.member_epoch,
        heartbeat_interval_ms=response.heartbeat_interval_ms,
        assignment=assignment,
    )


class GroupManager:
    """Membership, heartbeats and offsets of one consumer in one group. Thread-safe (one lock)."""

    def __init__(
        self,
        client: ClusterClient,
        settings: MembershipSettings,
        clock: Clock,
        *,
        default_api_timeout_ms: int,
    ) -> None:
        self.group_id = settings.group_id
        self._client = client
        self._clock = clock
        self._settings = settings
        self._timeout_ms = default_api_timeout_ms
        self.coordinator = CoordinatorClient(client, settings.group_id)
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._membership = Membership(settings, clock.monotonic_ms())
        self._thread: threading.Thread | None = None
        self._sent_seq = 0  # heartbeats sent so far
        self._answered_seq = 0  # the number of the last heartbeat answered
        self._stopping = False
        self._commits: ThreadPoolExecutor | None = None
        self._completed: deque[tuple[CommitCallback, Mapping[TopicPartition, int], Exception | None]] = deque()
        self._completed_lock = threading.Lock()

    # ------------------------------------------------------------------------------ membership

    @property
    def state(self) -> MemberState:
        return self._membership.state

    def identity(self) -> MemberIdentity:
        with self._lock:
            m = self._membership
            if not m.member_id or m.member_epoch <= 0 or not m.in_group:
                return MemberIdentity(instance_id=self._settings.instance_id or "")
            return MemberIdentity(m.member_id, m.member_epoch, self._settings.instance_id or "")

    def subscribe(self, subscription: Subscription) -> None:
        self.raise_if_fatal()
        with self._lock:
            self._membership.subscribe(subscription, self._clock.monotonic_ms())
        self._start_thread()
        self._wake.set()

    def leave(self, static: bool) -> None:
        with self._lock:
            self._membership.leave(static)
        self._wake.set()

    def record_poll(self) -> None:
        with self._lock:
            self._membership.record_poll(self._clock.monotonic_ms())
        self._wake.set()

    def take_reconciliation(self) -> Reconciliation | None:
        with self._lock:
            return self._membership.take_reconciliation()

    def reconciled(self, done: Reconciliation) -> None:
        with self._lock:
            self._membership.reconciled(done, self._clock.monotonic_ms())
        self._wake.set()

    def raise_if_fatal(self) -> None:
        with self._lock:
            fatal = self._membership.fatal_error
        if fatal is not None:
            code, message = fatal
            if code == FencedInstanceIdError.code:
                raise FencedInstanceIdError(
                    f"group {self.group_id!r}: another consumer with group.instance.id "
                    f"{self._settings.instance_id!r} joined the group and fenced this one ({code})"
                )
            raise error_from_code(code, f"group {self.group_id!r}: {message or code}")

    def wait_left(self, timeout_ms: float) -> bool:
        """Wait (bounded) until a leave heartbeat was answered or given up."""
        deadline = self._clock.monotonic_ms() + timeout_ms
        while True:
            with self._lock:
                if self._membership.leave_done or self._thread is None:
                    return True
            remaining = deadline - self._clock.monotonic_ms()
            if remaining <= 0:
                return False
            self._wake.set()
            time.sleep(min(remaining, 20.0) / 1000)

    # ------------------------------------------------------------------------------- heartbeats

    def _start_thread(self) -> None:
        with self._lock:
            if self._thread is not None or self._stopping:
                return
            self._thread = threading.Thread(target=self._run, name=f"odradek-heartbeat-{self.group_id}", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while True:
            with self._lock:
                if self._stopping:
                    return
                now = self._clock.monotonic_ms()
                if self._membership.check_poll_timer(now):
                    log.warning(
                        "group %r: no poll for more than max.poll.interval.ms (%d ms); leaving the group",
                        self.group_id,
                        self._settings.rebalance_timeout_ms,
                    )
                request = self._membership.next_heartbeat(now)
                if request is not None:
                    self._sent_seq += 1
                seq = self._sent_seq
                due = self._membership.heartbeat_due_in_ms(now)
            if request is not None:
                self._heartbeat(request, seq)
                continue
            wait_ms = IDLE_WAKE_MS if due is None else min(max(due, 1.0), IDLE_WAKE_MS)
            self._wake.wait(wait_ms / 1000)
            self._wake.clear()

    def _heartbeat(self, request: HeartbeatRequest, seq: int) -> None:
        message = heartbeat_proto(self.group_id, request)
        try:
            timeout_s = self._client.request_timeout_s
            answer = heartbeat_response(self.coordinator.call_once("ConsumerGroupHeartbeat", message, timeout_s))
        except KafkaError as exc:
            with self._lock:
                self._membership.on_failure(request, exc.code, str(exc), self._clock.monotonic_ms())
            log.debug("group %r: heartbeat failed: %s", self.group_id, exc)
            return
        except Exception as exc:  # the client closed under us: treat as a network failure
            with self._lock:
                self._membership.on_failure(request, NetworkError.code, repr(exc), self._clock.monotonic_ms())
            return
        if answer.error_code in REDISCOVER_CODES:
            self.coordinator.mark_unknown()
        with self._lock:
            self._answered_seq = seq
            outcome = self._membership.on_response(request, answer, self._clock.monotonic_ms())
        if outcome and outcome not in COORDINATOR_CODES:
            log.info("group %r: heartbeat answered %s: %s", self.group_id, outcome, answer.error_message)

    # ---------------------------------------------------------------------------------- commits

    def commit_sync(self, offsets: Mapping[TopicPartition, int], timeout_ms: float | None = None) -> None:
        """Commit now and wait; raises CommitFailedError, FencedInstanceIdError, KafkaTimeoutError, ..."""
        self.run_commit_callbacks()
        self.raise_if_fatal()
        if not offsets:
            return
        with self._lock:
            executor = self._commits
        if executor is not None:  # behind the async commits already queued: a commit never goes back in time
            executor.submit(self._commit_now, dict(offsets), timeout_ms).result()
            return
        self._commit_now(offsets, timeout_ms)

    def _commit_now(self, offsets: Mapping[TopicPartition, int], timeout_ms: float | None) -> None:
        timeout = self._timeout_ms if timeout_ms is None else timeout_ms
        deadline = self._clock.monotonic_ms() + timeout
        for _ in range(MAX_STALE_EPOCH_RETRIES):
            who = self.identity()
            response = self.coordinator.call(
                "OffsetCommit",
                partial(commit_request, self.group_id, who, offsets),
                max(0.0, deadline - self._clock.monotonic_ms()),
            )
            error = commit_error(self.group_id, response)
            if error is None:
                return
            if not isinstance(error, StaleMemberEpochError):
                raise error
            self._wait_for_new_epoch(who.member_epoch, deadline)  # a heartbeat brings the current epoch
        raise CommitFailedError(f"committing offsets for group {self.group_id!r}: the member epoch kept changing")

    def _wait_for_new_epoch(self, epoch: int, deadline: float) -> None:
        """Until a heartbeat answered after now (it brings the current epoch), or the epoch changed."""
        with self._lock:
            sent_before = self._sent_seq
            self._membership.heartbeat_soon(self._clock.monotonic_ms())
        while self._clock.monotonic_ms() < deadline:
            with self._lock:
                m = self._membership
                if m.member_epoch != epoch or not m.in_group or self._answered_seq > sent_before:
                    return
            self._wake.set()
            time.sleep(0.02)
        raise KafkaTimeoutError(f"committing offsets for group {self.group_id!r}: the member epoch stayed stale")

    def commit_async(self, offsets: Mapping[TopicPartition, int], callback: CommitCallback | None) -> Future[None]:
        """Commit in the background, in order with other async commits; ``callback(offsets, error)`` runs on
        the application thread at its next poll/commit/close."""
        with self._lock:
            if self._commits is None:
                self._commits = ThreadPoolExecutor(1, thread_name_prefix=f"odradek-commit-{self.group_id}")
            executor = self._commits
        frozen = dict(offsets)

        def run() -> None:
            error: Exception | None = None
            try:
                self._commit_in_background(frozen)
            except OdradekError as exc:
                error = exc
            if callback is not None:
                with self._completed_lock:
                    self._completed.append((callback, frozen, error))
            if error is not None:
                raise error

        return executor.submit(run)

    def _commit_in_background(self, offsets: Mapping[TopicPartition, int]) -> None:
        if offsets:
            self._commit_now(offsets, None)

    def run_commit_callbacks(self) -> None:
        """Run the callbacks of finished async commits (application thread)."""
        while True:
            with self._completed_lock:
                if not self._completed:
                    return
                callback, offsets, error = self._completed.popleft()
            callback(offsets, error)

    def committed(
        self, partitions: Iterable[TopicPartition] | None, timeout_ms: float | None = None
    ) -> dict[TopicPartition, int | None]:
        """The group's committed offsets (None: nothing committed); ``partitions`` None: all of them."""
        wanted = None if partitions is None else list(partitions)
        timeout = self._timeout_ms if timeout_ms is None else timeout_ms
        deadline = self._clock.monotonic_ms() + timeout
        while True:
            who = self.identity()
            response = self.coordinator.call(
                "OffsetFetch",
                partial(fetch_request, self.group_id, who, wanted),
                max(0.0, deadline - self._clock.monotonic_ms()),
            )
            if response.error.code == StaleMemberEpochError.code:
                self._wait_for_new_epoch(who.member_epoch, deadline)
                continue
            if response.error.code in ("UNKNOWN_MEMBER_ID", "FENCED_MEMBER_EPOCH"):
                # our membership is being renewed: an anonymous read sees the same offsets
                response = self.coordinator.call(
                    "OffsetFetch",
                    partial(fetch_request, self.group_id, MemberIdentity(), wanted),
                    max(0.0, deadline - self._clock.monotonic_ms()),
                )
            found = fetch_result(self.group_id, response)
            if wanted is None:
                return found
            return {tp: found.get(tp) for tp in wanted}

    # ---------------------------------------------------------------------------------- closing

    def close(self, timeout_ms: float) -> None:
        """Stop the threads: waits (bounded) for pending async commits and for the leave heartbeat."""
        deadline = self._clock.monotonic_ms() + timeout_ms
        with self._lock:
            executor, self._commits = self._commits, None
        if executor is not None:
            executor.shutdown(wait=True, cancel_futures=False)
        self.run_commit_callbacks()
        self.wait_left(max(0.0, deadline - self._clock.monotonic_ms()))
        with self._lock:
            self._stopping = True
            thread = self._thread
        self._wake.set()
        if thread is not None:
            thread.join(max(0.0, deadline - self._clock.monotonic_ms()) / 1000 + 0.1)
