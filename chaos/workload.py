"""The workload: producers writing unique values, readers polling every partition from the beginning, and
(when ``Consumer.subscribe`` works) the members of one consumer group. Every operation goes to the history.

* Producers (``producer-<i>``): one ``Producer`` each with ``acks=all`` and the default config otherwise
  (``enable.idempotence`` is true by default, so they are idempotent as soon as the client is). Each sends
  the values ``"<i>-<seq>"`` round-robin over the partitions (explicit partition), paced to its share of
  ``rate``, with at most ``in_flight_per_partition`` unanswered sends per partition so that one unavailable
  partition does not hold up the others.
* Probes (``probe-<i>``): a producer that tries each record once with a short timeout, at a low rate,
  so that the history holds the brokers' own errors during a fault (NOT_ENOUGH_REPLICAS below
  ``min.insync.replicas``), which the main producers' retries hide. Their values take part in every check.
* Transactional producers (``txn-<i>``): a ``Producer`` with ``transactional.id`` ``chaos-txn-<i>``, writing
  transactions of ``txn_records`` values ``"t<i>-<n>-<k>"`` round-robin over the partitions, committing each
  one (``commit_transaction``) and aborting every ``abort_every``-th (``abort_transaction``), one about every
  ``txn_interval_s``. Each transaction is one ``txn`` operation (``chaos.history``). After an error the
  producer is closed and a new one with the same id fences it (``init_transactions``).
* Readers (``reader-<j>``): ``assign`` every partition, start at the earliest offset, ``poll`` until told to
  stop. Empty polls are counted, not recorded. Read-committed readers (``rc-reader-<j>``) do the same with
  ``isolation.level=read_committed``.
* Group members (``group-<k>``): ``subscribe`` with one ``group.id``, ``poll``, ``commit`` after every
  non-empty poll. A change of assignment is recorded as a ``reset`` (a rebalance may legitimately re-deliver).
  :func:`group_support` says whether the client has groups yet; the runner switches the members on only then.

Draining: after the faults, :meth:`Workload.drain` gives every reader (and the group as a whole) the end
offsets to reach; :meth:`Workload.drained` says when they all have. Progress is the consumers' positions, not
the offsets of the records they returned: a partition may end with a transaction marker, which no poll returns.

Thread-safety: each worker is one thread owning its client; the shared counters are under a lock.
"""

from __future__ import annotations

import abc
import contextlib
import threading
import time
from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from chaos.history import FAILED, OK, UNKNOWN, History, Op
from odradek import Consumer, Producer, TopicPartition
from odradek.errors import NotSupportedYetError, OdradekError

POLL_TIMEOUT_MS = 300
ERROR_BACKOFF_S = 0.2


@dataclass(frozen=True, slots=True)
class WorkloadConfig:
    bootstrap_servers: str
    topic: str
    partitions: int
    producers: int = 3
    readers: int = 2
    group_members: int = 0  # 0: no group (see group_support)
    group_id: str = "chaos"
    rate: float = 150.0  # records per second, all producers together
    probes: int = 1  # probe producers (PROBE_CONFIG), each writing probe_rate records per second
    probe_rate: float = 5.0
    txn_producers: int = 0  # transactional producers (TxnProducerWorker)
    rc_readers: int = 0  # read_committed readers
    txn_records: int = 6  # records per transaction
    txn_interval_s: float = 0.2  # between the starts of one producer's transactions
    abort_every: int = 4  # every abort_every-th transaction is aborted
    transaction_timeout_ms: int = 10000  # the coordinator aborts a transaction left open this long
    in_flight_per_partition: int = 50  # enough to keep sending through an outage of a partition
    request_timeout_ms: int = 5000
    delivery_timeout_ms: int = 20000
    max_block_ms: int = 5000


def error_name(exc: BaseException) -> str:
    code = getattr(exc, "code", None)
    return code if isinstance(code, str) else type(exc).__name__


