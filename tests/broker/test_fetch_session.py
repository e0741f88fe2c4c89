"""Fetch sessions (broker/fetch_session.py) against real partitions: a follower's incremental fetches name
only what changed, the leader answers only what has news, a change to an idle partition wakes the parked
fetch, a high watermark alone does not (it rides with the next answer), epochs out of order and forgotten
partitions, and the idle partitions' caught-up time kept current (ISR1) without reading them."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

from broker.delayed_fetch import DelayedFetch, HeldFetch
from broker.fetch_session import LeaderSession, SessionError
from broker.handlers import fetch, produce
from broker.replication_link import (
    FETCH_SESSION_ID_NOT_FOUND,
    INVALID_FETCH_SESSION_EPOCH,
    MAX_EPOCH,
    FollowerSession,
    next_epoch,
)
from proto import broker_pb2 as pb
from tests.broker.conftest import BrokerHarness, batch
from tests.broker.test_produce_handler import answer, produce_request

FOLLOWER = 1
TOPICS = ("a", "b", "c")
PARKED_S = 5.0


@pytest.fixture
def cluster(tmp_path: Path) -> Iterable[BrokerHarness]:
    h = BrokerHarness(tmp_path / "broker", props={"replica.lag.time.max.ms": "1000"})  # idle touched every 100 ms
    try:
        h.register(FOLLOWER)
        for topic in TOPICS:
            h.create_topic(topic, replicas=[0, FOLLOWER])
            append(h, topic)
        yield h
    finally:
        h.close()


def append(h: BrokerHarness, topic: str) -> None:
    result = answer(produce.handle(h.ctx, produce_request(topic, batch([b"v"]), acks=1)))
    assert not result.error.code, result.error


def request(
    h: BrokerHarness, epoch: int, named: Mapping[str, int] = {}, forgotten: Iterable[str] = (),  # noqa: B006
    max_wait_ms: int = 100, min_bytes: int = 1,
) -> pb.FetchRequest:  # fmt: skip
    """The follower's fetch: ``named`` topic -> fetch offset (partition 0 of each)."""
    r = pb.FetchRequest(replica_id=FOLLOWER, replica_epoch=h.broker_epoch(FOLLOWER), max_wait_ms=max_wait_ms,
                        min_bytes=min_bytes, max_bytes=1 << 20, session_epoch=epoch)  # fmt: skip
    for topic, offset in named.items():
        r.topics.add(name=topic).partitions.add(partition=0, fetch_offset=offset, partition_max_bytes=1 << 20,
                                                current_leader_epoch=h.partition(topic).leader_epoch)  # fmt: skip
    for topic in forgotten:
        r.forgotten.add(name=topic).partitions.add(partition=0)
    return r


def begin(h: BrokerHarness, session: LeaderSession, r: pb.FetchRequest) -> object:
    return session.begin(h.ctx, session.apply(r))


def finish(h: BrokerHarness, session: LeaderSession, started: object, within_s: float = PARKED_S) -> pb.FetchResponse:
    if isinstance(started, fetch.PendingFetch):
        assert started.op.wait(within_s), "the parked fetch was not answered"
        started = session.finish(h.ctx, started)
    assert isinstance(started, pb.FetchResponse)
    session.answered(started)
    return started


def answers(response: pb.FetchResponse) -> dict[str, pb.FetchPartitionResponse]:
    return {t.name: p for t in response.topics for p in t.partitions}


def caught_up_session(h: BrokerHarness) -> LeaderSession:
    """A session whose follower has everything (offset 1 of each topic) and knows each high watermark (1)."""
    session = LeaderSession(h.ctx)
    first = answers(finish(h, session, begin(h, session, request(h, 0, dict.fromkeys(TOPICS, 0)))))
    assert {name: len(a.records) > 0 for name, a in first.items()} == dict.fromkeys(TOPICS, True)
    second = answers(finish(h, session, begin(h, session, request(h, 1, dict.fromkeys(TOPICS, 1)))))
    assert {name: a.high_watermark for name, a in second.items()} == dict.fromkeys(TOPICS, 1)
    return session


def test_only_partitions_with_news_are_answered(cluster: BrokerHarness) -> None:
    session = caught_up_session(cluster)
    nothing = finish(cluster, session, begin(cluster, session, request(cluster, 2)))
    assert answers(nothing) == {}  # all idle: the long poll expired with nothing to tell
    parked = begin(cluster, session, request(cluster, 3, max_wait_ms=30_000))
    assert isinstance(parked, fetch.PendingFetch)
    assert not parked.op.is_completed
    append(cluster, "b")  # an idle partition, not named: its append wakes the parked fetch
    woken = answers(finish(cluster, session, parked, within_s=2.0))
    assert list(woken) == ["b"]
    assert woken["b"].records
    assert not woken["b"].error.code


