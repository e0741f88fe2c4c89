"""Producer ids for InitProducerId: blocks allocated by the controller, handed out one at a time here.

Kafka's ``RPCProducerIdManager``: the active controller owns the id space (the ProducerIds metadata record
moves ``next_producer_id`` past each block it hands out, so no id is handed out twice, across controller
failovers and broker restarts); a broker asks for a block of :data:`metadata.records.PRODUCER_ID_BLOCK_SIZE`
ids with AllocateProducerIds (its id and current broker epoch) and serves ids from it until it is used up.
A broker that restarts asks for a new block: the rest of the old one is never used (ids are plentiful).

Thread-safety: one lock; a request thread that finds the block used up asks the controller under the lock
(the others wait for that one answer rather than each asking for a block).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from broker.errors import UNKNOWN_SERVER_ERROR, BrokerError
from proto import controller_pb2

Allocate = Callable[[], tuple[int, int]]
"""Asks the controller for a block; returns ``(first id, count)`` or raises :class:`BrokerError`."""


class ProducerIdManager:
    """Serves producer ids from the current block; asks ``allocate`` for the next block when it is used up."""

    def __init__(self, allocate: Allocate) -> None:
        self._allocate = allocate
        self._lock = threading.Lock()
        self._next = 0
        self._end = 0  # exclusive; next == end: no block

    def next_producer_id(self) -> int:
        with self._lock:
            if self._next >= self._end:
                start, count = self._allocate()
                if start < 0 or count <= 0:
                    raise BrokerError(
                        UNKNOWN_SERVER_ERROR, f"the controller allocated an empty block ({start}, {count})"
                    )
                self._next, self._end = start, start + count
            pid = self._next
            self._next += 1
            return pid


def controller_allocator(
    call: Callable[[str, controller_pb2.AllocateProducerIdsRequest, float], controller_pb2.AllocateProducerIdsResponse],
    broker_id: int,
    broker_epoch: Callable[[], int],
    timeout_s: float,
) -> Allocate:
    """An :data:`Allocate` that sends AllocateProducerIds through ``call`` (the broker's controller channel)."""

    def allocate() -> tuple[int, int]:
        epoch = broker_epoch()
        if epoch < 0:
            raise BrokerError("COORDINATOR_LOAD_IN_PROGRESS", f"broker {broker_id} is not registered yet")
        request = controller_pb2.AllocateProducerIdsRequest(broker_id=broker_id, broker_epoch=epoch)
        response = call("AllocateProducerIds", request, timeout_s)
        if response.error.code:
            raise BrokerError(response.error.code, f"AllocateProducerIds: {response.error.message}")
        return response.producer_id_start, response.producer_id_len

    return allocate