def group_support(bootstrap_servers: str, topic: str, timeout_s: float = 45.0) -> str | None:
    """None when a group member of this client gets an assignment for ``topic`` from this cluster within
    ``timeout_s``, else why not (one sentence): ``subscribe`` missing in the client, the broker answering
    UNSUPPORTED_VERSION, or no assignment in time."""
    consumer = Consumer({"bootstrap.servers": bootstrap_servers, "group.id": f"chaos-probe-{topic}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})  # fmt: skip
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + timeout_s
        while not consumer.assignment():
            if time.monotonic() >= deadline:
                return f"a group member got no assignment within {timeout_s:.0f} s"
            consumer.poll(timeout_ms=POLL_TIMEOUT_MS)
    except NotSupportedYetError as exc:
        return f"Consumer.subscribe is not supported yet ({exc})"
    except OdradekError as exc:
        return f"a group member's poll failed with {error_name(exc)} ({exc})"
    finally:
        consumer.close()
    return None


class _Worker(threading.Thread, metaclass=abc.ABCMeta):
    def __init__(self, name: str, history: History, config: WorkloadConfig, stop: threading.Event) -> None:
        super().__init__(name=f"chaos-{name}", daemon=True)
        self.process = name
        self.history = history
        self.config = config
        self.stop_event = stop
        self.failure: BaseException | None = None  # an unexpected exception that ended the thread

    def run(self) -> None:
        try:
            self.work()
        except BaseException as exc:  # reported by the runner; never silently lost
            self.failure = exc

    @abc.abstractmethod
    def work(self) -> None:
        """The thread's job; it must return soon after ``stop_event`` is set."""


# The probe: one try per record (no retries, so no idempotence), a short timeout; its errors are the
# brokers' own answers (NOT_ENOUGH_REPLICAS while the ISR is below min.insync.replicas), which the main
# producers' retries hide.
PROBE_CONFIG: dict[str, object] = {"retries": 0, "enable.idempotence": False, "request.timeout.ms": 3000,
                                   "delivery.timeout.ms": 3100}  # fmt: skip


class ProducerWorker(_Worker):
    """``producer-<i>`` writing ``"<i>-<seq>"``; or, with ``probe``, ``probe-<i>`` writing ``"probe<i>-<seq>"``
    at ``probe_rate`` with :data:`PROBE_CONFIG`."""

    def __init__(self, index: int, history: History, config: WorkloadConfig, stop: threading.Event,
                 *, probe: bool = False) -> None:  # fmt: skip
        super().__init__(f"{'probe' if probe else 'producer'}-{index}", history, config, stop)
        self.index = index
        self.tag = f"probe{index}" if probe else str(index)
        self.overrides = PROBE_CONFIG if probe else {}
        self.rate = config.probe_rate if probe else config.rate / config.producers
        self._lock = threading.Lock()
        self._outstanding = [0] * config.partitions
        self._pending: dict[int, tuple[int, float, str]] = {}  # seq -> (partition, t0, value)

    def work(self) -> None:
        cfg = self.config
        producer = Producer({"bootstrap.servers": cfg.bootstrap_servers, "acks": "all", "client.id": self.process,
                             "request.timeout.ms": cfg.request_timeout_ms, "max.block.ms": cfg.max_block_ms,
                             "delivery.timeout.ms": cfg.delivery_timeout_ms, "linger.ms": 5,
                             **self.overrides})  # fmt: skip
        interval_s = 1.0 / self.rate
        next_partition = self.index % cfg.partitions
        due = self.history.now()
        try:
            while not self.stop_event.wait(max(0.0, due - self.history.now())):
                due = max(due + interval_s, self.history.now() - 1.0)  # no burst after a long stall
                partition = self._free_partition(next_partition)
                if partition is None:
                    continue
                next_partition = (partition + 1) % cfg.partitions
                self._send(producer, partition)
        finally:
            with contextlib.suppress(OdradekError):  # what is still pending is recorded as unknown below
                producer.flush(timeout=cfg.delivery_timeout_ms / 1000 + 5)
            producer.close(timeout=5)
            self._abandon_pending()

    def _free_partition(self, start: int) -> int | None:
        with self._lock:
            for step in range(self.config.partitions):
                partition = (start + step) % self.config.partitions
                if self._outstanding[partition] < self.config.in_flight_per_partition:
                    return partition
        return None

    def _send(self, producer: Producer, partition: int) -> None:
        seq = self.history.next_seq(self.process)
        value = f"{self.tag}-{seq}"
        t0 = self.history.now()
        try:
            future = producer.send(self.config.topic, value=value.encode(), partition=partition)
        except OdradekError as exc:  # nothing was queued
            self._record(seq, t0, partition, value, FAILED, error=error_name(exc))
            return
        with self._lock:
            self._outstanding[partition] += 1
            self._pending[seq] = (partition, t0, value)
        future.add_done_callback(lambda f: self._done(f, seq))

    def _done(self, future: Future[Any], seq: int) -> None:
        with self._lock:
            pending = self._pending.pop(seq, None)
            if pending is None:
                return
            self._outstanding[pending[0]] -= 1
        partition, t0, value = pending
        exc = future.exception()
        if exc is None:
            self._record(seq, t0, partition, value, OK, offset=future.result().offset)
        else:  # a delivery failure: the record may or may not have been written
            self._record(seq, t0, partition, value, UNKNOWN, error=error_name(exc))

    def _abandon_pending(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, {}
        for seq, (partition, t0, value) in sorted(pending.items()):
            self._record(seq, t0, partition, value, UNKNOWN, error="NOT_COMPLETED")

    def _record(self, seq: int, t0: float, partition: int, value: str, outcome: str, **fields: Any) -> None:
        self.history.record(Op("send", self.process, seq, t0, self.history.now(), outcome,
                               partition=partition, value=value, **fields))  # fmt: skip


def transactional_id(index: int) -> str:
    """The ``transactional.id`` of ``txn-<index>``."""
    return f"chaos-txn-{index}"


class TxnProducerWorker(_Worker):
    """``txn-<i>``: one transaction after another (module docstring); each one a ``txn`` operation."""

    def __init__(self, index: int, history: History, config: WorkloadConfig, stop: threading.Event) -> None:
        super().__init__(f"txn-{index}", history, config, stop)
        self.index = index

    def producer_config(self) -> dict[str, object]:
        cfg = self.config
        return {"bootstrap.servers": cfg.bootstrap_servers, "transactional.id": transactional_id(self.index),
                "client.id": self.process, "request.timeout.ms": cfg.request_timeout_ms, "linger.ms": 5,
                "max.block.ms": cfg.request_timeout_ms * 2, "delivery.timeout.ms": cfg.delivery_timeout_ms,
                "transaction.timeout.ms": cfg.transaction_timeout_ms}  # fmt: skip

    def work(self) -> None:
        cfg = self.config
        producer: Producer | None = None
        number = 0
        next_partition = self.index % cfg.partitions
        try:
            while not self.stop_event.wait(cfg.txn_interval_s):
                if producer is None:
                    producer = self._new_producer()
                    if producer is None:
                        continue
                values = []
                for k in range(cfg.txn_records):
                    values.append((next_partition, f"t{self.index}-{number}-{k}"))
                    next_partition = (next_partition + 1) % cfg.partitions
                intent = "abort" if number % cfg.abort_every == cfg.abort_every - 1 else "commit"
                t0 = self.history.now()
                outcome, error, usable = self._transaction(producer, values, intent)
                info = {"txn": number, "intent": intent, "values": [list(v) for v in values]}
                self.history.add("txn", self.process, t0, outcome=outcome, error=error, info=info)
                number += 1
                if not usable:
                    producer.close(timeout=5)
                    producer = None
        finally:
            if producer is not None:
                producer.close(timeout=5)

    def _new_producer(self) -> Producer | None:
        """A producer whose ``init_transactions`` succeeded (it fences the previous one), or None."""
        producer = Producer(self.producer_config())
        t0 = self.history.now()
        try:
            producer.init_transactions()
        except OdradekError as exc:
            self.history.add("txn", self.process, t0, outcome=FAILED, error=f"init: {error_name(exc)}")
            producer.close(timeout=5)
            return None
        return producer

    def _transaction(
        self, producer: Producer, values: list[tuple[int, str]], intent: str
    ) -> tuple[str, str | None, bool]:
        """One transaction: (outcome, error, whether the producer can go on)."""
        try:
            producer.begin_transaction()
            for partition, value in values:
                producer.send(self.config.topic, value=value.encode(), partition=partition)
        except OdradekError as exc:  # no commit was asked for: the transaction is aborted, whatever comes next
            return FAILED, error_name(exc), self._abort(producer)
        if intent == "abort":
            return FAILED, None, self._abort(producer)
        try:
            producer.commit_transaction()
        except OdradekError as exc:  # committed or not: the checkers allow either, for all its records at once
            return UNKNOWN, error_name(exc), self._abort(producer)
        return OK, None, True

    @staticmethod
    def _abort(producer: Producer) -> bool:
        try:
            producer.abort_transaction()
        except OdradekError:
            return False  # a new producer's init_transactions aborts it (or the coordinator, on timeout)
        return True


class _ConsumerWorker(_Worker):
    """Polls until stopped, or until drained to ``targets``; tracks the next offset it will read per partition."""

    def __init__(self, name: str, history: History, config: WorkloadConfig, stop: threading.Event,
                 progress: _Progress) -> None:  # fmt: skip
        super().__init__(name, history, config, stop)
        self.progress = progress
        self.empty_polls = 0

    def consumer_config(self) -> dict[str, object]:
        isolation = "read_committed" if self.process.startswith("rc-") else "read_uncommitted"
        return {"bootstrap.servers": self.config.bootstrap_servers, "auto.offset.reset": "earliest",
                "client.id": self.process, "request.timeout.ms": self.config.request_timeout_ms,
                "default.api.timeout.ms": self.config.request_timeout_ms,
                "isolation.level": isolation}  # fmt: skip

    def poll_once(self, consumer: Consumer) -> None:
        """One poll, recorded when it raised or returned records (:meth:`before_record` runs just before)."""
        t0 = self.history.now()
        try:
            batch = consumer.poll(timeout_ms=POLL_TIMEOUT_MS)
        except OdradekError as exc:
            self.history.add("poll", self.process, t0, outcome=FAILED, error=error_name(exc))
            self.stop_event.wait(ERROR_BACKOFF_S)
            return
        if not batch:
            self.empty_polls += 1
        else:
            records = tuple((r.partition, r.offset, (r.value or b"").decode(errors="replace")) for r in batch)
            self.before_record(consumer)
            self.history.add("poll", self.process, t0, records=records)
        self.progress.advance(self.process, self._positions(consumer))

    @staticmethod
    def _positions(consumer: Consumer) -> dict[int, int]:
        positions: dict[int, int] = {}
        for tp in consumer.assignment():
            with contextlib.suppress(OdradekError):  # not known yet: no progress there
                positions[tp.partition] = consumer.position(tp, timeout_ms=POLL_TIMEOUT_MS)
        return positions

    def before_record(self, consumer: Consumer) -> None:
        """A hook between a poll and its record (the group records a changed assignment there)."""


class ReaderWorker(_ConsumerWorker):
    def work(self) -> None:
        consumer = Consumer(self.consumer_config())
        try:
            tps = [TopicPartition(self.config.topic, p) for p in range(self.config.partitions)]
            consumer.assign(tps)
            self.history.add("reset", self.process, self.history.now(), info={"partitions": list(range(len(tps)))})
            while not self.stop_event.is_set() and not self.progress.reached(self.process):
                self.poll_once(consumer)
        finally:
            consumer.close()


class GroupWorker(_ConsumerWorker):
    GROUP = "group"  # the progress key shared by every member

    def __init__(self, name: str, history: History, config: WorkloadConfig, stop: threading.Event,
                 progress: _Progress) -> None:  # fmt: skip
        super().__init__(name, history, config, stop, progress)
        self._assigned: set[TopicPartition] = set()

    def work(self) -> None:
        # session.timeout.ms stays Kafka's default: the brokers bound it (group.consumer.min.session.timeout.ms)
        consumer = Consumer({**self.consumer_config(), "group.id": self.config.group_id, "enable.auto.commit": False})
        try:
            consumer.subscribe([self.config.topic])
            while not self.stop_event.is_set() and not self.progress.reached(self.GROUP):
                self.poll_once(consumer)
                self._commit(consumer)
        finally:
            consumer.close()

    def before_record(self, consumer: Consumer) -> None:
        """A new assignment is a ``reset``, recorded before the records of the poll that brought it: those
        may legitimately start again from the committed offset."""
        now_assigned = consumer.assignment()
        if now_assigned != self._assigned:
            self._assigned = now_assigned
            self.history.add("reset", self.process, self.history.now(),
                             info={"partitions": sorted(tp.partition for tp in now_assigned)})  # fmt: skip

    def _commit(self, consumer: Consumer) -> None:
        t0 = self.history.now()
        try:
            consumer.commit()
        except OdradekError as exc:
            self.history.add("poll", self.process, t0, outcome=FAILED, error=f"commit: {error_name(exc)}")


class _Progress:
    """The next offset each consumer (and the group as a whole) will read, and the drain targets. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._next: dict[str, dict[int, int]] = {}
        self._targets: dict[int, int] | None = None

    def advance(self, process: str, positions: Mapping[int, int]) -> None:
        """``process`` will read ``positions`` (partition -> offset) next."""
        keys = [process, GroupWorker.GROUP] if process.startswith("group-") else [process]
        with self._lock:
            for key in keys:
                offsets = self._next.setdefault(key, {})
                for partition, position in positions.items():
                    if position > offsets.get(partition, 0):
                        offsets[partition] = position

    def set_targets(self, targets: Mapping[int, int]) -> None:
        with self._lock:
            self._targets = dict(targets)

    def reached(self, key: str) -> bool:
        with self._lock:
            if self._targets is None:
                return False
            offsets = self._next.get(key, {})
            return all(offsets.get(p, 0) >= end for p, end in self._targets.items())

    def lagging(self, keys: list[str]) -> dict[str, dict[int, int]]:
        """For each key not at its targets: partition -> how many offsets it is short."""
        with self._lock:
            if self._targets is None:
                return {}
            short: dict[str, dict[int, int]] = {}
            for key in keys:
                offsets = self._next.get(key, {})
                behind = {p: end - offsets.get(p, 0) for p, end in self._targets.items() if offsets.get(p, 0) < end}
                if behind:
                    short[key] = behind
            return short


class Workload:
    """Starts the workers; stops the producers; drains the consumers; stops everything (bounded)."""

    def __init__(self, config: WorkloadConfig, history: History) -> None:
        self.config = config
        self.history = history
        self.progress = _Progress()
        self._stop_producers = threading.Event()
        self._stop_consumers = threading.Event()
        self.producers = [ProducerWorker(i, history, config, self._stop_producers) for i in range(config.producers)]
        self.producers += [ProducerWorker(i, history, config, self._stop_producers, probe=True)
                           for i in range(config.probes)]  # fmt: skip
        self.txn_producers = [TxnProducerWorker(i, history, config, self._stop_producers)
                              for i in range(config.txn_producers)]  # fmt: skip
        self.readers = [ReaderWorker(f"reader-{j}", history, config, self._stop_consumers, self.progress)
                        for j in range(config.readers)]  # fmt: skip
        self.readers += [ReaderWorker(f"rc-reader-{j}", history, config, self._stop_consumers, self.progress)
                         for j in range(config.rc_readers)]  # fmt: skip
        self.group = [GroupWorker(f"group-{k}", history, config, self._stop_consumers, self.progress)
                      for k in range(config.group_members)]  # fmt: skip

    @property
    def workers(self) -> list[_Worker]:
        return [*self.producers, *self.txn_producers, *self.readers, *self.group]

    def start(self) -> None:
        for worker in self.workers:
            worker.start()

    def stop_producers(self, timeout_s: float) -> None:
        self._stop_producers.set()
        for worker in [*self.producers, *self.txn_producers]:
            worker.join(timeout_s)

    def drain(self, targets: Mapping[int, int]) -> None:
        self.progress.set_targets(targets)

    def drain_keys(self) -> list[str]:
        return [w.process for w in self.readers] + ([GroupWorker.GROUP] if self.group else [])

    def drained(self) -> bool:
        return not self.progress.lagging(self.drain_keys())

    def stop(self, timeout_s: float) -> None:
        self._stop_producers.set()
        self._stop_consumers.set()
        for worker in self.workers:
            worker.join(timeout_s)

    def crashed(self) -> list[str]:
        """Workers that ended with an unexpected exception."""
        return [f"{w.process}: {type(w.failure).__name__}: {w.failure}" for w in self.workers if w.failure]

    def failures(self) -> list[str]:
        """After :meth:`stop`: the crashed workers and those that did not stop."""
        return self.crashed() + [f"{w.process}: still running after stop" for w in self.workers if w.is_alive()]

    def empty_polls(self) -> int:
        return sum(w.empty_polls for w in [*self.readers, *self.group])