def test_a_high_watermark_alone_waits_for_the_next_answer(cluster: BrokerHarness) -> None:
    session = caught_up_session(cluster)
    append(cluster, "c")  # the leader has offset 1 of c; the follower fetches it, then reports offset 2
    assert answers(finish(cluster, session, begin(cluster, session, request(cluster, 2))))["c"].records
    parked = begin(cluster, session, request(cluster, 3, {"c": 2}, max_wait_ms=300))
    assert isinstance(parked, fetch.PendingFetch)  # the report moved c's high watermark to 2 ...
    assert cluster.partition("c").high_watermark == 2
    time.sleep(0.1)
    assert not parked.op.is_completed  # ... which is no reason to answer before the long poll ends
    told = answers(finish(cluster, session, parked))
    assert told["c"].high_watermark == 2
    assert not told["c"].records
    assert set(told) == {"c"}


def test_a_forgotten_partition_is_no_longer_listened_to(cluster: BrokerHarness) -> None:
    session = caught_up_session(cluster)
    purgatory = cluster.replicas.fetch_purgatory
    assert purgatory.listeners(("b", 0)) == 1
    quiet = finish(cluster, session, begin(cluster, session, request(cluster, 2, forgotten=["b"])))
    assert answers(quiet) == {}
    assert purgatory.listeners(("b", 0)) == 0
    assert len(session) == 2
    parked = begin(cluster, session, request(cluster, 3, max_wait_ms=200))
    append(cluster, "b")
    assert isinstance(parked, fetch.PendingFetch)
    time.sleep(0.05)
    assert not parked.op.is_completed
    assert "b" not in answers(finish(cluster, session, parked))
    session.close()  # the connection ends: nothing listens any more
    assert [purgatory.listeners((t, 0)) for t in TOPICS] == [0, 0, 0]


def test_a_leadership_change_of_an_idle_partition_is_answered_at_once(cluster: BrokerHarness) -> None:
    session = caught_up_session(cluster)
    parked = begin(cluster, session, request(cluster, 2, max_wait_ms=30_000))
    cluster.change("a", leader=FOLLOWER)
    told = answers(finish(cluster, session, parked, within_s=2.0))
    assert told["a"].error.code in ("FENCED_LEADER_EPOCH", "NOT_LEADER_OR_FOLLOWER")
    assert set(told) == {"a"}


def test_session_epochs_out_of_order_end_the_session(cluster: BrokerHarness) -> None:
    session = LeaderSession(cluster.ctx)
    with pytest.raises(SessionError) as no_session:
        session.apply(request(cluster, 1, {"a": 0}))
    assert no_session.value.code == FETCH_SESSION_ID_NOT_FOUND
    session = caught_up_session(cluster)
    with pytest.raises(SessionError) as skipped:
        session.apply(request(cluster, 3))
    assert skipped.value.code == INVALID_FETCH_SESSION_EPOCH
    assert len(session) == 0
    assert cluster.replicas.fetch_purgatory.listeners(("a", 0)) == 0
    with pytest.raises(SessionError):  # and it stays ended until a full fetch starts another
        session.apply(request(cluster, 2))
    session.apply(request(cluster, 0, {"a": 1}))
    assert len(session) == 1


def test_idle_partitions_stay_caught_up_without_being_read(cluster: BrokerHarness) -> None:
    session = caught_up_session(cluster)
    epoch = 1
    deadline = time.monotonic() + 0.6
    while time.monotonic() < deadline:  # incremental fetches naming nothing, 50 ms apart
        epoch += 1
        assert answers(finish(cluster, session, begin(cluster, session, request(cluster, epoch, max_wait_ms=50)))) == {}
    append(cluster, "a")  # the follower is behind now: ISR1 counts from when it was last caught up
    partition = cluster.partition("a")
    assert partition.isr_change(500) is None  # recorded within the last 100 ms or so, though never read
    time.sleep(0.6)  # no fetch at all for longer than the lag: now it is out of sync (the check can fail)
    shrink = partition.isr_change(500)
    assert shrink is not None
    assert FOLLOWER not in shrink.new_isr


