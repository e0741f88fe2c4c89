"""The leader's own work for one acks=all record at RF 3, in one process with no sockets: CPU microseconds a cycle.

    python -m tests.bench.leader_cycle [--cycles 5000] [--repeat 3] [--profile [--sort tottime]] [--json]

A cycle is what the partition's leader does for one record of ``odradek perf e2e`` at 1,000 records/s (the
followers and the consumer caught up, each fetch parked): a Produce (acks=all, one 100 B record) arrives on a
``DATA`` connection and appends, which answers both followers' parked fetches on their ``REPLICATION``
connections; each follower's next fetch arrives (in its fetch session) and reports the new log end, the second
moves the high watermark, which answers the consumer's parked fetch and then the Produce; the consumer's next
fetch arrives and parks. Every message is a frame fed to the listener's real ``asyncio.Protocol`` (the broker's
parsing, listeners, service, fetch sessions, purgatories, partition, log files in a temporary directory, the
answers serialized and framed); the transports only keep what is written, so what is measured is the broker's
Python and file writes without the socket calls, the event loop's wake-ups or other processes. The figures
(best of ``--repeat`` runs of ``--cycles``, after as many cycles of warm-up) are a change's CPU on the leader's
path, measured in seconds with little noise, where ``tests.bench.cpu`` measures the whole cluster for minutes
(the running leader spends about twice this per record: cold caches, the socket calls, the loop). ``--profile``
prints the profile of one more run (by cumulative time, or ``--sort``). Nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import json
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from broker.data_listener import DataListener
from broker.replication_link import FollowerSession, forgotten_topics
from broker.replication_listener import ReplicationListener
from broker.service import BrokerService
from common.framing import FETCH, OK, PRODUCE, SIZE, frame
from log.record import build_batch
from proto import broker_pb2 as pb
from tests.broker.conftest import BrokerHarness

TOPIC = "t"
FOLLOWERS = (1, 2)
# every parked fetch is answered within its cycle; a long wait keeps a slow run (under valgrind:
# tests.bench.leader_instructions) from expiring one, which the bench, never running its event loop, would not answer
MAX_WAIT_MS = 30_000
LISTENER = "PLAINTEXT"  # the harness's listener: both framed listeners take its (plaintext) protocol


class KeptTransport(asyncio.Transport):
    """What a listener's connection writes, kept; never paused, never full."""

    def __init__(self) -> None:
        super().__init__()
        self.written: list[bytes] = []
        self.closed = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 40000) if name == "peername" else default

    def write(self, data: Any) -> None:
        self.written.append(bytes(data))

    def take(self) -> bytes:
        """The one frame written since the last take (a cycle that answered otherwise is a bug: raised)."""
        if len(self.written) != 1:
            raise RuntimeError(f"expected one answer, {len(self.written)} were written")
        return self.written.pop()

    def abort(self) -> None:
        self.closed = True

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_write_buffer_size(self) -> int:
        return 0

    def pause_reading(self) -> None:
        return None

    def resume_reading(self) -> None:
        return None


