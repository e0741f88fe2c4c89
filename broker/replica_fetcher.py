"""Followers pull: one fetcher thread per source broker (Kafka's ``ReplicaFetcherManager`` / ``ReplicaFetcherThread``).

Each thread serves every partition this broker follows from one leader, in two phases per partition:

1. *truncating* -- after it became a follower in a leader epoch: ask the leader (OffsetsForLeaderEpoch, all
   such partitions in one request) where this replica's latest epoch ends, and truncate by the rules TR2-TR6
   of ``replication.truncation`` (asking again for TR4), never by the high watermark alone;
2. *fetching* -- one long-polling Fetch (``replica.fetch.wait.max.ms``) for every fetching partition, sent
   on the thread's ReplicaFetch stream (``common.streams``; one unary Fetch call a round with
   ``replica.fetch.stream.enable=false``), or on the leader's REPLICATION listener, where the connection is
   a fetch session (``broker.fetch_session``: only partitions whose fetch state changed are named, and only
   those with news are answered); the records are appended as they are (offsets and epochs kept),
   the leader's high watermark is taken up to the local log end, and each fetch reports this follower's
   position to the leader (HW4).

Errors: FENCED_LEADER_EPOCH waits for the metadata (the manager reassigns the partition with the new
epoch); UNKNOWN_LEADER_EPOCH / NOT_LEADER_OR_FOLLOWER (the leader's metadata is behind ours) and other
errors are retried after ``BACKOFF_S``; OFFSET_OUT_OF_RANGE below the leader's log start
restarts the log there, otherwise truncates again (TR rules; below the high watermark if the leader's log
is shorter, ``Partition.truncate_as_follower``); an unreachable leader is retried after ``BACKOFF_S``.

Failed partitions (Kafka's, KIP-461): an exception while truncating or appending one partition (a batch
that fails validation, a storage error) marks that partition *failed*, logged with its cause: it is left
out of this thread's requests until the metadata assigns it again (a new leader epoch), and every other
partition of the response and of the thread goes on. Only an RPC error fails a whole round.

Thread-safety: :meth:`ReplicaFetcherManager.update` and ``shutdown`` are the metadata thread's (or the
stopping thread's); each :class:`ReplicaFetcherThread` owns its partition states under its own lock, which
``assign`` takes from the metadata thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import grpc

from broker.config import BrokerConfig
from broker.controller_channel import MAX_MESSAGE_BYTES
from broker.lifecycle import LISTENER
from broker.log_manager import TopicPartition
from broker.replica_manager import ReplicaManager
from broker.replication_link import (
    SESSION_ERRORS,
    FollowerLink,
    FollowerSession,
    LinkError,
    forgotten_topics,
    replication_address,
)
from common.streams import LockstepStream
from controller.security.settings import open_channel
from log import trace
from metadata.image import MetadataImage
from proto import broker_pb2 as pb
from proto import broker_pb2_grpc
from replication.epoch_cache import EpochEndOffset
from replication.partition import Partition
from replication.views import Role

logger = logging.getLogger(__name__)

BACKOFF_S = 0.2
RPC_SLACK_S = 5.0
# Our epoch is older than the leader's: only newer metadata helps. (UNKNOWN_LEADER_EPOCH and
# NOT_LEADER_OR_FOLLOWER mean the leader has not caught up with the metadata yet: retried after a backoff.)
_WAIT_FOR_METADATA = frozenset({"FENCED_LEADER_EPOCH"})


@dataclass(slots=True)
class _State:
    leader_epoch: int
    truncating: bool = True
    asked_epoch: int | None = None  # None: ask about the log's latest epoch
    waiting: bool = False  # an epoch error: wait until the metadata reassigns the partition
    failed: bool = False  # an exception on this partition: left out until the metadata reassigns it


class ReplicaFetcherThread:
    """Fetches every partition this broker follows from leader ``source_id`` (see the module docstring)."""

    def __init__(
        self, broker_id: int, source_id: int, address: str, replicas: ReplicaManager, config: BrokerConfig,
        broker_epoch: Callable[[], int], credentials: Any = None, link_address: str | None = None,
        link_tls: Any = None,
    ) -> None:  # fmt: skip
        self.broker_id = broker_id
        self.source_id = source_id
        self.address = address
        self._replicas = replicas
        self._config = config
        self._broker_epoch = broker_epoch
        self._lock = threading.Lock()
        self._states: dict[TopicPartition, _State] = {}
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._errors = 0  # errors in the current round (the fetcher thread's own)
        options = [("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                   ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)]  # fmt: skip
        self._channel = open_channel(address, credentials, options)  # TLS when the inter-broker listener is
        self._stub: Any = broker_pb2_grpc.BrokerStub(self._channel)  # type: ignore[no-untyped-call]
        self._streaming = bool(config.get("replica.fetch.stream.enable"))
        self._stream: LockstepStream | None = None  # the ReplicaFetch stream, made by the first fetch round
        # the leader's REPLICATION listener (broker.replication_link): fetches go there instead of gRPC
        self.link_address = link_address
        self.link: FollowerLink | None = None if link_address is None else FollowerLink(
            link_address, link_tls, MAX_MESSAGE_BYTES)  # fmt: skip
        # the fetch session on that link (broker.fetch_session): only what changed is named
        self.session = FollowerSession() if self.link is not None and config.get("replica.fetch.session.enable") \
            else None  # fmt: skip
        self._thread = threading.Thread(target=self._run, name=f"fetcher-{broker_id}-from-{source_id}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._stream is not None:
            self._stream.close()
        if self.link is not None:
            self.link.close()
        self._channel.close()
        if self._thread.ident is not None:  # started
            self._thread.join(timeout=5.0)

    def assign(self, partitions: Mapping[TopicPartition, int]) -> None:
        """Follow exactly ``partitions`` (key -> leader epoch) from this source; a new epoch truncates again."""
        with self._lock:
            states = {}
            for key, epoch in partitions.items():
                old = self._states.get(key)
                states[key] = old if old is not None and old.leader_epoch == epoch else _State(epoch)
            self._states = states
        self._wake.set()

    @property
    def partitions(self) -> set[TopicPartition]:
        with self._lock:
            return set(self._states)

    @property
    def failed_partitions(self) -> set[TopicPartition]:
        """The partitions marked failed (see the module docstring)."""
        with self._lock:
            return {key for key, state in self._states.items() if state.failed}

    # ---------------------------------------------------------------------------------------- loop

    def run_once(self) -> bool:
        """One round: truncate what must be, then one Fetch; True when it did work without errors. Raises
        the RPC's error when the leader did not answer."""
        self._errors = 0
        worked = self._truncate_round() | self._fetch_round()
        return worked and not self._errors

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                worked = self.run_once()
            except (grpc.RpcError, LinkError) as e:
                if self._stop.is_set():
                    return
                logger.debug("fetcher %d <- %d: %s", self.broker_id, self.source_id, e)
                worked = False
            except Exception:
                logger.exception("fetcher %d <- %d failed a round", self.broker_id, self.source_id)
                worked = False
            if not worked:
                self._wake.wait(BACKOFF_S)
                self._wake.clear()

    def _snapshot(self, truncating: bool) -> list[tuple[TopicPartition, _State, Partition]]:
        out = []
        with self._lock:
            for key, state in self._states.items():
                partition = self._replicas.partition(*key)
                if partition is None or state.truncating != truncating or state.waiting or state.failed:
                    continue
                if partition.role is Role.FOLLOWER and partition.leader_epoch == state.leader_epoch:
                    out.append((key, _State(state.leader_epoch, state.truncating, state.asked_epoch), partition))
        return out

    def _update(self, key: TopicPartition, epoch: int, **changes: Any) -> None:
        with self._lock:
            state = self._states.get(key)
            if state is not None and state.leader_epoch == epoch:
                for name, value in changes.items():
                    setattr(state, name, value)

    # ------------------------------------------------------------------------------------ truncate

    def _truncate_round(self) -> bool:
        work = self._snapshot(truncating=True)
        if not work:
            return False
        asked = {key: s.asked_epoch if s.asked_epoch is not None else p.latest_epoch for key, s, p in work}
        request = pb.OffsetsForLeaderEpochRequest(replica_id=self.broker_id, partitions=[
            pb.OffsetForLeaderPartition(topic=key[0], partition=key[1], current_leader_epoch=s.leader_epoch,
                                        leader_epoch=asked[key]) for key, s, _ in work
        ])  # fmt: skip
        response = self._stub.OffsetsForLeaderEpoch(request, timeout=RPC_SLACK_S)
        answers = {(r.topic, r.partition): r for r in response.partitions}
        for key, state, partition in work:
            answer = answers.get(key)
            if answer is None or answer.error.code:
                self._on_error(key, state, answer.error.code if answer else "")
                continue
            try:
                leader_answer = EpochEndOffset(answer.leader_epoch, answer.end_offset)
                decision = partition.decide_truncation(asked[key], leader_answer)
                partition.truncate_as_follower(decision.truncate_to, state.leader_epoch)
            except Exception as exc:
                self._mark_failed(key, state, "truncating", exc)
                continue
            self._update(key, state.leader_epoch, truncating=not decision.done, asked_epoch=decision.ask_epoch)
        return True

    # --------------------------------------------------------------------------------------- fetch

    def _fetch_round(self) -> bool:
        work = self._snapshot(truncating=False)
        if not work:
            return False
        positions = {key: (p.log_end_offset, state.leader_epoch, p.log_start_offset) for key, state, p in work}
        named, forgotten, session_epoch = list(positions), list[TopicPartition](), 0
        if self.session is not None and self.link is not None:
            if not self.link.connected:  # a new connection: a new session, and a full fetch
                self.session.reset()
            named, forgotten, session_epoch = self.session.next(positions)
        topics: dict[str, list[pb.FetchPartition]] = {}
        partition_max_bytes = int(self._config.get("replica.fetch.max.bytes"))
        for key in named:
            fetch_offset, leader_epoch, log_start_offset = positions[key]
            topics.setdefault(key[0], []).append(pb.FetchPartition(
                partition=key[1], fetch_offset=fetch_offset, current_leader_epoch=leader_epoch,
                partition_max_bytes=partition_max_bytes, log_start_offset=log_start_offset, last_fetched_epoch=-1,
            ))  # fmt: skip
        wait_ms = int(self._config.get("replica.fetch.wait.max.ms"))
        request = pb.FetchRequest(
            replica_id=self.broker_id, replica_epoch=self._broker_epoch(), max_wait_ms=wait_ms,
            min_bytes=int(self._config.get("replica.fetch.min.bytes")),
            max_bytes=int(self._config.get("replica.fetch.response.max.bytes")),
            topics=[pb.FetchTopic(name=name, partitions=parts) for name, parts in topics.items()],
            session_epoch=session_epoch, forgotten=forgotten_topics(forgotten),
        )  # fmt: skip
        sent_ns = trace.now_ns() if trace.ON else 0
        timeout_s = wait_ms / 1000.0 + RPC_SLACK_S
        if self.link is not None:
            response = self.link.call(request, timeout_s)  # a LinkError closes the link: a full fetch next
            if response.error.code in SESSION_ERRORS and self.session is not None:
                logger.warning("fetcher %d <- %d: the leader ended the fetch session (%s: %s); starting a new one",
                               self.broker_id, self.source_id, response.error.code, response.error.message)  # fmt: skip
                self.session.reset()
                self._errors += 1
                return True
        elif self._streaming:
            if self._stream is None:
                self._stream = LockstepStream(self._stub, self._thread.name)
            response = self._stream.call(request, timeout_s)
        else:
            response = self._stub.Fetch(request, timeout=timeout_s)
        received_ns = trace.now_ns() if trace.ON else 0
        by_key = {key: (state, partition) for key, state, partition in work}
        for answered in response.topics:
            for answer in answered.partitions:
                key = (answered.name, answer.partition)
                found = by_key.get(key)
                if found is None:
                    continue
                fetch_offset = found[1].log_end_offset if trace.ON else 0
                try:
                    self._on_fetched(key, *found, answer)
                except Exception as exc:
                    self._mark_failed(key, found[0], "appending", exc)
                if trace.ON:  # log.trace's ``ff``: a follower's fetch, from its sending to its append
                    trace.record(received_ns, "ff", key[0], key[1], fetch_offset, found[1].log_end_offset, sent_ns,
                                 trace.now_ns())  # fmt: skip
        return True

    def _on_fetched(self, key: TopicPartition, state: _State, partition: Partition, answer: Any) -> None:
        code = answer.error.code
        if code == "OFFSET_OUT_OF_RANGE":
            if partition.log_end_offset < answer.log_start_offset:
                partition.restart_at(answer.log_start_offset, state.leader_epoch)
            else:
                self._update(key, state.leader_epoch, truncating=True, asked_epoch=None)
            return
        if code:
            self._on_error(key, state, code)
            return
        partition.append_as_follower(answer.records, answer.high_watermark, state.leader_epoch)

    def _mark_failed(self, key: TopicPartition, state: _State, doing: str, exc: Exception) -> None:
        logger.error("fetcher %d <- %d: %s-%d failed while %s (left out until its leader changes): %r",
                     self.broker_id, self.source_id, key[0], key[1], doing, exc)  # fmt: skip
        self._update(key, state.leader_epoch, failed=True)

    def _on_error(self, key: TopicPartition, state: _State, code: str) -> None:
        self._errors += 1
        if code in _WAIT_FOR_METADATA:
            self._update(key, state.leader_epoch, waiting=True)
        else:
            logger.debug("fetcher %d <- %d: %s-%d: %s", self.broker_id, self.source_id, key[0], key[1], code or "?")


