"""``common.streams`` against a real gRPC server.

:class:`LockstepStream` (a follower's ReplicaFetch): lockstep answers on one stream, a late answer cancelled
by the watchdog (the call fails, the next one opens a new stream), a stream the leader ends, and a leader
without ReplicaFetch (unary calls from then on).

:class:`OrderedStream` (a producer's ProduceStream): pipelined requests answered in order on one stream; a
peer without the stream (the waiting requests sent again as unary calls, in order); a stream broken by the
peer (every waiting request fails, the next opens a new stream); a late answer (the watchdog cancels the
stream); a refusal (the oldest waiting request fails, the later ones are sent again on a new stream); a
request its caller gave up on."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest

from common import streams
from common.streams import BROKEN_STREAMS, WATCHDOG_INTERVAL_S, LockstepStream, OrderedStream, StreamEnded
from proto import broker_pb2 as pb
from proto import broker_pb2_grpc


class Leader(broker_pb2_grpc.BrokerServicer):
    """Answers each fetch with its ``max_wait_ms`` as the high watermark; ``hang`` holds answers back;
    ``end_after`` ends a stream after that many answers; ``streams`` counts the streams opened."""

    def __init__(self, streaming: bool = True) -> None:
        self.streaming = streaming
        self.broken = False  # every stream fails at once with INTERNAL (a path that breaks streams)
        self.down = False  # unary calls fail UNAVAILABLE
        self.unary_gate = threading.Event()  # unary answers wait for it
        self.unary_gate.set()
        self.hang = threading.Event()
        self.release = threading.Event()
        self.end_after = 0
        self.streams = 0
        self.unary_calls = 0

    @staticmethod
    def answer(request: pb.FetchRequest) -> pb.FetchResponse:
        response = pb.FetchResponse()
        response.topics.add(name="t").partitions.add(partition=0, high_watermark=request.max_wait_ms)
        return response

    def Fetch(self, request: pb.FetchRequest, context: Any) -> pb.FetchResponse:  # noqa: N802
        self.unary_calls += 1
        self.unary_gate.wait(30)
        if self.down:
            context.abort(grpc.StatusCode.UNAVAILABLE, "down")
        return self.answer(request)

    def ReplicaFetch(self, request_iterator: Iterator[pb.FetchRequest], context: Any) -> Iterator[pb.FetchResponse]:  # noqa: N802
        if not self.streaming:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "no ReplicaFetch here")
        self.streams += 1
        if self.broken:
            context.abort(grpc.StatusCode.INTERNAL, "this path breaks streams")
        for n, request in enumerate(request_iterator, 1):
            if self.hang.is_set():
                self.release.wait(30)
                return
            yield self.answer(request)
            if self.end_after and n >= self.end_after:
                return


@pytest.fixture
def serve() -> Iterator[Any]:
    servers: list[grpc.Server] = []

    def start(leader: Leader) -> Any:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        broker_pb2_grpc.add_BrokerServicer_to_server(leader, server)  # type: ignore[no-untyped-call]
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        servers.append(server)
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        return broker_pb2_grpc.BrokerStub(channel)  # type: ignore[no-untyped-call]

    yield start
    for server in servers:
        server.stop(0)


def hw(response: pb.FetchResponse) -> int:
    return int(response.topics[0].partitions[0].high_watermark)


def test_each_request_gets_its_answer_on_one_stream(serve: Any) -> None:
    leader = Leader()
    stream = LockstepStream(serve(leader), "test")
    try:
        assert [hw(stream.call(pb.FetchRequest(max_wait_ms=n), 5)) for n in range(1, 51)] == list(range(1, 51))
        assert leader.streams == 1
        assert leader.unary_calls == 0
    finally:
        stream.close()


def test_a_late_answer_fails_the_call_and_the_next_call_opens_a_new_stream(serve: Any) -> None:
    leader = Leader()
    stream = LockstepStream(serve(leader), "test")
    try:
        assert hw(stream.call(pb.FetchRequest(max_wait_ms=1), 5)) == 1
        leader.hang.set()
        started = time.monotonic()
        with pytest.raises(grpc.RpcError):
            stream.call(pb.FetchRequest(max_wait_ms=2), 0.3)
        assert time.monotonic() - started < 0.3 + 10 * WATCHDOG_INTERVAL_S
        leader.hang.clear()
        leader.release.set()
        assert hw(stream.call(pb.FetchRequest(max_wait_ms=3), 5)) == 3
        assert leader.streams == 2
    finally:
        leader.release.set()
        stream.close()


def test_a_stream_the_leader_ends_fails_one_call(serve: Any) -> None:
    leader = Leader()
    leader.end_after = 2
    stream = LockstepStream(serve(leader), "test")
    try:
        assert hw(stream.call(pb.FetchRequest(max_wait_ms=1), 5)) == 1
        assert hw(stream.call(pb.FetchRequest(max_wait_ms=2), 5)) == 2
        with pytest.raises(grpc.RpcError):
            stream.call(pb.FetchRequest(max_wait_ms=3), 5)
        assert hw(stream.call(pb.FetchRequest(max_wait_ms=4), 5)) == 4
        assert leader.streams == 2
    finally:
        stream.close()


def test_a_leader_without_replica_fetch_gets_unary_fetches(serve: Any) -> None:
    leader = Leader(streaming=False)
    stream = LockstepStream(serve(leader), "test")
    try:
        with pytest.raises(grpc.RpcError) as failed:
            stream.call(pb.FetchRequest(max_wait_ms=1), 5)
        assert failed.value.code() == grpc.StatusCode.UNIMPLEMENTED  # type: ignore[attr-defined]
        assert stream.unary
        assert hw(stream.call(pb.FetchRequest(max_wait_ms=2), 5)) == 2
        assert leader.unary_calls == 1
    finally:
        stream.close()


def test_a_closed_stream_refuses_calls(serve: Any) -> None:
    stream = LockstepStream(serve(Leader()), "test")
    stream.close()
    with pytest.raises(RuntimeError, match="closed"):
        stream.call(pb.FetchRequest(), 5)


class Producer(broker_pb2_grpc.BrokerServicer):
    """Answers each Produce with its ``timeout_ms`` as the base offset, in order; ``hold`` holds answers until
    ``release``; ``break_after`` aborts a stream (UNAVAILABLE) after that many answers; ``refuse`` aborts it
    PERMISSION_DENIED at the request with that timeout_ms (after answering every earlier one, as
    ``controller/security/interceptor.py`` does); ``seen`` lists every request read, stream or unary."""

    def __init__(self, streaming: bool = True) -> None:
        self.streaming = streaming
        self.hold = threading.Event()
        self.release = threading.Event()
        self.break_after = 0
        self.refuse = -1
        self.streams = 0
        self.seen: list[tuple[str, int]] = []
        self.lock = threading.Lock()

    @staticmethod
    def answer(request: pb.ProduceRequest) -> pb.ProduceResponse:
        response = pb.ProduceResponse()
        response.topics.add(name="t").partitions.add(partition=0, base_offset=request.timeout_ms)
        return response

    def Produce(self, request: pb.ProduceRequest, context: Any) -> pb.ProduceResponse:  # noqa: N802
        with self.lock:
            self.seen.append(("unary", request.timeout_ms))
        return self.answer(request)

    def ProduceStream(  # noqa: N802
        self, request_iterator: Iterator[pb.ProduceRequest], context: Any
    ) -> Iterator[pb.ProduceResponse]:
        if not self.streaming:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "no ProduceStream here")
        self.streams += 1
        for n, request in enumerate(request_iterator, 1):
            if request.timeout_ms == self.refuse:
                context.abort(grpc.StatusCode.PERMISSION_DENIED, "TOPIC_AUTHORIZATION_FAILED: not this one")
            with self.lock:
                self.seen.append(("stream", request.timeout_ms))
            if self.hold.is_set():
                self.release.wait(30)
            yield self.answer(request)
            if self.break_after and n >= self.break_after:
                context.abort(grpc.StatusCode.UNAVAILABLE, "the broker went away")


def offset(future: Any) -> int:
    return int(future.result(timeout=10).topics[0].partitions[0].base_offset)


def produce(n: int) -> pb.ProduceRequest:
    return pb.ProduceRequest(timeout_ms=n)


def test_pipelined_requests_are_answered_in_order_on_one_stream(serve: Any) -> None:
    producer = Producer()
    stream = OrderedStream(serve(producer), "test", "ProduceStream", "Produce")
    try:
        producer.hold.set()  # every request is in flight before the first answer
        started = [stream.start(produce(n), 5) for n in range(1, 21)]
        time.sleep(0.2)
        assert not any(f.done() for f in started)
        producer.hold.clear()
        producer.release.set()
        assert [offset(f) for f in started] == list(range(1, 21))
        assert [offset(stream.start(produce(n), 5)) for n in range(21, 31)] == list(range(21, 31))
        assert producer.streams == 1
        assert producer.seen == [("stream", n) for n in range(1, 31)]
    finally:
        producer.release.set()
        stream.close()


def test_a_peer_without_the_stream_gets_the_waiting_requests_as_unary_calls_in_order(serve: Any) -> None:
    producer = Producer(streaming=False)
    stream = OrderedStream(serve(producer), "test", "ProduceStream", "Produce")
    try:
        started = [stream.start(produce(n), 5) for n in range(1, 6)]
        assert [offset(f) for f in started] == list(range(1, 6))
        assert stream.unary
        assert offset(stream.start(produce(6), 5)) == 6
        # each sent once (started in order; this test server's threads may handle them in any order)
        assert sorted(producer.seen) == [("unary", n) for n in range(1, 7)]
    finally:
        stream.close()


def test_a_broken_stream_fails_every_waiting_request_and_the_next_opens_a_new_one(serve: Any) -> None:
    producer = Producer()
    producer.break_after = 2
    stream = OrderedStream(serve(producer), "test", "ProduceStream", "Produce")
    try:
        producer.hold.set()
        started = [stream.start(produce(n), 5) for n in range(1, 5)]
        time.sleep(0.2)
        producer.hold.clear()
        producer.release.set()
        assert [offset(f) for f in started[:2]] == [1, 2]
        for future in started[2:]:
            with pytest.raises(grpc.RpcError) as failed:
                future.result(timeout=10)
            assert failed.value.code() == grpc.StatusCode.UNAVAILABLE  # type: ignore[attr-defined]
        assert not stream.unary
        assert offset(stream.start(produce(5), 5)) == 5
        assert producer.streams == 2
    finally:
        producer.release.set()
        stream.close()


def test_a_late_answer_cancels_the_stream_and_fails_the_waiting_requests(serve: Any) -> None:
    producer = Producer()
    stream = OrderedStream(serve(producer), "test", "ProduceStream", "Produce")
    try:
        assert offset(stream.start(produce(1), 5)) == 1
        producer.hold.set()
        started = time.monotonic()
        late = [stream.start(produce(2), 0.3), stream.start(produce(3), 5)]
        for future in late:
            with pytest.raises(grpc.RpcError) as failed:
                future.result(timeout=10)
            assert failed.value.code() == grpc.StatusCode.CANCELLED  # type: ignore[attr-defined]
        assert time.monotonic() - started < 0.3 + 10 * WATCHDOG_INTERVAL_S
        producer.hold.clear()
        producer.release.set()
        assert offset(stream.start(produce(4), 5)) == 4
        assert producer.streams == 2
    finally:
        producer.release.set()
        stream.close()


def test_a_refusal_fails_the_oldest_waiting_request_and_sends_the_later_ones_again(serve: Any) -> None:
    producer = Producer()
    producer.refuse = 3
    stream = OrderedStream(serve(producer), "test", "ProduceStream", "Produce")
    try:
        started = [stream.start(produce(n), 5) for n in range(1, 7)]
        assert [offset(f) for f in started[:2]] == [1, 2]
        with pytest.raises(grpc.RpcError) as failed:
            started[2].result(timeout=10)
        assert failed.value.code() == grpc.StatusCode.PERMISSION_DENIED  # type: ignore[attr-defined]
        assert [offset(f) for f in started[3:]] == [4, 5, 6]
        assert producer.seen == [("stream", n) for n in (1, 2, 4, 5, 6)]  # each read once, in order
        assert not stream.unary
        assert offset(stream.start(produce(7), 5)) == 7  # a refusal is an answer: the stream goes on
        assert producer.seen[-1] == ("stream", 7)
    finally:
        stream.close()


def test_a_refusal_of_the_first_request_keeps_the_later_ones_on_a_stream(serve: Any) -> None:
    """Refused before any answer: not a broken stream (no unary probe, which could overtake the requests
    sent again on the new stream)."""
    producer = Producer()
    producer.refuse = 1
    stream = OrderedStream(serve(producer), "test", "ProduceStream", "Produce")
    try:
        started = [stream.start(produce(n), 5) for n in range(1, 4)]
        with pytest.raises(grpc.RpcError):
            started[0].result(timeout=10)
        later = stream.start(produce(4), 5)
        assert [offset(f) for f in [*started[1:], later]] == [2, 3, 4]
        assert producer.seen == [("stream", n) for n in (2, 3, 4)]
    finally:
        stream.close()


def test_a_request_given_up_on_leaves_the_others_their_answers(serve: Any) -> None:
    producer = Producer()
    stream = OrderedStream(serve(producer), "test", "ProduceStream", "Produce")
    try:
        producer.hold.set()
        started = [stream.start(produce(n), 5) for n in range(1, 4)]
        assert started[0].cancel()
        producer.hold.clear()
        producer.release.set()
        assert [offset(f) for f in started[1:]] == [2, 3]
    finally:
        producer.release.set()
        stream.close()


def test_a_stream_the_peer_ends_fails_its_waiting_requests_as_stream_ended(serve: Any) -> None:
    leader = Leader()
    stream = OrderedStream(serve(leader), "test", "ReplicaFetch", "Fetch")
    try:
        assert hw(stream.start(pb.FetchRequest(max_wait_ms=1), 5).result(timeout=10)) == 1
        leader.hang.set()  # the next request ends the stream (status OK) without an answer
        waiting = [stream.start(pb.FetchRequest(max_wait_ms=n), 5) for n in (2, 3)]
        leader.release.set()
        for future in waiting:
            with pytest.raises(StreamEnded):
                future.result(timeout=10)
        leader.hang.clear()
        assert hw(stream.start(pb.FetchRequest(max_wait_ms=4), 5).result(timeout=10)) == 4
        assert leader.streams == 2
    finally:
        leader.release.set()
        stream.close()


def test_a_path_that_breaks_streams_but_not_calls_gets_unary_calls_for_a_while(
    serve: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each stream that fails before an answer is followed by a unary probe; after BROKEN_STREAMS of them
    with the probes answered, unary calls only, until UNARY_FALLBACK_S has passed; then the stream again."""
    monkeypatch.setattr(streams, "UNARY_FALLBACK_S", 1.0)
    leader = Leader()
    leader.broken = True
    stream = LockstepStream(serve(leader), "test")
    try:
        for n in range(1, 2 * BROKEN_STREAMS + 1, 2):  # stream (fails), probe (answered), ...
            with pytest.raises(StreamEnded, match="before its first answer.*INTERNAL"):  # retriable, as a lost
                stream.call(pb.FetchRequest(max_wait_ms=n), 5)  # connection; the probe gets the peer's answer
            assert hw(stream.call(pb.FetchRequest(max_wait_ms=n + 1), 5)) == n + 1
        assert leader.streams == BROKEN_STREAMS
        assert [hw(stream.call(pb.FetchRequest(max_wait_ms=n), 5)) for n in range(10, 20)] == list(range(10, 20))
        assert leader.streams == BROKEN_STREAMS  # unary calls only
        assert not stream.unary
        time.sleep(1.1)
        leader.broken = False
        assert hw(stream.call(pb.FetchRequest(max_wait_ms=30), 5)) == 30
        assert leader.streams == BROKEN_STREAMS + 1  # the stream again
    finally:
        stream.close()


