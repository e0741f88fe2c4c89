"""Broker registration, heartbeats, sessions, fencing and controlled shutdown (Kafka's
``ClusterControlManager`` and ``BrokerHeartbeatManager``).

Registration:

- R1. A broker's epoch is the offset of its RegisterBroker record (as in KRaft), so it grows with every
  registration of the same id.
- R2. The same incarnation registering again is idempotent: the current epoch, no record.
- R3. A new incarnation gets a new registration (new epoch, fenced); the old incarnation's ISR seats and
  leaderships go in the same command (as after an unclean shutdown). Unless it names its previous
  registration's epoch as the one it shut down cleanly with (``previous_broker_epoch``, KIP-966), it may have
  lost its unflushed tail: it also leaves the ELRs (rule ELR2 of ``controller.core.elections``).
- R4. A malformed request (negative id, incarnation id not a UUID, bad endpoint) is INVALID_REQUEST.
- R5. Another incarnation registering a broker id whose registration still has a live session (unfenced
  and heard from within ``broker.session.timeout.ms``, H2) is DUPLICATE_BROKER_REGISTRATION (Kafka's
  ``ClusterControlManager``): nothing is written and the live broker keeps its session. A restarted broker
  is refused until its old session expires and fences it (a controlled shutdown fences it at once).

Heartbeats (sessions live in memory on the active controller, never in the log):

- H1. A heartbeat with another epoch than the registration's is STALE_BROKER_EPOCH and is not a contact.
- H2. A broker whose last contact is more than ``broker.session.timeout.ms`` ago is fenced (at the tick);
  a newly active controller gives every registered broker a fresh session.
- H3. A fenced broker is unfenced once caught up: ``current_metadata_offset >= broker_epoch``, unless it
  asks to stay fenced. Offline partitions it can lead get it as leader in the same command.
- H4. States and transitions (``BrokerHeartbeatManager.calculateNextBrokerState``):
  FENCED --want_shut_down--> SHUTDOWN_NOW; UNFENCED --want_fence--> FENCED (SHUTDOWN_NOW with
  want_shut_down); UNFENCED --want_shut_down--> CONTROLLED_SHUTDOWN if it leads a partition, else
  SHUTDOWN_NOW; CONTROLLED_SHUTDOWN --> SHUTDOWN_NOW once it leads nothing and every unfenced broker has
  reported a metadata offset at or past the controlled-shutdown record (the new leaders know).
- H5. Fencing or entering controlled shutdown moves the broker's leaderships to other ISR members and
  removes it from ISRs (never emptying one: :mod:`controller.core.elections`, rules E1-E4).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from controller.core.common import Command, ControllerResult, chunk, error, preview
from controller.core.elections import UncleanPolicy, arriving_broker_changes, leaving_broker_changes
from metadata.errors import InvalidMetadataRecordError
from metadata.image import BrokerRegistration, MetadataImage
from metadata.records import (
    BrokerControlledShutdown,
    Endpoint,
    FenceBroker,
    MetadataRecord,
    PartitionChange,
    RegisterBroker,
    UnfenceBroker,
)
from proto import controller_pb2 as pb


class BrokerState(enum.Enum):
    FENCED = "fenced"
    UNFENCED = "unfenced"
    CONTROLLED_SHUTDOWN = "controlled_shutdown"
    SHUTDOWN_NOW = "shutdown_now"


def state_of(broker: BrokerRegistration) -> BrokerState:
    if broker.fenced:
        return BrokerState.SHUTDOWN_NOW if broker.in_controlled_shutdown else BrokerState.FENCED
    return BrokerState.CONTROLLED_SHUTDOWN if broker.in_controlled_shutdown else BrokerState.UNFENCED


@dataclass(slots=True)
class _Session:
    last_contact_ms: float
    metadata_offset: int = -1


class BrokerSessions:
    """Heartbeat sessions of the brokers, in memory (rule H2).

    Not thread-safe: owned by the controller thread, through :class:`~controller.core.ControllerCore`.
    """

    def __init__(self, session_timeout_ms: int) -> None:
        self.session_timeout_ms = session_timeout_ms
        self._sessions: dict[int, _Session] = {}
        self._shutdown_offsets: dict[int, int] = {}  # broker -> offset of its BrokerControlledShutdown

    def reset(self, image: MetadataImage, now_ms: float) -> None:
        """A fresh session for every registered broker (a newly active controller)."""
        self._sessions = {b: _Session(now_ms) for b in image.brokers}
        self._shutdown_offsets = {b: image.offset for b, r in image.brokers.items() if r.in_controlled_shutdown}

    def touch(self, broker_id: int, now_ms: float, metadata_offset: int) -> None:
        self._sessions[broker_id] = _Session(now_ms, metadata_offset)

    def is_alive(self, broker_id: int, now_ms: float) -> bool:
        """The broker was heard from within the session timeout (no session yet counts as a fresh one)."""
        session = self._sessions.get(broker_id)
        return session is None or now_ms - session.last_contact_ms <= self.session_timeout_ms

    def shutdown_started(self, broker_id: int, offset: int) -> None:
        self._shutdown_offsets[broker_id] = offset

    def expired(self, image: MetadataImage, now_ms: float) -> list[int]:
        """Unfenced brokers whose session timed out, ascending; drops sessions of unregistered brokers."""
        for gone in self._sessions.keys() - image.brokers.keys():
            del self._sessions[gone]
        stale = []
        for broker_id in sorted(image.brokers):
            if image.brokers[broker_id].fenced:
                continue
            session = self._sessions.setdefault(broker_id, _Session(now_ms))
            if now_ms - session.last_contact_ms > self.session_timeout_ms:
                stale.append(broker_id)
        return stale

    def others_caught_up(self, image: MetadataImage, broker_id: int) -> bool:
        """Every unfenced broker reported an offset at or past ``broker_id``'s controlled-shutdown record."""
        target = self._shutdown_offsets.get(broker_id, image.offset)
        for b, reg in image.brokers.items():
            session = self._sessions.get(b)
            if not reg.fenced and (session is None or session.metadata_offset < target):
                return False
        return True


