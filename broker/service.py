"""The Broker gRPC service (proto/broker.proto): a thin shell over ``broker.handlers``.

Each RPC calls its handler with the :class:`~broker.context.BrokerContext`. Handlers answer errors in the
response (Kafka's names); an exception escaping one is a bug: it is logged and the call fails with gRPC
status INTERNAL, and the broker keeps serving. With metrics on, ``_call`` (the one dispatch point) counts
and times every request (``broker.metrics.requests``). Every server also serves the gRPC health service.

Thread-safety: the servicer holds no state of its own. Short RPCs run on the server's worker threads
(``num.io.threads``); Fetch and Produce are coroutines on the server's event loop that wait (for data, for
the ISR) without holding a worker (``controller.rpc_server``), so long polls cannot starve the short requests.
Produce appends on the loop (a batch held for its turn goes to a worker); Fetch reads on a worker, except
the small read after a wake-up and the first read of a fetch with nothing to read yet
(``fetch.inline.read.max.bytes``), which the loop does itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

import grpc

from broker.config import BrokerConfig
from broker.context import BrokerContext
from broker.handlers import (
    add_offsets_to_txn,
    add_partitions_to_txn,
    consumer_group_describe,
    consumer_group_heartbeat,
    delete_groups,
    describe_cluster,
    describe_configs,
    describe_log_dirs,
    describe_transactions,
    end_txn,
    fetch,
    find_coordinator,
    forward,
    init_producer_id,
    list_groups,
    list_offsets,
    metadata,
    offset_commit,
    offset_fetch,
    offsets_for_leader_epoch,
    produce,
    security_admin,
    txn_offset_commit,
    write_txn_markers,
)
from broker.lifecycle import LISTENER
from broker.loop_listener import NoContext
from controller.long_poll import Wakeup, run_blocking
from controller.rpc_server import RpcServer
from log import trace
from proto import broker_pb2_grpc

if TYPE_CHECKING:
    from controller.health import HealthReporter

logger = logging.getLogger(__name__)

Req = TypeVar("Req")
Resp = TypeVar("Resp")
RESPONSE_SLACK_BYTES = 1 << 20  # framing of a response around its record bytes
SERVICE_NAME = "odradek.broker.Broker"  # its name in the gRPC health service


class BrokerService(broker_pb2_grpc.BrokerServicer):
    """Every RPC of the Broker service, as served on one listener (Metadata and DescribeCluster answer its
    endpoints)."""

    def __init__(self, ctx: BrokerContext, listener: str = LISTENER, pool: Executor | None = None) -> None:
        self._ctx = ctx
        self._listener = listener
        self._pool = pool  # the server's worker pool: where the long polls' reads run
        self._inline_read_max_bytes = int(ctx.config.get("fetch.inline.read.max.bytes"))
        self._fetch_stream = bool(ctx.config.get("consumer.fetch.stream.enable"))
        self._produce_stream = bool(ctx.config.get("produce.stream.enable"))

    def _call(self, handler: Callable[[BrokerContext, Req], Resp], request: Req, context: Any) -> Resp:
        metrics = self._ctx.metrics
        if metrics is None:
            return self._run(handler, request, context)
        started = time.perf_counter()
        try:
            response = self._run(handler, request, context)
        except BaseException:
            metrics.requests.record_failure(handler, request, started)
            raise
        metrics.requests.record(handler, request, response, started)
        return response

    def _run(self, handler: Callable[[BrokerContext, Req], Resp], request: Req, context: Any) -> Resp:
        try:
            return handler(self._ctx, request)
        except Exception as exc:
            name = getattr(getattr(handler, "func", handler), "__module__", handler)  # partial: its function's
            logger.exception("broker %d: %s failed", self._ctx.broker_id, name)
            context.abort(grpc.StatusCode.INTERNAL, f"unexpected error: {exc!r}")
            raise  # abort raises; this line satisfies the type checker

    def Metadata(self, request: Any, context: Any) -> Any:
        return self._call(partial(metadata.handle, listener=self._listener), request, context)

    async def Produce(self, request: Any, context: Any) -> Any:
        """The appends run on the event loop itself (a worker thread costs two thread switches a request, as
        much as validating a batch); a batch that must wait for its turn (S8) hands the rest of the request
        to a worker; an acks=all wait holds no thread."""
        arrived = time.perf_counter()
        try:
            started = produce.begin(self._ctx, request, hold=False)
        except Exception as exc:
            self._failed(produce.handle, request, arrived, exc)
            await context.abort(grpc.StatusCode.INTERNAL, f"unexpected error: {exc!r}")
            raise
        return await self._produce_rest(request, started, arrived, context)

    async def _produce_rest(self, request: Any, started: Any, arrived: float, context: Any) -> Any:
        """:meth:`Produce` after ``produce.begin``: a held batch's turn on a worker, the acks=all wait, the answer."""
        if isinstance(started, produce.PendingProduce) and started.pending.held:
            started = await self._call_blocking(produce.resume, started, context, produce.handle, arrived)
        if not isinstance(started, produce.PendingProduce):
            self._record(produce.handle, request, started, arrived)
            return started
        request.ClearField("topics")  # the records are written: free them while the ISR catches up
        op = started.pending.operation
        assert op is not None
        wakeup = Wakeup()
        op.add_done_callback(wakeup.wake)
        if not await wakeup.wait(started.pending.wait_s):
            op.expire()
        return self._produce_finished(request, started, arrived)

    def _produce_finished(self, request: Any, started: Any, arrived: float) -> Any:
        """An acks=all Produce's answer once its wait is over (completed or expired): traced and counted."""
        response = produce.finish(started)
        if trace.ON:
            _trace_produce(arrived, started.pending.results)
        self._record(produce.handle, request, response, arrived)
        return response

    def produce_then(self, request: Any, done: Callable[[Any], None]) -> Callable[[], None]:
        """:meth:`Produce` without a coroutine (``broker.data_listener``): the appends on the loop, the acks=all
        wait a timer and a callback of its DelayedProduce, the answer built in that callback; a batch held for
        its turn (S8) goes on as :meth:`Produce` does, in a task. ``done(response)`` runs on the loop, once (at
        once, inside this call, when nothing waits); an unexpected error is logged, counted and passed to
        ``done`` as the exception. Returns what cancels it (``done`` is then not called: the connection that
        waited for it is gone; the appends stay, as a cancelled Produce call's do)."""
        loop = asyncio.get_running_loop()
        arrived = time.perf_counter()
        try:
            started = produce.begin(self._ctx, request, hold=False)
        except Exception as exc:
            self._failed(produce.handle, request, arrived, exc)
            done(exc)
            return _nothing
        if not isinstance(started, produce.PendingProduce):
            self._record(produce.handle, request, started, arrived)
            done(started)
            return _nothing
        if started.pending.held:
            return _Running(loop.create_task(self._produce_rest(request, started, arrived, NoContext())), done).cancel
        request.ClearField("topics")  # the records are written: free them while the ISR catches up
        parked = _ParkedProduce(self, loop, request, started, arrived, done)
        operation = started.pending.operation
        assert operation is not None
        parked.park(started.pending.wait_s, operation)
        return parked.cancel

    async def Fetch(self, request: Any, context: Any, session: Any = None) -> Any:
        """A long poll: the first read runs on the worker pool, the wait holds no thread
        (``controller.rpc_server``); the read after the wait runs on the event loop when what woke it is at
        most ``fetch.inline.read.max.bytes`` (a record that just arrived: two thread switches saved on the
        way of every replicated and consumed record), else on the pool. With ``fetch.inline.read.max.bytes``
        above 0, a fetch with nothing to read yet (``fetch.nothing_to_read``: a caught-up follower reporting
        its position) also runs its first read on the loop. With ``session`` (a
        :class:`~broker.fetch_session.LeaderSession`; ``request`` is then its view) the session decides what
        is read, and how the fetch waits."""
        return await self._fetch(request, context, session, self._read_inline_first(request, session))

    def _read_inline_first(self, request: Any, session: Any) -> bool:
        """Whether a fetch's first read runs on the loop: it has nothing to read yet (``fetch.nothing_to_read``, or
        the session's), and inline reads are on (``fetch.inline.read.max.bytes`` above 0)."""
        if self._inline_read_max_bytes <= 0:
            return False
        return fetch.nothing_to_read(self._ctx, request) if session is None else session.nothing_to_read(self._ctx)

    async def _fetch(self, request: Any, context: Any, session: Any, inline_first: bool) -> Any:
        """:meth:`Fetch`, told where its first read runs (:meth:`_read_inline_first`)."""
        arrived = time.perf_counter()
        begin, finish = (fetch.begin_grpc, fetch.finish_grpc) if session is None else (session.begin, session.finish)
        if inline_first:
            # caught up (a follower's report, a consumer at the high watermark): the read finds nothing, and
            # the high watermark it may move completes the waiting produces on this loop, with no thread hop
            started = await self._call_inline(begin, request, context, fetch.handle, arrived)
        else:
            started = await self._call_blocking(begin, request, context, fetch.handle, arrived)
        woke_ns = 0
        if isinstance(started, fetch.PendingFetch):
            op = started.op
            wakeup = Wakeup()
            op.add_done_callback(wakeup.wake)
            if not await wakeup.wait(started.wait_s):
                op.expire()
            woke_ns = trace.now_ns() if trace.ON else 0
            if op.ready_bytes <= self._inline_read_max_bytes:  # small: read here, no hop to a worker and back
                started = await self._call_inline(finish, started, context, fetch.handle, arrived)
            else:
                started = await self._call_blocking(finish, started, context, fetch.handle, arrived)
        if trace.ON:
            fetch.trace_fetch(request, started, arrived, woke_ns)
        self._record(fetch.handle, request, started, arrived)
        return started

    async def ReplicaFetch(self, request_iterator: Any, context: Any) -> Any:
        """A follower's fetches on one stream, in lockstep: each request answered as :meth:`Fetch` answers it,
        in order (the follower sends the next one after the answer). The stream ends when the follower
        closes it, or at the first request that fails (INTERNAL, as Fetch)."""
        async for request in request_iterator:
            yield await self.Fetch(request, context)

    async def FetchStream(self, request_iterator: Any, context: Any) -> Any:
        """A consumer's fetches on one stream, in lockstep, as :meth:`ReplicaFetch` (``common.streams``);
        UNIMPLEMENTED with ``consumer.fetch.stream.enable`` false (the consumer then makes unary calls)."""
        if not self._fetch_stream:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "consumer.fetch.stream.enable is false")
        async for request in request_iterator:
            yield await self.Fetch(request, context)

    async def ProduceStream(self, request_iterator: Any, context: Any) -> Any:
        """A producer's requests on one stream, several in flight: each handled by :meth:`Produce` and answered
        in the order they came. Each request's handling starts (its appends, which run first and without a
        pause) as soon as it is read, so the appends keep the stream's order and a request does not wait for
        the answer of the one before it; the answers then go out in that order. UNIMPLEMENTED with
        ``produce.stream.enable`` false (the producer then makes unary calls). The stream ends when the producer
        closes it, or at the first request that fails (INTERNAL, as Produce)."""
        if not self._produce_stream:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "produce.stream.enable is false")
        answers: asyncio.Queue[asyncio.Future[Any] | None] = asyncio.Queue()

        async def read() -> None:
            try:
                async for request in request_iterator:
                    answers.put_nowait(asyncio.ensure_future(self.Produce(request, context)))
            finally:
                answers.put_nowait(None)

        reader = asyncio.ensure_future(read())
        try:
            while (answer := await answers.get()) is not None:
                yield await answer
            await reader  # its error, if reading failed
        finally:
            reader.cancel()
            while not answers.empty():  # the stream failed: the requests still running have no one to answer
                left = answers.get_nowait()
                if left is not None:
                    left.cancel()

    def _record(self, handler: Callable[..., Any], request: Any, response: Any, arrived: float) -> None:
        """The metrics of a request the coroutines above answered (``_call`` counts the others)."""
        if self._ctx.metrics is not None:
            self._ctx.metrics.requests.record(handler, request, response, arrived)

    def _record_failure(self, handler: Callable[..., Any], request: Any, arrived: float) -> None:
        if self._ctx.metrics is not None:
            self._ctx.metrics.requests.record_failure(handler, request, arrived)

    def fetch_then(self, request: Any, done: Callable[[Any], None], session: Any = None) -> Callable[[], None]:
        """:meth:`Fetch` without a coroutine when it stays on the event loop (``broker.data_listener``, and with
        ``session``, ``request`` its view, ``broker.replication_listener``), which is how a caught-up follower's
        report and a caught-up consumer's fetch go: the first read on the loop, the long poll a timer and a
        callback of the parked operation, the read after it on the loop when what woke it is at most
        ``fetch.inline.read.max.bytes``. ``done(response)`` runs on the loop, once (at once, inside this call,
        when nothing waits); a fetch with a first read for the worker pool runs as :meth:`Fetch` in a task. An
        unexpected error is logged, counted, and passed to ``done`` as the exception (the caller closes the
        connection). Returns what cancels it (``done`` is then not called). Measured in docs/LATENCY.md: no task,
        stream read or future per request on the way of every replicated and consumed record."""
        loop = asyncio.get_running_loop()
        if not self._read_inline_first(request, session):
            return _Running(loop.create_task(self._fetch(request, NoContext(), session, False)), done).cancel
        arrived = time.perf_counter()
        begin, finish = (fetch.begin_grpc, fetch.finish_grpc) if session is None else (session.begin, session.finish)
        try:
            started = begin(self._ctx, request)
        except Exception as exc:
            self._failed(fetch.handle, request, arrived, exc)
            done(exc)
            return _nothing
        if not isinstance(started, fetch.PendingFetch):
            self._fetched(request, started, arrived, 0)
            done(started)
            return _nothing
        parked = _ParkedFetch(self, loop, request, finish, started, arrived, done)
        parked.park(started.wait_s, started.op)
        return parked.cancel

    def _fetched(self, request: Any, response: Any, arrived: float, woke_ns: int) -> None:
        if trace.ON:
            fetch.trace_fetch(request, response, arrived, woke_ns)
        self._record(fetch.handle, request, response, arrived)

    def _failed(self, handler: Callable[..., Any], request: Any, arrived: float, exc: BaseException) -> None:
        """An unexpected error of ``handler`` (a bug): counted and logged."""
        self._record_failure(handler, request, arrived)
        logger.error("broker %d: %s failed", self._ctx.broker_id, handler.__module__, exc_info=exc)

    async def _call_inline(
        self, handler: Callable[[BrokerContext, Req], Resp], request: Req, context: Any,
        counted_as: Callable[..., Any], arrived: float,
    ) -> Resp:  # fmt: skip
        """``handler`` on the event loop itself (short work only); errors as :meth:`_call_blocking`'s."""
        try:
            return handler(self._ctx, request)
        except Exception as exc:
            self._record_failure(counted_as, request, arrived)
            logger.exception("broker %d: %s failed", self._ctx.broker_id, getattr(handler, "__module__", handler))
            await context.abort(grpc.StatusCode.INTERNAL, f"unexpected error: {exc!r}")
            raise

    async def _call_blocking(
        self, handler: Callable[[BrokerContext, Req], Resp], request: Req, context: Any,
        counted_as: Callable[..., Any], arrived: float,
    ) -> Resp:  # fmt: skip
        """``handler`` on the worker pool; an exception is a bug (logged, counted as ``counted_as``, INTERNAL)."""
        if self._pool is None:
            raise RuntimeError("an asynchronous handler needs the server's worker pool")
        try:
            return await run_blocking(self._pool, handler, self._ctx, request)
        except Exception as exc:
            self._record_failure(counted_as, request, arrived)
            logger.exception("broker %d: %s failed", self._ctx.broker_id, getattr(handler, "__module__", handler))
            await context.abort(grpc.StatusCode.INTERNAL, f"unexpected error: {exc!r}")
            raise

    def ListOffsets(self, request: Any, context: Any) -> Any:
        return self._call(list_offsets.handle, request, context)

    def OffsetsForLeaderEpoch(self, request: Any, context: Any) -> Any:
        return self._call(offsets_for_leader_epoch.handle, request, context)

    def DescribeCluster(self, request: Any, context: Any) -> Any:
        return self._call(partial(describe_cluster.handle, listener=self._listener), request, context)

    def DescribeConfigs(self, request: Any, context: Any) -> Any:
        return self._call(describe_configs.handle, request, context)

    def DescribeLogDirs(self, request: Any, context: Any) -> Any:
        return self._call(describe_log_dirs.handle, request, context)

    def CreateTopics(self, request: Any, context: Any) -> Any:
        return self._call(forward.create_topics, request, context)

    def DeleteTopics(self, request: Any, context: Any) -> Any:
        return self._call(forward.delete_topics, request, context)

    def CreatePartitions(self, request: Any, context: Any) -> Any:
        return self._call(forward.create_partitions, request, context)

    def AlterConfigs(self, request: Any, context: Any) -> Any:
        return self._call(forward.alter_configs, request, context)

    def ElectLeaders(self, request: Any, context: Any) -> Any:
        return self._call(forward.elect_leaders, request, context)

    def CreateAcls(self, request: Any, context: Any) -> Any:
        return self._call(security_admin.create_acls, request, context)

    def DeleteAcls(self, request: Any, context: Any) -> Any:
        return self._call(security_admin.delete_acls, request, context)

    def AlterUserScramCredentials(self, request: Any, context: Any) -> Any:
        return self._call(security_admin.alter_user_scram_credentials, request, context)

    def DescribeAcls(self, request: Any, context: Any) -> Any:
        return self._call(security_admin.describe_acls, request, context)

    def DescribeUserScramCredentials(self, request: Any, context: Any) -> Any:
        return self._call(security_admin.describe_user_scram_credentials, request, context)

    def InitProducerId(self, request: Any, context: Any) -> Any:
        return self._call(init_producer_id.handle, request, context)

    def FindCoordinator(self, request: Any, context: Any) -> Any:
        return self._call(partial(find_coordinator.handle, listener=self._listener), request, context)

    def ConsumerGroupHeartbeat(self, request: Any, context: Any) -> Any:
        return self._call(consumer_group_heartbeat.handle, request, context)

    def OffsetCommit(self, request: Any, context: Any) -> Any:
        return self._call(offset_commit.handle, request, context)

    def OffsetFetch(self, request: Any, context: Any) -> Any:
        return self._call(offset_fetch.handle, request, context)

    def ListGroups(self, request: Any, context: Any) -> Any:
        return self._call(list_groups.handle, request, context)

    def ConsumerGroupDescribe(self, request: Any, context: Any) -> Any:
        return self._call(consumer_group_describe.handle, request, context)

    def AddPartitionsToTxn(self, request: Any, context: Any) -> Any:
        return self._call(add_partitions_to_txn.handle, request, context)

    def AddOffsetsToTxn(self, request: Any, context: Any) -> Any:
        return self._call(add_offsets_to_txn.handle, request, context)

    def EndTxn(self, request: Any, context: Any) -> Any:
        return self._call(end_txn.handle, request, context)

    def TxnOffsetCommit(self, request: Any, context: Any) -> Any:
        return self._call(txn_offset_commit.handle, request, context)

    def WriteTxnMarkers(self, request: Any, context: Any) -> Any:
        return self._call(write_txn_markers.handle, request, context)

    def ListTransactions(self, request: Any, context: Any) -> Any:
        return self._call(describe_transactions.list_transactions, request, context)

    def DescribeTransactions(self, request: Any, context: Any) -> Any:
        return self._call(describe_transactions.describe, request, context)

    def DeleteGroups(self, request: Any, context: Any) -> Any:
        return self._call(delete_groups.handle, request, context)


