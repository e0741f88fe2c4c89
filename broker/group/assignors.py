"""Server-side partition assignors (KIP-848): ``uniform`` (Kafka's default) and ``range``.

An assignor is a pure function of the members' subscriptions, their current partitions and the partition
counts of the subscribed topics. Rules every assignor keeps (checked in ``tests/broker/group/test_assignors.py``):

* A1. Every partition of a subscribed topic goes to exactly one member subscribed to that topic.
* A2. A member gets only partitions of topics it subscribes to.

``uniform`` also keeps:

* U1. Balance: for any two members subscribed to a topic of one of them, their counts differ by at most one
  when both are eligible for the partitions in between (exactly the classic balance for equal subscriptions).
* U2. Stickiness: a member keeps every current partition it is still subscribed to, unless balance needs it
  elsewhere.

``range`` (per topic, members sorted by id, contiguous ranges, the first ``n % m`` members get one more)
gives co-partitioned topics the same partition numbers on the same member.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from broker.group.records import TopicPartition


@dataclass(frozen=True, slots=True)
class MemberSubscription:
    topics: frozenset[str]
    current: frozenset[TopicPartition] = frozenset()


Assignment = dict[str, frozenset[TopicPartition]]
Assignor = Callable[[Mapping[str, MemberSubscription], Mapping[str, int]], Assignment]


def _eligible(members: Mapping[str, MemberSubscription], topic: str) -> list[str]:
    return sorted(mid for mid, sub in members.items() if topic in sub.topics)


def range_assign(members: Mapping[str, MemberSubscription], partition_counts: Mapping[str, int]) -> Assignment:
    result: dict[str, set[TopicPartition]] = {mid: set() for mid in members}
    for topic in sorted(partition_counts):
        eligible = _eligible(members, topic)
        if not eligible:
            continue
        count = partition_counts[topic]
        quota, extra = divmod(count, len(eligible))
        start = 0
        for i, mid in enumerate(eligible):
            size = quota + (1 if i < extra else 0)
            result[mid].update((topic, p) for p in range(start, start + size))
            start += size
    return {mid: frozenset(tps) for mid, tps in result.items()}


def uniform_assign(members: Mapping[str, MemberSubscription], partition_counts: Mapping[str, int]) -> Assignment:
    """Sticky and balanced: keep what is still valid, give the rest to the least loaded, then even out."""
    topic_sets = {sub.topics for sub in members.values()}
    if len(topic_sets) == 1:
        return _uniform_homogeneous(members, partition_counts, next(iter(topic_sets)))
    return _uniform_general(members, partition_counts)


def _uniform_homogeneous(
    members: Mapping[str, MemberSubscription], partition_counts: Mapping[str, int], topics: frozenset[str]
) -> Assignment:
    """Every member subscribes to the same topics (the common case), in O(P log P) (Kafka's
    ``UniformHomogeneousAssignmentBuilder``): quotas of ``P // M``, ``P % M`` members get one more (those
    that already hold more first, so fewer partitions move); each keeps up to its quota of its current
    partitions; the rest go to members under quota."""
    everything = sorted((t, p) for t in topics if t in partition_counts for p in range(partition_counts[t]))
    valid = set(everything)
    order = sorted(members)
    kept = {mid: sorted(members[mid].current & valid) for mid in order}
    base, extra = divmod(len(everything), len(order))
    by_holding = sorted(order, key=lambda m: (-len(kept[m]), m))
    quota = {mid: base + (1 if i < extra else 0) for i, mid in enumerate(by_holding)}
    result: dict[str, list[TopicPartition]] = {}
    taken: set[TopicPartition] = set()
    for mid in order:
        keep = [tp for tp in kept[mid] if tp not in taken][: quota[mid]]
        taken.update(keep)
        result[mid] = keep
    free = iter(tp for tp in everything if tp not in taken)
    for mid in order:
        while len(result[mid]) < quota[mid]:
            result[mid].append(next(free))
    return {mid: frozenset(tps) for mid, tps in result.items()}


def _uniform_general(members: Mapping[str, MemberSubscription], partition_counts: Mapping[str, int]) -> Assignment:
    eligible_of: dict[TopicPartition, list[str]] = {}
    for topic in sorted(partition_counts):
        eligible = _eligible(members, topic)
        if eligible:
            for p in range(partition_counts[topic]):
                eligible_of[(topic, p)] = eligible
    result: dict[str, set[TopicPartition]] = {mid: set() for mid in members}
    owner: dict[TopicPartition, str] = {}
    for mid in sorted(members):  # U2: keep current partitions still valid
        for tp in sorted(members[mid].current):
            if tp in eligible_of and mid in eligible_of[tp] and tp not in owner:
                owner[tp] = mid
                result[mid].add(tp)
    # the rest, the most constrained first, to the eligible member with the fewest partitions
    free = sorted((tp for tp in eligible_of if tp not in owner), key=lambda tp: (len(eligible_of[tp]), tp))
    for tp in free:
        mid = min(eligible_of[tp], key=lambda m: (len(result[m]), m))
        owner[tp] = mid
        result[mid].add(tp)
    _balance(result, owner, eligible_of)
    return {mid: frozenset(tps) for mid, tps in result.items()}


def _balance(
    result: dict[str, set[TopicPartition]],
    owner: dict[TopicPartition, str],
    eligible_of: dict[TopicPartition, list[str]],
) -> None:
    """U1: move a partition from the most loaded member that can give one to an eligible member with at
    least two fewer, until none can move (always from the most loaded: no partition moves twice for U2).

    Each move lowers the sum of squared counts, so the loop ends; the bound is a belt for that argument.
    """
    for _ in range(len(owner) * 2 + 1):
        if not _move_one(result, owner, eligible_of):
            return


def _move_one(
    result: dict[str, set[TopicPartition]],
    owner: dict[TopicPartition, str],
    eligible_of: dict[TopicPartition, list[str]],
) -> bool:
    for src in sorted(result, key=lambda m: (-len(result[m]), m)):
        for tp in sorted(result[src]):
            dst = min(eligible_of[tp], key=lambda m: (len(result[m]), m))
            if len(result[src]) > len(result[dst]) + 1:
                result[src].discard(tp)
                result[dst].add(tp)
                owner[tp] = dst
                return True
    return False


ASSIGNORS: dict[str, Assignor] = {"uniform": uniform_assign, "range": range_assign}
