"""Benchmark of the controller quorum: three ``odradek controller`` processes on 127.0.0.1.

    python -m bench.controller_quorum [--trials 5] [--commits 300] [--topics 100] [--big-partitions 1000] [--no-fsync]

Prints, asserts nothing (figures are measured by a client over gRPC, so they include the RPC, the queue to
the controller thread, the Raft commit on a majority with fsync, and the apply):

- failover: for each trial, SIGKILL of the active controller -> the next write (a 1-record AlterConfigs,
  retried by a client that follows NOT_CONTROLLER hints) answered as committed; then the killed node is
  restarted and allowed to catch up before the next trial;
- metadata commit latency p50 / p99 of sequential 1-record AlterConfigs, and of CreateTopics of one
  partition (Topic + Partition records);
- CreateTopics of ``--big-partitions`` partitions (replication factor 3, one atomic command) end to end.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence

import grpc

from controller.client import ControllerClient, ControllerUnavailableError
from proto import controller_pb2 as pb
from tests.support.launcher import LocalQuorum, addresses_of, wait_until


def percentile(values: Sequence[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


class BenchBroker:
    """A stand-in broker: registers, follows the metadata log and heartbeats every 500 ms on a thread of its
    own, which alone touches its state (``stop`` from any thread)."""

    def __init__(self, client: ControllerClient, broker_id: int) -> None:
        self.client = client
        self.broker_id = broker_id
        self.applied = -1
        self._stop = threading.Event()
        response = client.call(
            "RegisterBroker",
            pb.RegisterBrokerRequest(
                broker_id=broker_id, incarnation_id=str(uuid.uuid4()), endpoints={"PLAINTEXT": f"127.0.0.1:{broker_id}"}
            ),
        )
        self.epoch = response.broker_epoch
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"bench-broker-{broker_id}")
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            try:
                fetched = self.client.stub(self.client.current).FetchMetadata(
                    pb.FetchMetadataRequest(from_offset=self.applied + 1, max_records=10_000), timeout=2
                )
                if fetched.entries:
                    self.applied = fetched.entries[-1].offset
                request = pb.BrokerHeartbeatRequest(
                    broker_id=self.broker_id, broker_epoch=self.epoch, current_metadata_offset=self.applied
                )
                self.client.call("BrokerHeartbeat", request, deadline_s=3)
            except (grpc.RpcError, ControllerUnavailableError):
                continue

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


def alter_configs(client: ControllerClient, value: int, deadline_s: float = 30.0) -> None:
    request = pb.AlterConfigsRequest()
    request.resources.add(resource_type="cluster", resource_name="").entries.add(
        key="log.retention.ms", value=str(value)
    )
    response = client.call("AlterConfigs", request, deadline_s=deadline_s)
    if response.resources[0].error.code:
        raise RuntimeError(f"AlterConfigs failed: {response.resources[0].error}")


def create_topic(client: ControllerClient, name: str, partitions: int, rf: int) -> None:
    request = pb.CreateTopicsRequest(
        topics=[pb.TopicToCreate(name=name, num_partitions=partitions, replication_factor=rf)], timeout_ms=60_000
    )
    result = client.call("CreateTopics", request, deadline_s=60).topics[0]
    if result.error.code:
        raise RuntimeError(f"CreateTopics {name} failed: {result.error}")


def active_node(quorum: LocalQuorum, client: ControllerClient) -> int:
    alter_configs(client, 1)
    return next(i for i, a in quorum.listen.items() if a == client.current)


def timed(action: Callable[[int], object], count: int) -> list[float]:
    latencies = []
    for i in range(count):
        start = time.perf_counter()
        action(i)
        latencies.append((time.perf_counter() - start) * 1000)
    return latencies


def report(label: str, latencies_ms: list[float]) -> None:
    print(
        f"  {label}: n={len(latencies_ms)}  p50 {percentile(latencies_ms, 50):.2f} ms  "
        f"p99 {percentile(latencies_ms, 99):.2f} ms  max {max(latencies_ms):.2f} ms"
    )


def failover_trial(quorum: LocalQuorum, client: ControllerClient, trial: int) -> float:
    """Seconds from SIGKILL of the active controller to the next write answered as committed."""
    victim = active_node(quorum, client)
    killed_at = time.monotonic()
    quorum.nodes[victim].kill()
    alter_configs(client, 1000 + trial)
    elapsed = time.monotonic() - killed_at
    restarted = quorum.start(victim)
    survivor = client.current

    def caught_up() -> bool:
        try:
            mine = restarted_client.stub(restarted.listen).FetchMetadata(
                pb.FetchMetadataRequest(from_offset=0, max_records=1), timeout=2
            )
            theirs = restarted_client.stub(survivor).FetchMetadata(
                pb.FetchMetadataRequest(from_offset=0, max_records=1), timeout=2
            )
        except grpc.RpcError:
            return False
        return bool(mine.end_offset >= theirs.end_offset)

    with ControllerClient([restarted.listen]) as restarted_client:
        wait_until(caught_up, 60, f"controller {victim} catching up")
    return elapsed


def run(trials: int, commits: int, topics: int, big: int, fsync: bool) -> None:
    config = {"metadata.log.fsync": "true" if fsync else "false"}
    with tempfile.TemporaryDirectory(prefix="bench-controller-") as root, LocalQuorum(root, 3, config) as quorum:
        quorum.start_all()
        client = ControllerClient(addresses_of(quorum))
        brokers = [BenchBroker(client, b) for b in range(3)]
        try:
            wait_until(lambda: _unfenced(client) == 3, 60, "3 brokers unfenced")
            print(f"controller quorum: 3 voters on 127.0.0.1, fsync={'on' if fsync else 'off'}")
            print("metadata commit latency (client round trip: gRPC + controller thread + Raft commit + apply):")
            report("AlterConfigs, 1 record", timed(lambda i: alter_configs(client, i + 2), commits))
            report("CreateTopics, 1 partition rf 3", timed(lambda i: create_topic(client, f"small-{i}", 1, 3), topics))
            start = time.perf_counter()
            create_topic(client, "big", big, 3)
            seconds = time.perf_counter() - start
            print(
                f"CreateTopics of {big} partitions (rf 3, {big + 1} records in one command): {seconds * 1000:.1f} ms "
                f"end to end ({big / seconds:.0f} partitions/s)"
            )
            failovers = [failover_trial(quorum, client, t) for t in range(trials)]
            print(f"failover (SIGKILL of the active controller -> next committed write), {trials} trials:")
            print(
                f"  median {statistics.median(failovers):.3f} s  min {min(failovers):.3f} s  "
                f"max {max(failovers):.3f} s  all {' '.join(f'{t:.3f}' for t in failovers)}"
            )
        finally:
            for broker in brokers:
                broker.stop()
            client.close()


def _unfenced(client: ControllerClient) -> int:
    from metadata.image import MetadataDelta, MetadataImage
    from metadata.record_codec import decode_record

    response = client.stub(client.current).FetchMetadata(pb.FetchMetadataRequest(from_offset=0), timeout=5)
    delta = MetadataDelta(MetadataImage())
    for e in response.entries:
        delta.replay(decode_record(e.payload), e.offset)
    return sum(1 for b in delta.apply().brokers.values() if not b.fenced)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.controller_quorum", description=__doc__)
    parser.add_argument("--trials", type=int, default=5, help="failover trials")
    parser.add_argument("--commits", type=int, default=300, help="sequential AlterConfigs")
    parser.add_argument("--topics", type=int, default=100, help="sequential CreateTopics of one partition")
    parser.add_argument("--big-partitions", type=int, default=1000)
    parser.add_argument("--no-fsync", action="store_true")
    args = parser.parse_args(argv)
    run(args.trials, args.commits, args.topics, args.big_partitions, fsync=not args.no_fsync)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
