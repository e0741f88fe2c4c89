"""Leader elections and ISR upkeep: what happens to partitions when brokers come and go.

Kafka's rules (``PartitionChangeBuilder``), each cited by the tests:

- E1. A leader that is in the ISR and eligible (registered, unfenced, not in controlled shutdown) stays.
- E2. Otherwise the new leader is the first eligible ISR member in replica order.
- E3. With no eligible ISR member (nor ELR member, E6, nor last known leader, E7) there is no leader (-1, the
  partition is offline) unless ``unclean.leader.election.enable`` is true for the topic (topic config, else
  the cluster's); then the first eligible replica in replica order leads and the ISR becomes just it
  (unclean: data may be lost).
- E4. Ineligible brokers leave ISRs. Without eligible leader replicas an ISR never becomes empty: when every
  member is ineligible the ISR stays as it was (the last member stays, with leader -1) so that a clean
  leader can come back.
- E5. Preferred-leader election makes the first replica the leader when it is an eligible ISR member.

Eligible leader replicas (KIP-966; ``eligible.leader.replicas.enable``, on by default):

- ELR1. While the ISR is smaller than the topic's ``min.insync.replicas`` the high watermark does not move
  (HW8, ``replication/high_watermark.py``), so every member that leaves the ISR then still holds every
  committed record: it joins the ELR (eligible leader replicas), and the ISR may become empty (E4 no
  longer keeps its last member). The ELR and the ISR are disjoint; an ISR at ``min.insync.replicas`` or
  more clears the ELR and the last known ELR.
- ELR2. A broker that registers again after an unclean shutdown (its ``previous_broker_epoch`` is not its
  last registration's) may have lost its unflushed tail: it leaves the ELR.
- ELR3. When the ISR becomes empty the partition remembers its last leader (``last_known_elr``, one broker);
  it is forgotten once the partition has a leader again.
- E6. With no eligible ISR member, the first eligible ELR member in replica order leads (a clean election:
  it has the high watermark); the ISR becomes just it.
- E7. With an empty ISR and an empty ELR, the last known leader (ELR3) leads once eligible, even after an
  unclean shutdown (Kafka's interim "last known leader" recovery), the ISR becoming just it: after a crash of
  every replica the partition comes back as with Kafka 3, while a clean ELR member is preferred when there
  is one -- so a last ISR member that lost its unflushed tail is no longer the only choice.

Pure functions over an immutable image; they return records and never mutate anything.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass

from controller.core.common import Eligibility
from metadata.image import MetadataImage, PartitionRegistration, TopicIdPartition
from metadata.records import NO_LEADER, PartitionChange

UncleanPolicy = Callable[[str], bool]
"""``unclean(topic_name)``: may this topic elect a leader outside its ISR? A policy may also have
``elr_min_isr(topic_name) -> int``: the topic's ``min.insync.replicas`` when eligible leader replicas are on,
0 when off (a plain function means off)."""
Selector = Callable[[PartitionRegistration], bool]


@dataclass(frozen=True, slots=True)
class LeaderPolicy:
    """An :data:`UncleanPolicy` that knows the ELR rules' ``min.insync.replicas`` (0: ELR off) too."""

    unclean_for: Callable[[str], bool]
    min_isr_for: Callable[[str], int]

    def __call__(self, topic_name: str) -> bool:
        return self.unclean_for(topic_name)

    def elr_min_isr(self, topic_name: str) -> int:
        return self.min_isr_for(topic_name)


@dataclass(frozen=True, slots=True)
class Target:
    """What a partition becomes: leader, ISR, ELR and last known ELR."""

    leader: int
    isr: tuple[int, ...]
    elr: tuple[int, ...] = ()
    last_known_elr: tuple[int, ...] = ()


def elr_min_isr(policy: UncleanPolicy, topic_name: str) -> int:
    """The ``min.insync.replicas`` the ELR rules use for the topic; 0 when eligible leader replicas are off."""
    fn = getattr(policy, "elr_min_isr", None)
    return int(fn(topic_name)) if fn is not None else 0


def elect(
    reg: PartitionRegistration, isr: tuple[int, ...], eligible: Eligibility, *, unclean: bool,
    elr: tuple[int, ...] = (), last_known_elr: tuple[int, ...] = (),
) -> tuple[int, tuple[int, ...]]:  # fmt: skip
    """``(leader, isr)`` after an election over ``isr``, then ``elr`` and ``last_known_elr`` (E1-E3, E6, E7)."""
    leader, new_isr, _ = _elect(reg, isr, eligible, unclean, elr, last_known_elr)
    return leader, new_isr


def _elect(
    reg: PartitionRegistration, isr: tuple[int, ...], eligible: Eligibility, unclean: bool,
    elr: tuple[int, ...], last_known_elr: tuple[int, ...],
) -> tuple[int, tuple[int, ...], str]:  # fmt: skip
    """:func:`elect`, and which rule decided: "isr", "elr", "last-known", "unclean" or "none"."""
    if reg.leader != NO_LEADER and reg.leader in isr and eligible(reg.leader):
        return reg.leader, isr, "isr"
    for broker in reg.replicas:
        if broker in isr and eligible(broker):
            return broker, isr, "isr"
    for broker in reg.replicas:
        if broker in elr and eligible(broker):
            return broker, (broker,), "elr"  # E6
    if not isr and not elr and len(last_known_elr) == 1 and eligible(last_known_elr[0]):
        return last_known_elr[0], last_known_elr, "last-known"  # E7
    if unclean:
        for broker in reg.replicas:
            if eligible(broker):
                return broker, (broker,), "unclean"
    return NO_LEADER, isr, "none"


