"""A consumer's membership in its group, as in KIP-848: a pure state machine driven by method calls.

The heartbeat thread asks it what to send (:meth:`Membership.next_heartbeat`) and feeds it the answers
(:meth:`on_response`, :meth:`on_failure`); the application thread, inside ``poll``, takes the work that
needs callbacks (:meth:`take_reconciliation`) and reports it done (:meth:`reconciled`). Time comes in as
``now_ms`` arguments (monotonic milliseconds); nothing here does I/O.

States (Kafka's ``MemberState``)::

    UNSUBSCRIBED --subscribe--> JOINING --assignment--> RECONCILING --app done--> ACKNOWLEDGING --sent--> STABLE
    STABLE --new assignment--> RECONCILING            (revoke first, then assign, then acknowledge)
    any --FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID--> FENCED --app lost its partitions--> JOINING (epoch 0)
    any --poll timer expired--> LEAVING (epoch -1) --sent--> STALE --next poll, partitions lost--> JOINING
    any --unsubscribe/close--> PREPARE_LEAVING --app revoked--> LEAVING (-1, or -2 static) --sent--> UNSUBSCRIBED
    any --FENCED_INSTANCE_ID, UNRELEASED_INSTANCE_ID, GROUP_MAX_SIZE_REACHED, ...--> FATAL (raised by poll)

Reconciliation order (the rule that matters): partitions leaving the member are revoked by the
application first (its ``on_partitions_revoked`` may commit them), then the new ones are assigned, and
only then does the next heartbeat report the new owned set; the coordinator gives a partition to its new
owner only after the old owner reported it gone.

Not thread-safe: its driver (:class:`odradek.group.manager.GroupManager`) calls it under one lock.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

from odradek.types import TopicPartition

JOIN_EPOCH = 0
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2

# Errors that end membership for good: poll() raises them (Kafka raises these to the application too).
FATAL_CODES = frozenset(
    {
        "FENCED_INSTANCE_ID",
        "UNRELEASED_INSTANCE_ID",
        "GROUP_MAX_SIZE_REACHED",
        "UNSUPPORTED_ASSIGNOR",
        "INVALID_REQUEST",
        "INVALID_GROUP_ID",
        "GROUP_AUTHORIZATION_FAILED",
        "UNSUPPORTED_VERSION",
        "INVALID_REGULAR_EXPRESSION",
    }
)
# The member is no longer known with its epoch: it gives up its partitions (lost, not revoked) and rejoins.
FENCED_CODES = frozenset({"FENCED_MEMBER_EPOCH", "UNKNOWN_MEMBER_ID"})
# The coordinator moved or is not ready: look it up again and retry.
COORDINATOR_CODES = frozenset({"NOT_COORDINATOR", "COORDINATOR_NOT_AVAILABLE", "COORDINATOR_LOAD_IN_PROGRESS"})


class MemberState(enum.Enum):
    UNSUBSCRIBED = "UNSUBSCRIBED"
    JOINING = "JOINING"
    RECONCILING = "RECONCILING"
    ACKNOWLEDGING = "ACKNOWLEDGING"
    STABLE = "STABLE"
    FENCED = "FENCED"
    PREPARE_LEAVING = "PREPARE_LEAVING"
    LEAVING = "LEAVING"
    STALE = "STALE"
    FATAL = "FATAL"


@dataclass(frozen=True, slots=True)
class Subscription:
    """Topic names, or a regular expression (``pattern``) the coordinator matches against topic names."""

    topics: tuple[str, ...] = ()
    pattern: str = ""


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    """One ConsumerGroupHeartbeat to send. ``subscription`` / ``owned`` are None when unchanged since the
    last heartbeat the coordinator answered (the wire's ``subscription_changed`` / ``owned_partitions_sent``)."""

    member_id: str
    member_epoch: int
    instance_id: str
    rack_id: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    server_assignor: str
    subscription: Subscription | None
    owned: frozenset[TopicPartition] | None


@dataclass(frozen=True, slots=True)
class HeartbeatResponse:
    """The parts of a ConsumerGroupHeartbeatResponse the state machine reads (``assignment`` None: unchanged)."""

    error_code: str = ""
    error_message: str = ""
    member_id: str = ""
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: frozenset[TopicPartition] | None = None


@dataclass(frozen=True, slots=True)
class Reconciliation:
    """Work for the application thread: call the listener for these partitions, then :meth:`Membership.reconciled`.

    ``lost`` partitions were taken away without a chance to commit (fenced or stale member); ``revoked``
    ones are given up in order (commit them first); ``assigned`` ones are new. ``target`` is the owned set
    once done. ``leaving`` marks the revocation before a leave (unsubscribe or close).
    """

    revoked: frozenset[TopicPartition]
    assigned: frozenset[TopicPartition]
    lost: frozenset[TopicPartition]
    target: frozenset[TopicPartition]
    leaving: bool = False


@dataclass(frozen=True, slots=True)
class MembershipSettings:
    group_id: str
    instance_id: str | None
    rack_id: str
    server_assignor: str
    rebalance_timeout_ms: int  # max.poll.interval.ms
    session_timeout_ms: int
    heartbeat_interval_ms: int  # until the coordinator answers with its own
    retry_backoff_ms: int
    retry_backoff_max_ms: int


class Membership:
    """The member's state, epochs and owned partitions. Not thread-safe (one lock in the driver)."""

    def __init__(self, settings: MembershipSettings, now_ms: float) -> None:
        self.settings = settings
        self.state = MemberState.UNSUBSCRIBED
        self.member_id = ""
        self.member_epoch = JOIN_EPOCH
        self.owned: frozenset[TopicPartition] = frozenset()
        self.target: frozenset[TopicPartition] | None = None  # the latest assignment received
        self.subscription: Subscription | None = None
        self.fatal_error: tuple[str, str] | None = None  # (code, message)
        self.heartbeat_interval_ms = settings.heartbeat_interval_ms
        self._in_flight = False
        self._next_heartbeat_ms = now_ms
        self._failures = 0
        self._subscription_sent = False
        self._owned_sent: frozenset[TopicPartition] | None = None
        self._last_poll_ms = now_ms
        self._leave_epoch = LEAVE_EPOCH
        self._stale_lost = False  # the poll timer expired: the owned partitions are lost to the application
        self._urgent = False  # heartbeat_soon() asked for a heartbeat after the one in flight
        self._rejoin_when_left = False

    # ------------------------------------------------------------------------------ application

    def subscribe(self, subscription: Subscription, now_ms: float) -> None:
        """Join (or change the subscription of a member already in the group)."""
        if subscription != self.subscription:
            self.subscription = subscription
            self._subscription_sent = False
        if self.state in (MemberState.UNSUBSCRIBED, MemberState.STALE):
            self._start_joining(now_ms)
        elif self.state in (MemberState.STABLE, MemberState.RECONCILING, MemberState.ACKNOWLEDGING):
            self._next_heartbeat_ms = now_ms  # tell the coordinator now

    def leave(self, static: bool) -> None:
        """Unsubscribe or close: revoke the owned partitions (application thread), then send a leave heartbeat.

        A static member closing leaves with epoch -2: the coordinator keeps its partitions for it for the
        session timeout. ``static`` is ignored for a dynamic member.
        """
        self._leave_epoch = STATIC_LEAVE_EPOCH if static and self.settings.instance_id else LEAVE_EPOCH
        if self.state in (MemberState.UNSUBSCRIBED, MemberState.FATAL, MemberState.STALE, MemberState.LEAVING):
            if self.state is MemberState.STALE:
                self.state = MemberState.UNSUBSCRIBED
            self.subscription = None
            return
        self.subscription = None
        self.state = MemberState.PREPARE_LEAVING if self.member_id else MemberState.UNSUBSCRIBED
        self.target = None

    def record_poll(self, now_ms: float) -> None:
        """The application polled: resets the poll timer; a member that left for not polling rejoins."""
        self._last_poll_ms = now_ms
        if self.state is MemberState.STALE and self.subscription is not None and not self._stale_lost:
            self._start_joining(now_ms)
        elif self.state is MemberState.LEAVING and self.subscription is not None:
            self._rejoin_when_left = True  # polled again while the poll-timer leave is on its way

    def check_poll_timer(self, now_ms: float) -> bool:
        """Leave the group (epoch -1, even when static) when ``max.poll.interval.ms`` passed without a poll.

        Returns True when that just happened. The owned partitions are then lost to the application.
        """
        if self.state not in (MemberState.STABLE, MemberState.RECONCILING, MemberState.ACKNOWLEDGING):
            return False
        if now_ms - self._last_poll_ms <= self.settings.rebalance_timeout_ms:
            return False
        self._leave_epoch = LEAVE_EPOCH
        self._stale_lost = True
        self.state = MemberState.LEAVING
        self._next_heartbeat_ms = now_ms
        return True

    def heartbeat_soon(self, now_ms: float) -> None:
        """Send a heartbeat now, or right after the answer of the one in flight (a commit answered
        STALE_MEMBER_EPOCH needs the current epoch)."""
        self._urgent = True
        self._next_heartbeat_ms = min(self._next_heartbeat_ms, now_ms)

    def take_reconciliation(self) -> Reconciliation | None:
        """What the application thread must do now (None: nothing)."""
        empty: frozenset[TopicPartition] = frozenset()
        if self.state is MemberState.FENCED:
            return Reconciliation(empty, empty, self.owned, empty)
        if self._stale_lost:
            return Reconciliation(empty, empty, self.owned, empty)
        if self.state is MemberState.PREPARE_LEAVING:
            return Reconciliation(self.owned, empty, empty, empty, leaving=True)
        if self.state is MemberState.RECONCILING and self.target is not None:
            return Reconciliation(self.owned - self.target, self.target - self.owned, empty, self.target)
        return None

    def reconciled(self, done: Reconciliation, now_ms: float) -> None:
        """The application ran the listener for ``done``: it now owns ``done.target`` (nothing after a loss or
        a leave). The heartbeat thread may have changed the state meanwhile; the owned set is the truth the
        next reconciliation starts from."""
        self.owned = done.target
        if done.lost or done.leaving:
            self.owned = frozenset()
        if self.state is MemberState.FENCED and not self.owned:
            self._start_joining(now_ms)
        elif self._stale_lost and not self.owned:
            self._stale_lost = False
            if self.state is MemberState.STALE and self.subscription is not None:
                self._start_joining(now_ms)
        elif self.state is MemberState.PREPARE_LEAVING and not self.owned:
            self.state = MemberState.LEAVING
            self._next_heartbeat_ms = now_ms
        elif self.state in (MemberState.RECONCILING, MemberState.ACKNOWLEDGING, MemberState.STABLE):
            if self.target is None or self.target == self.owned:
                self.state = MemberState.ACKNOWLEDGING
                self._next_heartbeat_ms = now_ms
            else:
                self.state = MemberState.RECONCILING

    # ------------------------------------------------------------------------------ heartbeats

    def heartbeat_due_in_ms(self, now_ms: float) -> float | None:
        """How long until the next heartbeat should go (0: now; None: nothing to send, e.g. unsubscribed)."""
        if self._in_flight or self.state in (
            MemberState.UNSUBSCRIBED,
            MemberState.FENCED,
            MemberState.STALE,
            MemberState.FATAL,
        ):
            return None
        return max(0.0, self._next_heartbeat_ms - now_ms)

    def next_heartbeat(self, now_ms: float) -> HeartbeatRequest | None:
        """The heartbeat to send now, marked in flight (None: not due)."""
        due = self.heartbeat_due_in_ms(now_ms)
        if due is None or due > 0:
            return None
        s = self.settings
        leaving = self.state is MemberState.LEAVING
        epoch = self._leave_epoch if leaving else self.member_epoch
        joining = self.state is MemberState.JOINING
        subscription = None
        if not leaving and self.subscription is not None and (joining or not self._subscription_sent):
            subscription = self.subscription
        owned = None
        if not leaving and (joining or self._owned_sent != self.owned):
            owned = self.owned
        self._in_flight = True
        self._urgent = False
        return HeartbeatRequest(
            member_id=self.member_id,
            member_epoch=epoch,
            instance_id=s.instance_id or "",
            rack_id=s.rack_id,
            rebalance_timeout_ms=s.rebalance_timeout_ms,
            session_timeout_ms=s.session_timeout_ms,
            server_assignor=s.server_assignor,
            subscription=subscription,
            owned=owned,
        )

    def on_response(self, sent: HeartbeatRequest, response: HeartbeatResponse, now_ms: float) -> str:
        """Apply a heartbeat answer; returns what happened for the driver's log ("" normally, else the error)."""
        self._in_flight = False
        try:
            return self._on_response(sent, response, now_ms)
        finally:
            if self._urgent:
                self._next_heartbeat_ms = now_ms

    def _on_response(self, sent: HeartbeatRequest, response: HeartbeatResponse, now_ms: float) -> str:
        code = response.error_code
        if code:
            return self._on_error(sent, code, response.error_message, now_ms)
        self._failures = 0
        self._next_heartbeat_ms = now_ms + self.heartbeat_interval_ms
        if sent.member_epoch < 0:  # the leave was heard
            self._left(sent, now_ms)
            return ""
        if self.state in (MemberState.UNSUBSCRIBED, MemberState.FATAL, MemberState.STALE):
            return ""  # a late answer
        if sent.subscription is not None and sent.subscription == self.subscription:
            self._subscription_sent = True
        if sent.owned is not None:
            self._owned_sent = sent.owned
        if response.heartbeat_interval_ms > 0:
            self.heartbeat_interval_ms = response.heartbeat_interval_ms
            self._next_heartbeat_ms = now_ms + self.heartbeat_interval_ms
        if response.member_id:
            self.member_id = response.member_id
        if self.state is MemberState.FENCED:
            return ""  # a late answer: the application gives up its partitions, then the member rejoins
        self.member_epoch = response.member_epoch  # commits use the latest epoch, even while leaving
        if self.state in (MemberState.PREPARE_LEAVING, MemberState.LEAVING):
            return ""  # the partitions are being given up: no new assignment
        if response.assignment is not None:
            self.target = response.assignment
        if self.state is MemberState.JOINING and self.target is None:
            return ""  # joined; the assignment comes in a later answer
        if self.target is not None and self.target != self.owned:
            self.state = MemberState.RECONCILING
        elif self.state in (MemberState.JOINING, MemberState.ACKNOWLEDGING, MemberState.RECONCILING):
            if self.state is MemberState.ACKNOWLEDGING or self._owned_sent == self.owned:
                self.state = MemberState.STABLE
            else:
                self.state = MemberState.ACKNOWLEDGING
                self._next_heartbeat_ms = now_ms
        return ""

    def on_failure(self, sent: HeartbeatRequest, code: str, message: str, now_ms: float) -> str:
        """The heartbeat got no answer (``code``: NETWORK_EXCEPTION, REQUEST_TIMED_OUT, ...)."""
        self._in_flight = False
        return self._on_error(sent, code, message, now_ms)

    @property
    def in_group(self) -> bool:
        return self.state not in (MemberState.UNSUBSCRIBED, MemberState.FATAL, MemberState.STALE)

    @property
    def leave_done(self) -> bool:
        return self.state in (MemberState.UNSUBSCRIBED, MemberState.STALE, MemberState.FATAL)

    # ---------------------------------------------------------------------------------- inside

    def _on_error(self, sent: HeartbeatRequest, code: str, message: str, now_ms: float) -> str:
        self._subscription_sent = False  # unknown whether it arrived: send everything again
        self._owned_sent = None
        if sent.member_epoch < 0:
            if code in FENCED_CODES or code in FATAL_CODES:
                self._left(sent, now_ms)  # nothing left to leave
                return code
            if self._failures >= 2:  # leaving is best effort (the session timeout removes us anyway)
                self._left(sent, now_ms)
                return code
        if code in FATAL_CODES:
            self.state = MemberState.FATAL
            self.fatal_error = (code, message)
            return code
        if code in FENCED_CODES:
            if self.state in (MemberState.LEAVING, MemberState.PREPARE_LEAVING):
                self._left(sent, now_ms)
                return code
            self.member_epoch = JOIN_EPOCH
            self.member_id = ""  # rejoin as a new member (PROTOCOL.md: epoch 0, empty member_id)
            self.target = None
            self.state = MemberState.FENCED  # the application gives up its partitions first, then it rejoins
            self._next_heartbeat_ms = now_ms
            return code
        self._next_heartbeat_ms = now_ms + self._backoff_ms()
        self._failures += 1
        return code

    def _left(self, sent: HeartbeatRequest, now_ms: float) -> None:
        self.member_epoch = JOIN_EPOCH
        self.target = None
        self._failures = 0
        if self._stale_lost or (self.state is MemberState.LEAVING and self.subscription is not None):
            self.state = MemberState.STALE  # left for not polling: the next poll rejoins
            if self._rejoin_when_left and not self._stale_lost and self.subscription is not None:
                self._start_joining(now_ms)
        else:
            self.state = MemberState.UNSUBSCRIBED
            self.owned = frozenset()
            if sent.member_epoch == LEAVE_EPOCH:
                self.member_id = ""

    def _start_joining(self, now_ms: float) -> None:
        self._rejoin_when_left = False
        self.member_id = ""  # the coordinator picks the id of a (re)joining member
        self.member_epoch = JOIN_EPOCH
        self.target = None
        self.state = MemberState.JOINING
        self._subscription_sent = False
        self._owned_sent = None
        self._next_heartbeat_ms = now_ms

    def _backoff_ms(self) -> float:
        s = self.settings
        return float(min(s.retry_backoff_max_ms, s.retry_backoff_ms * (1 << min(self._failures, 20))))


def topic_partitions(assignment: Iterable[tuple[str, Iterable[int]]]) -> frozenset[TopicPartition]:
    """``[(topic, partitions), ...]`` as a set of TopicPartitions."""
    return frozenset(TopicPartition(topic, p) for topic, parts in assignment for p in parts)
