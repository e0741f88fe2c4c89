"""The metadata thread: replicate ``__cluster_metadata`` from the controllers and follow it.

Loop (Kafka's ``MetadataLoader`` + ``BrokerMetadataPublisher``, one thread):

1. FetchMetadata from ``image.offset + 1`` (long poll, any controller).
2. A snapshot in the answer replaces the image (the broker was too far behind); the records then replay
   through a :class:`MetadataDelta` into the next image.
3. The replica manager follows the change (``delta.local_changes(broker_id)``, or the difference of two
   images after a snapshot), THEN the image is published (readers never see an image whose partitions
   this broker has not taken up yet), THEN requests waiting on the partitions touched are completed.
4. The first time the image reaches the controller's end offset, logs that no partition assigned here
   claims are set aside (strays), and ``caught_up`` is set.

Until then (a broker starting, or restarting, replays the log from its start in answers of
``FETCH_MAX_RECORDS``), the answers are replayed into an image that is neither followed nor published: once
it reaches the end offset, the replica manager follows the difference between the image it started from and
that one, as after a snapshot, and publishes it (Kafka's ``MetadataLoader`` publishes nothing while it still
needs to catch up). Following each answer instead made a restarting broker take up, for a moment, every
leadership the log once gave it (leader in epoch 25, then 30, of a partition whose leader epoch is 33). In a
15-minute chaos run with every fault (``python -m chaos run --duration 900 --seed 1128 --faults <all>
--txn-producers 2 --rc-readers 1``) followers then truncated below their high watermark 148 times (up to
thousands of records each, fetched again from the leader); with the catch-up held, the same run: none.

A record that does not replay (:class:`~metadata.errors.MetadataError`) means a corrupt log or a bug:
the thread stops and records ``failure``; the broker process exits non-zero (the module docstring of
``metadata.image.delta`` says why it must not skip it). A file system that refuses what a change needs
(an ``OSError``: no space, a name too long, a file where a directory must go) is not a reason to stop: the
log dir goes offline (:meth:`~broker.replica_manager.ReplicaManager.take_log_dir_offline`), the broker asks
the controller to fence it, and the thread goes on publishing images (Kafka's ``LogDirFailureChannel``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from broker.controller_channel import ChannelClosedError, ControllerChannel, ControllerUnavailableError
from broker.metadata_cache import MetadataCache
from broker.replica_manager import ConfigChanges, ReplicaManager
from log.errors import StorageError
from metadata.errors import MetadataError
from metadata.image import (
    ConfigResource,
    LocalReplicaChanges,
    MetadataDelta,
    MetadataImage,
    PartitionRegistration,
    TopicIdPartition,
    frozen_map,
)
from metadata.record_codec import decode_record
from metadata.snapshot import decode_snapshot
from proto import controller_pb2 as pb

logger = logging.getLogger(__name__)

FETCH_MAX_WAIT_MS = 1000
FETCH_MAX_RECORDS = 2000
_RETRY_BACKOFF_S = 0.2


def image_changes(old: MetadataImage, new: MetadataImage, broker_id: int) -> LocalReplicaChanges:
    """What ``broker_id`` must do to go from ``old`` to ``new`` (after a snapshot, where no delta exists).

    Deletes: partitions with a replica here in ``old`` whose topic id is gone or that no longer have one
    here. Leaders / followers: every partition with a replica here whose registration changed.
    """
    deletes: set[TopicIdPartition] = set()
    leaders: dict[TopicIdPartition, PartitionRegistration] = {}
    followers: dict[TopicIdPartition, PartitionRegistration] = {}
    for tp, reg in old.all_partitions():
        after = new.partition(tp.topic_id, tp.partition)
        if broker_id in reg.replicas and (after is None or broker_id not in after.replicas):
            deletes.add(tp)
    for tp, reg in new.all_partitions():
        if broker_id not in reg.replicas or old.partition(tp.topic_id, tp.partition) == reg:
            continue
        (leaders if reg.leader == broker_id else followers)[tp] = reg
    return LocalReplicaChanges(frozenset(deletes), frozen_map(leaders), frozen_map(followers))


def config_changes(old: MetadataImage, new: MetadataImage) -> set[ConfigResource]:
    """Resources whose configs differ between two images."""
    return {res for res in old.configs.keys() | new.configs.keys() if old.configs.get(res) != new.configs.get(res)}


class MetadataLoader:
    """Follows the metadata log; see the module docstring.

    Thread-safety: its own thread is the only one that replays, applies changes and publishes; ``start``,
    ``stop`` and the read-only properties are for any thread.
    """

    def __init__(
        self,
        broker_id: int,
        channel: ControllerChannel,
        cache: MetadataCache,
        replicas: ReplicaManager,
        *,
        on_published: Callable[[MetadataImage], None] | None = None,
    ) -> None:
        self.broker_id = broker_id
        self._channel = channel
        self._cache = cache
        self._replicas = replicas
        self._on_published = on_published
        self.on_log_dir_failure: Callable[[], None] | None = None  # after the log dir went offline
        self._stopping = threading.Event()
        self.caught_up = threading.Event()
        self.failure: str | None = None
        self.end_offset = -1  # the controller's end offset, as last reported
        # catching up (step 4): the image the replay has reached (the published one stays where it started)
        self._catching: MetadataImage | None = None
        self._thread = threading.Thread(target=self._run, name=f"broker-{broker_id}-metadata", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(FETCH_MAX_WAIT_MS / 1000 + 5.0)

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                self.poll_once()
            except (ChannelClosedError, ControllerUnavailableError) as exc:
                if not self._stopping.is_set():
                    logger.info("broker %d: metadata fetch failed: %s", self.broker_id, exc)
                    self._stopping.wait(_RETRY_BACKOFF_S)
            except MetadataError as exc:
                self.failure = f"the metadata log does not replay: {exc}"
                logger.critical("broker %d: %s", self.broker_id, self.failure)
                return
            except Exception as exc:  # a bug: stop loudly rather than serve from a wrong image
                self.failure = f"unexpected error in the metadata thread: {exc!r}"
                logger.exception("broker %d: metadata thread failed", self.broker_id)
                return

    def poll_once(self, timeout_s: float | None = None) -> bool:
        """One FetchMetadata round; True when it applied something."""
        image = self._cache.image if self._catching is None else self._catching
        request = pb.FetchMetadataRequest(
            from_offset=image.offset + 1,
            max_wait_ms=FETCH_MAX_WAIT_MS,  # the controller waits only when it has nothing to send
            max_records=FETCH_MAX_RECORDS,
            broker_id=self.broker_id,
        )
        wait_s = timeout_s if timeout_s is not None else FETCH_MAX_WAIT_MS / 1000 + 5.0
        response = self._channel.call("FetchMetadata", request, wait_s, active=False)
        if response.error.code:
            logger.info("broker %d: FetchMetadata: %s %s", self.broker_id, response.error.code, response.error.message)
            self._stopping.wait(_RETRY_BACKOFF_S)
            return False
        self.end_offset = response.end_offset
        applied = self.apply(response) if self.caught_up.is_set() else self._catch_up(response)
        reached_end = self._catching is None and self._cache.image.offset + 1 >= response.end_offset
        if not self.caught_up.is_set() and reached_end:
            strays = self._replicas.quarantine_strays()
            if strays:
                logger.warning("broker %d: set aside %d stray partition logs: %s", self.broker_id, len(strays), strays)
            self.caught_up.set()
            logger.info("broker %d: metadata caught up at offset %d", self.broker_id, self._cache.image.offset)
        return applied

    def apply(self, response: pb.FetchMetadataResponse) -> bool:
        """Replay one FetchMetadata answer, let the replica manager follow it, publish the new image."""
        old = self._cache.image
        replayed = _replay(old, response)
        if replayed is None:
            return False
        new, delta = replayed
        if delta is None:  # a snapshot: no delta from the image we had
            self._follow(new, image_changes(old, new, self.broker_id), config_changes(old, new))
        else:
            self._follow(new, delta.local_changes(self.broker_id), set(delta.changed_configs()))
        return True

    def _catch_up(self, response: pb.FetchMetadataResponse) -> bool:
        """Step 4: replay ``response`` into the image being caught up; once it reaches the end offset, follow and
        publish the difference from the published image (module docstring). True when something was replayed."""
        published = self._cache.image
        replayed = _replay(published if self._catching is None else self._catching, response)
        if replayed is None:
            return False
        new = replayed[0]
        if new.offset + 1 < response.end_offset:
            self._catching = new
            return True
        self._catching = None
        self._follow(new, image_changes(published, new, self.broker_id), config_changes(published, new))
        return True

    def _follow(self, new: MetadataImage, changes: LocalReplicaChanges, resources: set[ConfigResource]) -> None:
        """The replica manager follows ``changes``, then ``new`` is published and the requests waiting on the
        partitions touched are completed."""
        started = time.monotonic()
        try:
            touched = self._replicas.apply_changes(new, changes, ConfigChanges.of(resources, self.broker_id))
        except (OSError, StorageError) as exc:  # the file system said no: the log dir goes offline, we go on
            touched = set()
            if self._replicas.take_log_dir_offline(f"{type(exc).__name__}: {exc}") and self.on_log_dir_failure:
                self.on_log_dir_failure()
        self._cache.publish(new)
        self._replicas.complete_delayed(*sorted(touched))
        if changes.deletes or changes.leaders or changes.followers:
            logger.info(
                "broker %d: metadata offset %d: %d leaders, %d followers, %d deletes (%.1f ms)", self.broker_id,
                new.offset, len(changes.leaders), len(changes.followers), len(changes.deletes),
                (time.monotonic() - started) * 1000,
            )  # fmt: skip
        if self._on_published is not None:
            self._on_published(new)


def _replay(
    image: MetadataImage, response: pb.FetchMetadataResponse
) -> tuple[MetadataImage, MetadataDelta | None] | None:
    """The image after ``response`` (its snapshot, if any, replacing ``image``) and the delta from ``image``
    (None after a snapshot); None when the answer carries nothing."""
    if not response.HasField("snapshot") and not response.entries:
        return None
    snapshot = response.HasField("snapshot")
    delta = MetadataDelta(decode_snapshot(response.snapshot.payload) if snapshot else image)
    for entry in response.entries:
        delta.replay(decode_record(entry.payload), entry.offset)
    return delta.apply(), None if snapshot else delta