def _with_changes(
    head: Sequence[MetadataRecord], changes: Sequence[PartitionChange], max_records: int
) -> tuple[Command, ...]:
    """``head`` and as many partition changes as fit in one command, the rest in commands of their own."""
    room = max_records - len(head)
    first: Command = (*head, *changes[:room])
    return (first, *chunk(changes[room:], max_records))


def _parse_registration(request: pb.RegisterBrokerRequest, epoch: int) -> RegisterBroker | str:
    """The record registering ``request``'s broker, or why it cannot be built (rule R4)."""
    try:
        endpoints = tuple(Endpoint.parse(name, request.endpoints[name]) for name in sorted(request.endpoints))
        return RegisterBroker(
            request.broker_id, request.incarnation_id, epoch, endpoints, request.rack or None, fenced=True
        )
    except InvalidMetadataRecordError as exc:
        return str(exc)


def register_broker(
    image: MetadataImage, request: pb.RegisterBrokerRequest, sessions: BrokerSessions, unclean: UncleanPolicy,
    now_ms: float, max_records: int,
) -> ControllerResult[pb.RegisterBrokerResponse]:  # fmt: skip
    """RegisterBroker (rules R1-R5)."""
    record = _parse_registration(request, image.offset + 1)
    if isinstance(record, str):
        return ControllerResult((), pb.RegisterBrokerResponse(error=error("INVALID_REQUEST", record)))
    existing = image.broker(request.broker_id)
    if (
        existing is not None
        and existing.incarnation_id != request.incarnation_id
        and not existing.fenced
        and sessions.is_alive(request.broker_id, now_ms)
    ):
        message = (
            f"Another broker is registered with broker id {request.broker_id} (incarnation "
            f"{existing.incarnation_id}, broker epoch {existing.broker_epoch}) and its session is alive"
        )
        refused = pb.RegisterBrokerResponse(error=error("DUPLICATE_BROKER_REGISTRATION", message))
        return ControllerResult((), refused)
    sessions.touch(request.broker_id, now_ms, -1)
    if existing is not None and existing.incarnation_id == request.incarnation_id:
        return ControllerResult((), pb.RegisterBrokerResponse(broker_epoch=existing.broker_epoch))
    clean = existing is not None and request.HasField("previous_broker_epoch") and (
        request.previous_broker_epoch == existing.broker_epoch
    )
    changes = [] if existing is None else leaving_broker_changes(
        image, request.broker_id, unclean, unclean_shutdown=not clean
    )  # fmt: skip
    commands = _with_changes([record], changes, max_records)
    return ControllerResult(commands, pb.RegisterBrokerResponse(broker_epoch=record.broker_epoch))


