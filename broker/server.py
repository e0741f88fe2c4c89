"""The broker process: storage, the Broker gRPC service, metadata, heartbeats, maintenance.

Threads and what each owns:

- one gRPC event-loop thread per listener, and ``num.io.threads`` gRPC worker threads that run the request
  handlers; a long-polling Fetch or an acks=all Produce waits in a purgatory on the event loop, holding no
  worker (``controller.rpc_server``);
- the metadata thread (:class:`~broker.metadata_loader.MetadataLoader`) is the only writer of the metadata
  image and of the partition map, and the only caller of role changes; an ``OSError`` there takes the log
  dir offline (every partition answers KAFKA_STORAGE_ERROR, the broker asks to be fenced) and it goes on;
- the heartbeat thread (:class:`~broker.lifecycle.BrokerLifecycle`) registers and heartbeats;
- one reaper thread per purgatory expires waiting operations;
- the maintenance thread (:class:`~broker.maintenance.LogMaintenance`) runs retention, idle flushes and
  high-watermark checkpoints;
- ``log.cleaner.threads`` cleaner threads (:class:`~log.cleaner.manager.LogCleaner`) compact the logs of
  ``cleanup.policy=compact`` topics below their high watermarks, swapping segments under each Log's lock;
- the ISR thread (:class:`~broker.isr_manager.IsrManager`) sends the led partitions' AlterPartition;
- the group coordinator thread (:class:`~broker.group.coordinator.GroupCoordinator`) loads the groups of the
  ``__consumer_offsets`` partitions led here and runs their timers;
- the transaction coordinator thread and its marker threads (:class:`~broker.txn.coordinator.
  TransactionCoordinator`) load the ``__transaction_state`` partitions led here, abort timed-out transactions
  and write the markers of decided ones (:class:`~broker.txn.peers.BrokerPeers`: calls to other brokers);
- the Kafka-protocol listeners (:mod:`broker.kafka`, listeners named ``KAFKA`` or ``KAFKA_*``): an acceptor
  thread each and one thread per client connection, which runs the same handlers as gRPC; the classic
  group timer thread (:mod:`broker.group.classic_driver`);
- the replication listener (:mod:`broker.replication_listener`, a listener named ``REPLICATION``): followers'
  fetches over plain TCP, an ``asyncio`` server on the inter-broker gRPC listener's event loop; the same for the
  ``DATA`` listener (:mod:`broker.data_listener`): Odradek's producers and consumers on plain TCP frames;
- one fetcher thread per leader this broker follows partitions from
  (:class:`~broker.replica_fetcher.ReplicaFetcherManager`, reassigned by the metadata thread after each change).

Start, in order: open every partition log (recovery), serve gRPC, then the metadata thread, the heartbeat
thread and maintenance. The broker is *ready* once the controller unfenced it (its metadata caught up).

Stop (SIGTERM / SIGINT), in order: controlled shutdown (heartbeats with ``want_shut_down`` until the
controller moved this broker's leaderships away, bounded by ``controlled.shutdown.timeout.ms``); stop
accepting requests; answer every waiting request; stop the threads; checkpoint high watermarks; flush and
close every log (each writes its clean-shutdown marker); write the broker's clean-shutdown epoch
(``broker.clean_shutdown``, read and removed at the next start and named in its registration, KIP-966).

Launchers: run brokers with ``MALLOC_MMAP_THRESHOLD_=67108864`` in the environment. glibc then serves the
large request and response buffers from its heap instead of fresh mmaps (a page fault per page each
time); measured on this machine it doubled the throughput of 1 MiB RPCs. It is read at process start, so
it must be set by whoever starts the process.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

from broker import clean_shutdown, replication_link
from broker.config import BrokerConfig
from broker.context import BrokerContext
from broker.controller_channel import ControllerChannel
from broker.data_listener import DataListener, is_data_listener
from broker.group.classic import ClassicConfig
from broker.group.classic_driver import ClassicCoordinator
from broker.group.config import GroupConfig
from broker.group.coordinator import GroupCoordinator
from broker.handlers import write_txn_markers
from broker.handlers.describe_cluster import refresh_quorum
from broker.isr_manager import IsrManager
from broker.lifecycle import LISTENER, BrokerLifecycle
from broker.log_manager import LogManager
from broker.maintenance import LogMaintenance, make_log_cleaner
from broker.metadata_cache import MetadataCache
from broker.metadata_loader import MetadataLoader
from broker.producer_ids import ProducerIdManager, controller_allocator
from broker.replica_fetcher import ReplicaFetcherManager
from broker.replica_manager import ReplicaManager
from broker.replication_link import is_replication_listener
from broker.txn.coordinator import TransactionCoordinator, TxnConfig
from broker.txn.peers import BrokerPeers
from broker.txn.state import TxnMetadata
from common.clock import Clock, SystemClock
from controller.security.node import NodeGuard
from controller.security.rules import BROKER_RULES
from controller.security.settings import NodeSecurity
from metadata.image import MetadataImage
from proto import broker_pb2

logger = logging.getLogger("odradek.broker")

GRPC_GRACE_S = 2.0
MARKER_CALL_TIMEOUT_S = 15.0  # a leader's WriteTxnMarkers waits up to 5 s for its ISR
MALLOC_ENV = "MALLOC_MMAP_THRESHOLD_"
MALLOC_VALUE = "67108864"  # what launchers should set (see the module docstring)


@dataclass(frozen=True, slots=True)
class Listener:
    """A named listener (Kafka's ``listeners`` / ``advertised.listeners``): one gRPC server bound to
    ``listen``; Metadata and DescribeCluster requests that come in on it answer every broker's endpoint of
    the same name. ``advertised`` is what this broker registers for it."""

    name: str
    listen: str
    advertised: str


@dataclass(frozen=True, slots=True)
class BrokerOptions:
    """Everything ``odradek broker`` was told.

    ``listen`` / ``advertised`` are the inter-broker listener's (``PLAINTEXT``); ``listeners`` lists every
    listener, empty meaning that one alone.
    """

    node_id: int
    listen: str
    advertised: str
    controllers: tuple[str, ...]
    data_dir: str
    config: BrokerConfig
    listeners: tuple[Listener, ...] = ()
    metrics_listen: str = ""  # HOST:PORT of the /metrics endpoint ("": no metrics at all)

    def all_listeners(self) -> tuple[Listener, ...]:
        return self.listeners or (Listener(LISTENER, self.listen, self.advertised),)


def is_kafka_listener(name: str) -> bool:
    """Listeners named ``KAFKA`` or ``KAFKA_<anything>`` speak Kafka's binary protocol; the others gRPC."""
    return name == "KAFKA" or name.startswith("KAFKA_")


def classic_config(config: BrokerConfig) -> ClassicConfig:
    return ClassicConfig(
        min_session_timeout_ms=int(config.get("group.min.session.timeout.ms")),
        max_session_timeout_ms=int(config.get("group.max.session.timeout.ms")),
        initial_rebalance_delay_ms=int(config.get("group.initial.rebalance.delay.ms")),
        max_size=int(config.get("group.max.size")),
    )


class BrokerServer:
    """One broker; see the module docstring.

    Thread-safety: ``start`` and ``stop`` from one thread; the properties from any.
    """

    def __init__(self, options: BrokerOptions, *, clock: Clock | None = None) -> None:
        self.options = options
        self.node_id = options.node_id
        self.clock = clock or SystemClock()
        config = options.config
        self.log_manager = LogManager(options.data_dir, options.node_id, self.clock)
        self.replicas = ReplicaManager(options.node_id, config, self.log_manager, self.clock)
        self.metadata = MetadataCache()
        self.security = NodeSecurity.from_props(config.props)  # docs/SECURITY.md
        for listener in options.all_listeners():
            if not is_kafka_listener(listener.name):
                self.security.check_listener(listener.name)
        self.channel = ControllerChannel(options.controllers, self.security.controller_channel_credentials())
        self.ctx = BrokerContext(
            options.node_id, config, self.metadata, self.replicas, self.channel, security=self.security
        )
        self.ctx.guard = NodeGuard.build(self.security, lambda: self.metadata.image, BROKER_RULES)
        self.metrics: Any = None  # broker.metrics.BrokerMetrics with --metrics-listen
        if options.metrics_listen:
            from broker.metrics import BrokerMetrics

            self.metrics = self.ctx.metrics = BrokerMetrics(options.metrics_listen)
        self.health: Any = None  # controller.health.HealthReporter, made by start()
        self.coordinator = GroupCoordinator(
            options.node_id, GroupConfig.from_broker(config.get), self.clock, self.replicas, self.metadata
        )
        self.replicas.role_listeners.append(self.coordinator.on_partition)
        self.ctx.coordinator = self.coordinator
        self.classic = ClassicCoordinator(self.coordinator, classic_config(config), self.clock)
        self.ctx.classic = self.classic
        self.lifecycle = BrokerLifecycle(
            options.node_id, self.channel, self.metadata, {lis.name: lis.advertised for lis in options.all_listeners()},
            rack=config.rack, heartbeat_interval_ms=config.heartbeat_interval_ms,
        )  # fmt: skip
        self.loader = MetadataLoader(
            options.node_id, self.channel, self.metadata, self.replicas, on_published=self._on_published
        )
        self.loader.on_log_dir_failure = self.lifecycle.log_dir_failed  # stays up, fenced (LogDirFailureChannel)
        self.maintenance = LogMaintenance(self.replicas, config, self.clock)
        self.cleaner = make_log_cleaner(self.replicas, config, self.clock)
        links = replication_link.protocol_of(self.security) if config.get("replica.fetch.tcp.enable") else None
        self.fetchers = ReplicaFetcherManager(
            options.node_id, self.replicas, config, lambda: self.lifecycle.broker_epoch,
            self.security.channel_credentials(self.security.protocol(LISTENER)), links is not None,
            replication_link.client_context(self.security) if links in ("SSL", "SASL_SSL") else None,
        )  # fmt: skip
        self.isr = IsrManager(
            options.node_id, self.replicas, self.channel, config, lambda: self.lifecycle.broker_epoch, self.metadata
        )
        self.ctx.producer_ids = ProducerIdManager(
            controller_allocator(self.channel.call, options.node_id, lambda: self.lifecycle.broker_epoch, 10.0)
        )
        self.peers = self.ctx.peers = BrokerPeers(
            self.metadata, self.security.channel_credentials(self.security.protocol(LISTENER))
        )
        self.txn_coordinator = TransactionCoordinator(
            options.node_id, TxnConfig.from_broker(config.get), self.clock, self.replicas, self.metadata,
            self.ctx.producer_ids.next_producer_id, self._send_markers,
        )  # fmt: skip
        self.replicas.role_listeners.append(self.txn_coordinator.on_partition)
        self.ctx.txn_coordinator = self.txn_coordinator
        self._grpc: list[Any] = []  # one gRPC server per gRPC listener
        self._kafka: list[Any] = []  # one broker.kafka.server.KafkaListener per Kafka-protocol listener
        self._links: list[Any] = []  # the REPLICATION and DATA listeners (broker.replication_listener, .data_listener)
        self._stopped = False
        self._stop_lock = threading.Lock()

    def _send_markers(
        self, leader: int, metadata: TxnMetadata, commit: bool, epoch: int, partitions: list[tuple[str, int]]
    ) -> dict[tuple[str, int], str]:
        """The transaction coordinator's WriteTxnMarkers to ``leader`` (this broker's own: in place)."""
        request = broker_pb2.WriteTxnMarkersRequest(broker_id=self.node_id)
        marker = request.markers.add(producer_id=metadata.producer_id, producer_epoch=metadata.producer_epoch,
                                     committed=commit, coordinator_epoch=epoch)  # fmt: skip
        by_topic: dict[str, list[int]] = {}
        for topic, number in partitions:
            by_topic.setdefault(topic, []).append(number)
        for topic, numbers in by_topic.items():
            marker.topics.add(topic=topic, partitions=numbers)
        if leader == self.node_id:
            response = write_txn_markers.handle(self.ctx, request)
        else:
            response = self.peers.stub(leader).WriteTxnMarkers(request, timeout=MARKER_CALL_TIMEOUT_S)
        return {(p.topic, p.partition): p.error.code for m in response.markers for p in m.partitions}

    def _on_published(self, image: MetadataImage) -> None:
        self.fetchers.update(image)
        self.lifecycle.on_metadata(image.offset)

    # --- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        """Open the logs, serve gRPC, start following the metadata and heartbeating (see the module docstring)."""
        from broker.service import SERVICE_NAME, start_grpc_server  # grpc's server side is the process's business
        from controller.health import HealthReporter

        self.health = HealthReporter(SERVICE_NAME, self._healthy)
        self.replicas.startup()
        self.lifecycle.previous_broker_epoch = clean_shutdown.take_previous_epoch(self.options.data_dir)
        services: dict[str, tuple[Any, Any]] = {}  # listener name -> (its RpcServer, its BrokerService)
        try:
            for listener in self.options.all_listeners():
                if is_kafka_listener(listener.name):
                    from broker.kafka.server import KafkaListener

                    kafka = KafkaListener(self.ctx, listener.name, listener.listen)
                    kafka.start()
                    self._kafka.append(kafka)
                elif not is_replication_listener(listener.name) and not is_data_listener(listener.name):
                    self._grpc.append(start_grpc_server(self.ctx, listener.listen, listener=listener.name,
                                                        health=self.health, services=services))  # fmt: skip
            for listener in self.options.all_listeners():  # on the inter-broker gRPC listener's event loop
                if is_replication_listener(listener.name):
                    from broker.replication_listener import ReplicationListener

                    server, service = services[LISTENER]
                    link = ReplicationListener(self.ctx, listener.name, listener.listen, service, server.loop)
                    link.start()
                    self._links.append(link)
                elif is_data_listener(listener.name):  # the same loop: clients' appends wake followers' fetches
                    server, service = services[LISTENER]
                    data = DataListener(self.ctx, listener.name, listener.listen, service, server.loop)
                    data.start()
                    self._links.append(data)
            self.health.start()
            if self.metrics is not None:
                self.metrics.start(self)
            self.replicas.fetch_purgatory.start()
            self.replicas.produce_purgatory.start()
            self.coordinator.start()
            self.txn_coordinator.start()
            self.classic.start()
            self.loader.start()
            self.lifecycle.start()
            self.maintenance.start()
            self.cleaner.start()
            self.isr.start()
        except BaseException:
            try:
                self.stop(controlled=False)  # what started stops; what did not must not mask why start failed
            except Exception:
                logger.exception("broker %d: stopping after a failed start failed too", self.node_id)
            raise

    def wait_ready(self, timeout_s: float | None = None) -> bool:
        """Wait until the controller unfenced this broker (or it failed); True when ready."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while not self.lifecycle.unfenced.wait(0.1):
            if self.failure is not None or (deadline is not None and time.monotonic() >= deadline):
                return False
        refresh_quorum(self.ctx, 1.0)
        return True

    @property
    def failure(self) -> str | None:
        """Why the broker cannot go on (the metadata log does not replay), or None."""
        return self.loader.failure

    @property
    def broker_epoch(self) -> int:
        return self.lifecycle.broker_epoch

    @property
    def stopping(self) -> bool:
        return self._stopped

    def _healthy(self) -> bool:
        """The gRPC health service's SERVING: unfenced by the controller, not failed, not stopping."""
        return self.lifecycle.unfenced.is_set() and self.failure is None and not self._stopped

    def stop(self, *, controlled: bool = True) -> None:
        """Stop as the module docstring says; safe to call twice."""
        with self._stop_lock:
            if self._stopped:
                return
            self._stopped = True
        if self.health is not None:
            self.health.shutdown()  # NOT_SERVING from now on: orchestrators and clients move away
        config = self.options.config
        if controlled and config.get("controlled.shutdown.enable") and self.lifecycle.registered.is_set():
            timeout_s = int(config.get("controlled.shutdown.timeout.ms")) / 1000.0
            if self.lifecycle.controlled_shutdown(timeout_s):
                logger.info("broker %d: controlled shutdown done", self.node_id)
            elif not self.lifecycle.uncontrolled:
                logger.warning("broker %d: controlled shutdown not confirmed in %.1f s", self.node_id, timeout_s)
        for link in self._links:  # first: it runs on a gRPC listener's event loop
            link.stop()
        stopped = [server.stop(GRPC_GRACE_S) for server in self._grpc]  # no new requests
        for kafka in self._kafka:
            kafka.stop()
        self.replicas.fetch_purgatory.shutdown()  # waiting requests answer now
        self.replicas.produce_purgatory.shutdown()
        for event in stopped:
            event.wait(GRPC_GRACE_S + 1.0)
        self.lifecycle.stop()
        self.isr.stop()
        self.channel.close()  # cancels the metadata long poll
        self.loader.stop()
        self.fetchers.shutdown()
        self.maintenance.stop()
        self.cleaner.stop()
        self.classic.stop()
        self.txn_coordinator.stop()
        self.peers.close()
        self.coordinator.stop()
        self.replicas.shutdown()  # checkpoints high watermarks, flushes and closes every log
        if self.metrics is not None:
            self.metrics.stop()
        clean_shutdown.record(self.options.data_dir, self.lifecycle.broker_epoch)  # KIP-966: a clean shutdown
        logger.info("broker %d stopped", self.node_id)
