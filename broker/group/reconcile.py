"""Incremental reconciliation of one member towards its target assignment (Kafka's ``CurrentAssignmentBuilder``).

Rules (KIP-848; ``tests/broker/group/test_reconcile.py`` and the shard simulation cite them):

* C1. Revoke before assign: a partition is in at most one member's ``assigned | pending_revocation``; a
  member gets a partition only when no other member holds it there.
* C2. A member that owns partitions outside its target first moves to UNREVOKED_PARTITIONS: ``assigned``
  shrinks to what it keeps, the rest waits in ``pending_revocation``, and its epoch does not move.
* C3. It leaves UNREVOKED_PARTITIONS only once it *reported* owning none of ``pending_revocation``: its
  latest report counts (a client sends its owned partitions whenever they change, so an unchanged set
  is still true; a report unknown since a coordinator failover counts as still owning).
* C4. With nothing to revoke, the member moves to the assignment epoch and takes every target partition
  that is free; UNRELEASED_PARTITIONS while some are still held by others, else STABLE.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from broker.group.model import MemberState
from broker.group.records import TopicPartition


@dataclass(frozen=True, slots=True)
class MemberAssignment:
    member_epoch: int
    previous_member_epoch: int
    state: MemberState
    assigned: frozenset[TopicPartition]
    pending_revocation: frozenset[TopicPartition]


def reconcile(
    current: MemberAssignment,
    member_id: str,
    target: frozenset[TopicPartition],
    assignment_epoch: int,
    owned_reported: frozenset[TopicPartition] | None,
    owners: Mapping[TopicPartition, str],
) -> MemberAssignment:
    """The member's next assignment; ``owners`` maps each held partition to the member holding it."""
    if current.state is MemberState.UNREVOKED_PARTITIONS and (
        owned_reported is None or owned_reported & current.pending_revocation
    ):
        return current  # C3: still owns (or has not said it released) partitions it must give up
    keep = current.assigned & target
    revoke = current.assigned - target
    if revoke:  # C2
        return MemberAssignment(
            current.member_epoch, current.previous_member_epoch, MemberState.UNREVOKED_PARTITIONS, keep, revoke
        )
    free = frozenset(tp for tp in target - keep if owners.get(tp, member_id) == member_id)  # C1
    assigned = keep | free
    state = MemberState.UNRELEASED_PARTITIONS if assigned != target else MemberState.STABLE  # C4
    previous = current.member_epoch if assignment_epoch != current.member_epoch else current.previous_member_epoch
    return MemberAssignment(assignment_epoch, previous, state, assigned, frozenset())
