"""What the docker tests share: bounded waits, a replicated topic, and reading a topic back, each with the client
config it is given (the plain compose cluster's host clients, or the secured one's SASL_SSL keys)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TypeVar

from odradek import Admin, Consumer, NewTopic, TopicPartition
from odradek.errors import OdradekError

T = TypeVar("T")
PARTITIONS = 3
WAIT_S = 180.0


def wait_for(predicate: Callable[[], T | None], timeout_s: float, what: str) -> T:
    """Poll ``predicate`` (exceptions count as not yet) until it returns a truthy value, bounded."""
    deadline = time.monotonic() + timeout_s
    last: object = None
    while True:
        try:
            value = predicate()
            if value:
                return value
            last = value
        except OdradekError as exc:
            last = exc
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what} (last: {last!r})")
        time.sleep(0.5)


def admin(config: Mapping[str, str]) -> Admin:
    return Admin({**config, "request.timeout.ms": 10000})


def create_topic(config: Mapping[str, str], name: str) -> dict[int, int]:
    """RF 3, min.insync.replicas 2; waits until every partition has a leader and its full ISR: {partition:
    leader}."""
    a = admin(config)
    try:
        a.create_topics([NewTopic(name, PARTITIONS, 3, config={"min.insync.replicas": "2"})])
        return wait_for(lambda: full_isr(a, name), WAIT_S, f"{name} to have leaders and full ISRs")
    finally:
        a.close()


def full_isr(a: Admin, topic: str) -> dict[int, int]:
    """{partition: leader} when every partition of ``topic`` has a leader and its full ISR, else {}."""
    partitions = a.describe_topics([topic])[topic].partitions
    if len(partitions) == PARTITIONS and all(p.leader >= 0 and len(p.isr) == 3 for p in partitions):
        return {p.partition: p.leader for p in partitions}
    return {}


def consume_all(config: Mapping[str, str], topic: str, timeout_s: float = WAIT_S) -> dict[int, dict[int, bytes]]:
    """Every record of ``topic`` up to its current end offsets: {partition: {offset: value}}."""
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    consumer = Consumer({**config, "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.assign(tps)
        consumer.seek_to_beginning(tps)
        ends = wait_for(lambda: consumer.end_offsets(tps), WAIT_S, f"the end offsets of {topic}")
        seen: dict[int, dict[int, bytes]] = {p: {} for p in range(PARTITIONS)}
        deadline = time.monotonic() + timeout_s
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, f"could not read {topic} to {ends} within {timeout_s:.0f} s"
            for record in consumer.poll(timeout_ms=1000):
                seen[record.partition][record.offset] = record.value or b""
        return seen
    finally:
        consumer.close()