def next_state(
    current: BrokerState, request: pb.BrokerHeartbeatRequest, caught_up: bool, can_shut_down: bool,
    leads_partitions: bool,
) -> BrokerState:  # fmt: skip
    """Rule H4."""
    S = BrokerState
    if current is S.SHUTDOWN_NOW:
        return S.SHUTDOWN_NOW
    if current is S.FENCED:
        if request.want_shut_down:
            return S.SHUTDOWN_NOW
        return S.UNFENCED if caught_up and not request.want_fence else S.FENCED
    if current is S.UNFENCED:
        if request.want_fence:
            return S.SHUTDOWN_NOW if request.want_shut_down else S.FENCED
        if request.want_shut_down:
            return S.CONTROLLED_SHUTDOWN if leads_partitions else S.SHUTDOWN_NOW
        return S.UNFENCED
    if request.want_shut_down and can_shut_down:  # CONTROLLED_SHUTDOWN
        return S.SHUTDOWN_NOW
    return S.CONTROLLED_SHUTDOWN


def transition_records(
    image: MetadataImage, broker: BrokerRegistration, current: BrokerState, target: BrokerState,
    unclean: UncleanPolicy, max_records: int,
) -> tuple[Command, ...]:  # fmt: skip
    """The commands that move ``broker`` from ``current`` to ``target`` (rules H3, H5)."""
    b, epoch = broker.broker_id, broker.broker_epoch
    S = BrokerState
    if current is target or (current is S.FENCED and target is S.SHUTDOWN_NOW):
        return ()
    if target is S.UNFENCED:
        return _with_changes([UnfenceBroker(b, epoch)], arriving_broker_changes(image, b, unclean), max_records)
    if target is S.CONTROLLED_SHUTDOWN:
        head: list[MetadataRecord] = [BrokerControlledShutdown(b, epoch)]
    else:  # FENCED or SHUTDOWN_NOW from UNFENCED or CONTROLLED_SHUTDOWN
        head = [FenceBroker(b, epoch)]
    return _with_changes(head, leaving_broker_changes(image, b, unclean), max_records)


def broker_heartbeat(
    image: MetadataImage, request: pb.BrokerHeartbeatRequest, sessions: BrokerSessions, unclean: UncleanPolicy,
    now_ms: float, max_records: int,
) -> ControllerResult[pb.BrokerHeartbeatResponse]:  # fmt: skip
    """BrokerHeartbeat (rules H1, H3-H5)."""
    broker = image.broker(request.broker_id)
    if broker is None or broker.broker_epoch != request.broker_epoch:
        current_epoch = "no registration" if broker is None else f"epoch {broker.broker_epoch}"
        message = f"Broker {request.broker_id} has {current_epoch}, the heartbeat epoch {request.broker_epoch}"
        return ControllerResult((), pb.BrokerHeartbeatResponse(error=error("STALE_BROKER_EPOCH", message)))
    sessions.touch(broker.broker_id, now_ms, request.current_metadata_offset)
    caught_up = request.current_metadata_offset >= broker.broker_epoch
    current = state_of(broker)
    leads = bool(request.want_shut_down) and any(reg.leader == broker.broker_id for _, reg in image.all_partitions())
    can_shut_down = not leads and sessions.others_caught_up(image, broker.broker_id)
    target = next_state(current, request, caught_up, can_shut_down, leads)
    commands = transition_records(image, broker, current, target, unclean, max_records)
    if target is BrokerState.CONTROLLED_SHUTDOWN and current is not target:
        sessions.shutdown_started(broker.broker_id, image.offset + 1)
    response = pb.BrokerHeartbeatResponse(
        is_caught_up=caught_up,
        is_fenced=target in (BrokerState.FENCED, BrokerState.SHUTDOWN_NOW),
        should_shut_down=target is BrokerState.SHUTDOWN_NOW,
    )
    return ControllerResult(commands, response)


def fence_expired(
    image: MetadataImage, sessions: BrokerSessions, unclean: UncleanPolicy, now_ms: float, max_records: int
) -> list[Command]:
    """Commands fencing every broker whose session expired (rules H2, H5), each built on the one before."""
    commands: list[Command] = []
    for broker_id in sessions.expired(image, now_ms):
        broker = image.brokers[broker_id]
        fence = transition_records(image, broker, state_of(broker), BrokerState.FENCED, unclean, max_records)
        commands += fence
        image = preview(image, fence)
    return commands
