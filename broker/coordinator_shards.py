"""The lifecycle both coordinators share: the group coordinator (``broker/group/coordinator.py``, over
``__consumer_offsets``) and the transaction coordinator (``broker/txn/coordinator.py``, over
``__transaction_state``) each keep one shard per partition of their internal topic that this broker leads.

- ``on_partition`` (the metadata thread) creates a fresh shard when this broker becomes the partition's
  leader, or its leader epoch changes, and queues it for loading; it drops the shard when the broker is
  no longer leader or the partition goes.
- The coordinator's thread (``start``, ``stop``) loads the queued shards with the coordinator's ``load``
  (which replays the partition's records into the shard and sets ``loaded``, or sets ``failure``), and
  calls the coordinator's ``tick`` every :data:`TICK_S` seconds.
- ``lookup`` gives a request the shard of its key, or refuses it: NOT_COORDINATOR (not led here),
  COORDINATOR_NOT_AVAILABLE (no such topic yet, or the shard's load failed), COORDINATOR_LOAD_IN_PROGRESS;
  ``check_current`` refuses a shard that was dropped meanwhile.
- ``append`` writes a shard's records to its partition as leader of the shard's epoch, and
  ``replication_error`` says how the acks=all wait ended; a refused write answers with the coordinator's
  mapping of the error (``write_errors``).

Thread-safety: ``on_partition`` runs on the metadata thread; the shard map is replaced, never mutated, so
readers take no lock; everything else is for any thread.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from broker.appends import PendingAppend
from broker.errors import COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, UNKNOWN_SERVER_ERROR
from broker.metadata_cache import MetadataCache
from broker.replica_manager import ReplicaManager
from replication.partition import Partition
from replication.views import Role

logger = logging.getLogger(__name__)

TICK_S = 0.1


@dataclass(eq=False, kw_only=True)
class CoordinatorShard:
    """The lifecycle part of one shard; each coordinator's shard class adds its state."""

    partition: int
    leader_epoch: int
    lock: threading.Lock = field(default_factory=threading.Lock)  # the coordinator's state of the shard
    loaded: bool = False
    failure: str = ""  # why loading failed: the shard answers COORDINATOR_NOT_AVAILABLE


S = TypeVar("S", bound=CoordinatorShard)


