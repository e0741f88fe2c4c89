"""The controller process: one metadata-quorum voter, its committed image, the controller thread, gRPC.

Threads and what each one owns:

- the Raft thread (:class:`~controller.quorum.MetadataQuorum`) applies committed records and calls
  :meth:`MetadataPublisher.on_apply`, the only writer of this node's committed :class:`MetadataImage`;
- the controller thread (:class:`ControllerServer`) is the only caller of the :class:`ControllerCore`:
  it takes one request at a time from a bounded queue, decides on the current image, appends the
  records (term-stamped) and waits until they are committed and applied, then answers;
- gRPC handler threads (:mod:`controller.service`) only enqueue and wait (REQUEST_TIMED_OUT when the
  queue stays full or the answer does not come in time), or read the committed log (FetchMetadata).

The order that matters: decide on the image at offset ``O``; append only if the log still ends at ``O``
and this node is still active in the same term; answer after the commit. After an append whose outcome
is unknown (timed out), a barrier (a NoOp committed in the same term) settles it before anything else is
decided, so no decision is ever made on an image that misses a record which may still commit.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import queue
import random
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, InvalidStateError
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any, TypeVar

from common.clock import SYSTEM_CLOCK, Clock
from controller.core import Command, ControllerCore
from controller.long_poll import MAX_WAITING_FETCHES, OffsetWaiters
from controller.metrics.stats import ControllerStats, count_elections
from controller.node_api import Unanswered
from controller.quorum import ApplyEvent, MetadataQuorum, NotActiveError, QuorumTuning, RecordsApplied
from controller.raft.state import NOT_CONTROLLER, REQUEST_TIMED_OUT, UNEXPECTED_BASE_OFFSET, NeedsSnapshot
from controller.security.node import NodeGuard
from controller.security.rules import CONTROLLER_RULES
from controller.security.settings import NodeSecurity
from metadata.configs import ControllerConfig
from metadata.image import MetadataDelta, MetadataImage
from metadata.record_codec import decode_record, encode_record
from metadata.records import BrokerControlledShutdown, FenceBroker, LeaderChange, NoOp, RegisterBroker, UnfenceBroker
from metadata.snapshot import decode_snapshot, encode_snapshot
from proto import common_pb2

log = logging.getLogger("odradek.controller")
R = TypeVar("R")

METADATA_DIR = "__cluster_metadata-0"
TICK_INTERVAL_S = 0.1
_ROLE_POLL_S = 0.05
_SETTLE_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class ServerOptions:
    """Everything ``odradek controller`` was told (immutable). ``voters``: node id -> Raft address
    (``--quorum``); ``controller_addresses``: node id -> Controller gRPC address, for NOT_CONTROLLER hints."""

    node_id: int
    listen: str
    raft_listen: str
    voters: Mapping[int, str]
    data_dir: str
    config: ControllerConfig
    secret: str | None
    allow_insecure: bool = False
    controller_addresses: Mapping[int, str] = dataclasses.field(default_factory=dict)
    cluster_id: str = ""
    tuning: QuorumTuning | None = None
    metrics_listen: str = ""  # HOST:PORT of the /metrics endpoint ("": none)
    security: NodeSecurity = dataclasses.field(default_factory=NodeSecurity)  # docs/SECURITY.md


class SnapshotFolder:
    """The quorum's ``fold``: replays trimmed records into the snapshot image (``encode_snapshot``).

    Deterministic, as every voter must fold alike. Called on the Raft thread only; remembers the image of
    the snapshot it returned last so that the next fold does not decode it again.
    """

    def __init__(self) -> None:
        self._last: tuple[bytes, MetadataImage] | None = None

    def __call__(self, snapshot: bytes | None, snapshot_end_offset: int, payloads: list[bytes]) -> bytes:
        if snapshot is None:
            image = MetadataImage()
        elif self._last is not None and self._last[0] is snapshot:
            image = self._last[1]
        else:
            image = decode_snapshot(snapshot)
        if image.offset != snapshot_end_offset - 1:
            raise ValueError(f"snapshot at offset {image.offset} does not end at {snapshot_end_offset - 1}")
        delta = MetadataDelta(image)
        for i, payload in enumerate(payloads):
            delta.replay(decode_record(payload), snapshot_end_offset + i)
        folded = delta.apply()
        data = encode_snapshot(folded)
        self._last = (data, folded)
        return data


class MetadataPublisher:
    """Keeps this node's committed :class:`MetadataImage` current: the quorum's ``on_apply`` listener.

    Thread-safety: ``on_apply`` runs on the Raft thread, the only writer. ``image`` is read from any
    thread without a lock (one attribute read of an immutable object). ``addresses`` (node id ->
    Controller gRPC address) starts from the static map and learns from LeaderChange records.
    """

    def __init__(self, addresses: Mapping[int, str], stats: ControllerStats | None = None) -> None:
        self.image = MetadataImage()
        self.addresses: dict[int, str] = dict(addresses)
        self.quorum: MetadataQuorum | None = None  # set before the quorum starts: a reset reads it
        self.on_applied: Callable[[], None] = lambda: None  # after every apply (wakes FetchMetadata long polls)
        self.stats = stats or ControllerStats()

    def on_apply(self, event: ApplyEvent) -> None:
        if isinstance(event, RecordsApplied):
            delta = MetadataDelta(self.image)
            for entry in event.entries:
                record = decode_record(entry.payload)
                delta.replay(record, entry.offset)
                if isinstance(record, LeaderChange):
                    self.stats.leader_changes += 1
                    if record.leader_address:
                        self.addresses[record.leader_id] = record.leader_address  # one dict store: atomic
            self.image = delta.apply()
        else:
            self.image = self._rebuild()
            if self.image.controller_address:  # the snapshot keeps the active controller's address
                self.addresses[self.image.controller_id] = self.image.controller_address
        self.on_applied()

    def _rebuild(self) -> MetadataImage:
        """The image from the quorum's snapshot and the records after it (after a StateReset)."""
        assert self.quorum is not None
        view = self.quorum.snapshot()
        image = decode_snapshot(view.data) if view.data is not None else MetadataImage()
        delta = MetadataDelta(image)
        offset = view.end_offset
        while True:
            batch = self.quorum.records_from(offset, max_records=10_000, max_bytes=1 << 30)
            if isinstance(batch, NeedsSnapshot):  # cannot happen on the Raft thread, which alone folds
                raise RuntimeError(f"the metadata log was trimmed past {offset} while rebuilding")
            if not batch:
                return delta.apply()
            for entry in batch:
                delta.replay(decode_record(entry.payload), entry.offset)
            offset = batch[-1].offset + 1


