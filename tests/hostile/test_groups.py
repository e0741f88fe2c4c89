"""Hostile consumer-group requests (issue 15): a regex with catastrophic backtracking used to freeze the
coordinator, and the next one too (it is stored in ``__consumer_offsets``); regexes RE2 refuses; odd group
fields. Each ends with :func:`check_healthy`."""

from __future__ import annotations

import time

import pytest

from proto import broker_pb2 as pb
from tests.broker.cluster import Cluster
from tests.hostile.health import CALL_TIMEOUT_S, Ledger, check_healthy

pytestmark = pytest.mark.hostile

EVIL = r"(q+)+$"  # exponential in a backtracking engine on "qqqq...q-x": 2^40 steps for the topics below
RETRIABLE = ("COORDINATOR_NOT_AVAILABLE", "NOT_COORDINATOR", "COORDINATOR_LOAD_IN_PROGRESS")


def coordinator(cluster: Cluster, group: str, timeout_s: float = 30.0) -> int:
    """The broker coordinating ``group`` (FindCoordinator, retried while ``__consumer_offsets`` settles)."""

    def find() -> tuple[int] | None:
        for i, proc in enumerate(cluster.brokers):
            if not proc.alive():
                continue
            try:
                request = pb.FindCoordinatorRequest(key_type=0, keys=[group])
                answer = cluster.broker_stub(i).FindCoordinator(request, timeout=CALL_TIMEOUT_S).coordinators[0]
            except Exception:
                continue
            if not answer.error.code and answer.node_id >= 0 and cluster.brokers[answer.node_id].alive():
                return (answer.node_id,)
        return None

    found: tuple[int] = cluster.wait_for(find, timeout_s, f"the coordinator of {group}")
    return found[0]


def join(cluster: Cluster, group: str, *, regex: str = "", topics: tuple[str, ...] = (),
         timeout_s: float = 30.0) -> pb.ConsumerGroupHeartbeatResponse:  # fmt: skip
    """A joining heartbeat (member epoch 0), sent to the coordinator, retried while it moves or loads."""
    deadline = time.monotonic() + timeout_s
    while True:
        request = pb.ConsumerGroupHeartbeatRequest(
            group_id=group, member_epoch=0, rebalance_timeout_ms=30_000, subscribed_topic_regex=regex,
            subscribed_topic_names=list(topics), subscription_changed=True, owned_partitions_sent=True,
        )  # fmt: skip
        stub = cluster.broker_stub(coordinator(cluster, group))
        response: pb.ConsumerGroupHeartbeatResponse = stub.ConsumerGroupHeartbeat(request, timeout=CALL_TIMEOUT_S)
        if response.error.code not in RETRIABLE or time.monotonic() > deadline:
            return response
        time.sleep(0.1)


def assigned_topics(response: pb.ConsumerGroupHeartbeatResponse) -> set[str]:
    return {tp.topic for tp in response.assignment} if response.has_assignment else set()


@pytest.mark.parametrize(("regex", "why"), [
    ("(", "missing )"), (r"(a)\1", "invalid escape"), ("(?=a)b", "invalid perl operator"),
    ("x{2,1}", "invalid repetition size"), ("[z-a]", "invalid character class range"),
    ("y" * 10_000, "longer than 8192"),
])  # fmt: skip
def test_a_regex_re2_refuses_is_invalid_regular_expression_and_not_stored(
    cluster: Cluster, ledger: Ledger, regex: str, why: str
) -> None:
    response = join(cluster, "bad-regex", regex=regex)
    assert response.error.code == "INVALID_REGULAR_EXPRESSION"
    assert why in response.error.message
    assert not response.member_id  # nothing joined, nothing stored
    check_healthy(cluster, ledger)


def test_a_catastrophic_regex_is_matched_in_linear_time_and_survives_a_coordinator_move(
    cluster: Cluster, ledger: Ledger
) -> None:
    """RE2 semantics (Kafka's RE2/J for KIP-848): ``(q+)+$`` against topics named ``qqq...q-x`` is answered at
    once, and other groups are served meanwhile. Stored with its member, it is matched again by the next
    coordinator after a controlled shutdown of this one: that one must not freeze either."""
    victims = [("q" * n) + "-x" for n in (40, 80, 200)]
    for name in victims:
        cluster.create_topic(name, 1, 1)
    cluster.create_topic("qqqq", 1, 1)
    evil = join(cluster, "evil-regex", regex=EVIL)
    assert not evil.error.code, evil.error
    assert assigned_topics(evil) == {"qqqq"}
    other = join(cluster, "a-bystander", topics=("ledger",))
    assert not other.error.code, other.error
    old = coordinator(cluster, "evil-regex")
    cluster.stop_broker(old)
    try:
        new = coordinator(cluster, "evil-regex")
        assert new != old
        again = join(cluster, "evil-regex", regex=EVIL)  # the new coordinator loaded the stored member too
        assert not again.error.code, again.error
        assert assigned_topics(again) <= {"qqqq"}
    finally:
        cluster.start_broker(old)
    check_healthy(cluster, ledger)


@pytest.mark.parametrize(("field", "value", "code"), [
    ("group_id", "", "INVALID_GROUP_ID"), ("member_epoch", -3, "INVALID_REQUEST"),
    ("session_timeout_ms", 1, "INVALID_REQUEST"), ("server_assignor", "sticky-please", "UNSUPPORTED_ASSIGNOR"),
    ("member_epoch", 2**31 - 1, "INVALID_REQUEST"),
])  # fmt: skip
def test_odd_heartbeat_fields_are_named(cluster: Cluster, ledger: Ledger, field: str, value: object, code: str) -> None:
    request = pb.ConsumerGroupHeartbeatRequest(group_id="odd", member_epoch=0, subscribed_topic_names=["ledger"],
                                               subscription_changed=True)  # fmt: skip
    setattr(request, field, value)
    if field == "member_epoch" and isinstance(value, int) and value > 0:
        request.member_id = ""  # a member epoch without a member id
    stub = cluster.broker_stub(coordinator(cluster, "odd"))
    response = stub.ConsumerGroupHeartbeat(request, timeout=CALL_TIMEOUT_S)
    assert response.error.code in (code, "UNKNOWN_MEMBER_ID", "NOT_COORDINATOR"), response.error
    assert response.error.message
    check_healthy(cluster, ledger)
