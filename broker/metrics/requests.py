"""Per-request metrics, counted at the one gRPC dispatch point (``broker.service.BrokerService._call``), and
per-topic byte and message counters, counted by the Produce and Fetch handlers and the replica fetchers.

Kafka's request names (``Produce``, ``Metadata``, ...; a Fetch is ``FetchConsumer`` or ``FetchFollower``
by its ``replica_id``, as Kafka's RequestMetrics tell them apart) are derived from the handler: the module
name of a ``handle`` function (``broker.handlers.list_offsets`` -> ``ListOffsets``), else the function's
own name (``forward.create_topics`` -> ``CreateTopics``). Errors are the Kafka error codes an answer
carries anywhere in it, as Kafka's ``ErrorsPerSec`` counts a response's error counts: its top-level
``error`` and those of its topics, partitions, groups... (the paths to every ``odradek.common.Error`` field
are found once per response type from its descriptor); a handler that raised (gRPC status INTERNAL)
counts as ``UNKNOWN_SERVER_ERROR``.

Cost: the label children are looked up once and kept (one dict lookup per request or topic afterwards);
an update is prometheus-client's locked add. Nothing here decodes records: message counts come from the
append (produce) or from the 61-byte batch headers (fetch).

Thread-safety: every method may be called from any thread.
"""

from __future__ import annotations

import contextlib
import struct
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram

from log.record.header import LENGTH_PREFIX, LOG_OVERHEAD

REQUEST_BUCKETS_MS = (0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000)
UNKNOWN_SERVER_ERROR = "UNKNOWN_SERVER_ERROR"
_RECORDS_COUNT = struct.Struct(">i")  # recordsCount, at byte 57 of a RecordBatch v2 header
_RECORDS_COUNT_OFFSET = 57
ERROR_MESSAGE = "odradek.common.Error"
MAX_DEPTH = 4  # how deep error fields are looked for (a partition's error sits at depth 3)


def request_name(function: Callable[..., Any]) -> str:
    """Kafka's name of the request a handler function serves (see the module docstring)."""
    base = function.__name__ if function.__name__ != "handle" else function.__module__.rpartition(".")[2]
    return "".join(part.capitalize() for part in base.split("_"))


Path = tuple[tuple[str, bool], ...]  # (field name, repeated) from the response down to an Error field


def error_paths(descriptor: Any, depth: int = 0) -> list[Path]:
    """Every path from a message type to its ``odradek.common.Error`` fields (through message fields only)."""
    paths: list[Path] = []
    for field in descriptor.fields:
        if field.message_type is None or depth >= MAX_DEPTH:
            continue
        repeated = _is_repeated(field)
        if field.message_type.full_name == ERROR_MESSAGE:
            if not repeated:
                paths.append(((field.name, False),))
            continue
        if field.message_type.GetOptions().map_entry:
            continue
        paths += [((field.name, repeated), *rest) for rest in error_paths(field.message_type, depth + 1)]
    return paths


def _is_repeated(field: Any) -> bool:
    label = getattr(field, "is_repeated", None)  # protobuf >= 6 has it; older ones: the label
    return bool(label) if label is not None else field.label == field.LABEL_REPEATED


def error_codes(message: Any, path: Path) -> Iterator[str]:
    """The non-empty error codes at the end of ``path`` in ``message``."""
    (name, repeated), rest = path[0], path[1:]
    if not rest:
        code = getattr(message, name).code
        if code:
            yield code
    elif repeated:
        for item in getattr(message, name):
            yield from error_codes(item, rest)
    else:
        yield from error_codes(getattr(message, name), rest)


class ErrorReader:
    """The error codes of one response type (see the module docstring)."""

    __slots__ = ("paths",)

    def __init__(self, descriptor: Any) -> None:
        self.paths = error_paths(descriptor)

    def __call__(self, response: Any) -> Iterator[str]:
        for path in self.paths:
            yield from error_codes(response, path)


class _Api:
    """The bound children of one request name."""

    __slots__ = ("name", "requests", "time_ms", "errors_of")

    def __init__(self, name: str, requests: Any, time_ms: Any) -> None:
        self.name = name
        self.requests = requests
        self.time_ms = time_ms
        self.errors_of: ErrorReader | None = None  # made at the first answer


