"""The broker's partitions and what the metadata asks of them (Kafka's ``ReplicaManager``, data-plane half).

The partition map is copy-on-write: the metadata thread builds a new dict and publishes it with one
assignment, so request threads look partitions up without a lock and never see a half-applied change.

Applying a metadata change (:meth:`ReplicaManager.apply_changes`), in Kafka's order: delete the replicas
the change removes, then become leader of ``leaders`` and follower of ``followers``, then apply config
changes. The metadata thread publishes the new image only after this returns, so a partition that shows
up with this broker as leader in a Metadata answer already accepts writes here; then every partition
touched completes the delayed operations watching it (a leadership change answers waiting fetches and
produces, which then answer from the new image).

Appending (:meth:`ReplicaManager.append_records`, Kafka's ``appendRecords``): the one entry point for the
produce handler and the group coordinator. Each partition's batches are appended as leader in the order
given (a failure is that partition's and does not stop the others); the fetches waiting on it are woken;
for acks=all a :class:`~broker.delayed_produce.DelayedProduce` is parked in the produce purgatory until the
ISR has every appended batch, or its timeout. The caller waits on the returned :class:`PendingAppend`
(outside its own locks: the coordinator appends under a shard lock and waits after releasing it).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from broker.appends import PendingAppend
from broker.config import BrokerConfig, effective_log_config
from broker.log_manager import LogManager, TopicPartition
from broker.purgatory import DelayedOperation, Purgatory
from common.clock import Clock
from metadata.image import ConfigResource, LocalReplicaChanges, MetadataImage, PartitionRegistration
from metadata.records import ConfigResourceType
from replication.partition import Partition, Verifier
from replication.views import Role

logger = logging.getLogger(__name__)



@dataclass(frozen=True, slots=True)
class ConfigChanges:
    """Which partitions' configs may have changed: every one (a broker-level change) or these topics'."""

    all_topics: bool = False
    topics: frozenset[str] = frozenset()

    @classmethod
    def of(cls, resources: Iterable[ConfigResource], broker_id: int) -> ConfigChanges:
        topics, everything = set(), False
        for res in resources:
            if res.resource_type is ConfigResourceType.TOPIC:
                topics.add(res.resource_name)
            elif res.resource_type is ConfigResourceType.CLUSTER or res.resource_name == str(broker_id):
                everything = True
        return cls(everything, frozenset(topics))

    def covers(self, topic: str) -> bool:
        return self.all_topics or topic in self.topics


class ReplicaManager:
    """Every partition replica on this broker, and the purgatories that wait on them.

    Thread-safety: ``partition``, ``partitions`` and the purgatories are for any thread (lock-free reads
    of the published map). ``startup``, ``apply_changes``, ``quarantine_strays`` and ``shutdown`` are the
    metadata thread's (or the starting/stopping thread's), one at a time.
    """

    def __init__(
        self,
        broker_id: int,
        config: BrokerConfig,
        log_manager: LogManager,
        clock: Clock,
        *,
        fetch_purgatory: Purgatory[DelayedOperation] | None = None,
        produce_purgatory: Purgatory[DelayedOperation] | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.config = config
        self.log_manager = log_manager
        self.clock = clock
        max_ops = int(config.get("purgatory.max.operations"))
        self.fetch_purgatory = fetch_purgatory or Purgatory("fetch", clock, max_ops)
        self.produce_purgatory = produce_purgatory or Purgatory("produce", clock, max_ops)
        self._partitions: Mapping[TopicPartition, Partition] = {}
        self._offline_reason: str | None = None  # set once the log dir failed (take_log_dir_offline)
        # A batch held for its turn (S8) keeps its request's worker: at most a quarter of them at once.
        self._held_batch_slots = threading.BoundedSemaphore(max(1, int(config.get("num.io.threads")) // 4))
        # called by the metadata thread after a role change or removal (None) of a partition here (the group
        # coordinator follows __consumer_offsets); must not block
        self.role_listeners: list[Callable[[str, int, Partition | None], None]] = []
        self._saved_high_watermarks: dict[TopicPartition, int] = {}

    # --- lookups (any thread) ----------------------------------------------------------------------

    def partition(self, topic: str, partition: int) -> Partition | None:
        return self._partitions.get((topic, partition))

    def partitions(self) -> Mapping[TopicPartition, Partition]:
        """The current map (a snapshot: it never changes once published)."""
        return self._partitions

    def complete_delayed(self, *keys: TopicPartition) -> None:
        """Something changed under ``keys``: waiting fetches and produces try again."""
        for key in keys:
            self.fetch_purgatory.check_and_complete(key)
            self.produce_purgatory.check_and_complete(key)

    # --- appends (request threads) -----------------------------------------------------------------

    def append_records(
        self, entries: Sequence[tuple[Partition, bytes | memoryview]], acks: int, timeout_ms: float,
        *, leader_epoch: int | None = None, wait: bool = True, hold: bool = True, verify: Verifier | None = None,
    ) -> PendingAppend:  # fmt: skip
        """Append each ``(partition, records)`` as leader, in order; for ``acks`` -1 park a DelayedProduce
        that waits for the ISR. See the module docstring. ``timeout_ms`` is one deadline for the whole call:
        batches held for their turn (S8) wait within it, and the DelayedProduce gets what is left of it.

        ``leader_epoch``: the epoch the caller checked it leads in (the acks=all wait fails with
        NOT_LEADER_OR_FOLLOWER outside it); by default each partition's epoch just before its append.
        ``wait`` False: nobody will wait (acks=-1 still refuses an ISR below ``min.insync.replicas``), so no
        DelayedProduce is parked. ``hold`` False: a thread that must not wait (the gRPC event loop) stops at
        the first batch that would be held for its turn; :meth:`PendingAppend.resume` goes on from it later,
        on a thread that may.
        """
        deadline_ms = self.clock.monotonic_ms() + timeout_ms  # one deadline: held batches, then the ISR wait
        pending = PendingAppend(self, entries, acks, deadline_ms, leader_epoch, wait, verify)
        pending.run(hold)
        return pending

    # --- start and stop ----------------------------------------------------------------------------

    # --- the log dir (Kafka's LogDirFailureChannel) ------------------------------------------------------

    @property
    def offline_reason(self) -> str | None:
        """Why this broker's log dir is offline (None: online). Any thread."""
        return self._offline_reason

    def take_log_dir_offline(self, reason: str) -> bool:
        """The file system refused an operation on the log dir (an ``OSError`` in the metadata thread): stop
        serving every partition in it, instead of stopping the broker (Kafka's ``LogDirFailureChannel``; with
        one log dir per broker, every partition). The logs' files are closed without flushing (the disk said
        no), the partitions leave the map, waiting requests are answered, and from now on requests for them
        answer KAFKA_STORAGE_ERROR and metadata changes no longer touch the disk. The broker asks to be fenced
        (``broker.lifecycle``), so the controller moves its leaderships away. True the first time."""
        if self._offline_reason is not None:
            return False
        self._offline_reason = reason
        logger.error("broker %d: log dir %s is offline: %s", self.broker_id, self.log_manager.data_dir, reason)
        self.complete_delayed(*self._take_all(Partition.close_handlers, "closing the files of"))
        return True

    def startup(self) -> None:
        """Open every partition directory (role NONE until the metadata speaks about it)."""
        self.log_manager.prepare()
        self._saved_high_watermarks = self.log_manager.read_high_watermarks()
        logs = self.log_manager.load(self.config.log_config())
        partitions = {}
        for (topic, number), log in logs.items():
            topic_id = self.log_manager.topic_id(topic, number) or ""
            hw = self._saved_high_watermarks.get((topic, number), 0)
            partitions[(topic, number)] = Partition(
                topic_id, topic, number, log, self.broker_id, self.clock, high_watermark=hw, **self._producer_options()
            )
        self._partitions = partitions
        logger.info("broker %d: opened %d partition logs", self.broker_id, len(partitions))

    def _producer_options(self) -> dict[str, Any]:
        """The settings every Partition gets (``producer.id.*``, ``eligible.leader.replicas.enable``), and the
        broker's shared bound on batches held for their turn (S8)."""
        get = self.config.get
        return {
            "producer_id_expiration_ms": int(get("producer.id.expiration.ms")),
            "producer_id_expiration_check_interval_ms": int(get("producer.id.expiration.check.interval.ms")),
            "producer_id_max": int(get("producer.id.max.per.partition")),
            "held_batch_slots": self._held_batch_slots,
            "eligible_leader_replicas": bool(get("eligible.leader.replicas.enable")),
        }

    def shutdown(self) -> None:
        """Answer every waiting request, checkpoint high watermarks, flush and close every log."""
        self.fetch_purgatory.shutdown()
        self.produce_purgatory.shutdown()
        self.checkpoint_high_watermarks()
        self._take_all(Partition.close, "closing")

    def _take_all(self, close: Callable[[Partition], None], what: str) -> list[TopicPartition]:
        """Empty the published map and ``close`` every partition that was in it (an error is logged: one
        partition does not keep the others open); returns their keys."""
        partitions, self._partitions = self._partitions, {}
        for partition in partitions.values():
            try:
                close(partition)
            except Exception:
                logger.exception("broker %d: %s %s failed", self.broker_id, what, partition)
        return list(partitions)

    def high_watermarks(self) -> dict[TopicPartition, int]:
        return {key: p.high_watermark for key, p in self._partitions.items()}

    def checkpoint_high_watermarks(self) -> None:
        if self._offline_reason is None:
            self.log_manager.write_high_watermarks(self.high_watermarks())

    # --- metadata changes (the metadata thread) ----------------------------------------------------

    def apply_changes(
        self, image: MetadataImage, changes: LocalReplicaChanges, configs: ConfigChanges
    ) -> set[TopicPartition]:
        """Follow one metadata change; ``image`` is the image after it (see the module docstring).

        Returns the partitions it touched: once the image is published, the caller completes the delayed
        operations watching them (so that they answer from the new image).
        """
        touched: set[TopicPartition] = set()
        if self._offline_reason is not None:
            return touched  # the log dir is offline: nothing here to follow the metadata with
        for tp in sorted(changes.deletes):
            if self._remove(tp.topic_name, tp.partition, tp.topic_id):
                touched.add((tp.topic_name, tp.partition))
        for tp, reg in sorted(changes.leaders.items()):
            self._become(image, tp.topic_id, tp.topic_name, tp.partition, reg)
            touched.add((tp.topic_name, tp.partition))
        for tp, reg in sorted(changes.followers.items()):
            self._become(image, tp.topic_id, tp.topic_name, tp.partition, reg)
            touched.add((tp.topic_name, tp.partition))
        for topic, number in sorted(touched):
            for listener in self.role_listeners:
                listener(topic, number, self._partitions.get((topic, number)))
        if configs.all_topics or configs.topics:
            for key, partition in self._partitions.items():
                if configs.covers(partition.topic) and partition.role is not Role.NONE:
                    partition.update_config(effective_log_config(image, partition.topic, self.broker_id, self.config))
                    touched.add(key)
        return touched

    def _become(self, image: MetadataImage, topic_id: str, topic: str, number: int, reg: PartitionRegistration) -> None:
        key = (topic, number)
        partition = self._partitions.get(key)
        if partition is not None and partition.topic_id and partition.topic_id != topic_id:
            logger.warning("broker %d: %s-%d on disk belongs to topic id %s, not %s", self.broker_id, topic,
                           number, partition.topic_id, topic_id)  # fmt: skip
            self._unpublish(key)
            self.log_manager.quarantine(partition.log)
            partition = None
        config = effective_log_config(image, topic, self.broker_id, self.config)
        if partition is None:
            log = self.log_manager.open_log(topic, number, topic_id, config)
            hw = self._saved_high_watermarks.pop(key, 0)
            partition = Partition(
                topic_id, topic, number, log, self.broker_id, self.clock, high_watermark=hw, **self._producer_options()
            )
            self._publish(key, partition)
        else:
            if not partition.topic_id:
                self.log_manager.write_topic_id(topic, number, topic_id)
                partition.topic_id = topic_id
            partition.update_config(config)
        changed = partition.make_leader(reg) if reg.leader == self.broker_id else partition.make_follower(reg)
        if changed:
            logger.info("broker %d: %s-%d is %s (leader %d, leader epoch %d, isr %s)", self.broker_id, topic, number,
                        partition.role, reg.leader, reg.leader_epoch, list(reg.isr))  # fmt: skip

    def _remove(self, topic: str, number: int, topic_id: str) -> bool:
        key = (topic, number)
        partition = self._partitions.get(key)
        if partition is None or (partition.topic_id and partition.topic_id != topic_id):
            return False
        self._unpublish(key)
        partition.close()
        self.log_manager.delete_log(partition.log)
        self._saved_high_watermarks.pop(key, None)
        logger.info("broker %d: deleted %s-%d", self.broker_id, topic, number)
        return True

    def quarantine_strays(self) -> list[TopicPartition]:
        """After the first full metadata catch-up: logs the metadata never assigned here are set aside."""
        strays = sorted(key for key, p in self._partitions.items() if p.role is Role.NONE)
        for key in strays:
            partition = self._partitions[key]
            self._unpublish(key)
            self.log_manager.quarantine(partition.log)
        return strays

    def _publish(self, key: TopicPartition, partition: Partition) -> None:
        self._partitions = {**self._partitions, key: partition}

    def _unpublish(self, key: TopicPartition) -> None:
        self._partitions = {k: p for k, p in self._partitions.items() if k != key}
