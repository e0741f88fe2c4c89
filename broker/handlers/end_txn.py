"""EndTxn: commit or abort the producer's transaction (TC7). Answered once PrepareCommit / PrepareAbort is
written to ``__transaction_state``; the coordinator then writes the markers (TC8)."""

from __future__ import annotations

from broker.context import BrokerContext
from broker.errors import error
from broker.txn import errors as E
from broker.txn.errors import TxnError
from proto import broker_pb2 as pb


def handle(ctx: BrokerContext, request: pb.EndTxnRequest) -> pb.EndTxnResponse:
    response = pb.EndTxnResponse()
    try:
        coordinator = ctx.txn_coordinator
        if coordinator is None:
            raise TxnError(E.COORDINATOR_NOT_AVAILABLE, "no transaction coordinator on this broker")
        coordinator.end_txn(request.transactional_id, request.producer_id, request.producer_epoch, request.committed)
    except TxnError as exc:
        response.error.CopyFrom(error(exc.code, str(exc)))
    return response
