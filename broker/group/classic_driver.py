"""The classic groups' runtime: their state (:mod:`broker.group.classic`) per coordinator shard, the
threads that wait for a JoinGroup or SyncGroup to complete, and the timer thread.

Each shard's classic groups are mutated only under that shard's lock (the same lock as its consumer
groups, through :meth:`GroupCoordinator.read` / :meth:`GroupCoordinator.run`), so a group id is either
classic or consumer at any moment: a JoinGroup for a consumer group with members answers
INCONSISTENT_GROUP_PROTOCOL, a ConsumerGroupHeartbeat for a classic group with members GROUP_ID_NOT_FOUND
(the checks run under the lock). A waiting join or sync holds its request thread on a :class:`_Waiter`
(the Kafka listener has a thread per connection, so no other connection waits), bounded by its
rebalance timeout plus :data:`WAIT_SLACK_S`; a shard dropped meanwhile (leadership moved) answers
NOT_COORDINATOR then. The timer thread runs :meth:`ClassicGroups.tick` every :data:`TICK_S`.

Thread-safety: every public method is for any thread.
"""

from __future__ import annotations

import logging
import threading
import weakref
from typing import Any

from broker.group import errors as E
from broker.group.classic import ClassicConfig, ClassicGroups, JoinRequest, JoinResult, Ready, SyncResult
from broker.group.coordinator import GroupCoordinator
from broker.group.errors import GroupError
from broker.group.shard import GroupShard
from common.clock import Clock

logger = logging.getLogger(__name__)

TICK_S = 0.05
WAIT_SLACK_S = 5.0


class _Waiter:
    __slots__ = ("answer", "event")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.answer: Any = None


class ClassicCoordinator:
    def __init__(self, coordinator: GroupCoordinator, config: ClassicConfig, clock: Clock) -> None:
        self.coordinator = coordinator
        self.config = config
        self.clock = clock
        self._by_shard: weakref.WeakKeyDictionary[GroupShard, ClassicGroups] = weakref.WeakKeyDictionary()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="classic-groups-timer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(2.0)

    def groups_of(self, core: GroupShard) -> ClassicGroups:
        """The classic groups of ``core`` (call under its lock)."""
        groups = self._by_shard.get(core)
        if groups is None:
            groups = self._by_shard[core] = ClassicGroups(self.config)
        return groups

    def _run(self) -> None:
        while not self._stopping.wait(TICK_S):
            now = self.clock.monotonic_ms()
            for _, core, lock in self.coordinator.shards():
                with lock:
                    groups = self._by_shard.get(core)
                    ready = groups.tick(now) if groups is not None else []
                _deliver(ready)

    # --- operations ---------------------------------------------------------------------------------

    def join(self, req: JoinRequest) -> JoinResult:
        waiter = _Waiter()

        def op(core: GroupShard) -> tuple[JoinResult | None, Ready]:
            consumer = core.groups.get(req.group_id)
            if consumer is not None and consumer.members:
                raise GroupError(
                    "INCONSISTENT_GROUP_PROTOCOL", f"group {req.group_id} is a consumer group (KIP-848) with members"
                )
            return self.groups_of(core).join(req, waiter, self.clock.monotonic_ms())

        try:
            result, ready = self.coordinator.read(req.group_id, op)
        except GroupError as exc:
            return JoinResult(error=exc.code, member_id=req.member_id)
        _deliver(ready)
        if result is not None:
            return result
        bound = (max(req.rebalance_timeout_ms, self.config.initial_rebalance_delay_ms) / 1000.0) + WAIT_SLACK_S
        if not waiter.event.wait(bound):
            return JoinResult(error=E.NOT_COORDINATOR, member_id=req.member_id)
        answer: JoinResult = waiter.answer
        return answer

    def sync(self, group_id: str, member_id: str, instance_id: str, generation_id: int,
             assignments: dict[str, bytes]) -> SyncResult:  # fmt: skip
        waiter = _Waiter()
        timeout_ms = 0

        def op(core: GroupShard) -> tuple[SyncResult | None, Ready]:
            nonlocal timeout_ms
            groups = self.groups_of(core)
            group = groups.groups.get(group_id)
            member = group.members.get(member_id) if group is not None else None
            timeout_ms = member.rebalance_timeout_ms if member is not None else 0
            return groups.sync(group_id, member_id, instance_id, generation_id, assignments, waiter,
                               self.clock.monotonic_ms())  # fmt: skip

        try:
            result, ready = self.coordinator.read(group_id, op)
        except GroupError as exc:
            return SyncResult(error=exc.code)
        _deliver(ready)
        if result is not None:
            return result
        if not waiter.event.wait(timeout_ms / 1000.0 + WAIT_SLACK_S):
            return SyncResult(error=E.NOT_COORDINATOR)
        answer: SyncResult = waiter.answer
        return answer

    def heartbeat(self, group_id: str, member_id: str, instance_id: str, generation_id: int) -> str:
        try:
            self.coordinator.read(group_id, lambda core: self.groups_of(core).heartbeat(
                group_id, member_id, instance_id, generation_id, self.clock.monotonic_ms()))  # fmt: skip
        except GroupError as exc:
            return exc.code
        return ""

    def leave(self, group_id: str, members: list[tuple[str, str]]) -> tuple[str, list[str]]:
        """``(group error, per-member errors)``."""
        try:
            errors, ready = self.coordinator.read(
                group_id, lambda core: self.groups_of(core).leave(group_id, members, self.clock.monotonic_ms())
            )
        except GroupError as exc:
            return exc.code, [exc.code] * len(members)
        _deliver(ready)
        return "", errors


def _deliver(ready: Ready) -> None:
    for token, answer in ready:
        token.answer = answer
        token.event.set()
