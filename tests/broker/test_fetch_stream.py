"""``broker.fetch_stream.ReplicaFetchStream`` against a real gRPC server: lockstep answers on one stream, a
late answer cancelled by the watchdog (the call fails, the next one opens a new stream), a stream the
leader ends, and a leader without ReplicaFetch (unary calls from then on)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest

from broker.fetch_stream import WATCHDOG_INTERVAL_S, ReplicaFetchStream
from proto import broker_pb2 as pb
from proto import broker_pb2_grpc


class Leader(broker_pb2_grpc.BrokerServicer):
    """Answers each fetch with its ``max_wait_ms`` as the high watermark; ``hang`` holds answers back;
    ``end_after`` ends a stream after that many answers; ``streams`` counts the streams opened."""

    def __init__(self, streaming: bool = True) -> None:
        self.streaming = streaming
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
        return self.answer(request)

    def ReplicaFetch(self, request_iterator: Iterator[pb.FetchRequest], context: Any) -> Iterator[pb.FetchResponse]:  # noqa: N802
        if not self.streaming:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "no ReplicaFetch here")
        self.streams += 1
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
    stream = ReplicaFetchStream(serve(leader), "test")
    try:
        assert [hw(stream.call(pb.FetchRequest(max_wait_ms=n), 5)) for n in range(1, 51)] == list(range(1, 51))
        assert leader.streams == 1
        assert leader.unary_calls == 0
    finally:
        stream.close()


def test_a_late_answer_fails_the_call_and_the_next_call_opens_a_new_stream(serve: Any) -> None:
    leader = Leader()
    stream = ReplicaFetchStream(serve(leader), "test")
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
    stream = ReplicaFetchStream(serve(leader), "test")
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
    stream = ReplicaFetchStream(serve(leader), "test")
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
    stream = ReplicaFetchStream(serve(Leader()), "test")
    stream.close()
    with pytest.raises(RuntimeError, match="closed"):
        stream.call(pb.FetchRequest(), 5)
