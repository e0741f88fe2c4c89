"""A seeded simulation of the state machine with clients that follow PROTOCOL.md (docs/CONVENTIONS.md §9).

Clients join, heartbeat in random order, sometimes late (a lost turn), leave, crash (stop heartbeating
until their session expires), come back (static ones replace their old member), commit, and some apply
their assignments late (as an application thread reconciling in ``poll``); topics grow. After every step:

* C1 (client side, the guarantee users rely on): no two live clients own the same partition;
* C1 (coordinator side): no partition is in two members' ``assigned | pending_revocation``;
* R1: replaying every record emitted so far rebuilds the persisted state exactly.

Then, with membership quiet, the group converges: Stable, every partition owned once, balanced. The seed
is printed on failure.
"""

from __future__ import annotations

import random

import pytest

from broker.group.errors import GroupError
from broker.group.model import Groups, replay
from broker.group.records import CoordinatorRecord, TopicPartition
from broker.group.shard import Heartbeat, OffsetCommit
from common.clock import ManualClock
from tests.broker.group.helpers import CONFIG, Topics, make_shard
from tests.broker.group.test_shard import persisted

SEEDS = range(60)


class Client:
    """Sends its owned partitions only when they changed since the last answered report (as the odradek
    Consumer does); a ``lazy`` client applies an assignment later (its application thread reconciles in
    ``poll``), with heartbeats going on meanwhile."""

    def __init__(self, name: str, instance_id: str = "", lazy: bool = False) -> None:
        self.name, self.instance_id, self.lazy = name, instance_id, lazy
        self.member_id, self.epoch = "", 0
        self.owned: frozenset[TopicPartition] = frozenset()
        self.target: frozenset[TopicPartition] | None = None
        self.sent: frozenset[TopicPartition] | None = None
        self.alive = True

    def request(self) -> Heartbeat:
        joining = self.epoch == 0
        return Heartbeat(
            "g", self.member_id, self.epoch, instance_id=self.instance_id, rebalance_timeout_ms=60_000,
            subscribed_topic_names=("a", "b") if joining else None,
            owned=self.owned if joining or self.owned != self.sent else None,
        )  # fmt: skip

    def answer(self, request: Heartbeat, result: object) -> None:
        self.member_id, self.epoch = result.member_id, result.member_epoch  # type: ignore[attr-defined]
        if request.owned is not None:
            self.sent = request.owned
        assignment = result.assignment  # type: ignore[attr-defined]
        if assignment is not None:
            self.target = assignment
            if not self.lazy:
                self.apply()

    def apply(self) -> None:
        if self.target is not None:
            self.owned = self.target  # revoke what is not in it, then take the rest
            self.target = None

    def reset(self) -> None:  # UNKNOWN_MEMBER_ID / FENCED_MEMBER_EPOCH: drop everything, rejoin
        self.member_id, self.epoch, self.owned, self.target, self.sent = "", 0, frozenset(), None, None


def run(seed: int) -> None:
    rng = random.Random(seed)
    clock = ManualClock()
    shard, topics = make_shard(clock), Topics({"a": rng.randint(1, 6), "b": rng.randint(0, 6)})
    log: list[CoordinatorRecord] = []
    clients = [
        Client(f"c{i}", instance_id=f"i{i}" if rng.random() < 0.3 else "", lazy=rng.random() < 0.5)
        for i in range(rng.randint(1, 5))
    ]

    def heartbeat(c: Client) -> None:
        request = c.request()
        try:
            result, records = shard.heartbeat(request, topics)
        except GroupError as exc:
            if exc.code not in ("UNKNOWN_MEMBER_ID", "FENCED_MEMBER_EPOCH"):
                raise
            c.reset()
            return
        log.extend(records)
        c.answer(request, result)

    def check() -> None:
        # a client whose session expired while it was slow owns its partitions until its next heartbeat tells
        # it (UNKNOWN_MEMBER_ID): Kafka's zombie case; the guarantee is for the members the coordinator has
        members = shard.groups["g"].members if "g" in shard.groups else {}
        live = [c for c in clients if c.alive and c.member_id in members]
        owned = [tp for c in live for tp in c.owned]
        assert len(owned) == len(set(owned)), f"C1 (clients): {[(c.name, sorted(c.owned)) for c in live]}"
        held = [
            tp for g in shard.groups.values() for m in g.members.values() for tp in m.assigned | m.pending_revocation
        ]
        assert len(held) == len(set(held)), "C1 (coordinator)"
        rebuilt: Groups = {}
        for r in log:
            replay(rebuilt, r)
        assert persisted(rebuilt) == persisted(shard.groups), "R1"

    for _ in range(rng.randint(20, 120)):
        c = rng.choice(clients)
        roll = rng.random()
        if not c.alive:
            if roll < 0.2:  # a crashed client comes back (a new process: nothing owned, a new member id)
                c.alive = True
                c.reset()
            continue
        if roll < 0.05:
            c.alive = False  # crash: its session will expire
        elif roll < 0.09 and c.epoch > 0:
            try:
                _, records = shard.heartbeat(Heartbeat("g", c.member_id, -1, instance_id=c.instance_id), topics)
                log.extend(records)
            except GroupError as exc:
                if exc.code not in ("UNKNOWN_MEMBER_ID", "FENCED_INSTANCE_ID"):  # expired or replaced already
                    raise
            c.reset()
            c.alive = False
        elif roll < 0.12:
            topics.counts[rng.choice("ab")] += 1
        elif roll < 0.2 and c.lazy:
            c.apply()
        elif roll < 0.16 and c.epoch > 0 and c.owned:
            try:
                _, records = shard.commit_offsets(
                    OffsetCommit("g", c.member_id, c.epoch, c.instance_id, {tp: (1, -1, "") for tp in c.owned}), topics
                )
                log.extend(records)
            except GroupError as exc:
                if exc.code not in ("STALE_MEMBER_EPOCH", "UNKNOWN_MEMBER_ID", "FENCED_INSTANCE_ID"):
                    raise  # an expired or replaced member may still try
        elif roll < 0.26:
            clock.advance(rng.randint(100, 4_000))
            for gid in shard.due_groups():
                log.extend(shard.expire_group(gid))
        else:
            heartbeat(c)
        check()

    # quiet: every crashed client's session expires, the live ones heartbeat until stable
    clock.advance(CONFIG.session_timeout_ms + 1)
    for c in clients:
        if c.alive:
            heartbeat(c)
    for gid in shard.due_groups():
        log.extend(shard.expire_group(gid))
    live = [c for c in clients if c.alive]
    for _ in range(12):
        for c in live:
            heartbeat(c)
            c.apply()
        check()
    if live:
        group = shard.groups["g"]
        assert group.state().value == "Stable"
        everything = {(t, p) for t, n in topics.counts.items() for p in range(n)}
        assert set().union(*(c.owned for c in live)) == everything
        sizes = [len(c.owned) for c in live]
        assert max(sizes) - min(sizes) <= 1


@pytest.mark.parametrize("seed", SEEDS)
def test_simulation(seed: int) -> None:
    try:
        run(seed)
    except AssertionError as exc:
        raise AssertionError(f"seed {seed}: {exc}") from exc