def _trace_produce(arrived_s: float, results: list[Any]) -> None:
    """``lp`` events (``log.trace``): per appended partition of an acks=all Produce, its offsets and when
    the request arrived, its append ended (``AppendResult.appended_ns``: before the append woke any fetch),
    and its answer was ready (``perf_counter`` clock)."""
    answered_ns = trace.now_ns()
    for result in results:
        if result.info is not None:
            trace.record(int(arrived_s * 1e9), "lp", result.key[0], result.key[1], result.info.first_offset,
                         result.info.last_offset, result.appended_ns, answered_ns)  # fmt: skip


def message_limits(config: BrokerConfig) -> tuple[int, int]:
    """``(max receive, max send)`` bytes of one gRPC message.

    Receive: ``socket.request.max.bytes`` (a Produce may carry many partitions' batches, each up to
    ``message.max.bytes``). Send: the larger Fetch cap (``fetch.max.bytes`` or
    ``replica.fetch.response.max.bytes``) plus one batch of ``message.max.bytes`` (the first batch goes out
    whole even above the cap) plus framing.
    """
    receive = max(int(config.get("socket.request.max.bytes")), config.message_max_bytes + RESPONSE_SLACK_BYTES)
    send = max(config.fetch_max_bytes, config.replica_fetch_response_max_bytes) + config.message_max_bytes
    return receive, min(send + RESPONSE_SLACK_BYTES, 2**31 - 1)


