"""Small helpers for the real-client tests: topic creation and bounded consumption with confluent-kafka."""

from __future__ import annotations

import io
import socket
import struct
import time
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

WAIT_S = 30.0


def create_topic(bootstrap: str, name: str, partitions: int = 1, config: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, partitions, 1, config=config or {})], operation_timeout=10)
    futures[name].result(WAIT_S)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "topic-ready-probe"})
    try:  # every partition answers ListOffsets from its leader: ready for acks=0 too
        deadline = time.monotonic() + WAIT_S
        for partition in range(partitions):
            while True:
                try:
                    consumer.get_watermark_offsets(TopicPartition(name, partition), timeout=5)
                    break
                except KafkaException:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)
    finally:
        consumer.close()


def consume(consumer: Consumer, count: int, timeout_s: float = WAIT_S) -> list[Any]:
    """Poll until ``count`` messages arrived (fails on a consumer error or when time runs out)."""
    got: list[Any] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < count and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is None:
            continue
        error = message.error()
        if error is not None and error.code() != KafkaError._PARTITION_EOF:
            raise AssertionError(f"consumer error: {error}")
        if error is None:
            got.append(message)
    assert len(got) == count, f"got {len(got)} of {count} messages in {timeout_s} s"
    return got


def request_frame(api_key: int, version: int, correlation_id: int, body: object, client_id: str = "raw") -> bytes:
    """One Kafka request by hand, ready to send: the size, a v2 header and the kio body."""
    from kio.schema.request_header.v2.header import RequestHeader
    from kio.serial import entity_writer

    out = io.BytesIO()
    entity_writer(RequestHeader)(out, RequestHeader(request_api_key=api_key, request_api_version=version,  # type: ignore[arg-type]
                                                    correlation_id=correlation_id, client_id=client_id))  # type: ignore[arg-type]
    entity_writer(type(body))(out, body)  # type: ignore[type-var]
    frame = out.getvalue()
    return struct.pack(">i", len(frame)) + frame


def read_response_frame(conn: socket.socket) -> memoryview:
    """One response frame (after its size): the header and the body."""
    size = struct.unpack(">i", recv_exactly(conn, 4))[0]
    return memoryview(recv_exactly(conn, size))


def recv_exactly(conn: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        assert chunk, "the broker closed the connection"
        data += chunk
    return data
