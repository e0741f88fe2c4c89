"""InitProducerId (broker/handlers/init_producer_id.py) and the producer-id blocks (broker/producer_ids.py)."""

from __future__ import annotations

import threading

import pytest

from broker.errors import BrokerError
from broker.handlers import init_producer_id
from broker.producer_ids import ProducerIdManager, controller_allocator
from proto import broker_pb2 as pb
from proto import controller_pb2
from tests.broker.conftest import BrokerHarness


class Blocks:
    """A controller stand-in handing out blocks of 3 ids from 100."""

    def __init__(self) -> None:
        self.calls = 0
        self.fail_with = ""

    def __call__(self) -> tuple[int, int]:
        if self.fail_with:
            raise BrokerError(self.fail_with, "no controller")
        self.calls += 1
        return 100 + 3 * (self.calls - 1), 3


def init(harness: BrokerHarness, pid: int = -1, epoch: int = -1, txn: str = "") -> pb.InitProducerIdResponse:
    request = pb.InitProducerIdRequest(transactional_id=txn, producer_id=pid, producer_epoch=epoch)
    return init_producer_id.handle(harness.ctx, request)


def test_new_producers_get_ids_from_blocks_and_epoch_zero(harness: BrokerHarness) -> None:
    blocks = Blocks()
    harness.ctx.producer_ids = ProducerIdManager(blocks)
    answers = [init(harness) for _ in range(7)]
    assert [(a.producer_id, a.producer_epoch, a.error.code) for a in answers] == [
        (pid, 0, "") for pid in (100, 101, 102, 103, 104, 105, 106)
    ]
    assert blocks.calls == 3


def test_kip_360_a_known_producer_bumps_its_epoch_then_gets_a_new_id_at_the_last_epoch(harness: BrokerHarness) -> None:
    harness.ctx.producer_ids = ProducerIdManager(Blocks())
    bumped = init(harness, 55, 4)
    assert (bumped.producer_id, bumped.producer_epoch) == (55, 5)
    fresh = init(harness, 55, init_producer_id.MAX_PRODUCER_EPOCH)
    assert (fresh.producer_id, fresh.producer_epoch) == (100, 0)


@pytest.mark.parametrize(("pid", "epoch", "txn", "why"), [
    (5, -1, "", "give both"),
    (-1, 3, "", "give both"),
    (-7, -7, "", "give both"),
])  # fmt: skip
def test_invalid_requests(harness: BrokerHarness, pid: int, epoch: int, txn: str, why: str) -> None:
    harness.ctx.producer_ids = ProducerIdManager(Blocks())
    answer = init(harness, pid, epoch, txn)
    assert answer.error.code == "INVALID_REQUEST"
    assert why in answer.error.message
    assert (answer.producer_id, answer.producer_epoch) == (-1, -1)


def test_no_block_is_a_retriable_error(harness: BrokerHarness) -> None:
    assert init(harness).error.code == "COORDINATOR_LOAD_IN_PROGRESS"  # no id source at all
    blocks = Blocks()
    blocks.fail_with = "REQUEST_TIMED_OUT"
    harness.ctx.producer_ids = ProducerIdManager(blocks)
    answer = init(harness)
    assert answer.error.code == "COORDINATOR_LOAD_IN_PROGRESS"
    assert "REQUEST_TIMED_OUT" in answer.error.message
    blocks.fail_with = ""
    assert init(harness).producer_id == 100  # the next request asks again


def test_ids_are_unique_across_threads() -> None:
    manager = ProducerIdManager(Blocks())
    seen: list[int] = []
    lock = threading.Lock()

    def take() -> None:
        for _ in range(50):
            pid = manager.next_producer_id()
            with lock:
                seen.append(pid)

    threads = [threading.Thread(target=take) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert sorted(seen) == list(range(100, 300))


def test_controller_allocator_sends_the_broker_epoch_and_raises_the_controllers_error() -> None:
    sent: list[controller_pb2.AllocateProducerIdsRequest] = []
    answer = controller_pb2.AllocateProducerIdsResponse(producer_id_start=2000, producer_id_len=1000)

    def call(method: str, request: controller_pb2.AllocateProducerIdsRequest, timeout_s: float) -> object:
        assert method == "AllocateProducerIds"
        sent.append(request)
        return answer

    epoch = [-1]
    allocate = controller_allocator(call, 3, lambda: epoch[0], 1.0)  # type: ignore[arg-type]
    with pytest.raises(BrokerError, match="not registered"):
        allocate()
    epoch[0] = 42
    assert allocate() == (2000, 1000)
    assert (sent[-1].broker_id, sent[-1].broker_epoch) == (3, 42)
    answer.error.code = "STALE_BROKER_EPOCH"
    with pytest.raises(BrokerError) as raised:
        allocate()
    assert raised.value.code == "STALE_BROKER_EPOCH"


def test_a_transactional_id_goes_to_the_transaction_coordinator(harness: BrokerHarness) -> None:
    harness.ctx.producer_ids = ProducerIdManager(Blocks())
    answer = init(harness, -1, -1, "tx-1")  # this harness runs none (the process tests: tests/transactions)
    assert answer.error.code == "COORDINATOR_NOT_AVAILABLE"
    assert "no transaction coordinator" in answer.error.message