@dataclass(slots=True)
class _Request:
    rpc: str
    request: Any
    deadline: float  # time.monotonic()
    future: Future[Any]


class ControllerServer:
    """One controller node: the quorum voter, the image, the controller thread and the gRPC server.

    Thread-safety: ``start`` and ``stop`` from one thread; ``submit`` and the read-only properties from
    any thread. The :class:`ControllerCore` is used by the controller thread only.
    """

    def __init__(
        self, options: ServerOptions, *, clock: Clock | None = None, rng: random.Random | None = None
    ) -> None:
        self.options = options
        self.node_id = options.node_id
        config = options.config
        self.config = config
        addresses = {**options.controller_addresses, options.node_id: options.listen}
        self.stats = ControllerStats()  # read by controller.metrics at scrape time
        self.publisher = MetadataPublisher(addresses, self.stats)
        self.guard = NodeGuard.build(options.security, lambda: self.publisher.image, CONTROLLER_RULES)
        self.quorum = MetadataQuorum(
            options.node_id,
            options.voters[options.node_id],
            options.voters,
            os.path.join(options.data_dir, METADATA_DIR),
            options.secret,
            fold=SnapshotFolder(),
            leader_change_payload=self._leader_change_payload,
            on_apply=self.publisher.on_apply,
            tuning=_tuning(options),
            allow_insecure=options.allow_insecure,
            bind_address=options.raft_listen,
        )
        self.publisher.quorum = self.quorum
        self.fetch_waiters = OffsetWaiters(MAX_WAITING_FETCHES)
        self.publisher.on_applied = lambda: self.fetch_waiters.notify(self.quorum.end_offset)
        self.core = ControllerCore(config, clock or SYSTEM_CLOCK, rng or random.Random())
        self._queue: queue.Queue[_Request] = queue.Queue(maxsize=config.event_queue_size)
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"controller-{self.node_id}", daemon=True)
        self._active_term: int | None = None
        self._grpc: Any = None
        self.health: Any = None  # controller.health.HealthReporter, made by start()
        self.metrics: Any = None  # controller.metrics.endpoint.MetricsEndpoint with --metrics-listen

    def _leader_change_payload(self, term: int, node_id: int) -> bytes:
        return encode_record(LeaderChange(term, node_id, self.options.listen))

    # --- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        """Open the data directory, join the quorum, start the controller thread and serve gRPC (with the
        health service: SERVING while the quorum has a leader) and, with ``metrics_listen``, /metrics."""
        from controller.health import HealthReporter
        from controller.service import SERVICE_NAME, start_grpc_server  # grpc is imported by the process only

        self.health = HealthReporter(SERVICE_NAME, self._healthy)
        self.quorum.start()
        self._thread.start()
        try:
            self._grpc = start_grpc_server(self, self.options.listen, health=self.health)
            self.health.start()
            if self.options.metrics_listen:
                self.metrics = _start_metrics(self)
        except BaseException:
            self.stop()
            raise

    def _healthy(self) -> bool:
        return self.failure is None and self.quorum.leader() is not None

    def stop(self, grace_s: float = 1.0) -> None:
        """Stop serving, fail queued requests with NOT_CONTROLLER, leave the quorum (safe to call twice)."""
        if self.health is not None:
            self.health.shutdown()
        stopped = self._grpc.stop(grace_s) if self._grpc is not None else None
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(5.0)
        self._fail_queued()
        self.quorum.close()  # also wakes long-polling fetches
        self.fetch_waiters.notify(None)
        if stopped is not None:
            stopped.wait(grace_s + 1.0)
        if self.metrics is not None:
            self.metrics.stop()

    @property
    def failure(self) -> str | None:
        """Why the quorum halted this node (a record that does not apply, storage errors), or None."""
        return self.quorum.status().failure

    # --- requests (gRPC handler threads) ---------------------------------------------------------

    def hint(self) -> common_pb2.ControllerHint:
        """Where the active controller is, as this node knows it (-1: unknown)."""
        leader = self.quorum.leader()
        if leader is None:
            return common_pb2.ControllerHint(node_id=-1)
        return common_pb2.ControllerHint(node_id=leader[0], address=self.publisher.addresses.get(leader[0], ""))

    def submit(self, rpc: str, request: Any, response_type: type[R], timeout_ms: int = 0) -> R:
        """Have the controller thread decide ``request`` and wait for its answer, a ``response_type``.

        Raises :class:`Unanswered` with NOT_CONTROLLER or REQUEST_TIMED_OUT. ``timeout_ms`` <= 0 means
        ``controller.request.timeout.ms``.
        """
        if not self.quorum.is_active():
            raise Unanswered(NOT_CONTROLLER, f"controller {self.node_id} is not the active controller")
        timeout_s = (timeout_ms if timeout_ms > 0 else self.config.request_timeout_ms) / 1000.0
        item = _Request(rpc, request, time.monotonic() + timeout_s, Future())
        try:
            self._queue.put(item, timeout=timeout_s)
            response = item.future.result(timeout=max(0.0, item.deadline - time.monotonic()))
        except (queue.Full, FutureTimeout):
            item.future.cancel()
            raise Unanswered(REQUEST_TIMED_OUT, f"no answer within {timeout_s:.1f} s") from None
        if not isinstance(response, response_type):
            raise TypeError(f"{rpc} answered a {type(response).__name__}, not a {response_type.__name__}")
        return response

    def _fail_queued(self) -> None:
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            _resolve(item, Unanswered(NOT_CONTROLLER, f"controller {self.node_id} is stopping"))

    # --- the controller thread -------------------------------------------------------------------

    def _run(self) -> None:
        next_tick = 0.0
        while not self._stopping.is_set():
            self._follow_role()
            try:
                item: _Request | None = self._queue.get(
                    timeout=max(0.0, min(next_tick - time.monotonic(), _ROLE_POLL_S))
                )
            except queue.Empty:
                item = None
            try:
                if item is not None:
                    self._serve(item)
                if time.monotonic() >= next_tick:
                    next_tick = time.monotonic() + TICK_INTERVAL_S
                    self._tick()
            except Exception:  # a bug (the core refused its own result, ...): log it, answer, keep serving
                log.exception("controller %d: unexpected error", self.node_id)
                if item is not None:
                    _resolve(item, Unanswered("UNKNOWN_SERVER_ERROR", "unexpected error; see the controller log"))
        self._follow_role(stopping=True)

    def _follow_role(self, *, stopping: bool = False) -> None:
        image = self.publisher.image
        active = not stopping and self.quorum.is_active() and image.controller_id == self.node_id
        term = image.term if active else None
        if term == self._active_term:
            return
        if self._active_term is not None:
            log.info("controller %d resigned (was active in term %d)", self.node_id, self._active_term)
        if term is not None:
            self.core.activate(image)
            log.info("controller %d became active in term %d", self.node_id, term)
        self._active_term = term

    def _serve(self, item: _Request) -> None:
        if item.future.cancelled() or time.monotonic() > item.deadline:
            return  # its caller gave up: decide nothing for it
        self._follow_role()
        if self._active_term is None:
            _resolve(item, Unanswered(NOT_CONTROLLER, f"controller {self.node_id} is not the active controller"))
            return
        image = self.publisher.image
        result = self.core.handler(item.rpc)(image, item.request)
        try:
            self._append(image, result.commands, item.deadline)
        except Unanswered as exc:
            _resolve(item, exc)
        else:
            _resolve(item, result.response)

    def _tick(self) -> None:
        self._follow_role()
        if self._active_term is None:
            return
        image = self.publisher.image
        result = self.core.tick(image)
        if result.commands:
            try:
                self._append(image, result.commands, time.monotonic() + self.config.request_timeout_ms / 1000)
            except Unanswered as exc:
                log.warning("controller %d: periodic work not committed: %s %s", self.node_id, exc.code, exc)

    def _append(self, image: MetadataImage, commands: tuple[Command, ...], deadline: float) -> None:
        """Append ``commands`` in order, each only if the log still ends where the decision assumed."""
        expected = image.offset
        for command in commands:
            self._check_current(expected)
            if time.monotonic() >= deadline:  # nothing proposed: the outcome is known (not written)
                raise Unanswered(REQUEST_TIMED_OUT, "the request timed out before its records were appended")
            payloads = [encode_record(r) for r in command]
            started = time.monotonic()
            try:
                result = self.quorum.append(
                    payloads, timeout_s=max(0.001, deadline - time.monotonic()), expected_base_offset=expected + 1
                )
            except NotActiveError as exc:
                raise Unanswered(NOT_CONTROLLER, str(exc)) from None
            if result.ok:
                self.stats.commit_latency.observe((time.monotonic() - started) * 1000.0)
                count_elections(self.stats, image, command)
            if not result.ok:
                if result.error == REQUEST_TIMED_OUT:
                    self._settle()
                if result.error == UNEXPECTED_BASE_OFFSET:  # the log moved under this decision: decide again
                    raise Unanswered(NOT_CONTROLLER, "the metadata log moved while the request was decided; retry")
                raise Unanswered(result.error or "UNKNOWN_SERVER_ERROR", "the metadata records were not committed")
            assert result.base_offset == expected + 1, (result, expected)
            expected = result.last_offset
            _log_changes(self.node_id, command)

    def _check_current(self, expected_offset: int) -> None:
        image = self.publisher.image
        current = (
            self.quorum.is_active()
            and image.offset == expected_offset
            and self.quorum.end_offset == expected_offset + 1
            and image.term == self._active_term
            and image.controller_id == self.node_id
        )
        if not current:
            raise Unanswered(NOT_CONTROLLER, f"controller {self.node_id} lost its term before appending")

    def _settle(self) -> None:
        """After an append of unknown outcome: commit a NoOp in the same term (or lose the term), so that
        the earlier append is decided, one way or the other, before anything else is."""
        while not self._stopping.is_set() and self.quorum.is_active():
            try:
                if self.quorum.append([encode_record(NoOp())], timeout_s=_SETTLE_TIMEOUT_S).ok:
                    return
            except NotActiveError:
                return


def _log_changes(node_id: int, command: Command) -> None:
    """One line per broker lifecycle change (topic and partition changes are too many for INFO)."""
    for record in command:
        if isinstance(record, RegisterBroker):
            log.info("controller %d: broker %d registered (epoch %d)", node_id, record.broker_id, record.broker_epoch)
        elif isinstance(record, FenceBroker | UnfenceBroker | BrokerControlledShutdown):
            what = {FenceBroker: "fenced", UnfenceBroker: "unfenced", BrokerControlledShutdown: "shutting down"}
            log.info("controller %d: broker %d %s", node_id, record.broker_id, what[type(record)])
        else:
            log.debug("controller %d: committed %r", node_id, record)


def _resolve(item: _Request, outcome: Any) -> None:
    """Answer ``item`` unless its caller gave up (cancelled it) meanwhile."""
    with contextlib.suppress(InvalidStateError):
        if isinstance(outcome, BaseException):
            item.future.set_exception(outcome)
        else:
            item.future.set_result(outcome)


def _start_metrics(server: ControllerServer) -> Any:
    """The /metrics endpoint of ``server`` (started), on ``options.metrics_listen``."""
    from controller.metrics.collector import ControllerCollector
    from controller.metrics.endpoint import MetricsEndpoint, new_registry

    registry = new_registry()
    registry.register(ControllerCollector(server))
    endpoint = MetricsEndpoint(server.options.metrics_listen, registry)
    endpoint.start()
    return endpoint


def _tuning(options: ServerOptions) -> QuorumTuning:
    base = options.tuning or QuorumTuning()
    config = options.config
    return dataclasses.replace(
        base,
        fsync=base.fsync and config.metadata_log_fsync,
        max_records_per_append=max(base.max_records_per_append, config.max_records_per_command),
        max_append_bytes=max(base.max_append_bytes, 16 << 20),
        state_max_records_before_snapshot=config.max_records_between_snapshots,
    )
