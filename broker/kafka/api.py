"""What every API module of the Kafka listener works with: the connection's session, one request's
context, the API table's entry type, and file regions (record bytes sent from a segment with sendfile).

Adding an API is adding an :class:`Api` to :data:`broker.kafka.apis.API_TABLE`; ApiVersions answers
exactly that table, so an API that is not in it is never half-answered.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from broker.context import BrokerContext

ANONYMOUS = "User:ANONYMOUS"


@dataclass(slots=True)
class Session:
    """One client connection's state (owned by its connection thread).

    ``principal`` and ``authenticated`` are the slots an authentication step fills: a plaintext listener
    starts authenticated as ``User:ANONYMOUS``; a SASL listener would start unauthenticated and serve
    only the APIs whose :attr:`Api.before_auth` is set until its handshake succeeds.
    """

    listener: str
    client_host: str
    client_port: int
    sendfile: bool = False  # record bytes may go out with os.sendfile (plaintext sockets only)
    principal: str = ANONYMOUS
    authenticated: bool = True
    client_id: str = ""
    client_software: str = ""  # ApiVersions v3+: client_software_name/version
    extra: dict[str, Any] = field(default_factory=dict)  # state an API keeps per connection


@dataclass(frozen=True, slots=True)
class Request:
    """One request as an API handler sees it."""

    ctx: BrokerContext
    session: Session
    api_key: int
    version: int
    correlation_id: int
    client_id: str
    body: Any  # the kio request entity


@dataclass(frozen=True, slots=True)
class FileRegion:
    """``size`` bytes at ``position`` of an open file, sent with ``os.sendfile`` (or read when it cannot).

    ``fd`` is a duplicate the region owns (the segment may be closed meanwhile): :meth:`close` it once sent.
    """

    fd: int
    position: int
    size: int

    def read(self) -> bytes:
        data = os.pread(self.fd, self.size, self.position)
        if len(data) != self.size:
            raise OSError(f"short read of {len(data)}/{self.size} bytes from a segment")
        return data

    def close(self) -> None:
        os.close(self.fd)


@dataclass(frozen=True, slots=True)
class RawResponse:
    """A response body already laid out: bytes and file regions, in order."""

    parts: list[bytes | FileRegion]

    @property
    def size(self) -> int:
        return sum(p.size if isinstance(p, FileRegion) else len(p) for p in self.parts)

    def close(self) -> None:
        for part in self.parts:
            if isinstance(part, FileRegion):
                part.close()


class CloseConnection(Exception):
    """Raised by a handler: close the connection instead of answering (the reason is logged)."""


NO_RESPONSE = None  # a handler's answer when Kafka sends none (Produce with acks=0)


@dataclass(frozen=True, slots=True)
class Pending:
    """A handler's answer that waits for something else (an acks=all Produce: the ISR): ``wait()`` blocks
    until it can be built (bounded by the request's own timeout), ``finish()`` builds it. The connection
    reads the next requests meanwhile and sends every answer in request order (``connection.py``)."""

    wait: Callable[[], object]
    finish: Callable[[], Any]


Handler = Callable[[Request], Any]  # returns a kio response entity, a RawResponse, a Pending, or NO_RESPONSE


@dataclass(frozen=True, slots=True)
class Api:
    key: int
    name: str
    min_version: int
    max_version: int
    handle: Handler
    before_auth: bool = False  # may be served before the connection authenticated (ApiVersions, SASL)