class RequestMetrics:
    """``kafka_network_requestmetrics_*``: requests, errors and total time per request name."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._requests = Counter(
            "kafka_network_requestmetrics_requests", "requests answered, per request name", ["request"],
            registry=registry,
        )  # fmt: skip
        self._errors = Counter(
            "kafka_network_requestmetrics_errors", "error codes answered, per request name and error", ["request",
            "error"], registry=registry,
        )  # fmt: skip
        self._time = Histogram(
            "kafka_network_requestmetrics_totaltimems", "time from the request's arrival to its answer (ms)",
            ["request"], buckets=REQUEST_BUCKETS_MS, registry=registry,
        )  # fmt: skip
        self._apis: dict[object, _Api | tuple[_Api, _Api]] = {}
        self._named: dict[str, _Api] = {}  # the Kafka listener's, by API name

    def _api(self, handler: Callable[..., Any], request: Any) -> _Api:
        function = getattr(handler, "func", handler)  # a functools.partial: its function
        api = self._apis.get(function)
        if api is None:
            name = request_name(function)
            split = name == "Fetch"  # Kafka's RequestMetrics tell consumer and follower fetches apart
            api = (self._make("FetchConsumer"), self._make("FetchFollower")) if split else self._make(name)
            self._apis[function] = api
        if isinstance(api, tuple):
            return api[1] if request.replica_id >= 0 else api[0]
        return api

    def _make(self, name: str) -> _Api:
        return _Api(name, self._requests.labels(name), self._time.labels(name))

    def record(self, handler: Callable[..., Any], request: Any, response: Any, started: float) -> None:
        """One answered request; ``started`` is its ``time.perf_counter()`` at arrival."""
        api = self._api(handler, request)
        api.requests.inc()
        api.time_ms.observe((time.perf_counter() - started) * 1000.0)
        errors_of = api.errors_of
        if errors_of is None:
            errors_of = api.errors_of = ErrorReader(response.DESCRIPTOR)
        for code in errors_of(response):
            self._errors.labels(api.name, code).inc()

    def record_kafka(self, name: str, started: float, *, failed: bool = False) -> None:
        """A request of the Kafka-protocol listener (``broker.kafka``), by its API name (a Fetch there is a
        consumer's: followers fetch over gRPC); its error codes are not read, a failure counts as
        ``UNKNOWN_SERVER_ERROR``."""
        api = self._named.get(name)
        if api is None:
            api = self._named[name] = self._make("FetchConsumer" if name == "Fetch" else name)
        api.requests.inc()
        api.time_ms.observe((time.perf_counter() - started) * 1000.0)
        if failed:
            self._errors.labels(api.name, UNKNOWN_SERVER_ERROR).inc()

    def record_failure(self, handler: Callable[..., Any], request: Any, started: float) -> None:
        """A request whose handler raised (answered with gRPC status INTERNAL)."""
        api = self._api(handler, request)
        api.requests.inc()
        api.time_ms.observe((time.perf_counter() - started) * 1000.0)
        self._errors.labels(api.name, UNKNOWN_SERVER_ERROR).inc()


def count_records(data: bytes) -> int:
    """Records in a sequence of whole RecordBatch v2 batches, from their headers (nothing is decoded)."""
    count, position, end = 0, 0, len(data)
    while position + _RECORDS_COUNT_OFFSET + 4 <= end:
        count += _RECORDS_COUNT.unpack_from(data, position + _RECORDS_COUNT_OFFSET)[0]
        position += LOG_OVERHEAD + LENGTH_PREFIX.unpack_from(data, position)[1]
    return count


class _Topic:
    """The bound children of one topic."""

    __slots__ = ("bytes_in", "messages_in", "bytes_out", "messages_out", "replication_out")

    def __init__(self, metrics: TopicMetrics, topic: str) -> None:
        self.bytes_in = metrics.bytes_in.labels(topic)
        self.messages_in = metrics.messages_in.labels(topic)
        self.bytes_out = metrics.bytes_out.labels(topic)
        self.messages_out = metrics.messages_out.labels(topic)
        self.replication_out = metrics.replication_bytes_out.labels(topic)


class TopicMetrics:
    """``kafka_server_brokertopicmetrics_*`` per topic: bytes and messages in (produce) and out (consumer
    fetches), and replication bytes out (follower fetches from this leader)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        def counter(name: str, documentation: str) -> Counter:
            return Counter("kafka_server_brokertopicmetrics_" + name, documentation, ["topic"], registry=registry)

        self.bytes_in = counter("bytesin", "bytes of record batches appended by producers")
        self.messages_in = counter("messagesin", "records appended by producers")
        self.bytes_out = counter("bytesout", "bytes of record batches sent to consumers")
        self.messages_out = counter("messagesout", "records sent to consumers")
        self.replication_bytes_out = counter("replicationbytesout", "bytes sent to followers")
        self._topics: dict[str, _Topic] = {}

    def _topic(self, topic: str) -> _Topic:
        bound = self._topics.get(topic)
        if bound is None:
            bound = self._topics[topic] = _Topic(self, topic)
        return bound

    def produced(self, topic: str, size_bytes: int, records: int) -> None:
        bound = self._topic(topic)
        bound.bytes_in.inc(size_bytes)
        bound.messages_in.inc(records)

    def bytes_sent(self, topic: str, size_bytes: int, *, for_replica: bool) -> None:
        """Batches sent out: to a follower (replication bytes out) or a consumer (bytes out)."""
        bound = self._topic(topic)
        (bound.replication_out if for_replica else bound.bytes_out).inc(size_bytes)

    def records_out(self, topic: str, data: bytes) -> None:
        """The records of batches sent to a consumer (counted from their headers)."""
        self._topic(topic).messages_out.inc(count_records(data))

    def forget_except(self, topics: Iterable[str]) -> None:
        """Drop the series of topics not in ``topics`` (deleted ones), as Kafka removes their metrics."""
        keep = set(topics)
        for topic in [t for t in list(self._topics) if t not in keep]:  # list(): one atomic copy of the keys
            self._topics.pop(topic, None)
            for family in (self.bytes_in, self.messages_in, self.bytes_out, self.messages_out,
                           self.replication_bytes_out):  # fmt: skip
                with contextlib.suppress(KeyError):
                    family.remove(topic)