class ReplicaFetcherManager:
    """The fetcher threads of this broker, one per leader it follows partitions from."""

    def __init__(
        self, broker_id: int, replicas: ReplicaManager, config: BrokerConfig, broker_epoch: Callable[[], int],
        credentials: Any = None, links: bool = False, link_tls: Any = None,
    ) -> None:  # fmt: skip
        self.broker_id = broker_id
        self._credentials = credentials  # grpc.ChannelCredentials of the inter-broker listener; None: plaintext
        self._links = links  # fetch over a leader's REPLICATION listener when it has one
        self._link_tls = link_tls  # ssl.SSLContext for those links; None: plaintext
        self._replicas = replicas
        self._config = config
        self._broker_epoch = broker_epoch
        self._threads: dict[int, ReplicaFetcherThread] = {}

    def update(self, image: MetadataImage) -> None:
        """After a metadata change: each followed partition goes to its leader's thread (with its epoch)."""
        wanted: dict[int, dict[TopicPartition, int]] = {}
        for key, partition in self._replicas.partitions().items():
            if partition.role is Role.FOLLOWER and partition.leader_id >= 0 and partition.leader_id != self.broker_id:
                wanted.setdefault(partition.leader_id, {})[key] = partition.leader_epoch
        for source_id in list(self._threads):
            thread = self._threads[source_id]
            if source_id not in wanted or (thread.address, thread.link_address) != self._addresses(image, source_id):
                del self._threads[source_id]
                thread.stop()
        for source_id, partitions in wanted.items():
            existing = self._threads.get(source_id)
            address, link_address = self._addresses(image, source_id)
            if existing is None and address is not None:
                existing = self._threads[source_id] = ReplicaFetcherThread(
                    self.broker_id, source_id, address, self._replicas, self._config, self._broker_epoch,
                    self._credentials, link_address, self._link_tls,
                )
                existing.start()
            if existing is not None:
                existing.assign(partitions)

    def _addresses(self, image: MetadataImage, source_id: int) -> tuple[str | None, str | None]:
        """Broker ``source_id``'s inter-broker gRPC address and, when this broker uses links, its replication
        listener's (None: it has none)."""
        link = replication_address(image, source_id) if self._links else None
        return inter_broker_address(image, source_id), link

    def shutdown(self) -> None:
        threads, self._threads = self._threads, {}
        for thread in threads.values():
            thread.stop()


def inter_broker_address(image: MetadataImage, broker_id: int) -> str | None:
    """The address of broker ``broker_id``'s inter-broker listener (its first listener without one), or None."""
    broker = image.broker(broker_id)
    if broker is None:
        return None
    endpoint = broker.endpoint(LISTENER) or (broker.endpoints[0] if broker.endpoints else None)
    return None if endpoint is None else f"{endpoint.host}:{endpoint.port}"
