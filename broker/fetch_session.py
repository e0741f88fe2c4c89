"""Fetch sessions on a ``REPLICATION`` listener's connection (Kafka's incremental fetch requests, KIP-227).

Without a session every follower fetch names every partition the follower takes from that leader, and the
leader reads and answers each of them, whether anything changed or not: with many idle partitions that is
most of the work of each round (docs/LATENCY.md, "Idle partitions in every follower fetch"). With one, only
what changed travels and is read.

The session is the connection (a follower's fetches on it are in lockstep, one thread per leader), so there
is no session id as in Kafka, only an epoch that numbers its requests:

* ``session_epoch`` 0 starts a session (again) with exactly the partitions the request names: a full fetch.
  The first request on a connection is one; so is any request after the follower lost track (a reconnect,
  an error answer about the session).
* ``session_epoch`` n > 0 is the session's n-th incremental fetch (after 2^31 - 1 comes 1 again). It names
  only the partitions whose fetch state (fetch offset, current leader epoch, log start offset) changed since
  the follower last named them, and lists in ``forgotten`` the partitions it no longer fetches from this
  leader; every other partition stays in the session as it was. Any other epoch is answered
  INVALID_FETCH_SESSION_EPOCH with no partitions (the session is dropped: the follower starts over with a
  full fetch); an incremental fetch on a connection without a session is answered FETCH_SESSION_ID_NOT_FOUND.

The leader (:class:`LeaderSession`) answers for the whole session, as if each request had named every
partition of it, with work in proportion to what changed rather than to the session's size:

* it listens to each of the session's partitions (``Purgatory.listen`` on the fetch purgatory, which hears
  of every append, high watermark move, leadership or epoch change, truncation and log start move); a
  partition that changed is read for the next answer;
* a fetch reads the partitions named and those that changed; when that finds nothing to answer yet, it
  parks (the long poll, ``max_wait_ms``) and is woken by a change a follower must act on: records past its
  position, another leader or epoch, a position out of range; a high watermark that moved alone does not
  wake it, it rides with the next answer (as without sessions). The listener is what wakes it: with
  ``min_bytes`` 1 (``replica.fetch.min.bytes``' default) the parked fetch is a ``HeldFetch``, in the fetch
  purgatory for its timer and a shutdown only, tried by no check of its partitions (one Python pass less on
  every append and high watermark move; ``python -m tests.bench.leader_instructions``); above 1 a
  ``DelayedFetch`` watches the partitions read and counts their bytes, as for a fetch without a session;
* every ``TOUCH_INTERVAL_MS`` (at most a tenth of ``replica.lag.time.max.ms``) the follower's fetch of each
  idle partition is recorded without reading it (``Partition.note_idle_follower_fetch``: the follower's
  position and caught-up time, what ISR1 counts; a partition that has something to tell after all is read);
* the answer carries only the partitions read. A partition named is always in it; a follower that hears
  nothing of a partition knows nothing changed there.

The follower (:class:`~broker.replication_link.FollowerSession`) remembers what it named on the current
connection and starts over with a full fetch whenever the connection is new. gRPC fetches and consumers'
fetches have no sessions: a request with ``session_epoch`` or ``forgotten`` anywhere else is INVALID_REQUEST
(``broker.handlers.fetch.begin_grpc``).

Thread-safety: a :class:`LeaderSession` belongs to one connection of the listener (its event loop, and the
worker thread a read may run on while the loop waits for it); its listener runs on whichever thread made a
change, and takes the session's lock for what it shares with the connection (what to read, the parked fetch).
"""

from __future__ import annotations

import threading
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import cast

from broker.context import BrokerContext
from broker.delayed_fetch import DelayedFetch, HeldFetch
from broker.handlers import fetch
from broker.log_manager import TopicPartition
from broker.replication_link import FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH, next_epoch
from proto import broker_pb2 as pb
from replication.partition_reads import IdleFetch
from replication.views import FetchPosition, Role

TOUCH_INTERVAL_MS = 100.0  # idle partitions have the follower's fetch recorded this often (at most)
MAX_SESSION_PARTITIONS = 200_000  # a session holds at most this many partitions (INVALID_REQUEST beyond)


# ---------------------------------------------------------------------------------------------- leader


@dataclass(slots=True)
class _Entry:
    """One partition of a session: the fields of a FetchPartition (read by attribute, as ``fetch.begin`` reads
    a request's) and what the last answer told the follower of it."""

    partition: int
    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int
    log_start_offset: int
    last_fetched_epoch: int = -1
    sent_high_watermark: int = -1
    sent_log_start_offset: int = -1


