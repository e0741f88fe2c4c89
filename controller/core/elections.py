"""Leader elections and ISR upkeep: what happens to partitions when brokers come and go.

Kafka's rules (``PartitionChangeBuilder`` with ELR disabled), each cited by the tests:

- E1. A leader that is in the ISR and eligible (registered, unfenced, not in controlled shutdown) stays.
- E2. Otherwise the new leader is the first eligible ISR member in replica order.
- E3. With no eligible ISR member there is no leader (-1, the partition is offline) unless
  ``unclean.leader.election.enable`` is true for the topic (topic config, else the cluster's); then the
  first eligible replica in replica order leads and the ISR becomes just it (unclean: data may be lost).
- E4. Ineligible brokers leave ISRs, but an ISR never becomes empty: when every member is ineligible
  the ISR stays as it was (the last member stays, with leader -1) so that a clean leader can come back.
- E5. Preferred-leader election makes the first replica the leader when it is an eligible ISR member.

Pure functions over an immutable image; they return records and never mutate anything.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from controller.core.common import Eligibility
from controller.image import MetadataImage, PartitionRegistration, TopicIdPartition
from controller.records import NO_LEADER, PartitionChange

UncleanPolicy = Callable[[str], bool]
"""``unclean(topic_name)``: may this topic elect a leader outside its ISR?"""
Selector = Callable[[PartitionRegistration], bool]


def elect(
    reg: PartitionRegistration, isr: tuple[int, ...], eligible: Eligibility, *, unclean: bool
) -> tuple[int, tuple[int, ...]]:
    """``(leader, isr)`` after an election over ``isr`` (rules E1-E3)."""
    if reg.leader != NO_LEADER and reg.leader in isr and eligible(reg.leader):
        return reg.leader, isr
    for broker in reg.replicas:
        if broker in isr and eligible(broker):
            return broker, isr
    if unclean:
        for broker in reg.replicas:
            if eligible(broker):
                return broker, (broker,)
    return NO_LEADER, isr


def reconcile(reg: PartitionRegistration, eligible: Eligibility, *, unclean: bool) -> tuple[int, tuple[int, ...]]:
    """``(leader, isr)`` with ineligible members dropped from the ISR (E4) and a leader elected (E1-E3)."""
    isr = tuple(b for b in reg.isr if eligible(b)) or reg.isr
    return elect(reg, isr, eligible, unclean=unclean)


def change(
    tp: TopicIdPartition, reg: PartitionRegistration, leader: int, isr: tuple[int, ...]
) -> PartitionChange | None:
    """The record that moves ``reg`` to ``leader`` / ``isr``, or None when nothing changes."""
    new_isr = None if isr == reg.isr else isr
    new_leader = None if leader == reg.leader else leader
    if new_isr is None and new_leader is None:
        return None
    return PartitionChange(tp.topic_id, tp.partition, isr=new_isr, leader=new_leader)


def reconcile_partitions(
    image: MetadataImage, eligible: Eligibility, unclean: UncleanPolicy, select: Selector
) -> list[PartitionChange]:
    """Changes that bring every selected partition in line with ``eligible`` (E1-E4), in image order."""
    changes = []
    for tp, reg in image.all_partitions():
        if not select(reg):
            continue
        leader, isr = reconcile(reg, eligible, unclean=unclean(tp.topic_name))
        record = change(tp, reg, leader, isr)
        if record is not None:
            changes.append(record)
    return changes


def leaving_broker_changes(image: MetadataImage, broker_id: int, unclean: UncleanPolicy) -> list[PartitionChange]:
    """Broker ``broker_id`` is being fenced, shut down or re-registered: its ISR seats and leaderships go."""
    eligible = Eligibility(image, excluded=[broker_id])
    return reconcile_partitions(image, eligible, unclean, lambda reg: broker_id in reg.isr)


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
