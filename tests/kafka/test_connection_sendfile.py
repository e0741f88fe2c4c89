"""The Kafka listener's zero-copy send (``Connection._sendfile``) on a real socket pair and a real file: the
bytes arrive whole, and a client that stops reading is dropped after ``connections.max.idle.ms`` instead
of holding its connection thread forever."""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from broker.kafka.api import FileRegion, Session
from broker.kafka.connection import Connection

SIZE = 8 << 20  # far more than the socket buffers hold


def connection(sock: socket.socket, idle_timeout_s: float) -> Connection:
    ctx: Any = None  # _sendfile touches no broker state
    return Connection(ctx, sock, Session("KAFKA", "127.0.0.1", 1, sendfile=True), {}, 1 << 20, idle_timeout_s)


@pytest.fixture
def segment(tmp_path: Path) -> bytes:
    data = os.urandom(SIZE)
    (tmp_path / "segment.log").write_bytes(data)
    return data


def region(tmp_path: Path, position: int, size: int) -> FileRegion:
    return FileRegion(os.open(tmp_path / "segment.log", os.O_RDONLY), position, size)


def test_a_region_arrives_whole(tmp_path: Path, segment: bytes) -> None:
    server, client = socket.socketpair()
    received = bytearray()

    def read() -> None:
        while len(received) < SIZE - 100:
            chunk = client.recv(1 << 20)
            if not chunk:
                return
            received.extend(chunk)

    reader = threading.Thread(target=read)
    reader.start()
    r = region(tmp_path, 100, SIZE - 100)
    try:
        connection(server, 5.0)._sendfile(r)
    finally:
        r.close()
    reader.join(30)
    server.close()
    client.close()
    assert bytes(received) == segment[100:]


def test_a_client_that_stops_reading_is_dropped_after_the_idle_timeout(tmp_path: Path, segment: bytes) -> None:
    server, client = socket.socketpair()
    r = region(tmp_path, 0, SIZE)
    start = time.monotonic()
    try:
        with pytest.raises(TimeoutError, match="read nothing"):
            connection(server, 0.3)._sendfile(r)
    finally:
        r.close()
        server.close()
        client.close()
    assert time.monotonic() - start < 10
