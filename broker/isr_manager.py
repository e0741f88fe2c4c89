"""The leader's ISR changes: AlterPartition to the active controller (Kafka's ``AlterPartitionManager``).

Every ``ISR_CHECK_INTERVAL_MS`` (and at most half ``replica.lag.time.max.ms``) each partition this broker leads
is asked for the change its rules call for (``Partition.isr_change``: shrink a follower that lagged longer
than ``replica.lag.time.max.ms``, expand with one that caught up); the request goes to the active controller
and its answer is the truth (ISR6): accepted, the committed ISR and partition epoch become the controller's;
refused as ineligible or invalid, the change is dropped; refused for a stale view or unanswered, it stays
pending (the high watermark keeps counting the larger ISR) and is sent again until the metadata settles
it. Brokers the metadata shows fenced, in controlled shutdown or in another life are not proposed (ISR8).

After every answer (accepted, refused or none) the partition's delayed operations are checked: a shrink
moves the high watermark, and so does the end of a pending expansion (ISR4: while it was pending, the
high watermark waited for the joining replica too). A refused expansion that was the only thing holding
the high watermark back otherwise left an acks=all produce waiting for its timeout although its records
were in every ISR member (the controlled-shutdown stall: the leader proposed the shutting-down broker,
the controller refused it, and nothing woke the produce).

Thread-safety: one thread of its own; partitions are looked up in the replica manager's published map.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from broker.config import BrokerConfig
from broker.controller_channel import ChannelClosedError, ControllerChannel
from broker.errors import BrokerError
from broker.metadata_cache import MetadataCache
from broker.replica_manager import ReplicaManager
from proto import controller_pb2 as cpb
from replication.isr import AlterPartitionRequest
from replication.partition import Partition

logger = logging.getLogger(__name__)

ISR_CHECK_INTERVAL_MS = 250
# Refusals that settle the proposal (ISR6); any other (a stale view: INVALID_UPDATE_VERSION,
# FENCED_LEADER_EPOCH, ...) leaves it pending until the metadata says what happened.
SETTLING_ERRORS = frozenset({"INELIGIBLE_REPLICA", "INVALID_REQUEST"})
ALTER_TIMEOUT_S = 5.0


class IsrManager:
    """Proposes and applies the ISR changes of the partitions this broker leads (see the module docstring)."""

    def __init__(
        self, broker_id: int, replicas: ReplicaManager, channel: ControllerChannel, config: BrokerConfig,
        broker_epoch: Callable[[], int], metadata: MetadataCache | None = None,
    ) -> None:  # fmt: skip
        self.broker_id = broker_id
        self._replicas = replicas
        self._channel = channel
        self._broker_epoch = broker_epoch
        self._metadata = metadata  # None: no metadata (unit tests), every caught-up follower may join
        self.lag_max_ms = float(config.get("replica.lag.time.max.ms"))
        self.interval_s = min(ISR_CHECK_INTERVAL_MS, self.lag_max_ms / 2) / 1000.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"broker-{broker_id}-isr", daemon=True)
        # committed ISR changes that removed / added replicas (Kafka's IsrShrinksPerSec / IsrExpandsPerSec);
        # written by the ISR thread only, read by the metrics at scrape time
        self.isr_shrinks = 0
        self.isr_expands = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread (safe before ``start``: a broker whose start failed stops everything it has)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=ALTER_TIMEOUT_S + 1.0)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.run_once()
            except ChannelClosedError:
                return
            except Exception:
                logger.exception("broker %d: ISR round failed", self.broker_id)

    def run_once(self) -> int:
        """One pass over the led partitions; returns how many ISR changes were committed."""
        committed = 0
        may_join = self._may_join_isr()
        for key, partition in self._replicas.partitions().items():
            request = partition.isr_change(self.lag_max_ms, may_join)
            if request is None:
                continue
            try:
                committed += self._send(partition, request)
            finally:
                self._replicas.complete_delayed(key)  # the high watermark may have moved (module docstring)
        return committed

    def _may_join_isr(self) -> Callable[[int, int], bool] | None:
        """ISR8, from the current metadata image."""
        if self._metadata is None:
            return None
        image = self._metadata.image

        def may_join(broker_id: int, broker_epoch: int) -> bool:
            broker = image.broker(broker_id)
            if broker is None or broker.fenced or broker.in_controlled_shutdown:
                return False
            return broker_epoch < 0 or broker.broker_epoch == broker_epoch

        return may_join

    def _send(self, partition: Partition, request: AlterPartitionRequest) -> bool:
        before = set(partition.isr)  # read now: the metadata thread may apply the change before the answer comes
        message = cpb.AlterPartitionRequest(
            broker_id=self.broker_id, broker_epoch=self._broker_epoch(), topic_id=partition.topic_id,
            partition=partition.partition, leader_epoch=request.leader_epoch,
            partition_epoch=request.partition_epoch, new_isr=list(request.new_isr),
            joining=[cpb.JoiningReplica(broker_id=b, broker_epoch=e) for b, e in request.joining_broker_epochs],
        )  # fmt: skip
        try:
            response = self._channel.call("AlterPartition", message, ALTER_TIMEOUT_S)
        except BrokerError as e:  # unanswered: it may have been applied (ISR6), stays pending
            logger.info("broker %d: AlterPartition for %s unanswered: %s", self.broker_id, partition.key_str, e)
            partition.on_isr_answer(request, False, (), -1, settled=False)
            if isinstance(e, ChannelClosedError):
                raise
            return False
        if response.error.code:
            logger.info("broker %d: AlterPartition for %s refused: %s %s", self.broker_id, partition.key_str,
                        response.error.code, response.error.message)  # fmt: skip
            settled = response.error.code in SETTLING_ERRORS
            partition.on_isr_answer(request, False, (), -1, settled=settled)
            return False
        after = set(response.isr)
        logger.info("broker %d: %s ISR %s -> %s (partition epoch %d)", self.broker_id, partition.key_str,
                    sorted(before), list(response.isr), response.partition_epoch)  # fmt: skip
        self.isr_shrinks += bool(before - after)
        self.isr_expands += bool(after - before)
        return partition.on_isr_answer(request, True, tuple(response.isr), response.partition_epoch)