def with_elr(
    reg: PartitionRegistration, isr: tuple[int, ...], min_isr: int, unclean_shutdown: Collection[int] = ()
) -> tuple[int, ...]:
    """ELR1, ELR2: the ELR of ``reg`` moving to ``isr`` (Kafka's ``maybePopulateTargetElr``)."""
    if len(isr) >= min_isr:
        return ()
    candidates = dict.fromkeys((*reg.elr, *reg.isr))
    return tuple(b for b in candidates if b not in isr and b not in unclean_shutdown)


def last_known_leader(reg: PartitionRegistration, leader: int, isr: tuple[int, ...]) -> tuple[int, ...]:
    """ELR3 (Kafka's ``maybeUpdateLastKnownLeader``): the last known ELR of ``reg`` moving to ``leader``, ``isr``."""
    if leader != NO_LEADER:
        return ()
    if not isr and reg.leader != NO_LEADER:
        return (reg.leader,)
    return reg.last_known_elr


def reconcile(
    reg: PartitionRegistration, eligible: Eligibility, *, unclean: bool, min_isr: int = 0,
    unclean_shutdown: Collection[int] = (),
) -> Target:  # fmt: skip
    """Ineligible members dropped from the ISR (E4, ELR1-ELR3) and a leader elected (E1-E3, E6, E7)."""
    if min_isr <= 0:  # eligible leader replicas off
        isr = tuple(b for b in reg.isr if eligible(b)) or reg.isr
        leader, isr = elect(reg, isr, eligible, unclean=unclean)
        return Target(leader, isr)
    isr = tuple(b for b in reg.isr if eligible(b))
    elr = with_elr(reg, isr, min_isr, unclean_shutdown)
    last = last_known_leader(reg, NO_LEADER, isr)
    leader, new_isr, rule = _elect(reg, isr, eligible, unclean, elr, last)
    if rule == "unclean":
        return Target(leader, new_isr)  # nothing else is known to hold the new leader's high watermark
    if rule in ("elr", "last-known"):  # the ISR is just the new leader: the others stay where they were
        elr = with_elr(PartitionRegistration(reg.replicas, (), NO_LEADER, 0, 0, elr), new_isr, min_isr)
    return Target(leader, new_isr, elr, last_known_leader(reg, leader, new_isr))


def change(
    tp: TopicIdPartition, reg: PartitionRegistration, leader: int, isr: tuple[int, ...],
    elr: tuple[int, ...] | None = None, last_known_elr: tuple[int, ...] | None = None,
) -> PartitionChange | None:  # fmt: skip
    """The record that moves ``reg`` to ``leader`` / ``isr`` (/ ``elr``, ``last_known_elr`` when given), or None
    when nothing changes."""
    new_isr = None if isr == reg.isr else isr
    new_leader = None if leader == reg.leader else leader
    new_elr = None if elr is None or elr == reg.elr else elr
    new_last = None if last_known_elr is None or last_known_elr == reg.last_known_elr else last_known_elr
    if new_isr is None and new_leader is None and new_elr is None and new_last is None:
        return None
    return PartitionChange(tp.topic_id, tp.partition, isr=new_isr, leader=new_leader, elr=new_elr,
                           last_known_elr=new_last)  # fmt: skip


def reconcile_partitions(
    image: MetadataImage, eligible: Eligibility, unclean: UncleanPolicy, select: Selector,
    unclean_shutdown: Collection[int] = (),
) -> list[PartitionChange]:  # fmt: skip
    """Changes that bring every selected partition in line with ``eligible`` (E1-E4, E6, E7, ELR1, ELR2), in
    image order."""
    changes = []
    for tp, reg in image.all_partitions():
        if not select(reg):
            continue
        min_isr = elr_min_isr(unclean, tp.topic_name)
        target = reconcile(
            reg, eligible, unclean=unclean(tp.topic_name), min_isr=min_isr, unclean_shutdown=unclean_shutdown
        )
        elr = target.elr if min_isr > 0 else None
        last = target.last_known_elr if min_isr > 0 else None
        record = change(tp, reg, target.leader, target.isr, elr, last)
        if record is not None:
            changes.append(record)
    return changes


def leaving_broker_changes(
    image: MetadataImage, broker_id: int, unclean: UncleanPolicy, *, unclean_shutdown: bool = False
) -> list[PartitionChange]:
    """Broker ``broker_id`` is being fenced, shut down or re-registered: its ISR seats and leaderships go;
    ``unclean_shutdown`` (a new registration after one, ELR2) takes it out of ELRs too."""
    eligible = Eligibility(image, excluded=[broker_id])
    shut = (broker_id,) if unclean_shutdown else ()

    def involved(reg: PartitionRegistration) -> bool:
        return broker_id in reg.isr or (unclean_shutdown and broker_id in reg.elr)

    return reconcile_partitions(image, eligible, unclean, involved, shut)


def arriving_broker_changes(image: MetadataImage, broker_id: int, unclean: UncleanPolicy) -> list[PartitionChange]:
    """Broker ``broker_id`` is being unfenced: offline partitions it can lead get it as leader."""
    eligible = Eligibility(image, included=[broker_id])
    return reconcile_partitions(image, eligible, unclean, lambda reg: reg.leader == NO_LEADER)


def preferred(reg: PartitionRegistration, eligible: Eligibility) -> int | None:
    """The preferred replica if it should lead now (E5), else None (it leads already or cannot)."""
    first = reg.replicas[0]
    if first == reg.leader or first not in reg.isr or not eligible(first):
        return None
    return first


def imbalanced(image: MetadataImage, eligible: Eligibility) -> Iterator[PartitionChange]:
    """Preferred-leader elections for every partition whose preferred replica could lead but does not."""
    for tp, reg in image.all_partitions():
        leader = preferred(reg, eligible)
        if leader is not None:
            yield PartitionChange(tp.topic_id, tp.partition, leader=leader)
