"""InitProducerId: a producer id and epoch for an idempotent producer (Kafka's InitProducerId, KIP-98/360).

* A new producer (``producer_id = -1``, ``producer_epoch = -1``) gets the next id of this broker's block
  (:mod:`broker.producer_ids`) with epoch 0.
* A producer that names its current id and epoch gets the same id with the epoch bumped (KIP-360: after
  UNKNOWN_PRODUCER_ID or OUT_OF_ORDER_SEQUENCE_NUMBER it starts its sequences over under a new epoch);
  at the last epoch (32766) it gets a new id with epoch 0 instead. No state is kept for this: partitions
  enforce epochs and sequences themselves (``log.producer_state``), so a client that lies about its id
  gains nothing a forged batch would not give it, and cannot change another producer's partition state.
* A transactional id: the transaction coordinator's answer (``broker.txn``: TC4; this broker must be the
  id's coordinator, else NOT_COORDINATOR). A half-set id/epoch pair: INVALID_REQUEST. No block from the
  controller (no controller reachable, not registered yet): COORDINATOR_LOAD_IN_PROGRESS, which producers retry.
"""

from __future__ import annotations

import logging

from broker.context import BrokerContext
from broker.errors import INVALID_REQUEST, BrokerError, error
from broker.txn.errors import TxnError
from proto import broker_pb2 as pb

logger = logging.getLogger(__name__)

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_PRODUCER_EPOCH = 32766  # Short.MAX_VALUE - 1: Kafka's last usable epoch before a new id
COORDINATOR_LOAD_IN_PROGRESS = "COORDINATOR_LOAD_IN_PROGRESS"
COORDINATOR_NOT_AVAILABLE = "COORDINATOR_NOT_AVAILABLE"


def handle(ctx: BrokerContext, request: pb.InitProducerIdRequest) -> pb.InitProducerIdResponse:
    pid, epoch = request.producer_id, request.producer_epoch
    if (pid == NO_PRODUCER_ID) != (epoch == NO_PRODUCER_EPOCH) or pid < -1 or epoch < -1:
        return _refuse(INVALID_REQUEST, f"producer id {pid} and epoch {epoch}: give both (to bump) or neither")
    if request.transactional_id:
        return _transactional(ctx, request)
    if pid >= 0 and epoch < MAX_PRODUCER_EPOCH:
        return pb.InitProducerIdResponse(producer_id=pid, producer_epoch=epoch + 1)
    if ctx.producer_ids is None:
        return _refuse(COORDINATOR_LOAD_IN_PROGRESS, f"broker {ctx.broker_id} has no producer-id source")
    try:
        new_pid = ctx.producer_ids.next_producer_id()
    except BrokerError as exc:
        logger.warning("broker %d: no producer id block: %s", ctx.broker_id, exc)
        return _refuse(
            COORDINATOR_LOAD_IN_PROGRESS, f"no producer id block from the controller yet ({exc.code}: {exc})"
        )
    return pb.InitProducerIdResponse(producer_id=new_pid, producer_epoch=0)


def _transactional(ctx: BrokerContext, request: pb.InitProducerIdRequest) -> pb.InitProducerIdResponse:
    coordinator = ctx.txn_coordinator
    if coordinator is None:
        return _refuse(COORDINATOR_NOT_AVAILABLE, f"broker {ctx.broker_id} runs no transaction coordinator")
    try:
        m = coordinator.init_producer_id(request.transactional_id, request.transaction_timeout_ms,
                                         request.producer_id, request.producer_epoch)  # fmt: skip
    except TxnError as exc:
        return _refuse(exc.code, str(exc))
    return pb.InitProducerIdResponse(producer_id=m.producer_id, producer_epoch=m.producer_epoch)


def _refuse(code: str, message: str) -> pb.InitProducerIdResponse:
    return pb.InitProducerIdResponse(error=error(code, message), producer_id=NO_PRODUCER_ID,
                                     producer_epoch=NO_PRODUCER_EPOCH)  # fmt: skip
