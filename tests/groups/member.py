"""A group member as its own process, for the end-to-end tests (``kill -9`` needs a process to kill).

    python -m tests.groups.member BOOTSTRAP GROUP TOPIC [--instance-id I] [--session-timeout-ms T]

Prints one JSON object per line on stdout, flushed: ``{"assigned": [[topic, p], ...]}``,
``{"revoked": ...}``, ``{"lost": ...}`` from its rebalance listener, and ``{"records": [[p, offset], ...]}``
for every batch it processed, printed *before* the batch is committed (processing, then commit: at
least once). ``{"fatal": "CODE"}`` when the group refuses it. It runs until killed or SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from types import FrameType

from odradek import Consumer, KafkaError, TopicPartition
from odradek.errors import CommitFailedError
from odradek.group import ConsumerRebalanceListener


def emit(event: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


class Announce(ConsumerRebalanceListener):
    def __init__(self, consumer: Consumer) -> None:
        self.consumer = consumer

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.consumer.commit()  # at-least-once: what was processed is committed before the partitions move
        emit({"revoked": sorted(revoked)})

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        emit({"assigned": sorted(assigned)})

    def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        emit({"lost": sorted(lost)})


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("bootstrap")
    parser.add_argument("group")
    parser.add_argument("topic")
    parser.add_argument("--instance-id")
    parser.add_argument("--session-timeout-ms", type=int, default=3000)
    args = parser.parse_args()
    config: dict[str, object] = {
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": args.session_timeout_ms,
        "fetch.max.wait.ms": 100,
        "max.poll.records": 50,
    }
    if args.instance_id:
        config["group.instance.id"] = args.instance_id
    consumer = Consumer(config)
    stopping = False

    def stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    consumer.subscribe([args.topic], Announce(consumer))
    try:
        while not stopping:
            records = consumer.poll(timeout_ms=100)
            if records:
                emit({"records": [[r.partition, r.offset] for r in records]})
                try:
                    consumer.commit()
                except CommitFailedError:  # the partitions moved meanwhile: their new owner goes on
                    emit({"commit_failed": True})
    except KafkaError as exc:
        emit({"fatal": exc.code})
        return 1
    finally:
        consumer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
