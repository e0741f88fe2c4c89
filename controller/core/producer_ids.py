"""AllocateProducerIds: hand a broker the next block of producer ids (Kafka's ``ProducerIdControlManager``).

- I1. The broker's epoch must be its current registration's (else STALE_BROKER_EPOCH).
- I2. The block is ``[next_producer_id, next_producer_id + PRODUCER_ID_BLOCK_SIZE)``; the ProducerIds record
  moves ``next_producer_id`` past it, so no id is ever handed out twice, across failovers too.
- I3. Producer ids are int64: when they run out the answer is UNKNOWN_SERVER_ERROR and nothing is written.
"""

from __future__ import annotations

from controller.core.common import ControllerResult, error
from metadata._validate import INT64_MAX
from metadata.image import MetadataImage
from metadata.records import PRODUCER_ID_BLOCK_SIZE, ProducerIds
from proto import controller_pb2 as pb


def allocate_producer_ids(
    image: MetadataImage, request: pb.AllocateProducerIdsRequest
) -> ControllerResult[pb.AllocateProducerIdsResponse]:
    """AllocateProducerIds (rules I1-I3)."""
    broker = image.broker(request.broker_id)
    if broker is None or broker.broker_epoch != request.broker_epoch:
        return ControllerResult(
            (),
            pb.AllocateProducerIdsResponse(
                error=error("STALE_BROKER_EPOCH", f"Broker {request.broker_id} has no registration of that epoch")
            ),
        )
    start = image.next_producer_id
    end = start + PRODUCER_ID_BLOCK_SIZE
    if end > INT64_MAX:
        return ControllerResult(
            (), pb.AllocateProducerIdsResponse(error=error("UNKNOWN_SERVER_ERROR", "Exhausted all producer ids"))
        )
    record = ProducerIds(request.broker_id, request.broker_epoch, end)
    response = pb.AllocateProducerIdsResponse(producer_id_start=start, producer_id_len=PRODUCER_ID_BLOCK_SIZE)
    return ControllerResult(((record,),), response)
