"""Fixtures of the client tests: a fake cluster of in-process gRPC brokers, stopped after each test."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.clients.fake_broker import FakeCluster


@pytest.fixture
def make_cluster() -> Iterator[Callable[..., FakeCluster]]:
    clusters: list[FakeCluster] = []

    def make(node_ids: tuple[int, ...] = (1,)) -> FakeCluster:
        cluster = FakeCluster(node_ids)
        clusters.append(cluster)
        return cluster

    yield make
    for cluster in clusters:
        cluster.stop()


@pytest.fixture
def cluster(make_cluster: Callable[..., FakeCluster]) -> FakeCluster:
    return make_cluster((1,))
