"""The shared core of every client: bootstrap, the metadata cache and its refresh, calls to brokers.

Metadata is refreshed when a client asks (``request_update``: a leader moved, a topic is new) and
every ``metadata.max.age.ms``; refreshes are spaced by ``retry.backoff.ms``, growing exponentially
up to ``retry.backoff.max.ms`` while they fail. A refresh asks the known brokers first and then the
``bootstrap.servers``, each in turn, until one answers; brokers a client suspects (``suspect``: a request to
them went unanswered for a while, as to a paused broker) are asked last, and a Metadata call that times out
moves on to the next broker like a refused connection (Kafka's client asks its least loaded node).
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from typing import Any, NamedTuple, Protocol

import grpc

from common.clock import SYSTEM_CLOCK, Clock
from odradek.backoff import ExponentialBackoff
from odradek.errors import (
    KafkaError,
    KafkaTimeoutError,
    LeaderNotAvailableError,
    NetworkError,
    UnknownTopicOrPartitionError,
    error_from_code,
)
from odradek.net.calls import CallPool
from odradek.net.channels import ChannelPool
from odradek.net.data_link import DataLink
from odradek.net.metadata import EMPTY_CLUSTER, Cluster, TopicInfo
from odradek.rpc_errors import rpc_error
from odradek.security.channels import tls_context
from odradek.security.config import SecurityConfig
from odradek.types import TopicPartition
from proto import broker_pb2

logger = logging.getLogger(__name__)

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1


class ListedOffset(NamedTuple):
    offset: int  # -1: no record at or after the timestamp asked
    timestamp: int
    leader_epoch: int


DATA_FALLBACK_MS = 30_000.0  # how long a broker whose DATA listener could not be reached gets gRPC instead
SUSPECT_MS = 10_000.0  # how long a broker with an overdue request is asked last
METADATA_ATTEMPT_S = 5.0  # one broker's time to answer a Metadata refresh before the next is asked


class ConnectionConfig(Protocol):
    """The keys every client config has that say how to reach the cluster (``odradek.config``)."""

    @property
    def bootstrap_servers(self) -> Sequence[str]: ...

    @property
    def client_id(self) -> str: ...

    @property
    def request_timeout_ms(self) -> int: ...

    @property
    def retry_backoff_ms(self) -> int: ...

    @property
    def retry_backoff_max_ms(self) -> int: ...

    @property
    def metadata_max_age_ms(self) -> int: ...

    @property
    def security(self) -> SecurityConfig: ...


class ClusterClient:
    """Channels, the metadata snapshot and calls to brokers, shared by one client's threads.

    Thread-safe: ``cluster`` is an immutable snapshot swapped atomically; refreshes are serialized by a
    lock (a second caller waits for the first refresh and does not repeat it).
    """

    @classmethod
    def for_config(cls, cfg: ConnectionConfig, **options: Any) -> ClusterClient:
        """A client reaching the cluster as ``cfg`` says; ``options``: the other keyword arguments of
        ``__init__`` (``max_message_bytes``, ``clock``, ``max_concurrent_calls``, ``name``)."""
        return cls(
            bootstrap_servers=cfg.bootstrap_servers,
            client_id=cfg.client_id,
            request_timeout_ms=cfg.request_timeout_ms,
            retry_backoff_ms=cfg.retry_backoff_ms,
            retry_backoff_max_ms=cfg.retry_backoff_max_ms,
            metadata_max_age_ms=cfg.metadata_max_age_ms,
            security=cfg.security,
            **options,
        )

    def __init__(
        self,
        *,
        bootstrap_servers: Sequence[str],
        client_id: str = "",
        request_timeout_ms: int = 30000,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 1000,
        metadata_max_age_ms: int = 300000,
        max_message_bytes: int = 1 << 20,
        clock: Clock = SYSTEM_CLOCK,
        max_concurrent_calls: int = 32,
        name: str = "odradek",
        security: SecurityConfig | None = None,
    ) -> None:
        self.pool = ChannelPool(
            max_message_bytes=max_message_bytes,
            client_id=client_id,
            reconnect_backoff_ms=retry_backoff_ms,
            reconnect_backoff_max_ms=retry_backoff_max_ms,
            security=security,
        )
        self.calls = CallPool(max_concurrent_calls, f"{name}-{client_id}" if client_id else name)
        self.clock = clock
        self.request_timeout_s = request_timeout_ms / 1000
        self.backoff = ExponentialBackoff(retry_backoff_ms, retry_backoff_max_ms)
        self._bootstrap = tuple(bootstrap_servers)
        self._retry_backoff_ms = retry_backoff_ms
        self._max_age_ms = metadata_max_age_ms
        self._cluster = EMPTY_CLUSTER
        self._topics: frozenset[str] = frozenset()
        self._topics_lock = threading.Lock()
        self._update_requested = True
        self._refresh_lock = threading.Lock()
        self._failures = 0
        self._next_attempt_ms = -float("inf")  # refreshes are spaced (backoff), not only failed ones
        self._version = 0
        self._rotation = itertools.count()
        self._suspects: dict[str, float] = {}  # address -> until when (monotonic ms) it is asked last
        # DATA listeners (odradek.net.data_link): the TLS of the channels, and with SASL each node's session
        self._data_tls = tls_context(security) if security is not None else None
        self._data_down: dict[str, float] = {}  # DATA address -> until when (monotonic ms) gRPC is used instead
        self._name = name

    # ---------------------------------------------------------------------------------- metadata

    @property
    def cluster(self) -> Cluster:
        return self._cluster

    @property
    def bootstrap_servers(self) -> tuple[str, ...]:
        return self._bootstrap

    def add_topics(self, topics: Iterable[str]) -> None:
        """Keep metadata for these topics too (an update is requested when one is new)."""
        new = frozenset(topics) - self._topics
        if new:
            with self._topics_lock:
                self._topics = self._topics | new
            self._update_requested = True
            if not self._failures:  # a new topic need not wait out the spacing of healthy refreshes
                self._next_attempt_ms = -float("inf")

    def set_topics(self, topics: Iterable[str]) -> None:
        topics = frozenset(topics)
        with self._topics_lock:
            if topics != self._topics:
                self._update_requested = bool(topics - self._topics) or self._update_requested
                self._topics = topics

    def request_update(self) -> None:
        self._update_requested = True

    def metadata_due_in_ms(self, now_ms: float) -> float:
        """How long until a refresh should happen (0: now): requested or stale, and past the backoff."""
        if self._update_requested or now_ms - self._cluster.updated_ms >= self._max_age_ms:
            return max(0.0, self._next_attempt_ms - now_ms)
        return self._cluster.updated_ms + self._max_age_ms - now_ms

    def maybe_refresh(self) -> bool:
        """Refresh if due; True when the snapshot changed. Failures are kept for the next attempt."""
        if self.metadata_due_in_ms(self.clock.monotonic_ms()) > 0:
            return False
        try:
            self.refresh()
        except KafkaError:
            return False
        return True

    def refresh(self) -> Cluster:
        """Fetch metadata for the topics of interest now; raises NetworkError when no broker answers."""
        version = self._version
        with self._refresh_lock:
            if self._version != version:  # another thread refreshed while we waited
                return self._cluster
            started = self.clock.monotonic_ms()
            self._update_requested = False
            request = broker_pb2.MetadataRequest(topics=sorted(self._topics))
            try:
                response = self.call_any("Metadata", request, min(self.request_timeout_s, METADATA_ATTEMPT_S))
            except KafkaError:
                self._next_attempt_ms = started + self.backoff.backoff_ms(self._failures)
                self._failures += 1
                self._update_requested = True
                raise
            self._failures = 0
            self._next_attempt_ms = started + self._retry_backoff_ms
            self._cluster = Cluster.from_response(response, self.clock.monotonic_ms(), self._cluster)
            if self._cluster.stale:  # KIP-320: that broker is behind; ask again (spaced by retry.backoff.ms)
                logger.debug("metadata from an older leader epoch for %s: kept what was known, asking again",
                             sorted(self._cluster.stale))  # fmt: skip
                self._update_requested = True
            self._version += 1
            return self._cluster

    def wait_for_topic(self, topic: str, timeout_ms: float) -> TopicInfo:
        """Metadata of ``topic`` with its partitions, refreshing until it shows up or ``timeout_ms`` passes."""
        self.add_topics((topic,))
        deadline = self.clock.monotonic_ms() + timeout_ms
        last_error = ""
        while True:
            info = self._cluster.topics.get(topic)
            if info is not None and info.partitions:
                return info
            if info is not None and info.error and info.error != UnknownTopicOrPartitionError.code:
                error = error_from_code(info.error, f"topic {topic!r}: {info.error}")
                if not error.retriable:
                    raise error
            now = self.clock.monotonic_ms()
            if now >= deadline:
                hint = f" (last error: {last_error})" if last_error else ""
                raise KafkaTimeoutError(f"topic {topic!r} not present in metadata after {timeout_ms:.0f} ms{hint}")
            self.request_update()
            wait_ms = min(self.metadata_due_in_ms(now), deadline - now)
            if wait_ms > 0:
                time.sleep(wait_ms / 1000)
                continue
            try:
                self.refresh()
            except KafkaError as exc:
                last_error = str(exc)
            info = self._cluster.topics.get(topic)
            if info is not None and info.error:
                last_error = f"{info.error} for topic {topic!r}"

    # ------------------------------------------------------------------------------------- calls

    def stub_for(self, node_id: int) -> tuple[Any, str] | None:
        """The Broker stub and address of ``node_id``, or None when the snapshot does not know it."""
        address = self._cluster.address(node_id)
        if address is None:
            return None
        return self.pool.stub(address), address

    def data_address(self, node_id: int) -> str:
        """Where Produce and Fetch for ``node_id`` go on TCP frames (its DATA listener), "" for gRPC: it has none
        for this client's listener, or it could not be reached a moment ago (:meth:`data_unreachable`)."""
        address = self._cluster.data_address(node_id)
        if address and self._data_down:
            until = self._data_down.get(address)
            if until is not None:
                if until > self.clock.monotonic_ms():
                    return ""
                self._data_down.pop(address, None)
        return address

    def data_link(self, node_id: int, address: str, max_answer_bytes: int, role: str) -> DataLink:
        """A new connection to the DATA listener of ``node_id`` at ``address`` (opened by its first request; the
        caller owns it and closes it); with SASL it authenticates with the session of the node's channel."""
        grpc_address = self._cluster.address(node_id)
        session = self.pool.sasl_session(grpc_address) if grpc_address is not None else None
        return DataLink(address, self._data_tls, max_answer_bytes, f"{self._name}-{role}-{address}", session)

    def data_unreachable(self, address: str, error: BaseException) -> None:
        """No connection to the DATA listener at ``address`` could be opened: requests to that broker go on gRPC
        for ``DATA_FALLBACK_MS`` (a firewall between client and broker, a listener not reachable from here),
        then the listener is tried again."""
        if address not in self._data_down:
            logger.warning("%s: cannot reach the DATA listener at %s (%s); using gRPC for %.0f s", self._name,
                           address, error, DATA_FALLBACK_MS / 1000)  # fmt: skip
        self._data_down[address] = self.clock.monotonic_ms() + DATA_FALLBACK_MS

    def suspect(self, node_id: int, for_ms: float = SUSPECT_MS) -> None:
        """Ask ``node_id`` last for a while (a request to it went unanswered too long)."""
        address = self._cluster.address(node_id)
        if address is not None:
            self._suspects[address] = self.clock.monotonic_ms() + for_ms

    def _candidates(self) -> Iterator[str]:
        known = [b.address for b in self._cluster.brokers.values()]
        if known:
            start = next(self._rotation) % len(known)
            known = known[start:] + known[:start]
        everyone = known + [a for a in self._bootstrap if a not in known]
        now = self.clock.monotonic_ms()
        suspects = {a for a, until in self._suspects.items() if until > now}
        yield from (a for a in everyone if a not in suspects)
        yield from (a for a in everyone if a in suspects)

    def call_any(self, method: str, request: Any, timeout_s: float | None = None) -> Any:
        """Call ``method`` on the first broker that answers; only connection failures (and, for Metadata,
        timeouts) move on to the next."""
        failures: list[str] = []
        for address in self._candidates():
            try:
                answer = getattr(self.pool.stub(address), method)(request, timeout=timeout_s or self.request_timeout_s)
            except grpc.RpcError as exc:
                error = rpc_error(exc, method, address)
                if not isinstance(error, NetworkError) and not (method == "Metadata" and error.retriable):
                    raise error from None
                failures.append(str(error))
                continue
            self._suspects.pop(address, None)
            return answer
        raise NetworkError(f"no broker answered {method}: {'; '.join(failures)}")

    def call_node(self, node_id: int, method: str, request: Any, timeout_s: float | None = None) -> Any:
        target = self.stub_for(node_id)
        if target is None:
            self.request_update()
            raise NetworkError(f"broker {node_id} is not in the cluster metadata")
        stub, address = target
        try:
            return getattr(stub, method)(request, timeout=timeout_s or self.request_timeout_s)
        except grpc.RpcError as exc:
            raise rpc_error(exc, method, address) from None

    # ------------------------------------------------------------------------------- ListOffsets

    def list_offsets(
        self,
        timestamps: Mapping[TopicPartition, int],
        timeout_ms: float,
        isolation_level: int = 0,
        *,
        fail_on_unknown_topic: bool = False,
    ) -> dict[TopicPartition, ListedOffset]:
        """Ask each partition's leader for the offset at a timestamp (-2 earliest, -1 latest, else ms).

        Retriable errors (no leader yet, a leader that moved, a topic the brokers do not know yet) are
        retried with backoff, refreshing metadata, until ``timeout_ms``; with ``fail_on_unknown_topic``
        a topic or partition missing from fresh metadata raises UnknownTopicOrPartitionError at once.
        """
        self.add_topics(tp.topic for tp in timestamps)
        remaining = dict(timestamps)
        found: dict[TopicPartition, ListedOffset] = {}
        deadline = self.clock.monotonic_ms() + timeout_ms
        attempt = 0
        while True:
            if attempt:
                self.maybe_refresh()
            if fail_on_unknown_topic:
                self._check_partitions_exist(remaining)
            answered, last_error = self.list_offsets_once(remaining, isolation_level)
            found.update(answered)
            for tp in answered:
                del remaining[tp]
            if not remaining:
                return found
            now = self.clock.monotonic_ms()
            if now >= deadline:
                raise KafkaTimeoutError(
                    f"listing offsets of {', '.join(map(str, sorted(remaining)))} timed out after "
                    f"{timeout_ms:.0f} ms" + (f": {last_error}" if last_error else "")
                )
            time.sleep(min(self.backoff.backoff_ms(attempt), deadline - now) / 1000)
            attempt += 1

    def list_offsets_once(
        self, timestamps: Mapping[TopicPartition, int], isolation_level: int = 0
    ) -> tuple[dict[TopicPartition, ListedOffset], KafkaError | None]:
        """One round of ListOffsets calls: the offsets found and the last retriable error (non-retriable ones raise)."""
        found: dict[TopicPartition, ListedOffset] = {}
        last_error: KafkaError | None = None
        groups = self._group_by_leader(timestamps)
        if sum(map(len, groups.values())) < len(timestamps):
            last_error = LeaderNotAvailableError("some partitions have no known leader")
        for node, tps in groups.items():
            error = self._list_offsets_at(node, {tp: timestamps[tp] for tp in tps}, isolation_level, found)
            last_error = error or last_error
        if last_error is not None:
            self.request_update()
        return found, last_error

    def _check_partitions_exist(self, tps: Iterable[TopicPartition]) -> None:
        cluster = self._cluster
        if cluster.updated_ms == 0.0 or any(tp.topic not in cluster.topics for tp in tps):
            cluster = self.refresh()
        for tp in tps:
            info = cluster.topics.get(tp.topic)
            if info is not None and info.error == UnknownTopicOrPartitionError.code:
                raise UnknownTopicOrPartitionError(f"topic {tp.topic!r} does not exist")
            if info is not None and info.partitions and tp.partition >= len(info.partitions):
                raise UnknownTopicOrPartitionError(
                    f"partition {tp} does not exist: topic {tp.topic!r} has {len(info.partitions)} partitions"
                )

    def _group_by_leader(self, tps: Iterable[TopicPartition]) -> dict[int, list[TopicPartition]]:
        groups: dict[int, list[TopicPartition]] = {}
        cluster = self._cluster
        for tp in tps:
            leader = cluster.leader(tp)
            if leader < 0:
                self.request_update()
                continue
            groups.setdefault(leader, []).append(tp)
        return groups

    def _list_offsets_at(
        self,
        node: int,
        timestamps: Mapping[TopicPartition, int],
        isolation_level: int,
        found: dict[TopicPartition, ListedOffset],
    ) -> KafkaError | None:
        """One ListOffsets call; fills ``found``, raises non-retriable errors, returns the last retriable one."""
        cluster = self._cluster
        request = broker_pb2.ListOffsetsRequest(
            replica_id=-1,
            isolation_level=isolation_level,
            partitions=[
                broker_pb2.ListOffsetsPartition(
                    topic=tp.topic,
                    partition=tp.partition,
                    timestamp=ts,
                    current_leader_epoch=_epoch(cluster, tp),
                )
                for tp, ts in timestamps.items()
            ],
        )
        try:
            response = self.call_node(node, "ListOffsets", request)
        except KafkaError as exc:
            if not exc.retriable:
                raise
            self.request_update()
            return exc
        last: KafkaError | None = None
        for p in response.partitions:
            tp = TopicPartition(p.topic, p.partition)
            if tp not in timestamps:
                continue
            if p.error.code:
                error = error_from_code(p.error.code, f"listing offsets of {tp}: {p.error.message or p.error.code}")
                if not error.retriable:
                    raise error
                if error.invalid_metadata:
                    self.request_update()
                last = error
                continue
            found[tp] = ListedOffset(p.offset, p.timestamp, p.leader_epoch)
        return last

    def submit(self, stub_method: Any, request: Any, timeout_s: float) -> Future[Any]:
        """Start ``stub_method(request)`` on a worker thread (see :mod:`odradek.net.calls`)."""
        return self.calls.submit(stub_method, request, timeout_s)

    def start_ordered(self, stub_method: Any, request: Any, timeout_s: float) -> Any:
        """Start ``stub_method(request)`` now, on the calling thread: calls one thread starts on a channel go
        out in the order it started them (see :mod:`odradek.net.calls`). A ``grpc.Future``: its result raises
        ``grpc.RpcError`` on failure; done-callbacks run on gRPC's thread."""
        return stub_method.future(request, timeout=timeout_s)

    def close(self) -> None:
        self.calls.shutdown()
        self.pool.close()


def _epoch(cluster: Cluster, tp: TopicPartition) -> int:
    info = cluster.partition(tp)
    return -1 if info is None else info.leader_epoch
