"""Produce (key 0), v3-v12, through :func:`broker.handlers.produce.handle`: the same partition append,
idempotence checks and acks=all purgatory as gRPC.

The handler reads a request by attribute (``acks``, ``timeout_ms``, ``topics[].name``,
``topics[].partitions[].partition/records``); :class:`_ProduceView` gives it those names over the kio
request, so each partition's record bytes go to the log as kio read them from the frame, without a
protobuf copy. ``acks=0`` gets no response (Kafka's rule); a request's ``transactional_id`` goes with it
(a transaction opens on a partition only once its coordinator confirmed it: ``broker.txn.verify``).
An acks=all request whose appends are done answers a :class:`~broker.kafka.api.Pending`: its connection
goes on reading (and appending) the next requests while this one waits for the ISR.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from broker.handlers import produce as produce_handler
from broker.kafka.api import NO_RESPONSE, CloseConnection, Pending, Request
from broker.kafka.codec import build, millis, response_class

API_KEY = 0


@dataclass(frozen=True, slots=True)
class _PartitionView:
    partition: int
    records: bytes


@dataclass(frozen=True, slots=True)
class _TopicView:
    name: str
    partitions: list[_PartitionView]


@dataclass(frozen=True, slots=True)
class _ProduceView:
    acks: int
    timeout_ms: int
    transactional_id: str
    topics: list[_TopicView]


def handle(request: Request) -> Any:
    body = request.body
    acks = int(body.acks)
    view = _ProduceView(
        acks,
        millis(body.timeout),
        body.transactional_id or "",
        [
            _TopicView(t.name, [_PartitionView(p.index, p.records or b"") for p in t.partition_data])
            for t in body.topic_data
        ],
    )
    started = produce_handler.begin(request.ctx, view)  # type: ignore[arg-type]
    if isinstance(started, produce_handler.PendingProduce):
        return Pending(started.pending.wait, lambda: _response(request, produce_handler.finish(started)))
    if acks == 0:
        answer = _answer(started)
        if any(p["error_code"] for t in answer for p in t["partition_responses"]):
            # Kafka's rule: an acks=0 producer learns of a failure by losing the connection (and then
            # refreshes its metadata), since it reads no answer
            raise CloseConnection(f"acks=0 produce failed: {_first_error(answer)}")
        return NO_RESPONSE
    return _response(request, started)


def _response(request: Request, response: Any) -> Any:
    return build(response_class(API_KEY, request.version), responses=_answer(response), throttle_time=0)


def _first_error(answer: list[dict[str, Any]]) -> str:
    return next(f"{t['name']}-{p['index']}: {p['error_code']}" for t in answer for p in t["partition_responses"]
                if p["error_code"])  # fmt: skip


def _answer(response: Any) -> list[dict[str, Any]]:
    return [
        dict(
            name=t.name,
            partition_responses=[
                dict(index=p.partition, error_code=p.error.code, error_message=p.error.message or None,
                     base_offset=p.base_offset, log_append_time=p.log_append_time_ms,
                     log_start_offset=p.log_start_offset, record_errors=[])  # fmt: skip
                for p in t.partitions
            ],
        )
        for t in response.topics
    ]