def max_concurrent_rpcs(config: BrokerConfig) -> int:
    """``queued.max.requests`` for the short requests, plus room for every long poll the purgatories may
    hold (``purgatory.max.operations`` each; over it a long poll answers at once): long polls alone can never
    fill the server."""
    return int(config.get("queued.max.requests")) + 2 * int(config.get("purgatory.max.operations"))


def start_grpc_server(
    ctx: BrokerContext, listen: str, *, listener: str = LISTENER, health: HealthReporter | None = None,
    services: dict[str, tuple[RpcServer, BrokerService]] | None = None,
) -> RpcServer:  # fmt: skip
    """Serve the Broker service (and ``health``'s) on ``listen`` for the listener named ``listener``;
    ``RuntimeError`` when it cannot bind. Short requests run on ``num.io.threads`` workers; long polls wait
    without one. ``services`` gets ``listener`` -> (the server, its Broker service): the replication listener
    serves on them."""
    receive, send = message_limits(ctx.config)
    holder: list[BrokerService] = []

    def add(server: Any) -> None:
        service = BrokerService(ctx, listener, rpc.pool)
        holder.append(service)
        add_servicer: Any = broker_pb2_grpc.add_BrokerServicer_to_server  # generated code is untyped
        add_servicer(service, server)
        if ctx.guard is not None:
            ctx.guard.add_sasl(server, listener)
        if health is not None:
            health.add_to(server)

    rpc = RpcServer(
        f"broker-{ctx.broker_id}-{listener.lower()}",
        listen,
        add,
        workers=int(ctx.config.get("num.io.threads")),
        maximum_concurrent_rpcs=max_concurrent_rpcs(ctx.config),
        options=[
            ("grpc.max_receive_message_length", receive),
            ("grpc.max_send_message_length", send),
            ("grpc.so_reuseport", 0),
        ],
        credentials=ctx.security.server_credentials(listener),
        interceptors=ctx.guard.interceptors(listener) if ctx.guard is not None else (),
    )
    rpc.start()
    if services is not None:
        services[listener] = (rpc, holder[0])
    return rpc