@dataclass(slots=True)
class _Topic:
    name: str
    partitions: list[_Entry] = field(default_factory=list)


@dataclass(slots=True)
class SessionFetch:
    """The session as one FetchRequest naming all its partitions (what ``fetch.begin`` and the service read by
    attribute), with the limits of the request that is being answered."""

    replica_id: int
    replica_epoch: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    topics: list[_Topic]
    isolation_level: int = 0


class SessionError(Exception):
    """A request that does not fit the connection's session: ``code`` (INVALID_FETCH_SESSION_EPOCH,
    FETCH_SESSION_ID_NOT_FOUND, INVALID_REQUEST) and the message; the session is dropped."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class LeaderSession:
    """The fetch session of one connection of the REPLICATION listener (see the module docstring); ``ctx``: the
    broker's, whose fetch purgatory tells the session of every change to its partitions."""

    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx
        self.epoch = -1  # the epoch of the last request applied; -1: no session
        self._entries: dict[TopicPartition, _Entry] = {}
        self._topics: list[_Topic] = []
        self._lock = threading.Lock()  # guards the three below (changes arrive on any thread)
        self._dirty: set[TopicPartition] = set()  # to read for the next answer
        self._woken = False  # a change a parked fetch must answer came since the last read
        self._parked: DelayedFetch | HeldFetch | None = None
        # the partitions the fetch in progress reads (None: none in progress): the read sees their changes
        # and finish reads them again; a parked DelayedFetch watches them, a HeldFetch is woken by _changed
        self._reading: frozenset[TopicPartition] | None = None
        self._held = True  # the fetch in progress parks as a HeldFetch (min_bytes <= 1), not a DelayedFetch
        self._starts: dict[TopicPartition, FetchPosition] = {}  # where its partitions stood before its read
        self._woken_bytes = 0  # what the changes that woke it before it parked added (its ready_bytes)
        self._changed_while_reading: set[TopicPartition] = set()  # of those: read again if answered at once
        lag_ms = float(ctx.config.get("replica.lag.time.max.ms"))
        self._touch_every_ms = min(TOUCH_INTERVAL_MS, lag_ms / 10)
        self._next_touch_ms = 0.0
        self._token = id(self)
        self._purgatory = ctx.replicas.fetch_purgatory
        self._clock = ctx.replicas.clock
        self._sentinel = ("", -1 - self._token)  # the key a parked fetch with no partition to watch waits under

    def __len__(self) -> int:
        return len(self._entries)

    # --- requests (the connection's loop) ------------------------------------------------------------

    def apply(self, request: pb.FetchRequest) -> SessionFetch:
        """Take ``request`` into the session and return the fetch to answer (the whole session);
        :class:`SessionError` (and no session left) when its epoch does not follow the session's or the
        session would grow too large."""
        epoch = request.session_epoch
        if epoch != 0:
            if self.epoch < 0:
                raise self._drop(FETCH_SESSION_ID_NOT_FOUND, f"an incremental fetch (session_epoch {epoch}) on a "
                                 "connection with no fetch session: start one with session_epoch 0")  # fmt: skip
            if epoch != next_epoch(self.epoch):
                raise self._drop(INVALID_FETCH_SESSION_EPOCH, f"session_epoch {epoch} does not follow the "
                                 f"session's {self.epoch}: start over with session_epoch 0")  # fmt: skip
        else:  # a full fetch: the session is exactly what it names (the partitions kept stay listened to)
            named_now = {(topic.name, p.partition) for topic in request.topics for p in topic.partitions}
            for key in [key for key in self._entries if key not in named_now]:
                del self._entries[key]
                self._purgatory.unlisten(key, self._token)
            with self._lock:
                self._dirty = set()
        changed = epoch == 0
        for topic in request.forgotten:
            for p in topic.partitions:
                key = (topic.name, p.partition)
                if self._entries.pop(key, None) is not None:
                    self._purgatory.unlisten(key, self._token)
                    changed = True
        named = []
        for topic in request.topics:
            for p in topic.partitions:
                key = (topic.name, p.partition)
                entry = self._entries.get(key)
                if entry is None:
                    entry = self._entries[key] = _Entry(p.partition, 0, 0, 0, 0)
                    self._purgatory.listen(key, self._token, self._changed)
                    changed = True
                entry.fetch_offset = p.fetch_offset
                entry.partition_max_bytes = p.partition_max_bytes
                entry.current_leader_epoch = p.current_leader_epoch
                entry.log_start_offset = p.log_start_offset
                entry.last_fetched_epoch = p.last_fetched_epoch if p.HasField("last_fetched_epoch") else -1
                named.append(key)
        if len(self._entries) > MAX_SESSION_PARTITIONS:
            raise self._drop("INVALID_REQUEST", f"a fetch session of {len(self._entries)} partitions, over the "
                             f"limit of {MAX_SESSION_PARTITIONS}")  # fmt: skip
        with self._lock:
            self._dirty.update(named)
            self._dirty &= self._entries.keys()
        if changed:
            topics: dict[str, _Topic] = {}
            for (name, _), entry in self._entries.items():
                topics.setdefault(name, _Topic(name)).partitions.append(entry)
            self._topics = list(topics.values())
        self.epoch = epoch
        return SessionFetch(request.replica_id, request.replica_epoch, request.max_wait_ms, request.min_bytes,
                            request.max_bytes, self._topics)  # fmt: skip

    def _drop(self, code: str, message: str) -> SessionError:
        self.close()
        return SessionError(code, message)

    def close(self) -> None:
        """No session any more: its partitions are no longer listened to (the connection closed, or a new
        session starts on it)."""
        for key in self._entries:
            self._purgatory.unlisten(key, self._token)
        self.epoch = -1
        self._entries = {}
        self._topics = []
        with self._lock:
            self._dirty = set()

    def nothing_to_read(self, ctx: BrokerContext) -> bool:
        """Whether the partitions to read now are all led here and have nothing past the follower's position
        (``fetch.nothing_to_read`` for the session: the reads are then short, and run on the loop)."""
        with self._lock:
            keys = list(self._dirty)
        entries = self._entries
        named = (None if (e := entries.get(k)) is None else (k[0], k[1], e.fetch_offset) for k in keys)
        return fetch.caught_up(ctx, named, True, when_empty=True)

    def begin(self, ctx: BrokerContext, view: SessionFetch) -> pb.FetchResponse | fetch.PendingFetch[pb.FetchResponse]:
        """``fetch.begin`` for the session: record the fetch of the idle partitions (every ``TOUCH_INTERVAL_MS``
        at most), read the partitions with something to tell, and answer, or park until one of the session's
        partitions has records, another leader or epoch, or an out-of-range position (then :meth:`finish`)."""
        refusal = fetch.check_replica(ctx, view)
        if refusal is not None:
            return refusal
        self._touch(ctx, view)
        held = view.min_bytes <= 1
        with self._lock:
            self._woken = False
            keys, self._dirty = self._dirty, set()
            targets = self._targets(keys)
            self._reading = frozenset((t.topic, t.partition) for t in targets)
            self._held = held
            self._starts = {}
            self._woken_bytes = 0
        max_bytes = fetch.response_limit(ctx, view.max_bytes, True)
        starts = fetch.positions(ctx, targets, True)  # before the read: nothing that arrives after is missed
        if held:
            with self._lock:
                self._starts = {(t.topic, t.partition): s for t, s in zip(targets, starts, strict=True)
                                if s is not None}  # fmt: skip
        if fetch.skips_first_read(ctx, view, targets, starts, max_bytes):  # caught up: no read before the wait
            sizes = [0] * len(targets)
        else:
            response, sizes, failed = fetch.read_partitions(ctx, view.replica_id, targets, max_bytes,
                                                            view.replica_epoch)  # fmt: skip
            # unlike fetch.begin, nothing to read is no answer: the session parks until one of its partitions
            # changes
            if fetch.answers_now(view, sum(sizes), failed, max_bytes):
                with self._lock:  # what changed after the read is news for the next answer
                    self._reading = None
                    self._dirty |= self._changed_while_reading
                    self._changed_while_reading = set()
                fetch.count_out(ctx, targets, sizes, True)
                return response
        op: DelayedFetch | HeldFetch
        if held:  # any byte answers: the listener (_changed) wakes it, nothing in the purgatory tries it
            op = HeldFetch(min(view.max_wait_ms, fetch.MAX_WAIT_CAP_MS))
            self._purgatory.hold(op)
        else:  # min_bytes above 1: the purgatory's DelayedFetch counts the bytes of its partitions
            op = fetch.delayed_fetch(ctx, view, targets, starts, sizes, max_bytes, True)
            self._purgatory.try_complete_else_watch(op, op.keys or [self._sentinel], first_try=False)
        with self._lock:  # from now on a change completes it (_changed); one since the read did already
            self._parked = op
            woken, woken_bytes = self._woken, self._woken_bytes
            self._changed_while_reading = set()  # finish reads them again
        if woken:
            if isinstance(op, HeldFetch):
                op.wake(woken_bytes)
            else:
                op.force_complete()
        return fetch.PendingFetch(op, view.replica_id, view.replica_epoch, targets, max_bytes, fetch.read_partitions)

    def finish(self, ctx: BrokerContext, pending: fetch.PendingFetch[pb.FetchResponse]) -> pb.FetchResponse:
        """The answer once the parked fetch completed: what :meth:`begin` read, read again, and every
        partition that changed meanwhile."""
        with self._lock:
            self._parked = self._reading = None
            self._changed_while_reading = set()  # read below
            keys, self._dirty = self._dirty, set()
        read = {(t.topic, t.partition) for t in pending.targets}
        targets = pending.targets + self._targets(keys - read)
        response, sizes, _ = fetch.read_partitions(ctx, pending.replica_id, targets, pending.max_bytes,
                                                   pending.replica_epoch)  # fmt: skip
        fetch.count_out(ctx, targets, sizes, True)
        return response

    def answered(self, response: pb.FetchResponse) -> None:
        """``response`` went to the follower: what it told of each partition is what the follower knows."""
        for topic in response.topics:
            for answer in topic.partitions:
                entry = self._entries.get((topic.name, answer.partition))
                if entry is not None:
                    entry.sent_high_watermark = answer.high_watermark
                    entry.sent_log_start_offset = answer.log_start_offset

    def _targets(self, keys: set[TopicPartition]) -> list[fetch.Target]:
        targets = []
        for key in keys:
            entry = self._entries.get(key)
            if entry is not None:
                targets.append(fetch.Target(key[0], key[1], entry.fetch_offset, entry.partition_max_bytes,
                                            entry.current_leader_epoch))  # fmt: skip
        return targets

    def _touch(self, ctx: BrokerContext, view: SessionFetch) -> None:
        """Every ``TOUCH_INTERVAL_MS`` at most: the follower's fetch of every idle partition is recorded
        (``Partition.note_idle_follower_fetch``: its caught-up time stays current, as if it had been read);
        one that has something to tell after all is read with the others."""
        now = self._clock.monotonic_ms()
        if now < self._next_touch_ms:
            return
        self._next_touch_ms = now + self._touch_every_ms
        with self._lock:
            idle = [key for key in self._entries if key not in self._dirty]
        for key in idle:
            entry = self._entries[key]
            partition = ctx.replicas.partition(*key)
            outcome = IdleFetch.READ if partition is None else partition.note_idle_follower_fetch(
                view.replica_id, entry.fetch_offset, entry.current_leader_epoch, view.replica_epoch,
                entry.sent_high_watermark, entry.sent_log_start_offset,
            )  # fmt: skip
            if outcome is IdleFetch.HW_MOVED and partition is not None:
                fetch.high_watermark_moved(ctx, key[0], key[1], partition.high_watermark, view.replica_id)
            if outcome is not IdleFetch.UNCHANGED:
                with self._lock:
                    self._dirty.add(key)

    # --- changes (any thread) ------------------------------------------------------------------------

    def _changed(self, key: Hashable) -> None:
        """The purgatory's listener: something changed under ``key`` (an append, a high watermark, the
        leadership, the log start). It is read for the next answer; a parked fetch is answered now when the
        change is one a follower must act on (records past its position, another leader or epoch, a position
        out of range), not for a high watermark alone (that waits for the next answer)."""
        tp = cast(TopicPartition, key)  # the fetch purgatory's keys are (topic, partition)
        entry = self._entries.get(tp)
        if entry is None:
            return
        with self._lock:
            reading = self._reading
            if reading is not None and tp in reading:  # the fetch in progress reads it (and finish again)
                self._changed_while_reading.add(tp)  # for the next answer, if this one goes at once
                if not self._held:
                    return  # its parked DelayedFetch watches it
            else:
                self._dirty.add(tp)
                if reading is None:
                    return  # no fetch in progress: the next one reads it
            start = self._starts.get(tp)
        partition = self.ctx.replicas.partition(*tp)
        urgent, ready = True, 0
        if partition is not None:
            now = partition.fetch_position(True)
            urgent = (
                now.role is not Role.LEADER or now.leader_epoch != entry.current_leader_epoch
                or entry.fetch_offset != now.log_end_offset or entry.fetch_offset < now.log_start_offset
            )  # fmt: skip
            if start is not None:  # read by the fetch: what arrived since, as DelayedFetch counts it (case D)
                ready = max(0, now.appended_bytes - start.appended_bytes)
                if entry.partition_max_bytes > 0:
                    ready = min(ready, entry.partition_max_bytes)
        if not urgent:
            return
        with self._lock:
            self._woken = True
            parked = self._parked
            if parked is None:  # not parked yet: begin wakes it once it is
                self._woken_bytes += ready
        if isinstance(parked, HeldFetch):
            parked.wake(ready)
        elif parked is not None:
            parked.force_complete()
