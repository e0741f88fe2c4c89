"""A structure-aware fuzzer against a live cluster (issue 15): Hypothesis draws hostile Produce, Fetch,
metadata, admin and group requests (``tests.hostile.strategies``) and sends each to a broker of the shared
cluster, with a call timeout. Every answer must be an answer: an error code Kafka names, or success; never
a hang (DEADLINE_EXCEEDED), a dead process (UNAVAILABLE), a handler bug (INTERNAL, UNKNOWN_SERVER_ERROR).
After every :data:`CHECK_EVERY` examples, and at the end, :func:`check_healthy`: every process up, a fresh
acks=all produce succeeds, everything acknowledged before still readable at its offset.

``ODRADEK_FUZZ_EXAMPLES`` (default 300, what CI runs) sets the number of examples, ``ODRADEK_FUZZ_SEED``
(default 0) the seed: the run is deterministic for a seed. The distinct errors seen are printed at the end
(``pytest -s``), and written as JSON to ``ODRADEK_FUZZ_REPORT`` when set.
"""

from __future__ import annotations

import collections
import json
import os
import time

import grpc
import pytest
from hypothesis import HealthCheck, given, seed, settings

from proto import broker_pb2_grpc, controller_pb2
from tests.broker.cluster import Cluster
from tests.hostile.health import CALL_TIMEOUT_S, Ledger, check_healthy
from tests.hostile.strategies import FUZZ_TOPIC, Call, calls

pytestmark = [pytest.mark.hostile, pytest.mark.slow]

EXAMPLES = int(os.environ.get("ODRADEK_FUZZ_EXAMPLES", "300"))
SEED = int(os.environ.get("ODRADEK_FUZZ_SEED", "0"))
CHECK_EVERY = 50
FAILING_STATUS = {grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.INTERNAL,
                  grpc.StatusCode.UNKNOWN}  # fmt: skip


def error_codes(message: object) -> list[str]:
    """Every ``error.code`` in a response, however deep (topics, partitions, coordinators, ...)."""
    found: list[str] = []
    for field, value in message.ListFields():  # type: ignore[attr-defined]
        if field.name == "error" and hasattr(value, "code"):
            found.append(value.code)
        elif field.message_type is not None:
            for item in [value] if hasattr(value, "ListFields") else value:
                if hasattr(item, "ListFields"):
                    found.extend(error_codes(item))
    return found


def send(cluster: Cluster, call: Call) -> list[str]:
    """The error codes of ``call``'s answer ("OK" for none), or the gRPC status it ended with."""
    stub = broker_pb2_grpc.BrokerStub(cluster.broker_channel(call.target))  # type: ignore[no-untyped-call]
    try:
        response = getattr(stub, call.rpc)(call.message, timeout=CALL_TIMEOUT_S)
    except grpc.RpcError as exc:
        failure = exc
    else:
        failure = None
    if failure is not None:
        status = failure.code()
        assert status not in FAILING_STATUS, f"{call!r} ended with {status}: {failure.details()}"
        return [f"grpc:{status.name}"]
    codes = [c for c in error_codes(response) if c] or ["OK"]
    assert "UNKNOWN_SERVER_ERROR" not in codes, f"{call!r} hit a broker bug: {response}"
    return codes


def test_hostile_requests_get_answers_and_lose_nothing(cluster: Cluster, ledger: Ledger) -> None:
    request = controller_pb2.CreateTopicsRequest(topics=[controller_pb2.TopicToCreate(
        name=FUZZ_TOPIC, num_partitions=-1, replication_factor=-1,
        assignments=[controller_pb2.ReplicaList(broker_ids=[0, 1, 2]) for _ in range(3)])], timeout_ms=20_000)
    assert not cluster.broker_stub(0).CreateTopics(request, timeout=30).topics[0].error.code  # broker 0 leads all
    for i in range(len(cluster.brokers)):
        cluster.wait_for(lambda i=i: cluster.has_leaders(i, FUZZ_TOPIC, 3), 30, f"{FUZZ_TOPIC} on broker {i}")
    seen: collections.Counter[str] = collections.Counter()
    kinds: collections.Counter[str] = collections.Counter()
    sent = [0]
    started = time.monotonic()

    @seed(SEED)
    @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=False,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(call=calls(len(cluster.brokers)))
    def one(call: Call) -> None:
        kinds[call.rpc] += 1
        for code in send(cluster, call):
            seen[f"{call.rpc}:{code}"] += 1
        sent[0] += 1
        if sent[0] % CHECK_EVERY == 0:
            check_healthy(cluster, ledger)

    one()
    check_healthy(cluster, ledger)
    report = {"examples": sent[0], "seconds": round(time.monotonic() - started, 1), "seed": SEED,
              "requests": dict(sorted(kinds.items())), "distinct_errors": len(seen),
              "errors": dict(sorted(seen.items()))}  # fmt: skip
    print(json.dumps(report, indent=1))
    if os.environ.get("ODRADEK_FUZZ_REPORT"):
        with open(os.environ["ODRADEK_FUZZ_REPORT"], "w", encoding="utf-8") as f:
            json.dump(report, f, indent=1)
    assert sent[0] >= min(EXAMPLES, 50)  # the examples ran (Hypothesis may stop early only when exhausted)