def test_grpc_fetches_have_no_sessions(cluster: BrokerHarness) -> None:
    for r in (request(cluster, 1, {"a": 0}), request(cluster, 0, {"a": 0}, forgotten=["b"])):
        refused = fetch.begin_grpc(cluster.ctx, r)
        assert isinstance(refused, pb.FetchResponse)
        assert refused.error.code == "INVALID_REQUEST"
        assert "REPLICATION" in refused.error.message
        assert answers(refused)["a"].error.code == "INVALID_REQUEST"


def test_the_follower_names_only_what_changed() -> None:
    follower = FollowerSession()
    a, b, c = ("t", 0), ("t", 1), ("u", 0)
    assert follower.next({a: (0, 1, 0), b: (5, 1, 0)}) == ([a, b], [], 0)  # a full fetch
    assert follower.next({a: (0, 1, 0), b: (5, 1, 0)}) == ([], [], 1)
    assert follower.next({a: (3, 1, 0), b: (5, 1, 0), c: (0, 2, 0)}) == ([a, c], [], 2)
    assert follower.next({a: (3, 2, 0), c: (0, 2, 0)}) == ([a], [b], 3)  # b left (truncating, failed, moved)
    follower.reset()  # a new connection
    assert follower.next({a: (3, 2, 0), c: (0, 2, 0)}) == ([a, c], [], 0)
    assert next_epoch(MAX_EPOCH) == 1
    assert next_epoch(0) == 1


