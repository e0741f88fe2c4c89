"""Calls from this broker to other brokers for transactions: markers to partition leaders, verifications to
transaction coordinators (Kafka's inter-broker ``TransactionMarkerChannelManager`` and
``AddPartitionsToTxnManager``).

One gRPC channel per peer address, made on first use and kept (closed by :meth:`BrokerPeers.close`); a
channel whose address changed in the metadata is replaced. Every call has a deadline.

Thread-safety: any thread; the channel map is under one lock.
"""

from __future__ import annotations

import threading
from typing import Any

from broker.metadata_cache import MetadataCache
from broker.replica_fetcher import inter_broker_address
from controller.security.settings import open_channel
from proto import broker_pb2_grpc

CALL_TIMEOUT_S = 10.0


class BrokerPeers:
    """gRPC stubs of the other brokers, by broker id (their inter-broker listener)."""

    def __init__(self, metadata: MetadataCache, credentials: Any = None) -> None:
        self._metadata = metadata
        self._credentials = credentials  # TLS when the inter-broker listener is (as the replica fetchers)
        self._lock = threading.Lock()
        self._channels: dict[int, tuple[str, Any, Any]] = {}  # broker id -> (address, channel, stub)
        self._closed = False

    def stub(self, broker_id: int) -> Any:
        """The stub of ``broker_id``; raises ConnectionError when it has no address (not registered)."""
        address = inter_broker_address(self._metadata.image, broker_id)
        if address is None:
            raise ConnectionError(f"broker {broker_id} has no address in the metadata")
        with self._lock:
            if self._closed:
                raise ConnectionError("the broker is stopping")
            found = self._channels.get(broker_id)
            if found is not None and found[0] == address:
                return found[2]
            if found is not None:
                found[1].close()
            channel = open_channel(address, self._credentials)
            stub = broker_pb2_grpc.BrokerStub(channel)  # type: ignore[no-untyped-call]
            self._channels[broker_id] = (address, channel, stub)
            return stub

    def close(self) -> None:
        with self._lock:
            self._closed = True
            for _, channel, _ in self._channels.values():
                channel.close()
            self._channels.clear()
