"""The Kafka listener's figures on 127.0.0.1, one run, one cluster (1 controller, 1 broker, processes, started
and stopped here): ``python -m tests.kafka.bench [--records N] [--rounds R] [--json]``.

* produce: ``RECORDS`` records of 100 bytes to a 3-partition topic, from confluent-kafka through the Kafka
  listener and from the odradek Producer over gRPC, the same settings (acks=1, no idempotence, no
  compression, linger.ms=5, batch.size=64 KiB);
* consume: those records from the earliest offsets, every partition assigned (no group), by confluent-kafka
  through the Kafka listener with ``socket.sendfile.enable=true`` (record bytes sent from the segment files
  with ``os.sendfile``) and ``false`` (read and copied; the broker restarts between the two), and by the
  odradek Consumer over gRPC.

Each figure is the median of ``--rounds`` rounds (modes interleaved, so a slow moment hurts all alike) and
is printed with its ratio to the odradek/gRPC figure of the same run: the machine's speed and load change
between runs, the ratios much less. Records/s are wall-clock from the first send (or poll) to the last
acknowledgement (or record), client and broker on the same machine.

It lives with the tests because it drives the test process fixture (``tests/broker/cluster.py``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from tests.broker.cluster import Cluster

RECORDS = 200_000
RECORD_BYTES = 100
PARTITIONS = 3
ROUNDS = 3
WAIT_S = 300.0
PRODUCE_SETTINGS = {"acks": "1", "enable.idempotence": False, "compression.type": "none", "linger.ms": 5,
                    "batch.size": 65536}  # fmt: skip


def confluent_produce(bootstrap: str, topic: str, records: int) -> float:
    payload = b"x" * RECORD_BYTES
    failed: list[str] = []

    def on_delivery(error: object, _message: object) -> None:
        if error is not None:
            failed.append(str(error))

    producer = Producer({"bootstrap.servers": bootstrap, **PRODUCE_SETTINGS, "queue.buffering.max.messages": 1_000_000})
    producer.produce(topic, payload, on_delivery=on_delivery)  # metadata and connections first
    assert producer.flush(30) == 0
    start = time.monotonic()
    for i in range(records - 1):
        while True:
            try:
                producer.produce(topic, payload, partition=i % PARTITIONS, on_delivery=on_delivery)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.01)
    assert producer.flush(WAIT_S) == 0, "records left undelivered"
    seconds = time.monotonic() - start
    assert not failed, failed[:3]
    return (records - 1) / seconds


def odradek_produce(bootstrap: str, topic: str, records: int) -> float:
    from odradek import Producer as OdradekProducer

    payload = b"x" * RECORD_BYTES
    with OdradekProducer({"bootstrap.servers": bootstrap, **PRODUCE_SETTINGS}) as producer:
        producer.send(topic, payload).result(30)  # metadata, connections
        start = time.monotonic()
        futures = [producer.send(topic, payload, partition=i % PARTITIONS) for i in range(records - 1)]
        producer.flush()
        seconds = time.monotonic() - start
    failed = sum(1 for f in futures if f.exception() is not None)
    assert not failed, f"{failed} records failed"
    return (records - 1) / seconds


def confluent_consume(bootstrap: str, topic: str, records: int) -> float:
    # a local queue that never fills during a run: librdkafka pauses fetching above queued.min.messages and
    # resumes on its own schedule, which would time the client's pacing rather than the broker
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False,
                         "queued.min.messages": min(10 * records, 10_000_000),
                         "queued.max.messages.kbytes": 2_000_000})  # fmt: skip
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    consume_batch = consumer.consume
    got = 0
    start = time.monotonic()
    deadline = start + WAIT_S
    try:
        while got < records and time.monotonic() < deadline:
            for message in consume_batch(min(10_000, records - got), 0.5):  # never waits for more than are left
                error = message.error()
                assert error is None, error
                got += 1
        seconds = time.monotonic() - start
    finally:
        consumer.close()
    assert got >= records, f"consumed {got} of {records}"
    return records / seconds


def odradek_consume(bootstrap: str, topic: str, records: int) -> float:
    from odradek import Consumer as OdradekConsumer
    from odradek import TopicPartition as OdradekTopicPartition

    with OdradekConsumer({"bootstrap.servers": bootstrap, "enable.auto.commit": False}) as consumer:
        partitions = [OdradekTopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(partitions)
        consumer.seek_to_beginning(partitions)
        got = 0
        start = time.monotonic()
        deadline = start + WAIT_S
        while got < records and time.monotonic() < deadline:
            got += len(consumer.poll(timeout_ms=500))
        seconds = time.monotonic() - start
    assert got >= records, f"consumed {got} of {records}"
    return records / seconds


def restart_broker(cluster: Cluster, sendfile: bool) -> None:
    """Broker 0 again, with ``socket.sendfile.enable`` set as asked (same data, same listeners)."""
    cluster.stop_broker(0)
    argv = cluster.brokers[0].argv
    for i, arg in enumerate(argv):
        if arg.startswith("socket.sendfile.enable="):
            argv[i] = f"socket.sendfile.enable={str(sendfile).lower()}"
    cluster.start_broker(0)
    cluster.wait_for(lambda: cluster.has_leaders(0, "kafka-produced", PARTITIONS), 60, "leaders after the restart")


def median_of(rounds: list[dict[str, float]], key: str) -> float:
    return statistics.median(r[key] for r in rounds)


def run(records: int, rounds: int) -> dict[str, float]:
    """The median of each figure over the rounds, and ``sendfile_over_copy``: the median of the rounds'
    sendfile/copy ratios (each round's two consumes ran seconds apart, so their ratio is the steadier one)."""
    with tempfile.TemporaryDirectory(prefix="kafka-bench-") as tmp:
        config = {"socket.sendfile.enable": "true", "group.initial.rebalance.delay.ms": "0"}
        with Cluster(Path(tmp), brokers=1, kafka=True, broker_config=config) as cluster:
            kafka, grpc = cluster.kafka_bootstrap_servers, cluster.bootstrap_servers
            results: list[dict[str, float]] = []
            for r in range(rounds):
                figures: dict[str, float] = {}
                for name in (f"kafka-produced-{r}", f"grpc-produced-{r}"):
                    cluster.create_topic(name, partitions=PARTITIONS)
                figures["produce_grpc"] = odradek_produce(grpc, f"grpc-produced-{r}", records)
                figures["produce_kafka"] = confluent_produce(kafka, f"kafka-produced-{r}", records)
                if r == 0:  # the consume rounds read one topic; its name is what restarts wait for
                    cluster.create_topic("kafka-produced", partitions=PARTITIONS)
                    confluent_produce(kafka, "kafka-produced", records)
                figures["consume_grpc"] = odradek_consume(grpc, "kafka-produced", records)
                figures["consume_kafka_sendfile"] = confluent_consume(kafka, "kafka-produced", records)
                restart_broker(cluster, sendfile=False)
                figures["consume_kafka_copy"] = confluent_consume(kafka, "kafka-produced", records)
                restart_broker(cluster, sendfile=True)
                results.append(figures)
                print(f"round {r + 1}/{rounds}: " + ", ".join(f"{k} {v:,.0f}/s" for k, v in figures.items()),
                      file=sys.stderr)  # fmt: skip
    figures = {key: median_of(results, key) for key in results[0]}
    figures["sendfile_over_copy"] = statistics.median(r["consume_kafka_sendfile"] / r["consume_kafka_copy"]
                                                      for r in results)  # fmt: skip
    return figures


def table(figures: dict[str, float], records: int, rounds: int) -> str:
    rows: list[tuple[str, str, Callable[[], float]]] = [
        ("produce", "odradek Producer, gRPC", lambda: figures["produce_grpc"]),
        ("produce", "confluent-kafka, Kafka listener", lambda: figures["produce_kafka"]),
        ("consume", "odradek Consumer, gRPC", lambda: figures["consume_grpc"]),
        ("consume", "confluent-kafka, Kafka listener, sendfile", lambda: figures["consume_kafka_sendfile"]),
        ("consume", "confluent-kafka, Kafka listener, copy", lambda: figures["consume_kafka_copy"]),
    ]
    lines = [f"{records:,} records of {RECORD_BYTES} B, {PARTITIONS} partitions, 1 broker; median of {rounds} rounds",
             f"{'':8} {'client and path':44} {'records/s':>12} {'MB/s':>8} {'vs gRPC':>8}"]  # fmt: skip
    for what, path, value in rows:
        base = figures["produce_grpc"] if what == "produce" else figures["consume_grpc"]
        v = value()
        lines.append(f"{what:8} {path:44} {v:12,.0f} {v * RECORD_BYTES / 1e6:8.1f} {v / base:7.2f}x")
    lines.append(f"sendfile / copy (Kafka listener consume), median of the rounds' ratios: "
                 f"{figures['sendfile_over_copy']:.2f}x")  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.kafka.bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=RECORDS)
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    figures = run(args.records, args.rounds)
    print(json.dumps(figures, indent=2) if args.json else table(figures, args.records, args.rounds))


if __name__ == "__main__":
    main()
