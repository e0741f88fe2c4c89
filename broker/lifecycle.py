"""Registration and heartbeats: the broker's standing with the active controller (Kafka's
``BrokerLifecycleManager``), on one thread.

1. Register with a fresh incarnation id (uuid4), the advertised endpoints (one per listener; a bare
   ``host:port`` is the ``PLAINTEXT`` listener's) and, after a clean shutdown, the epoch it shut down with
   (KIP-966, ``broker.clean_shutdown``); the controller answers with
   the broker epoch (the offset of the RegisterBroker record). Retried with backoff until it succeeds;
   NOT_CONTROLLER hints are followed by the :class:`~broker.controller_channel.ControllerChannel`.
2. Heartbeat every ``broker.heartbeat.interval.ms`` with the offset of the last applied metadata record.
   The controller unfences the broker once that offset reaches its epoch (caught up); the metadata thread
   wakes this one as soon as it gets there, so unfencing does not wait a whole interval. STALE_BROKER_EPOCH
   (the registration was replaced or removed) registers again with the same incarnation.
3. When the log dir goes offline (``log_dir_failed``), every heartbeat asks to be fenced (``want_fence``).
4. Controlled shutdown: heartbeats with ``want_shut_down`` (every 100 ms) until the controller answers
   ``should_shut_down`` (it moved this broker's leaderships away first) or the bound passes; when no
   controller answers two heartbeats in a row (1 s each), the broker shuts down uncontrolled.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Mapping

from broker.controller_channel import ChannelClosedError, ControllerChannel, ControllerUnavailableError
from broker.metadata_cache import MetadataCache
from proto import controller_pb2 as pb

logger = logging.getLogger(__name__)

LISTENER = "PLAINTEXT"  # the inter-broker listener (Kafka's default inter.broker.listener.name)
REGISTER_TIMEOUT_S = 5.0
SHUTDOWN_HEARTBEAT_S = 0.1
SHUTDOWN_HEARTBEAT_TIMEOUT_S = 1.0
SHUTDOWN_MAX_FAILURES = 2  # consecutive heartbeats no controller answered: shut down uncontrolled
STALE_BROKER_EPOCH = "STALE_BROKER_EPOCH"


class BrokerLifecycle:
    """Registration, heartbeats and controlled shutdown; see the module docstring.

    Thread-safety: its own thread sends every RPC and writes the state; ``wake``, ``on_metadata``,
    ``controlled_shutdown``, ``stop`` and the read-only state (``broker_epoch``, the events) are for any
    thread.
    """

    def __init__(
        self,
        broker_id: int,
        channel: ControllerChannel,
        cache: MetadataCache,
        advertised: str | Mapping[str, str],
        *,
        rack: str = "",
        heartbeat_interval_ms: int = 500,
        on_unfenced: Callable[[int], None] | None = None,
        previous_broker_epoch: int | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.incarnation_id = str(uuid.uuid4())
        self._channel = channel
        self._cache = cache
        self._endpoints = {LISTENER: advertised} if isinstance(advertised, str) else dict(advertised)
        self._rack = rack
        self._interval_s = heartbeat_interval_ms / 1000.0
        self._on_unfenced = on_unfenced
        self.previous_broker_epoch = previous_broker_epoch  # KIP-966: None after an unclean shutdown
        self.broker_epoch = -1
        self.registered = threading.Event()
        self.unfenced = threading.Event()
        self.shut_down_allowed = threading.Event()
        self._want_shut_down = False
        self._want_fence = False  # the log dir is offline: stay fenced, lead nothing
        self.uncontrolled = False  # the controlled shutdown gave up: no controller answered
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._failures = 0
        self._thread = threading.Thread(target=self._run, name=f"broker-{broker_id}-heartbeat", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(REGISTER_TIMEOUT_S + 1.0)

    def wake(self) -> None:
        """Send the next heartbeat now."""
        self._wake.set()

    def on_metadata(self, image_offset: int) -> None:
        """The metadata thread published an image: heartbeat at once if that catches this broker up."""
        if self.registered.is_set() and not self.unfenced.is_set() and image_offset >= self.broker_epoch:
            self.wake()

    def log_dir_failed(self) -> None:
        """The log dir went offline: heartbeat at once, and from now on, with ``want_fence`` (the controller
        fences this broker and moves its leaderships and ISR seats to others; Kafka's brokers report offline
        log dirs in their heartbeats)."""
        self._want_fence = True
        self.wake()

    def controlled_shutdown(self, timeout_s: float) -> bool:
        """Ask to shut down and wait (bounded) until the controller allows it; True when it did (False also
        when no controller answered: ``uncontrolled`` says so)."""
        if not self.registered.is_set():
            return False
        self._failures = 0
        self._want_shut_down = True
        self.wake()
        return self.shut_down_allowed.wait(timeout_s) and not self.uncontrolled

    # --- the thread -------------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                if not self.registered.is_set():
                    self._register()
                else:
                    self._heartbeat()
            except ChannelClosedError:
                return
            except ControllerUnavailableError as exc:
                self._failures += 1
                logger.info("broker %d: %s", self.broker_id, exc)
                if self._want_shut_down and self._failures >= SHUTDOWN_MAX_FAILURES:
                    logger.warning("broker %d: no controller answers; shutting down uncontrolled", self.broker_id)
                    self.uncontrolled = True
                    self.shut_down_allowed.set()
            except Exception:
                logger.exception("broker %d: heartbeat thread error", self.broker_id)
            interval = SHUTDOWN_HEARTBEAT_S if self._want_shut_down else self._interval_s
            if not self.registered.is_set():
                interval = min(interval, 0.5)
            self._wake.wait(interval)
            self._wake.clear()

    def _register(self) -> None:
        request = pb.RegisterBrokerRequest(
            broker_id=self.broker_id,
            incarnation_id=self.incarnation_id,
            endpoints=self._endpoints,
            rack=self._rack,
        )
        if self.previous_broker_epoch is not None:
            request.previous_broker_epoch = self.previous_broker_epoch
        response = self._channel.call("RegisterBroker", request, REGISTER_TIMEOUT_S)
        if response.error.code:
            logger.warning("broker %d: RegisterBroker: %s %s", self.broker_id, response.error.code,
                           response.error.message)  # fmt: skip
            return
        self.broker_epoch = response.broker_epoch
        self.registered.set()
        self._failures = 0
        logger.info("broker %d: registered with epoch %d (incarnation %s)", self.broker_id, self.broker_epoch,
                    self.incarnation_id)  # fmt: skip
        self._wake.set()  # the first heartbeat goes at once

    def _heartbeat(self) -> None:
        request = pb.BrokerHeartbeatRequest(
            broker_id=self.broker_id,
            broker_epoch=self.broker_epoch,
            current_metadata_offset=self._cache.image.offset,
            want_fence=self._want_fence,
            want_shut_down=self._want_shut_down,
        )
        timeout_s = SHUTDOWN_HEARTBEAT_TIMEOUT_S if self._want_shut_down else max(1.0, self._interval_s)
        response = self._channel.call("BrokerHeartbeat", request, timeout_s)
        self._failures = 0
        if response.error.code == STALE_BROKER_EPOCH:
            logger.warning("broker %d: %s; registering again", self.broker_id, response.error.message)
            self.registered.clear()
            self.unfenced.clear()
            return
        if response.error.code:
            logger.info("broker %d: BrokerHeartbeat: %s %s", self.broker_id, response.error.code,
                        response.error.message)  # fmt: skip
            return
        if response.should_shut_down:
            self.shut_down_allowed.set()
        if response.is_fenced:
            if self.unfenced.is_set():
                level = logging.INFO if self._want_shut_down else logging.WARNING
                logger.log(level, "broker %d: fenced by the controller", self.broker_id)
            self.unfenced.clear()
        elif not self.unfenced.is_set():
            self.unfenced.set()
            logger.info("broker %d: unfenced (epoch %d)", self.broker_id, self.broker_epoch)
            if self._on_unfenced is not None:
                self._on_unfenced(self.broker_epoch)
