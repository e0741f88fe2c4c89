"""Which transport a producer's request and a consumer's fetch take (``Sender._link_for``,
``Fetcher._link_for``): the broker's DATA listener when the metadata names one, else gRPC; a producer moves a
broker's requests from one to the other only while none is in flight (so they never overtake each other), and
a link whose broker moved or whose listener went away is closed once nothing waits on it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from odradek.fetcher import Fetcher
from odradek.sender import Sender


@dataclass
class FakeLink:
    address: str
    pending: int = 0
    closed: bool = False

    def close(self) -> None:
        self.closed = True


@dataclass
class FakeClient:
    """``ClusterClient``'s DATA side: the address the metadata names for each node ("" for gRPC)."""

    addresses: dict[int, str] = field(default_factory=dict)
    made: list[FakeLink] = field(default_factory=list)

    def data_address(self, node: int) -> str:
        return self.addresses.get(node, "")

    def data_link(self, node: int, address: str, max_answer_bytes: int, role: str) -> Any:
        link = FakeLink(address)
        self.made.append(link)
        return link


def sender(client: FakeClient) -> Any:
    s: Any = Sender.__new__(Sender)  # only what _link_for reads
    s._client, s._links, s._in_flight = client, {}, {}
    return s


def test_a_producer_uses_the_data_listener_only_from_a_quiet_broker() -> None:
    client = FakeClient()
    s = sender(client)
    s._in_flight[1] = 1  # this request, counted before it starts
    assert s._link_for(1) is None  # no DATA listener named: gRPC
    client.addresses[1] = "h:1"
    s._in_flight[1] = 2  # another request is in flight on gRPC: this one follows it there
    assert s._link_for(1) is None
    assert client.made == []
    s._in_flight[1] = 1
    link = s._link_for(1)
    assert link is client.made[0]
    assert link.address == "h:1"
    s._in_flight[1] = 3
    assert s._link_for(1) is link  # once on the link, the broker's requests stay on it


def test_a_producers_link_to_a_moved_listener_is_closed_once_nothing_waits_on_it() -> None:
    client = FakeClient({1: "h:1"})
    s = sender(client)
    s._in_flight[1] = 1
    old = s._link_for(1)
    client.addresses[1] = "h:2"  # the broker came back on another port
    old.pending = 2
    assert s._link_for(1) is old
    assert not old.closed
    old.pending = 0
    new = s._link_for(1)
    assert old.closed
    assert new is not old
    assert new.address == "h:2"
    client.addresses[1] = ""  # DATA listener gone (or unreachable: gRPC for a while)
    assert s._link_for(1) is None
    assert new.closed


def test_a_consumer_fetches_on_the_data_listener_when_named() -> None:
    client = FakeClient()
    f: Any = Fetcher.__new__(Fetcher)
    f._client, f._links, f._max_answer_bytes = client, {}, 1 << 20
    assert f._link_for(2) is None
    client.addresses[2] = "h:9"
    link = f._link_for(2)
    assert link.address == "h:9"
    assert f._link_for(2) is link
    client.addresses[2] = "h:10"  # a consumer has one fetch in flight per broker, none now: it switches at once
    moved = f._link_for(2)
    assert link.closed
    assert moved.address == "h:10"
    client.addresses[2] = ""
    assert f._link_for(2) is None
    assert moved.closed