def _nothing() -> None:
    """What cancels a request answered already."""


class _Running:
    """A request answered by a task (:meth:`BrokerService.produce_then`, ``fetch_then``): ``done(outcome)`` when
    it ends, unless :meth:`cancel` came first."""

    __slots__ = ("_task", "_done")

    def __init__(self, task: asyncio.Task[Any], done: Callable[[Any], None]) -> None:
        self._task = task
        self._done: Callable[[Any], None] | None = done
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[Any]) -> None:
        if self._done is not None:
            self._done(_outcome(task))

    def cancel(self) -> None:
        self._done = None
        self._task.cancel()


class _Parked:
    """A request waiting for a purgatory operation without a coroutine: woken by the operation's completion (on
    the loop's thread directly, from another through ``call_soon_threadsafe``) or by its timer (then it expires
    the operation), whichever comes first; then :meth:`_woken`, once, unless :meth:`cancel` came first, which
    ends in ``done`` (the answer, or the exception of an unexpected error)."""

    __slots__ = ("_service", "_loop", "_thread", "_request", "_arrived", "_done", "_op", "_timer", "_fired",
                 "_cancelled")  # fmt: skip

    def __init__(
        self, service: BrokerService, loop: asyncio.AbstractEventLoop, request: Any, arrived: float,
        done: Callable[[Any], None],
    ) -> None:  # fmt: skip
        self._service = service
        self._loop = loop
        self._thread = threading.get_ident()
        self._request = request
        self._arrived = arrived
        self._done = done
        self._op: Any = None
        self._timer: asyncio.TimerHandle | None = None
        self._fired = False
        self._cancelled = False

    def park(self, wait_s: float, op: Any) -> None:
        self._op = op
        self._timer = self._loop.call_later(max(wait_s, 0.0), self._resume, True)
        op.add_done_callback(self._wake)  # at once when it completed meanwhile

    def cancel(self) -> None:
        self._cancelled = True
        if self._timer is not None:
            self._timer.cancel()

    def _wake(self) -> None:
        if threading.get_ident() == self._thread:
            self._resume(False)
            return
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            self._loop.call_soon_threadsafe(self._resume, False)

    def _resume(self, expired: bool) -> None:
        if self._fired or self._cancelled:
            return
        self._fired = True
        if self._timer is not None:
            self._timer.cancel()
        if expired:
            self._op.expire()
        self._woken()

    def _woken(self) -> None:
        raise NotImplementedError


