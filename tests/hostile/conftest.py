"""The shared cluster of the hostile tests: 1 controller and 3 brokers (real processes), and a ledger of the
records it acknowledged before any attack (``tests.hostile.health``).

Limits are set low where a test needs to cross them cheaply: ``socket.request.max.bytes`` 4 MiB (a larger
request is refused by gRPC), ``max.broker.partitions`` 300.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.broker.cluster import Cluster
from tests.hostile.health import Ledger

BROKER_CONFIG = {"socket.request.max.bytes": str(4 << 20), "offsets.topic.num.partitions": "3"}
CONTROLLER_CONFIG = {"max.broker.partitions": "300"}


@pytest.fixture(scope="package")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with Cluster(tmp_path_factory.mktemp("hostile"), brokers=3, broker_config=BROKER_CONFIG,
                 controller_config=CONTROLLER_CONFIG) as c:  # fmt: skip
        yield c


@pytest.fixture(scope="package")
def ledger(cluster: Cluster) -> Ledger:
    ledger = Ledger(cluster).create()
    ledger.produce(5)
    return ledger