class CoordinatorShards(Generic[S]):
    """See the module docstring. ``what`` names the shards' contents in the log ("groups", "transactions");
    ``error(code, message)`` is the coordinator's exception."""

    def __init__(
        self,
        *,
        broker_id: int,
        topic: str,
        what: str,
        replicas: ReplicaManager,
        metadata: MetadataCache,
        new_shard: Callable[[int, int], S],
        load: Callable[[S], None],
        tick: Callable[[], None],
        error: Callable[[str, str], Exception],
        write_errors: Mapping[str, str],
        thread_name: str,
    ) -> None:
        self.broker_id = broker_id
        self.topic = topic
        self._what = what
        self._replicas = replicas
        self._metadata = metadata
        self._new_shard = new_shard  # (partition, leader epoch) -> a fresh shard, not loaded
        self._load = load
        self._tick = tick
        self._error = error
        self._write_errors = write_errors
        self._lock = threading.Lock()
        self.shards: dict[int, S] = {}  # partition -> shard; replaced, never mutated
        self._loads: queue.Queue[S | None] = queue.Queue()
        self.stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name=thread_name, daemon=True)

    # --- lifecycle -----------------------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread (up to 5 s) and drop every shard."""
        self.stopping.set()
        self._loads.put(None)
        if self._thread.is_alive():
            self._thread.join(5.0)
        with self._lock:
            self.shards = {}

    def on_partition(self, topic: str, number: int, partition: Partition | None) -> None:
        """The metadata thread changed ``topic-number`` here (None: removed): load or drop its shard."""
        if topic != self.topic:
            return
        leading = partition is not None and partition.role is Role.LEADER
        with self._lock:
            current = self.shards.get(number)
            if leading and partition is not None:
                if current is not None and current.leader_epoch == partition.leader_epoch:
                    return
                shard = self._new_shard(number, partition.leader_epoch)
                self.shards = {**self.shards, number: shard}
                self._loads.put(shard)
                logger.info("broker %d: loading %s of %s-%d (leader epoch %d)", self.broker_id, self._what, topic,
                            number, partition.leader_epoch)  # fmt: skip
            elif current is not None:
                self.shards = {k: v for k, v in self.shards.items() if k != number}
                logger.info("broker %d: no longer coordinator of %s-%d; %s dropped", self.broker_id, topic, number,
                            self._what)  # fmt: skip

    def _run(self) -> None:
        while not self.stopping.is_set():
            try:
                shard = self._loads.get(timeout=TICK_S)
            except queue.Empty:
                shard = None
            try:
                if shard is not None:
                    self._load(shard)
                self._tick()
            except Exception:
                logger.exception("broker %d: %s coordinator thread error", self.broker_id, self.topic)

    # --- lookups -------------------------------------------------------------------------------------------

    def is_current(self, shard: S) -> bool:
        return self.shards.get(shard.partition) is shard

    def check_current(self, shard: S) -> None:
        if not self.is_current(shard):
            raise self._error(NOT_COORDINATOR, f"broker {self.broker_id} stopped coordinating "
                              f"{self.topic}-{shard.partition}")  # fmt: skip

    def num_partitions(self) -> int | None:
        t = self._metadata.image.topic(self.topic)
        return len(t.partitions) if t is not None and t.partitions else None

    def partition_of(self, key: str, partition_for: Callable[[str, int], int]) -> int:
        n = self.num_partitions()
        if n is None:
            raise self._error(COORDINATOR_NOT_AVAILABLE, f"{self.topic} does not exist yet")
        return partition_for(key, n)

    def lookup(self, number: int, not_here: str) -> S:
        """The loaded shard of partition ``number``; ``not_here`` completes "broker N is not the ..." (the
        coordinator of what) when this broker does not lead it."""
        shard = self.shards.get(number)
        if shard is None:
            raise self._error(NOT_COORDINATOR, f"broker {self.broker_id} is not the {not_here} "
                              f"({self.topic}-{number})")  # fmt: skip
        if shard.failure:
            raise self._error(COORDINATOR_NOT_AVAILABLE, shard.failure)
        if not shard.loaded:
            raise self._error(COORDINATOR_LOAD_IN_PROGRESS, f"{self.topic}-{number} is loading")
        return shard

    def partition_to_load(self, shard: S) -> Partition | None:
        """The shard's partition while the shard is current (what its load reads), else None."""
        partition = self._replicas.partition(self.topic, shard.partition)
        return partition if partition is not None and self.is_current(shard) else None

    # --- writes --------------------------------------------------------------------------------------------

    def leading_partition(self, shard: S) -> Partition:
        """The shard's partition, which this broker leads in the shard's epoch (else NOT_COORDINATOR)."""
        partition = self._replicas.partition(self.topic, shard.partition)
        if partition is None or not partition.is_leader or partition.leader_epoch != shard.leader_epoch:
            raise self._error(NOT_COORDINATOR, f"broker {self.broker_id} no longer leads "
                              f"{self.topic}-{shard.partition}")  # fmt: skip
        return partition

    def append(self, shard: S, batch: bytes, timeout_ms: float, *, wait: bool = True) -> PendingAppend:
        """Append ``batch`` (acks=all) to the shard's partition as leader of the shard's epoch."""
        partition = self.leading_partition(shard)
        pending = self._replicas.append_records(
            [(partition, batch)], -1, timeout_ms, leader_epoch=shard.leader_epoch, wait=wait
        )
        exc = pending.results[0].exception
        if exc is not None:
            code = str(getattr(exc, "code", ""))
            raise self._error(self._write_errors.get(code, UNKNOWN_SERVER_ERROR),
                              f"writing to {partition.key_str}: {exc}") from None  # fmt: skip
        return pending

    def replication_error(self, pending: PendingAppend) -> Exception | None:
        """Wait for ``pending`` (bounded by its timeout): None once the high watermark passed it, else the
        coordinator's error for why it did not."""
        result = pending.wait()[0]
        if not result.replication_error:
            return None
        why = f"the write to {result.key[0]}-{result.key[1]} was not replicated: {result.replication_error}"
        return self._error(self._write_errors.get(result.replication_error, COORDINATOR_NOT_AVAILABLE), why)