def test_a_change_during_a_read_answered_at_once_is_read_for_the_next_answer(
    cluster: BrokerHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = caught_up_session(cluster)
    append(cluster, "a")  # records for the follower: the next fetch is answered at once
    read = fetch.read_partitions
    fired = []

    def read_then_change(*args: object, **kwargs: object) -> object:
        result = read(*args, **kwargs)  # type: ignore[arg-type]
        if not fired:  # after the read and before the answer: a change to c, which this fetch read
            fired.append(True)
            cluster.replicas.fetch_purgatory.check_and_complete(("c", 0))
        return result

    monkeypatch.setattr(fetch, "read_partitions", read_then_change)
    first = answers(finish(cluster, session, begin(cluster, session, request(cluster, 2, {"c": 1}))))
    assert first["a"].records
    assert set(first) == {"a", "c"}
    second = answers(finish(cluster, session, begin(cluster, session, request(cluster, 3, {"a": 2}))))
    assert set(second) == {"a", "c"}  # c is read again though the follower did not name it


def test_full_fetches_on_one_connection_make_the_session_what_they_name(cluster: BrokerHarness) -> None:
    session = caught_up_session(cluster)
    purgatory = cluster.replicas.fetch_purgatory
    told = answers(finish(cluster, session, begin(cluster, session, request(cluster, 0, {"a": 1, "b": 1}))))
    assert set(told) == {"a", "b"}  # a full fetch answers every partition it names
    assert len(session) == 2
    assert [purgatory.listeners((t, 0)) for t in TOPICS] == [1, 1, 0]
    assert answers(finish(cluster, session, begin(cluster, session, request(cluster, 1)))) == {}


def test_a_caught_up_report_parks_without_a_read(cluster: BrokerHarness, monkeypatch: pytest.MonkeyPatch) -> None:
    """A follower naming a partition at its log end (its report of what it now has) is recorded without a read
    (``fetch.skips_first_read``), which moves the high watermark; the fetch parks, and the next append wakes it
    and is read. A report that comes with news elsewhere is read whole and answered at once."""
    session = caught_up_session(cluster)
    append(cluster, "c")
    assert answers(finish(cluster, session, begin(cluster, session, request(cluster, 2))))["c"].records
    read = fetch.read_partitions
    reads: list[list[str]] = []

    def counted(ctx: object, replica_id: int, targets: list[fetch.Target], *args: object, **kwargs: object) -> object:
        reads.append([t.topic for t in targets])
        return read(ctx, replica_id, targets, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(fetch, "read_partitions", counted)
    parked = begin(cluster, session, request(cluster, 3, {"c": 2}, max_wait_ms=30_000))
    assert isinstance(parked, fetch.PendingFetch)
    assert reads == []
    assert cluster.partition("c").high_watermark == 2
    append(cluster, "c")
    woken = answers(finish(cluster, session, parked, within_s=2.0))
    assert reads == [["c"]]
    assert woken["c"].records
    assert woken["c"].log_end_offset == 3

    append(cluster, "b")  # news on b, and c reported at its end: one read of both, answered at once
    both = begin(cluster, session, request(cluster, 4, {"c": 3}, max_wait_ms=30_000))
    assert isinstance(both, pb.FetchResponse)
    assert sorted(reads[1]) == ["b", "c"]
    told = answers(finish(cluster, session, both))
    assert told["b"].records
    assert not told["c"].records
    assert cluster.partition("c").high_watermark == 3


def appended_bytes(h: BrokerHarness, topic: str) -> int:
    return h.partition(topic).fetch_position(True).appended_bytes


def test_a_parked_report_is_held_by_the_session_and_woken_with_what_arrived(cluster: BrokerHarness) -> None:
    """With ``min_bytes`` 1 (any record answers) the parked fetch is a ``HeldFetch``: in the purgatory for its
    timer only, watched under no partition (the session's listener wakes it), and woken by an append to the
    partition it reported with the bytes that arrived (what decides where the read after the wait runs)."""
    session = caught_up_session(cluster)
    append(cluster, "c")
    assert answers(finish(cluster, session, begin(cluster, session, request(cluster, 2))))["c"].records
    purgatory = cluster.replicas.fetch_purgatory
    parked = begin(cluster, session, request(cluster, 3, {"c": 2}, max_wait_ms=30_000))
    assert isinstance(parked, fetch.PendingFetch)
    assert isinstance(parked.op, HeldFetch)
    assert purgatory.size == 1
    assert [purgatory.watched((t, 0)) for t in TOPICS] == [0, 0, 0]
    before = appended_bytes(cluster, "c")
    append(cluster, "c")
    assert parked.op.wait(2.0)
    assert not parked.op.expired
    assert parked.op.ready_bytes == appended_bytes(cluster, "c") - before > 0
    assert purgatory.size == 0
    assert answers(finish(cluster, session, parked))["c"].records


def test_a_change_during_the_read_wakes_the_held_fetch_as_it_parks(
    cluster: BrokerHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An append after the positions were taken and the report recorded, before the fetch parks: the listener
    wakes it as it parks (no purgatory check would try it), with the bytes that arrived."""
    session = caught_up_session(cluster)
    append(cluster, "c")
    assert answers(finish(cluster, session, begin(cluster, session, request(cluster, 2))))["c"].records
    skips = fetch.skips_first_read
    before = appended_bytes(cluster, "c")

    def skips_then_append(*args: object, **kwargs: object) -> bool:
        skipped = skips(*args, **kwargs)  # type: ignore[arg-type]
        append(cluster, "c")
        return skipped

    monkeypatch.setattr(fetch, "skips_first_read", skips_then_append)
    parked = begin(cluster, session, request(cluster, 3, {"c": 2}, max_wait_ms=30_000))
    assert isinstance(parked, fetch.PendingFetch)
    assert isinstance(parked.op, HeldFetch)
    assert parked.op.is_completed
    assert not parked.op.expired
    assert parked.op.ready_bytes == appended_bytes(cluster, "c") - before > 0
    told = answers(finish(cluster, session, parked))
    assert told["c"].records
    assert told["c"].log_end_offset == 3


def test_with_min_bytes_above_one_the_parked_fetch_counts_bytes_in_the_purgatory(cluster: BrokerHarness) -> None:
    """``replica.fetch.min.bytes`` above 1: the purgatory's ``DelayedFetch`` watches the partitions read and
    counts what arrives; one small append is not enough, a second that reaches ``min_bytes`` answers both."""
    session = caught_up_session(cluster)
    append(cluster, "c")
    assert answers(finish(cluster, session, begin(cluster, session, request(cluster, 2))))["c"].records
    one = appended_bytes(cluster, "c")
    append(cluster, "c")
    one = appended_bytes(cluster, "c") - one  # a batch's bytes
    assert answers(finish(cluster, session, begin(cluster, session, request(cluster, 3, {"c": 2}))))["c"].records
    parked = begin(cluster, session, request(cluster, 4, {"c": 3}, max_wait_ms=30_000, min_bytes=2 * one))
    assert isinstance(parked, fetch.PendingFetch)
    assert isinstance(parked.op, DelayedFetch)
    assert cluster.replicas.fetch_purgatory.watched(("c", 0)) == 1
    append(cluster, "c")
    time.sleep(0.05)
    assert not parked.op.is_completed  # one batch: fewer than min_bytes
    append(cluster, "c")
    assert parked.op.wait(2.0)
    assert not parked.op.expired
    told = answers(finish(cluster, session, parked))
    assert told["c"].log_end_offset == 5
    assert len(told["c"].records) == 2 * one
