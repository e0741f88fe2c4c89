"""A TCP proxy in front of one broker's Kafka listener that can lose Produce answers on purpose (test-only;
no fault hook in the broker itself): the Kafka-protocol twin of ``tests/idempotence/proxy.py``.

The broker runs with ``--advertised KAFKA://<proxy address>``, so clients that find it through Metadata
connect to the proxy. Bytes are forwarded frame by frame (a 4-byte size, then the frame); the proxy notes
the correlation id of every Produce request, and after :meth:`lose_answers` the next ``n`` Produce answers
(the broker handled them: the records are written) are not forwarded: the proxy closes the client's
connection instead, as if it dropped just before the answer arrived. The client then retries the batch.

Thread-safety: ``lose_answers`` and the counters are guarded by one lock; two pump threads per connection.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading

SIZE = struct.Struct(">i")
REQUEST_HEAD = struct.Struct(">hhi")  # api_key, api_version, correlation_id
CORRELATION = struct.Struct(">i")
PRODUCE = 0


class LossyKafkaProxy:
    def __init__(self, listen: str, target: str) -> None:
        self.listen = listen
        self._target = target
        self._lock = threading.Lock()
        self._to_lose = 0
        self.lost = 0  # Produce answers lost so far
        self._sockets: set[socket.socket] = set()
        host, port = listen.rsplit(":", 1)
        self._server = socket.create_server((host, int(port)))
        self._closed = False
        self._accepter = threading.Thread(target=self._accept, name=f"kafka-proxy-{listen}", daemon=True)
        self._accepter.start()

    def lose_answers(self, n: int) -> None:
        """Lose the answers of the next ``n`` Produce requests (after the broker handled them)."""
        with self._lock:
            self._to_lose += n

    def close(self) -> None:
        with self._lock:
            self._closed = True
            sockets = list(self._sockets)
        with contextlib.suppress(OSError):  # wakes the accept thread (close alone does not, on Linux)
            self._server.shutdown(socket.SHUT_RDWR)
        self._server.close()
        self._accepter.join(10)
        for s in sockets:
            _close(s)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            host, port = self._target.rsplit(":", 1)
            try:
                upstream = socket.create_connection((host, int(port)), timeout=10)
            except OSError:
                _close(client)
                continue
            upstream.settimeout(None)
            with self._lock:
                if self._closed:
                    _close(client)
                    _close(upstream)
                    return
                self._sockets.update((client, upstream))
            produce_ids: set[int] = set()
            threading.Thread(target=self._requests, args=(client, upstream, produce_ids), daemon=True).start()
            threading.Thread(target=self._answers, args=(upstream, client, produce_ids), daemon=True).start()

    def _requests(self, client: socket.socket, upstream: socket.socket, produce_ids: set[int]) -> None:
        try:
            while (frame := _read_frame(client)) is not None:
                api_key, _version, correlation_id = REQUEST_HEAD.unpack_from(frame, 4)
                if api_key == PRODUCE:
                    with self._lock:
                        produce_ids.add(correlation_id)
                upstream.sendall(frame)
        except OSError:
            pass
        self._drop(client, upstream)

    def _answers(self, upstream: socket.socket, client: socket.socket, produce_ids: set[int]) -> None:
        try:
            while (frame := _read_frame(upstream)) is not None:
                (correlation_id,) = CORRELATION.unpack_from(frame, 4)
                with self._lock:
                    lose = correlation_id in produce_ids and self._to_lose > 0
                    produce_ids.discard(correlation_id)
                    if lose:
                        self._to_lose -= 1
                        self.lost += 1
                if lose:
                    break
                client.sendall(frame)
        except OSError:
            pass
        self._drop(client, upstream)

    def _drop(self, *sockets: socket.socket) -> None:
        with self._lock:
            self._sockets.difference_update(sockets)
        for s in sockets:
            _close(s)


def _read_frame(sock: socket.socket) -> bytes | None:
    """One whole frame including its size prefix, or None at the end of the stream."""
    head = _read_exactly(sock, SIZE.size)
    if head is None:
        return None
    body = _read_exactly(sock, SIZE.unpack(head)[0])
    return None if body is None else head + body


def _read_exactly(sock: socket.socket, n: int) -> bytes | None:
    chunks, left = [], n
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _close(s: socket.socket) -> None:
    with contextlib.suppress(OSError):
        s.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        s.close()
