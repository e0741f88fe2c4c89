"""The producer's I/O thread: drains ready batches, sends one ProduceRequest per broker, completes futures.

Each pass: handle finished requests, refresh metadata when due, ask the accumulator which brokers have
sendable batches, drain them (up to ``max.in.flight.requests.per.connection`` requests per broker,
``max.request.size`` each), send, expire batches past ``delivery.timeout.ms``, then sleep until the
next linger or backoff deadline or until woken (a new batch, a response, a flush, close).

Transport: a broker with a ``DATA`` listener (the metadata names it: ``ClusterClient.data_address``) gets the
requests on one TCP connection of plain frames (``odradek.net.data_link``: pipelined, answered in order, the
answer read by the connection's own thread), which costs the broker about a third of the CPU of a gRPC message;
a broker without one, or whose DATA listener could not be reached (for ``DATA_FALLBACK_MS``), gets them on gRPC
as follows. A broker's requests move from one to the other only while none is in flight.

Request order: the sender thread starts each Produce request itself, on the broker's ``ProduceStream``
(``common.streams.OrderedStream``: one long-lived stream per broker, requests pipelined on it and
answered in order, no call set-up per request), so one broker's requests go out in the order they were
drained, as on a Kafka connection; with idempotence that is sequence order per partition (the leader then
appends them in that order, holding a batch that overtook an earlier one on the broker's side:
``log.producer_state`` S8). A broker without the stream gets unary Produce calls
(``ClusterClient.start_ordered``, also in order); a broken stream fails the requests on it as a lost
connection does (retried as below), and a request not answered within ``request.timeout.ms`` cancels the
stream (as Kafka's client closes a connection with a request that timed out).

Per-partition answers: success completes the batches' futures with their offsets; a retriable error
(NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS, a lost connection, ...) puts the batches back at the
front of their queue after a backoff, refreshing metadata first when the error says it is stale, as
long as ``retries`` and ``delivery.timeout.ms`` allow; anything else fails the futures with the typed
error. Failover (as Kafka's client): while a partition with queued batches is led by a broker the last
request to which failed on the connection, metadata is refreshed every pass (the client spaces refreshes by
``retry.backoff.ms``), and a retried batch whose partition got a new leader goes at once, without the rest
of its backoff (KIP-951, ``RecordAccumulator``). A request unanswered for ``STALE_REQUEST_MS`` has the
metadata looked at again every ``STALE_REFRESH_MS`` (from other brokers than its own first): once none of its
partitions is led by its broker any more (a paused or cut-off leader, replaced by the controller), it is
cancelled and its batches go to the new leaders at once, instead of waiting for ``request.timeout.ms`` (with
idempotence they keep their sequences: a copy the old leader may have written is not committed there, and a
new leader that has it answers with its offsets). With ``acks=0`` futures complete (offset -1) as soon as the
request is sent, and nothing is retried.

Idempotence (``enable.idempotence``, ``odradek.idempotence``): before the first batch goes out, and after
an epoch bump was asked for and every batch with a sequence got its final answer, the sender asks any broker
for a producer id and epoch (InitProducerId, retried with backoff); each answer about a batch goes through
:meth:`IdempotenceState.on_error`, which says retry with the same sequence, resend under the next epoch,
or fail (rules P1-P7 there). A DUPLICATE_SEQUENCE_NUMBER answer means the batch was written before: its
records complete with offset -1, as in Kafka. A P5 refusal (an earlier batch of the partition did not reach
the leader in time: lost, refused, or later than the leader's hold) is no broker trouble: the batch is
resent without ``retry.backoff.ms``, as soon as the earlier batches are answered (P3 holds it until then).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import grpc

from common.clock import Clock
from common.framing import PRODUCE
from common.streams import OrderedStream
from log import trace
from odradek.accumulator import ProducerBatch, RecordAccumulator
from odradek.backoff import ExponentialBackoff
from odradek.config import ProducerConfig
from odradek.errors import (
    IllegalStateError,
    InvalidProducerEpochError,
    KafkaError,
    KafkaTimeoutError,
    NetworkError,
    TransactionAbortedError,
    error_from_code,
)
from odradek.idempotence import DUPLICATE_SEQUENCE, OUT_OF_ORDER, UNKNOWN_PRODUCER_ID, IdempotenceState, Verdict
from odradek.net import ClusterClient, rpc_error
from odradek.net.data_link import DataLink, DataLinkUnreachable
from odradek.transactions import EPOCH_REFUSALS
from odradek.types import TopicPartition
from proto import broker_pb2

MAX_IDLE_MS = 1000.0
DATA_ANSWER_BYTES = 16 << 20  # the largest ProduceResponse taken from a DATA listener (a few bytes a partition)
STALE_REQUEST_MS = 1000.0  # an unanswered request this old has its leaders looked up again
STALE_REFRESH_MS = 250.0  # ... this often, from brokers other than its own
_REFUSED = frozenset({OUT_OF_ORDER, UNKNOWN_PRODUCER_ID})  # with an earlier batch unanswered: rule P5
_log = logging.getLogger("odradek.producer")


class _Request:
    """One ProduceRequest in flight: its broker and the batches it carries, by partition."""

    __slots__ = ("node", "address", "batches", "sent_ms", "call", "sent_ns", "done_ns")

    def __init__(
        self, node: int, address: str, batches: dict[TopicPartition, list[ProducerBatch]], sent_ms: float = 0.0
    ) -> None:
        self.node = node
        self.address = address
        self.batches = batches
        self.sent_ms = sent_ms
        self.call: Any = None  # the gRPC future, once started
        self.sent_ns = self.done_ns = 0  # log.trace: when the call started and when its answer came


class Sender:
    """Runs on its own daemon thread, the only one that sends, retries and completes batches.

    Thread-safety: ``wakeup``, ``initiate_close`` and ``force_close`` may be called from any thread;
    gRPC callbacks only append to a deque and set an event; everything else runs on the sender thread.
    """

    def __init__(
        self,
        *,
        client: ClusterClient,
        accumulator: RecordAccumulator,
        config: ProducerConfig,
        clock: Clock,
        backoff: ExponentialBackoff,
        idempotence: IdempotenceState | None = None,
        on_record_error: Callable[[BaseException], None] | None = None,
        refused: Callable[[], Mapping[TopicPartition, BaseException]] | None = None,
    ) -> None:
        self._client = client
        self._idempotence = idempotence
        # a transactional producer: its InitProducerId is the transaction manager's, and its records' failures
        # are reported to it (odradek.transactions)
        self._transactional_id = config.transactional_id or ""
        self._on_record_error = on_record_error
        self._refused = refused  # partitions whose records must fail unsent (their AddPartitionsToTxn failed)
        self._abort_unsent: threading.Event | None = None  # set by abort_unsent(); the sender thread does it
        self._init_attempts = 0
        self._init_retry_at_ms = 0.0
        self._accumulator = accumulator
        self._clock = clock
        self._backoff = backoff
        self._acks = config.acks
        self._retries = config.retries
        self._delivery_timeout_ms = config.delivery_timeout_ms
        self._request_timeout_ms = config.request_timeout_ms
        self._max_request_size = config.max_request_size
        self._max_in_flight = config.max_in_flight_requests_per_connection
        self._in_flight: dict[int, int] = {}
        self._requests: set[_Request] = set()
        self._unreachable: set[int] = set()  # brokers whose last request failed on the connection
        self._stale_refresh_ms = -float("inf")  # the last metadata refresh asked for because of a stale request
        self._completions: deque[tuple[_Request, Any]] = deque()
        # batches a leader accepted, whose futures and callbacks wait for the end of the pass's sends (run_once)
        self._accepted: list[tuple[ProducerBatch, int, int]] = []
        self._streams: dict[str, OrderedStream] = {}  # each broker's ProduceStream, by address
        self._links: dict[int, DataLink] = {}  # each broker's DATA connection, by node id (odradek.net.data_link)
        self._wake = threading.Event()
        self._running = True
        self._forced = False
        name = f"odradek-producer-sender{'-' + config.client_id if config.client_id else ''}"
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    # ----------------------------------------------------------------------------- control

    def start(self) -> None:
        self._thread.start()

    def wakeup(self) -> None:
        self._wake.set()

    def initiate_close(self) -> None:
        """Stop after everything queued has been sent and answered (or failed)."""
        self._running = False
        self._accumulator.close()
        self._wake.set()

    def force_close(self) -> None:
        """Stop now; every unfinished record fails."""
        self._forced = True
        self.initiate_close()

    def join(self, timeout_s: float | None) -> bool:
        if threading.current_thread() is self._thread:
            return False  # close() from a callback: the thread ends by itself once done
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    @property
    def is_sender_thread(self) -> bool:
        return threading.current_thread() is self._thread

    # ---------------------------------------------------------------------------------- loop

    def _run(self) -> None:
        while self._running:
            self._guarded_run_once()
        while not self._forced and (self._accumulator.has_incomplete() or self._requests):
            self._guarded_run_once()
        self._complete_accepted()
        error = IllegalStateError("the producer was closed forcefully before the record was delivered")
        for batch in self._accumulator.abort_all():
            self._fail(batch, error)
        for request in list(self._requests):
            for batches in request.batches.values():
                for batch in batches:
                    self._fail(batch, error)
        for stream in self._streams.values():
            stream.close()
        for link in self._links.values():
            link.close()

    def _guarded_run_once(self) -> None:
        """A bug in one pass must not kill the thread and leave every future hanging: log, pause, go on."""
        try:
            self.run_once()
        except Exception:
            _log.exception("unexpected error in the producer's sender thread")
            self._wake.wait(MAX_IDLE_MS / 1000)

    def run_once(self) -> None:
        """One pass of the loop (also driven directly by tests)."""
        self._wake.clear()
        if self._accepted:  # left by a pass that failed before its end
            self._complete_accepted()
        now = self._clock.monotonic_ms()
        self._handle_completions(now)
        aborting = self._abort_unsent
        if aborting is not None:  # abort_transaction(): the records not sent yet are dropped (C5)
            self._abort_unsent = None
            for batch in self._accumulator.abort_all():
                self._fail(batch, TransactionAbortedError("the transaction was aborted before the record was sent"))
            aborting.set()
        refused = None if self._refused is None else self._refused()
        if refused:  # never sent: the coordinator did not add their partitions to the transaction (C2)
            for tp, error in refused.items():
                for batch in self._accumulator.abort_partition(tp):
                    self._fail(batch, error, from_leader=False)
        self._client.maybe_refresh()
        init_wait_ms = self._maybe_init_producer_id(now)
        cluster = self._client.cluster
        check = self._accumulator.ready(cluster.leader, now)
        unreachable = bool(self._unreachable & check.leaders)  # a dead leader: look for its successor
        stale_wait_ms = self._abandon_moved_requests(now)  # a paused leader: its successor takes over
        if check.unknown_leaders or unreachable:
            self._client.request_update()
        nodes = [n for n in check.nodes if self._in_flight.get(n, 0) < self._max_in_flight]
        sent = False
        if nodes:
            for node, batches in self._accumulator.drain(cluster.leader, nodes, self._max_request_size, now).items():
                self._send(node, batches, now)
                sent = True
        self._complete_accepted()
        for batch in self._accumulator.expire(now):
            self._fail(batch, self._expired_error([batch], now, batch.last_error))
        if sent or self._completions or self._forced:
            return
        if not self._running and not self._requests and not self._accumulator.has_incomplete():
            return  # closing, and nothing is left to wait for
        wait_ms = min(check.next_check_ms, MAX_IDLE_MS, init_wait_ms, stale_wait_ms)
        if check.unknown_leaders or unreachable:
            wait_ms = min(wait_ms, self._client.metadata_due_in_ms(now))
        if wait_ms > 0:
            self._wake.wait(wait_ms / 1000)

    def _abandon_moved_requests(self, now: float) -> float:
        """Requests unanswered for ``STALE_REQUEST_MS``: ask for metadata (at most every ``STALE_REQUEST_MS``)
        and cancel those whose partitions are all led elsewhere now (module docstring); how long until the
        next look is due."""
        if self._acks == 0 or not self._requests:
            return MAX_IDLE_MS
        oldest = min(r.sent_ms for r in self._requests)
        if now - oldest < STALE_REQUEST_MS:
            return STALE_REQUEST_MS - (now - oldest)
        stale = [r for r in self._requests if now - r.sent_ms >= STALE_REQUEST_MS]
        if now - self._stale_refresh_ms >= STALE_REFRESH_MS:
            self._stale_refresh_ms = now
            for node in {r.node for r in stale}:
                self._client.suspect(node)
            self._client.request_update()
        leader = self._client.cluster.leader
        for request in stale:
            if request.call is not None and all(0 <= leader(tp) != request.node for tp in request.batches):
                _log.info("cancelling a Produce to %s: its partitions have other leaders now", request.address)
                request.call.cancel()  # its callback hands the CANCELLED outcome to this thread: retried
        return STALE_REFRESH_MS

    # ----------------------------------------------------------------------------- producer id

    def _maybe_init_producer_id(self, now: float) -> float:
        """InitProducerId when the idempotence state needs an id (P7); how long until the next try is due."""
        idem = self._idempotence
        if idem is None or not idem.needs_producer_id() or self._forced or self._transactional_id:
            return MAX_IDLE_MS
        if now < self._init_retry_at_ms:
            return self._init_retry_at_ms - now
        self._complete_accepted()  # not behind a blocking call
        request = broker_pb2.InitProducerIdRequest(producer_id=idem.producer_id, producer_epoch=idem.producer_epoch)
        try:
            response = self._client.call_any("InitProducerId", request, self._request_timeout_ms / 1000)
            if response.error.code:
                raise error_from_code(response.error.code, f"InitProducerId failed: {response.error.message}")
        except KafkaError as exc:
            if exc.code.endswith("AUTHORIZATION_FAILED"):
                # Kafka's producer: not allowed a producer id is fatal for what is queued (no retry can help)
                for batch in self._accumulator.abort_all():
                    self._fail(batch, exc)
                self._init_retry_at_ms = now + self._backoff.backoff_ms(self._init_attempts)
                return self._init_retry_at_ms - now
            self._init_attempts += 1
            self._init_retry_at_ms = now + self._backoff.backoff_ms(self._init_attempts - 1)
            _log.info("InitProducerId failed (%s); trying again in %.0f ms", exc, self._init_retry_at_ms - now)
            return self._init_retry_at_ms - now
        self._init_attempts = 0
        idem.set_producer_id(response.producer_id, response.producer_epoch)
        return 0.0

    # ---------------------------------------------------------------------------------- send

    def _send(self, node: int, batches: Sequence[ProducerBatch], now: float) -> None:
        by_tp: dict[TopicPartition, list[ProducerBatch]] = {}
        by_topic: dict[str, list[broker_pb2.ProducePartitionData]] = {}
        failed: set[TopicPartition] = set()
        for batch in batches:
            batch.in_flight = True
            try:
                batch.build()
            except Exception as exc:  # a record the builder rejects fails its batch, not the others
                self._fail(batch, KafkaError(f"could not build the record batch for {batch.tp}: {exc}"))
                failed.add(batch.tp)
                continue
            by_tp.setdefault(batch.tp, []).append(batch)
        for tp in failed - by_tp.keys():
            self._accumulator.unmute(tp)
        for tp, tp_batches in by_tp.items():
            records = b"".join(b.data or b"" for b in tp_batches)
            by_topic.setdefault(tp.topic, []).append(
                broker_pb2.ProducePartitionData(partition=tp.partition, records=records)
            )
        if not by_tp:
            return
        target = self._client.stub_for(node)
        request = _Request(node, target[1] if target else f"broker {node}", by_tp, now)
        self._requests.add(request)
        self._in_flight[node] = self._in_flight.get(node, 0) + 1
        if target is None:
            self._complete_request(request, NetworkError(f"broker {node} left the cluster metadata"), now)
            return
        message = broker_pb2.ProduceRequest(
            acks=self._acks,
            timeout_ms=self._request_timeout_ms,
            transactional_id=self._transactional_id,
            topics=[broker_pb2.ProduceTopicData(name=t, partitions=p) for t, p in by_topic.items()],
        )
        if trace.ON:
            request.sent_ns = trace.now_ns()
        try:  # started here, on the sender thread: one broker's requests go out in the order they were drained
            link = self._link_for(node)
            if link is not None:
                call = link.start(PRODUCE, message, self._request_timeout_ms / 1000)
            else:
                call = self._stream_for(*target).start(message, self._request_timeout_ms / 1000)
        except Exception as exc:  # a closed channel, ...: the request failed before it left
            error = NetworkError(f"Produce to {request.address} failed: {exc!r}")
            if self._acks == 0:  # nothing is retried: the records fail
                for tp_batches in by_tp.values():
                    for batch in tp_batches:
                        self._fail(batch, error)
            self._complete_request(request, error, now)
            return
        if self._acks == 0:
            for tp_batches in by_tp.values():
                for batch in tp_batches:
                    batch.complete(-1)
        request.call = call
        call.add_done_callback(lambda done: self._on_done(request, done))

    def _link_for(self, node: int) -> DataLink | None:
        """The connection to the broker's DATA listener (TCP frames), None when its requests go on gRPC. A
        broker's requests switch between the two only while none is in flight, so they never overtake each
        other."""
        address = self._client.data_address(node)
        link = self._links.get(node)
        if link is not None and link.address != address and link.pending == 0:
            link.close()  # the broker moved or its DATA listener went away
            del self._links[node]
            link = None
        if link is not None:
            return link
        if not address or self._in_flight.get(node, 0) > 1:  # this request is counted already
            return None
        link = self._links[node] = self._client.data_link(node, address, DATA_ANSWER_BYTES, "producer")
        return link

    def _stream_for(self, stub: Any, address: str) -> OrderedStream:
        """The broker's ProduceStream (made by its first request); unary Produce calls where it has none."""
        stream = self._streams.get(address)
        if stream is None:
            stream = self._streams[address] = OrderedStream(
                stub, f"{self._thread.name}-{address}", "ProduceStream", "Produce",
                lambda message, timeout: self._client.start_ordered(stub.Produce, message, timeout),
            )  # fmt: skip
        return stream

    def _on_done(self, request: _Request, call: Any) -> None:
        """On a gRPC thread: hand the finished call over to the sender thread."""
        if trace.ON:
            request.done_ns = trace.now_ns()
        self._completions.append((request, call))
        self._wake.set()

    # ------------------------------------------------------------------------------ answers

    def _handle_completions(self, now: float) -> None:
        while self._completions:
            request, call = self._completions.popleft()
            try:
                response = call.result()
            except DataLinkUnreachable as exc:  # gRPC for this broker for a while; the batches are retried
                link = self._links.pop(request.node, None)
                if link is not None:
                    self._client.data_unreachable(link.address, exc)
                    link.close()
                self._complete_request(request, exc, now)
            except KafkaError as exc:  # from the DATA listener: a refusal, or the connection lost (NetworkError)
                self._complete_request(request, exc, now)
            except grpc.RpcError as exc:
                self._complete_request(request, rpc_error(exc, "Produce", request.address), now)
            except Exception as exc:  # cancelled by channel close, ...
                self._complete_request(request, NetworkError(f"Produce to {request.address} failed: {exc!r}"), now)
            else:
                self._complete_request(request, response, now)

    def _complete_request(
        self, request: _Request, outcome: broker_pb2.ProduceResponse | KafkaError, now: float
    ) -> None:
        self._requests.discard(request)
        self._in_flight[request.node] -= 1
        for batches in request.batches.values():
            for batch in batches:
                batch.in_flight = False
        if isinstance(outcome, NetworkError):
            self._unreachable.add(request.node)
        else:
            self._unreachable.discard(request.node)
        if isinstance(outcome, KafkaError):
            if outcome.invalid_metadata:
                self._client.request_update()
            for batches in request.batches.values():
                self._retry_or_fail(batches, outcome, now)
        else:
            self._handle_response(request, outcome, now)
        for tp in request.batches:
            self._accumulator.unmute(tp)

    def _handle_response(self, request: _Request, response: broker_pb2.ProduceResponse, now: float) -> None:
        answered: set[TopicPartition] = set()
        for topic in response.topics:
            for p in topic.partitions:
                tp = TopicPartition(topic.name, p.partition)
                batches = request.batches.get(tp)
                if batches is None or tp in answered:
                    continue
                answered.add(tp)
                code = p.error.code
                if not code or code == DUPLICATE_SEQUENCE:
                    offset = p.base_offset if not code else -1
                    if trace.ON and offset >= 0:
                        _trace_batches(request, tp, batches, offset)
                    for batch in batches:
                        if self._idempotence is not None:
                            self._idempotence.resolved(batch)
                        self._accepted.append((batch, offset, p.log_append_time_ms))
                        offset += batch.record_count if offset >= 0 else 0
                    continue
                error = error_from_code(code, f"producing to {tp} failed: {p.error.message or code}")
                if error.invalid_metadata:
                    self._client.request_update()
                self._retry_or_fail(batches, error, now)
        for tp, batches in request.batches.items():
            if tp not in answered:
                self._retry_or_fail(batches, NetworkError(f"the answer of {request.address} lacks partition {tp}"), now)

    def _retry_or_fail(self, batches: Sequence[ProducerBatch], error: KafkaError, now: float) -> None:
        retry: list[ProducerBatch] = []
        reordered: list[ProducerBatch] = []  # P5: resent once the earlier batches are answered, no backoff
        for batch in batches:
            if self._acks == 0 or batch.done:
                self._accumulator.deallocate(batch)
                continue
            expired = now - batch.created_ms >= self._delivery_timeout_ms
            retriable = error.retriable
            verdict = None
            if self._idempotence is not None:
                verdict = self._idempotence.on_error(batch, error.code, error.retriable)
                retriable = verdict is not Verdict.FAIL
            if retriable and not expired and batch.attempts < self._retries and not self._forced:
                batch.attempts += 1
                batch.last_error = error
                p5 = verdict is Verdict.RETRY and error.code in _REFUSED and not batch.head_when_sent
                (reordered if p5 else retry).append(batch)
            else:
                self._fail(batch, self._expired_error([batch], now, error) if expired else error)
        if reordered:
            self._accumulator.reenqueue(reordered, now)
        if retry:
            attempts = max(b.attempts for b in retry)
            self._accumulator.reenqueue(retry, now + self._backoff.backoff_ms(attempts - 1))

    def _expired_error(
        self, batches: Sequence[ProducerBatch], now: float, last: BaseException | None
    ) -> KafkaTimeoutError:
        batch = batches[0]
        count = sum(b.record_count for b in batches)
        cause = f"; last error: {last}" if last is not None else ""
        return KafkaTimeoutError(
            f"expiring {count} record(s) for {batch.tp}: {now - batch.created_ms:.0f} ms has passed since batch "
            f"creation (delivery.timeout.ms is {self._delivery_timeout_ms}){cause}"
        )

    def abort_unsent(self, timeout_s: float) -> bool:
        """Fail every queued (unsent) batch, on the sender thread; wait until done (True) or ``timeout_s``."""
        done = threading.Event()
        self._abort_unsent = done
        self._wake.set()
        return done.wait(timeout_s)

    def _complete_accepted(self) -> None:
        """The futures and callbacks of the batches the leaders accepted, and their memory back. ``run_once`` calls
        it after its sends: a batch held for its partition's request in flight goes out as soon as that answer is
        taken, before the callbacks of the records it answered run (docs/LATENCY.md). Every failure completes these
        first, so a partition's callbacks keep their order."""
        accepted, self._accepted = self._accepted, []
        for batch, offset, log_append_time_ms in accepted:
            if self._acks != 0:
                batch.complete(offset, log_append_time_ms)
            self._accumulator.deallocate(batch)

    def _fail(self, batch: ProducerBatch, error: BaseException, from_leader: bool = True) -> None:
        """``batch`` fails for good with ``error`` (``from_leader``: a partition leader's answer)."""
        if self._accepted:
            self._complete_accepted()
        if self._on_record_error is not None:
            if from_leader:
                error = self._leader_refusal(batch, error)
            self._on_record_error(error)
        if self._idempotence is not None:
            self._idempotence.on_failed(batch, type(error).__name__)
        batch.fail(error)
        self._accumulator.deallocate(batch)

    def _leader_refusal(self, batch: ProducerBatch, error: BaseException) -> BaseException:
        """A transactional record's error from its partition leader, as the transaction manager takes it: a
        refused epoch is abortable (KIP-588: the leader's verdict may be stale, a leader cut off from the others
        answers from its own coordinator's old state; the abort asks the coordinator, which raises
        ProducerFencedError if a newer instance took the id). A refusal of the epoch or of the transaction also
        asks for metadata: the leader may be a deposed one that does not know it yet."""
        code = getattr(error, "code", "")
        if code in EPOCH_REFUSALS:
            error = InvalidProducerEpochError(
                f"a partition leader refused this producer's epoch {batch.producer_epoch} of transactional.id "
                f"{self._transactional_id!r}: abort the transaction ({error})"
            )
        if code in EPOCH_REFUSALS or code == "INVALID_TXN_STATE":
            self._client.request_update()
        return error


def _trace_batches(request: _Request, tp: TopicPartition, batches: Sequence[ProducerBatch], offset: int) -> None:
    """``pb`` events (``log.trace``): per answered batch, its offsets and when it was created, when its
    request started and answered, and when this thread took the answer (``perf_counter`` clock)."""
    handled_ns = trace.now_ns()
    for batch in batches:
        count = batch.record_count
        trace.record(handled_ns, "pb", tp.topic, tp.partition, offset, offset + count - 1,
                     int(batch.created_ms * 1e6), request.sent_ns, request.done_ns)  # fmt: skip
        offset += count