def test_a_peer_that_is_down_gets_the_stream_again_once_it_is_back(serve: Any) -> None:
    """A failed stream followed by a failed unary probe: the peer was unreachable, not the stream broken."""
    leader = Leader()
    leader.broken = leader.down = True
    stream = LockstepStream(serve(leader), "test")
    try:
        for n in range(1, 2 * BROKEN_STREAMS + 3):
            with pytest.raises(grpc.RpcError):
                stream.call(pb.FetchRequest(max_wait_ms=n), 5)
        assert leader.streams == BROKEN_STREAMS + 1  # streams and probes alternate; no fallback
        leader.broken = leader.down = False
        assert hw(stream.call(pb.FetchRequest(max_wait_ms=50), 5)) == 50
        assert leader.streams == BROKEN_STREAMS + 2
    finally:
        stream.close()


def test_pipelined_requests_keep_their_order_across_the_switch_to_unary_calls(serve: Any) -> None:
    """An OrderedStream on a stream-breaking path: the failed stream's request fails (its caller retries), the
    next requests go as unary calls, the stream is tried again only when none is in flight."""
    leader = Leader()
    leader.broken = True
    stream = OrderedStream(serve(leader), "test", "ReplicaFetch", "Fetch")
    try:
        with pytest.raises(grpc.RpcError):
            stream.start(pb.FetchRequest(max_wait_ms=1), 5).result(timeout=10)
        leader.unary_gate.clear()  # the probes stay in flight together
        probes = [stream.start(pb.FetchRequest(max_wait_ms=n), 5) for n in (2, 3, 4)]
        leader.unary_gate.set()
        assert [hw(f.result(timeout=10)) for f in probes] == [2, 3, 4]
        assert leader.unary_calls == 3
        assert leader.streams == 1
        with pytest.raises(grpc.RpcError):  # probes over: the stream again (still broken)
            stream.start(pb.FetchRequest(max_wait_ms=5), 5).result(timeout=10)
        assert leader.streams == 2
    finally:
        stream.close()