class Leader:
    """One broker (id 0) leading a 1-partition RF 3 topic, its listeners' connections for a producer, a consumer
    and the two followers; :meth:`cycle` moves one record through it. Runs inside an event loop."""

    def __init__(self, root: Path) -> None:
        self.harness = h = BrokerHarness(root)
        for follower in FOLLOWERS:
            h.register(follower)
        h.create_topic(TOPIC, replicas=[0, *FOLLOWERS])
        partition = h.replicas.partition(TOPIC, 0)
        assert partition is not None
        self.epoch = partition.leader_epoch
        loop = asyncio.get_running_loop()
        service = BrokerService(h.ctx)
        data = DataListener(h.ctx, LISTENER, "127.0.0.1:0", service, loop)
        replication = ReplicationListener(h.ctx, LISTENER, "127.0.0.1:0", service, loop)
        self.connections: dict[str, tuple[asyncio.Protocol, KeptTransport]] = {}
        for name, listener in (("producer", data), ("consumer", data), ("f1", replication), ("f2", replication)):
            protocol, transport = listener._protocol(), KeptTransport()
            protocol.connection_made(transport)
            self.connections[name] = (protocol, transport)
        self.sessions = {f: FollowerSession() for f in FOLLOWERS}
        self.follower_end = dict.fromkeys(FOLLOWERS, 0)
        self.value = os.urandom(100)
        self.offset = 0
        for follower in FOLLOWERS:
            self._follower_fetch(follower)
        self._consumer_fetch()
        if any(transport.written for _, transport in self.connections.values()):
            raise RuntimeError("a fetch of a caught-up reader was answered at once instead of parking")

    def _send(self, name: str, payload: bytes) -> None:
        self.connections[name][0].data_received(payload)

    def _answer(self, name: str) -> bytes:
        return self.connections[name][1].take()

    def _follower_fetch(self, follower: int) -> None:
        key = (TOPIC, 0)
        end = self.follower_end[follower]
        named, forgotten, session_epoch = self.sessions[follower].next({key: (end, self.epoch, 0)})
        partitions = [pb.FetchPartition(partition=0, fetch_offset=end, current_leader_epoch=self.epoch,
                                        partition_max_bytes=1 << 20, log_start_offset=0, last_fetched_epoch=-1)]
        request = pb.FetchRequest(
            replica_id=follower, replica_epoch=self.harness.broker_epoch(follower), max_wait_ms=MAX_WAIT_MS,
            min_bytes=1, max_bytes=10 << 20, topics=[pb.FetchTopic(name=TOPIC, partitions=partitions)] if named else [],
            session_epoch=session_epoch, forgotten=forgotten_topics(forgotten),
        )  # fmt: skip
        self._send(f"f{follower}", frame(request.SerializeToString()))

    def _consumer_fetch(self) -> None:
        partition = pb.FetchPartition(partition=0, fetch_offset=self.offset, partition_max_bytes=1 << 20,
                                      current_leader_epoch=self.epoch, log_start_offset=-1, last_fetched_epoch=-1)
        request = pb.FetchRequest(replica_id=-1, max_wait_ms=MAX_WAIT_MS, min_bytes=1, max_bytes=50 << 20,
                                  topics=[pb.FetchTopic(name=TOPIC, partitions=[partition])])  # fmt: skip
        self._send("consumer", frame(bytes((FETCH,)) + request.SerializeToString()))

    def cycle(self) -> None:
        records = build_batch([self.value], timestamp_ms=int(time.time() * 1000))
        data = pb.ProducePartitionData(partition=0, records=records)
        request = pb.ProduceRequest(acks=-1, timeout_ms=30_000, topics=[pb.ProduceTopicData(name=TOPIC,
                                                                                           partitions=[data])])
        self._send("producer", frame(bytes((PRODUCE,)) + request.SerializeToString()))
        for follower in FOLLOWERS:  # both parked follower fetches were answered by the append
            answer = pb.FetchResponse.FromString(self._answer(f"f{follower}")[SIZE.size :])
            self.follower_end[follower] = answer.topics[0].partitions[0].log_end_offset
        for follower in FOLLOWERS:  # each reports its new log end; the second one moves the high watermark
            self._follower_fetch(follower)
        for name in ("consumer", "producer"):
            raw = self._answer(name)
            if raw[SIZE.size] != OK:
                raise RuntimeError(f"the {name} was refused: {raw[SIZE.size + 1 :].decode(errors='replace')}")
        self.offset += 1
        self._consumer_fetch()


async def _measure(root: Path, cycles: int, profile: bool, sort: str) -> tuple[float, Leader]:
    leader = Leader(root)
    for _ in range(cycles):  # warm-up: caches, the segment's first pages, the purgatories' structures
        leader.cycle()
    gc.collect()
    gc.freeze()  # as the broker does once it is ready
    profiler = cProfile.Profile() if profile else None
    if profiler is not None:
        profiler.enable()
    started = time.process_time()
    for _ in range(cycles):
        leader.cycle()
    elapsed = time.process_time() - started
    if profiler is not None:
        profiler.disable()
        pstats.Stats(profiler, stream=sys.stdout).sort_stats(sort).print_stats(40)
    gc.unfreeze()
    partition = leader.harness.replicas.partition(TOPIC, 0)
    assert partition is not None
    if not partition.log_end_offset == partition.high_watermark == leader.offset == 2 * cycles:
        raise RuntimeError(f"after {2 * cycles} cycles the log ends at {partition.log_end_offset}, the high "
                           f"watermark is {partition.high_watermark} and the consumer is at {leader.offset}")
    return elapsed / cycles * 1e6, leader


def run_once(cycles: int, profile: bool = False, sort: str = "cumulative") -> float:
    """CPU microseconds per cycle of one run on a fresh leader (its directory removed after)."""
    with tempfile.TemporaryDirectory(prefix="odradek-leader-cycle-") as tmp:
        us, leader = asyncio.run(_measure(Path(tmp), cycles, profile, sort))
        leader.harness.replicas.shutdown()
        return us


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.leader_cycle", description=__doc__.split("\n")[0])
    parser.add_argument("--cycles", type=int, default=5000, help="records a run (and as many to warm up)")
    parser.add_argument("--repeat", type=int, default=3, help="runs; the best is reported")
    parser.add_argument("--profile", action="store_true", help="then one more run under cProfile")
    parser.add_argument("--sort", default="cumulative", choices=("cumulative", "tottime", "ncalls"),
                        help="the profile's order (default cumulative)")
    parser.add_argument("--json", action="store_true", help="one JSON object as the last line")
    args = parser.parse_args(argv)
    runs = []
    for i in range(args.repeat):
        runs.append(run_once(args.cycles))
        print(f"run {i + 1}/{args.repeat}: {runs[-1]:.1f} µs a cycle", file=sys.stderr, flush=True)
    best = min(runs)
    each = ", ".join(f"{r:.1f}" for r in runs)
    print(f"the leader's CPU per acks=all record at RF 3 (in process, no sockets): {best:.1f} µs "
          f"(best of {args.repeat} runs of {args.cycles} cycles; runs {each})")  # fmt: skip
    if args.profile:
        run_once(args.cycles, profile=True, sort=args.sort)
    if args.json:
        print(json.dumps({"cycles": args.cycles, "us_per_cycle": best, "runs": runs}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
