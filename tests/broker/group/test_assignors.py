"""The server-side assignors (broker/group/assignors.py), property tests citing rules A1, A2, U1, U2."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.group.assignors import MemberSubscription, range_assign, uniform_assign

TOPICS = ["a", "b", "c"]
counts_st = st.fixed_dictionaries({t: st.integers(0, 12) for t in TOPICS})
subs_st = st.dictionaries(
    st.sampled_from([f"m{i}" for i in range(7)]), st.frozensets(st.sampled_from(TOPICS), min_size=1), min_size=1
)


def _check_a1_a2(members: dict[str, MemberSubscription], counts: dict[str, int], result: dict) -> None:
    owners: dict[tuple[str, int], str] = {}
    for mid, tps in result.items():
        for tp in tps:
            assert tp not in owners, f"A1: {tp} given twice"
            owners[tp] = mid
            assert tp[0] in members[mid].topics, f"A2: {mid} got {tp} without subscribing"
    subscribed = {t for s in members.values() for t in s.topics}
    assert set(owners) == {(t, p) for t in subscribed for p in range(counts[t])}, "A1: a partition is unassigned"


@settings(deadline=None)  # the machine is shared: no per-example time limit
@given(subs_st, counts_st)
def test_uniform_and_range_assign_every_partition_once_to_a_subscriber(subs: dict, counts: dict[str, int]) -> None:
    members = {m: MemberSubscription(t) for m, t in subs.items()}
    for assign in (uniform_assign, range_assign):
        _check_a1_a2(members, counts, assign(members, counts))


@settings(deadline=None)  # the machine is shared: no per-example time limit
@given(st.integers(1, 7), counts_st, st.data())
def test_uniform_is_balanced_for_equal_subscriptions_and_sticky(n: int, counts: dict[str, int], data: st.DataObject):
    members = {f"m{i}": MemberSubscription(frozenset(TOPICS)) for i in range(n)}
    first = uniform_assign(members, counts)
    sizes = [len(tps) for tps in first.values()]
    assert max(sizes) - min(sizes) <= 1, "U1"
    # U2: a new member takes only what balance needs; everyone else keeps what it had
    sticky = {m: MemberSubscription(frozenset(TOPICS), first[m]) for m in members}
    sticky["new"] = MemberSubscription(frozenset(TOPICS))
    second = uniform_assign(sticky, counts)
    total = sum(counts.values())
    moved = sum(len(first[m] - second[m]) for m in members)
    assert moved == len(second["new"]) <= total // (n + 1) + 1, "U2: more moved than the new member got"
    sizes = [len(tps) for tps in second.values()]
    assert max(sizes) - min(sizes) <= 1, "U1"


def test_range_gives_contiguous_ranges_in_member_order_and_copartitions() -> None:
    members = {m: MemberSubscription(frozenset({"a", "b"})) for m in ("m2", "m1", "m3")}
    result = range_assign(members, {"a": 7, "b": 7})
    assert result["m1"] == {("a", 0), ("a", 1), ("a", 2), ("b", 0), ("b", 1), ("b", 2)}
    assert result["m2"] == {("a", 3), ("a", 4), ("b", 3), ("b", 4)}
    assert result["m3"] == {("a", 5), ("a", 6), ("b", 5), ("b", 6)}