class _ParkedProduce(_Parked):
    """An acks=all Produce waiting for the ISR (:meth:`BrokerService.produce_then`); then its answer."""

    __slots__ = ("_started",)

    def __init__(
        self, service: BrokerService, loop: asyncio.AbstractEventLoop, request: Any, started: Any, arrived: float,
        done: Callable[[Any], None],
    ) -> None:  # fmt: skip
        super().__init__(service, loop, request, arrived, done)
        self._started = started

    def _woken(self) -> None:
        try:
            response = self._service._produce_finished(self._request, self._started, self._arrived)
        except Exception as exc:
            self._service._failed(produce.handle, self._request, self._arrived, exc)
            self._done(exc)
            return
        self._done(response)


class _ParkedFetch(_Parked):
    """A fetch waiting in the purgatory (:meth:`BrokerService.fetch_then`); then the read after the wait (on the
    loop when small, else on the worker pool)."""

    __slots__ = ("_finish", "_started")

    def __init__(
        self, service: BrokerService, loop: asyncio.AbstractEventLoop, request: Any,
        finish: Callable[[BrokerContext, Any], Any], started: fetch.PendingFetch[Any], arrived: float,
        done: Callable[[Any], None],
    ) -> None:  # fmt: skip
        super().__init__(service, loop, request, arrived, done)
        self._finish = finish
        self._started = started

    def _woken(self) -> None:
        service = self._service
        woke_ns = trace.now_ns() if trace.ON else 0
        if self._started.op.ready_bytes <= service._inline_read_max_bytes:  # small: read here, no hop to a worker
            try:
                response = self._finish(service._ctx, self._started)
            except Exception as exc:
                service._failed(fetch.handle, self._request, self._arrived, exc)
                self._done(exc)
                return
            service._fetched(self._request, response, self._arrived, woke_ns)
            self._done(response)
            return
        if service._pool is None:
            self._done(RuntimeError("an asynchronous read needs the server's worker pool"))
            return
        task = self._loop.create_task(run_blocking(service._pool, self._finish, service._ctx, self._started))
        task.add_done_callback(lambda t: self._read(t, woke_ns))

    def _read(self, task: asyncio.Task[Any], woke_ns: int) -> None:
        if self._cancelled:
            return
        outcome = _outcome(task)
        if isinstance(outcome, BaseException):
            self._service._failed(fetch.handle, self._request, self._arrived, outcome)
        else:
            self._service._fetched(self._request, outcome, self._arrived, woke_ns)
        self._done(outcome)


def _outcome(task: asyncio.Task[Any]) -> Any:
    """A finished task's result, or the exception it ended with (CancelledError when cancelled)."""
    if task.cancelled():
        return asyncio.CancelledError()
    return task.exception() or task.result()
