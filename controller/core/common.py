"""What every part of the active controller's core shares: results, errors, eligibility, the clock
(``common.clock.Clock``; the core reads only its monotonic milliseconds).

A decision of the core is a :class:`ControllerResult`: the commands to append (each an atomic run of
records, committed together or not at all) and the response to send once every one has committed.
Order that matters: persist, then answer. A response is never sent for records that did not commit.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from metadata.image import BrokerRegistration, MetadataDelta, MetadataImage
from metadata.records import MetadataRecord
from proto import common_pb2

T = TypeVar("T")
Command = tuple[MetadataRecord, ...]
"""Records appended as one atomic batch of the metadata log."""


@dataclass(frozen=True, slots=True)
class ControllerResult(Generic[T]):
    """Commands to append, in order, then ``response`` to send once all of them have committed.

    Immutable (do not mutate ``response`` after handing the result over); safe to pass between threads.
    """

    commands: tuple[Command, ...]
    response: T

    @property
    def records(self) -> tuple[MetadataRecord, ...]:
        """Every record of every command, in append order."""
        return tuple(r for command in self.commands for r in command)


def error(code: str, message: str = "") -> common_pb2.Error:
    """An error carried in a response (``code`` is Kafka's error name)."""
    return common_pb2.Error(code=code, message=message)


NO_ERROR = common_pb2.Error()
"""Success: the empty code. Never mutate it (protobuf messages are mutable); ``CopyFrom`` it."""


def pack(groups: Iterable[Sequence[MetadataRecord]], max_records: int) -> tuple[Command, ...]:
    """Greedily pack groups of records into commands of at most ``max_records`` records.

    A group (one topic, one broker's fencing, ...) is never split across two commands; a group larger
    than ``max_records`` is the caller's bug (it must refuse such a request first).
    """
    commands: list[Command] = []
    current: list[MetadataRecord] = []
    for group in groups:
        if not group:
            continue
        if len(group) > max_records:
            raise ValueError(f"a group of {len(group)} records exceeds max_records={max_records}")
        if len(current) + len(group) > max_records:
            commands.append(tuple(current))
            current = []
        current.extend(group)
    if current:
        commands.append(tuple(current))
    return tuple(commands)


def chunk(records: Sequence[MetadataRecord], max_records: int) -> tuple[Command, ...]:
    """Records that need no atomicity among themselves, in commands of at most ``max_records``."""
    return tuple(tuple(records[i : i + max_records]) for i in range(0, len(records), max_records))


def preview(image: MetadataImage, commands: Iterable[Sequence[MetadataRecord]]) -> MetadataImage:
    """The image after ``commands`` commit right after ``image`` (the next offsets, in order).

    Raises :class:`~metadata.errors.MetadataError` when a record does not fit: the core checks every
    result with it before anything is appended, so that a bug of the core fails one request instead of
    halting every voter that would replay a bad record (docs/CONVENTIONS.md §8).
    """
    delta = MetadataDelta(image)
    offset = image.offset
    for command in commands:
        for record in command:
            offset += 1
            delta.replay(record, offset)
    return delta.apply()


def is_eligible(broker: BrokerRegistration | None) -> bool:
    """May lead and join ISRs: registered, unfenced and not in controlled shutdown."""
    return broker is not None and not broker.fenced and not broker.in_controlled_shutdown


class Eligibility:
    """Which brokers may lead or join an ISR, as the image says, with overrides for a pending change.

    ``excluded``: brokers about to be fenced or to enter controlled shutdown; ``included``: brokers about to
    be unfenced. Immutable after construction; one per decision.
    """

    __slots__ = ("_image", "_excluded", "_included")

    def __init__(self, image: MetadataImage, *, excluded: Iterable[int] = (), included: Iterable[int] = ()) -> None:
        self._image = image
        self._excluded = frozenset(excluded)
        self._included = frozenset(included)

    def __call__(self, broker_id: int) -> bool:
        if broker_id in self._excluded:
            return False
        if broker_id in self._included:
            return True
        return is_eligible(self._image.brokers.get(broker_id))

    def brokers(self) -> list[int]:
        """Every eligible broker id, ascending."""
        ids = set(self._image.brokers) | self._included
        return sorted(b for b in ids if self(b))
