"""A consume-transform-produce application for the exactly-once tests: reads ``in`` (read_committed, as a group
that commits its offsets with the transaction), writes ``out`` (``<key>:<value upper-cased>``), and commits a
transaction every ``--every`` records (or when a poll brings nothing). Run as its own process so that a test can
kill it, pause it (a zombie) and start it again:

    python -m tests.transactions.eos_app --bootstrap-servers H:P --transactional-id app --expect 300

Prints ``committed <total>`` after each commit (the test watches for it) and ``done`` once the group's offsets
reach ``--expect`` records; exits 3 when fenced (ProducerFencedError), 0 when done.
"""

from __future__ import annotations

import argparse
import sys
import time

from odradek import Consumer, Producer, TopicPartition
from odradek.errors import KafkaError, ProducerFencedError


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--transactional-id", required=True)
    parser.add_argument("--group", default="eos")
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--every", type=int, default=20)
    parser.add_argument("--expect", type=int, required=True)
    parser.add_argument("--deadline-s", type=float, default=240.0)
    parser.add_argument("--pause-ms", type=float, default=0.0, help="sleep after each commit (a slower run)")
    args = parser.parse_args()
    tps = [TopicPartition("in", p) for p in range(args.partitions)]
    consumer = Consumer({"bootstrap.servers": args.bootstrap_servers, "group.id": args.group,
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "max.poll.records": args.every})  # fmt: skip
    producer = Producer({"bootstrap.servers": args.bootstrap_servers, "transactional.id": args.transactional_id,
                         "linger.ms": 2, "transaction.timeout.ms": 20000, "max.block.ms": 60000})  # fmt: skip
    deadline = time.monotonic() + args.deadline_s
    try:
        consumer.assign(tps)
        producer.init_transactions()  # a previous instance's open transaction is aborted: its offsets too
        # assign() with a group.id starts at the group's committed offsets (read at the first poll, after the
        # previous instance's transaction was aborted above)
        print("ready", flush=True)
        while time.monotonic() < deadline:
            if _consumed(consumer, tps) >= args.expect:
                print("done", flush=True)
                return 0
            records = consumer.poll(500)
            if not records:
                continue
            try:
                producer.begin_transaction()
                for r in records:
                    producer.send("out", key=r.key, value=(r.key or b"") + b":" + (r.value or b"").upper())
                offsets = {tp: consumer.position(tp) for tp in tps}
                producer.send_offsets_to_transaction(offsets, consumer.group_metadata())
                producer.commit_transaction()
            except ProducerFencedError:
                raise
            except KafkaError as exc:  # abort, and read again from the committed offsets
                print(f"aborting: {exc!r}", flush=True)
                producer.abort_transaction()
                _rewind(consumer, tps)
                continue
            print(f"committed {_consumed(consumer, tps)}", flush=True)
            time.sleep(args.pause_ms / 1000)
        print("deadline passed", flush=True)
        return 1
    except ProducerFencedError as exc:
        print(f"fenced: {exc}", flush=True)
        return 3
    finally:
        producer.close(5)
        consumer.close()


def _consumed(consumer: Consumer, tps: list[TopicPartition]) -> int:
    return sum(consumer.position(tp) for tp in tps)


def _rewind(consumer: Consumer, tps: list[TopicPartition]) -> None:
    for tp in tps:
        committed = consumer.committed(tp)
        consumer.seek(tp, committed if committed is not None else 0)


if __name__ == "__main__":
    sys.exit(main())
