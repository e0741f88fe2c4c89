"""Length-prefixed frames on plain TCP: the wire of the ``REPLICATION`` listener (followers' fetches,
``broker.replication_link``) and of the ``DATA`` listener (Odradek's own producers and consumers,
``broker.data_listener`` and ``odradek.net.data_link``).

Both carry the same protobuf messages as the gRPC services (``proto/broker.proto``), so a request on a frame
is handled by the very handler a gRPC call reaches; only the transport differs. Measured here
(``bench/rpc_floor.py``, docs/LATENCY.md): a round trip on a frame costs about a third of the server CPU of a
gRPC stream message and half its wall time.

Every frame::

    frame := size:uint32 (big-endian) payload[size]

``REPLICATION``: the payload is a ``FetchRequest`` and its answer a ``FetchResponse``, in lockstep.

``DATA``: requests are pipelined (a client may send the next before the last is answered) and answered in the
order they came, as a Kafka connection::

    request := kind:uint8 message          kind PRODUCE (1): a ProduceRequest; kind FETCH (2): a FetchRequest
                                           (a consumer's: replica_id -1); kind AUTH (3): the UTF-8 session
                                           token of a SASL exchange with the same broker
    answer  := status:uint8 body           status OK (0): the serialized ProduceResponse / FetchResponse (empty
                                           for AUTH); status ERROR (1): UTF-8 "<KAFKA_ERROR_CODE>: <message>",
                                           the request refused as a whole (as the details of a refused gRPC call)

A frame over the listener's ``socket.request.max.bytes``, an unknown kind or a message that does not parse
closes the connection (nothing of that request was read or changed).

On a SASL listener (SASL_PLAINTEXT, SASL_SSL) a connection authenticates with AUTH before its first request: the
token is what SaslAuthenticate on the broker's gRPC listener answered (``controller.security.token``: signed by
that broker, valid until its expiry), and the connection's principal is the token's. A later AUTH re-authenticates
(KIP-368) and must name the same principal. A refused AUTH answers ERROR SASL_AUTHENTICATION_FAILED and the
connection closes; so does a request before any AUTH; a request after the session expired closes the connection
without an answer (the client re-authenticates before that).
"""

from __future__ import annotations

import socket
import struct
import time

SIZE = struct.Struct(">I")
DATA = "DATA"  # the name of the clients' framed listener

# DATA request kinds
PRODUCE = 1
FETCH = 2
AUTH = 3
KINDS = {PRODUCE: "Produce", FETCH: "Fetch", AUTH: "Authenticate"}

# DATA answer status
OK = 0
ERROR = 1


def split_host_port(address: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT``) -> (host, port); an empty host is every address."""
    host, _, port = address.rpartition(":")
    return host.strip("[]") or "0.0.0.0", int(port)


def frame(payload: bytes) -> bytes:
    return SIZE.pack(len(payload)) + payload


def recv_exactly(sock: socket.socket, size: int, deadline: float | None) -> bytearray | None:
    """``size`` bytes, or None when the peer closed before the first; ``TimeoutError`` past ``deadline``."""
    buffer = bytearray(size)
    view, got = memoryview(buffer), 0
    while got < size:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the deadline passed")
            sock.settimeout(left)
        n = sock.recv_into(view[got:])
        if n == 0:
            if got == 0:
                return None
            raise ConnectionError(f"the peer closed the connection inside a frame ({got} of {size} bytes)")
        got += n
    return buffer
