"""An in-process fake cluster of Broker gRPC servers with in-memory logs, for the client tests.

It speaks the real protocol over real gRPC on 127.0.0.1, so the whole client stack runs, but it is
deliberately simple: one shared state under one lock, whole batches appended with patched base
offsets, the high watermark at the log end, no replication. Tests steer it: move leaders, inject
error codes per partition, hold produce answers, stop a broker.

Thread-safe: every servicer method takes ``FakeCluster.lock``.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import grpc

from log.errors import LogError
from log.producer_state import ProducerStateManager
from log.record import iter_batches, patch_base_offset, read_batch
from odradek.types import TopicPartition
from proto import broker_pb2, broker_pb2_grpc, common_pb2, controller_pb2


@dataclass
class FakePartition:
    leader: int
    replicas: list[int]
    leader_epoch: int = 0
    log_start_offset: int = 0
    log_end_offset: int = 0
    batches: list[tuple[int, int, int, bytes]] = field(default_factory=list)  # base, next, max_ts, bytes
    producers: ProducerStateManager = field(default_factory=ProducerStateManager)  # the broker's idempotence

    def records_from(self, offset: int, max_bytes: int, whole_first_batch: bool = True) -> bytes:
        """Batches from the one holding ``offset``, up to ``max_bytes``: the first one whole (KIP-74), or
        cut at ``max_bytes`` like brokers before KIP-74 when ``whole_first_batch`` is False."""
        if not whole_first_batch:
            return self.records_from(offset, 1 << 62)[:max_bytes]
        out: list[bytes] = []
        size = 0
        for _base, nxt, _, data in self.batches:
            if nxt <= offset:
                continue
            if out and size + len(data) > max_bytes:
                break
            out.append(data)
            size += len(data)
        return b"".join(out)


LOSE_RESPONSE = "LOSE_RESPONSE"  # an inject() code: write the records, then fail the call as if the answer was lost


def _error(code: str = "", message: str = "") -> common_pb2.Error:
    return common_pb2.Error(code=code, message=message)


class FakeCluster:
    """The shared state of the fake brokers."""

    def __init__(self, node_ids: tuple[int, ...] = (1,), cluster_id: str = "fake-cluster") -> None:
        self.lock = threading.Condition()
        self.cluster_id = cluster_id
        self.controller_id = 100
        self.topics: dict[str, list[FakePartition]] = {}
        self.topic_configs: dict[str, dict[str, str]] = {}
        self.internal_topics: set[str] = set()
        self.injected: dict[tuple[str, TopicPartition], deque[str]] = {}  # (rpc, tp) -> error codes
        self.admin_errors: dict[str, deque[str]] = {}  # rpc -> top-level error codes
        self.produce_gate = threading.Event()
        self.produce_gate.set()
        self.paused: set[int] = set()  # brokers whose Produce and Metadata calls hang (SIGSTOPped), up to 30 s
        self.calls: list[tuple[int, str, Any]] = []
        self.servers: dict[int, grpc.Server] = {}
        self.ports: dict[int, int] = {}
        self.fenced: set[int] = set()
        self.produce_active = 0  # Produce calls being handled now, and the most at once
        self.produce_active_max = 0
        self.whole_first_batch = True  # KIP-74; False: answers are cut at the fetch size
        self.groups: Any = None  # a FakeCoordinator (tests/clients/fake_coordinator.py) answers the group RPCs
        self.next_producer_id = 1000  # InitProducerId hands out ids from here
        for node in node_ids:
            self.start_broker(node)

    # ------------------------------------------------------------------------- lifecycle

    def start_broker(self, node: int) -> None:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=16, thread_name_prefix=f"fake-broker-{node}"))
        broker_pb2_grpc.add_BrokerServicer_to_server(FakeBroker(self, node), server)
        port = server.add_insecure_port(f"127.0.0.1:{self.ports.get(node, 0)}")
        server.start()
        self.servers[node] = server
        self.ports[node] = port

    def stop_broker(self, node: int) -> None:
        self.servers.pop(node).stop(grace=None).wait(5)

    def stop(self) -> None:
        self.produce_gate.set()
        for node in list(self.servers):
            self.stop_broker(node)

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{port}" for port in self.ports.values())

    # ------------------------------------------------------------------------- steering

    def create_topic(self, name: str, partitions: int = 1, leaders: list[int] | None = None) -> None:
        nodes = sorted(self.ports)
        with self.lock:
            self.topics[name] = [
                FakePartition(leader=(leaders[p] if leaders else nodes[p % len(nodes)]), replicas=list(nodes))
                for p in range(partitions)
            ]
            self.topic_configs.setdefault(name, {})

    def set_leader(self, tp: TopicPartition, node: int) -> None:
        with self.lock:
            part = self.topics[tp.topic][tp.partition]
            part.leader = node
            part.leader_epoch += 1

    def inject(self, rpc: str, tp: TopicPartition, *codes: str) -> None:
        """Answer the next ``len(codes)`` ``rpc`` calls for ``tp`` with these error codes."""
        with self.lock:
            self.injected.setdefault((rpc, tp), deque()).extend(codes)

    def partition(self, tp: TopicPartition) -> FakePartition:
        return self.topics[tp.topic][tp.partition]

    def truncate_front(self, tp: TopicPartition, new_start: int) -> None:
        with self.lock:
            part = self.partition(tp)
            part.batches = [b for b in part.batches if b[1] > new_start]
            part.log_start_offset = new_start

    def append(self, tp: TopicPartition, batch: bytes) -> int:
        with self.lock:
            return self._append(self.partition(tp), batch)

    def _append(self, part: FakePartition, records: bytes) -> int:
        base = part.log_end_offset
        buf = bytearray(records)
        for pos, header in list(iter_batches(bytes(buf))):
            part.producers.update(header, part.log_end_offset)
            patch_base_offset(buf, pos, part.log_end_offset)
            nxt = part.log_end_offset + header.last_offset_delta + 1
            part.batches.append(
                (part.log_end_offset, nxt, header.max_timestamp, bytes(buf[pos : pos + header.size_bytes]))
            )
            part.log_end_offset = nxt
        self.lock.notify_all()
        return base

    def records(self, tp: TopicPartition) -> list[Any]:
        """Every record of ``tp``, decoded."""
        with self.lock:
            out: list[Any] = []
            for _, _, _, data in self.partition(tp).batches:
                out.extend(read_batch(data)[1])
            return out

    def take_injected(self, rpc: str, tp: TopicPartition) -> str:
        queue = self.injected.get((rpc, tp))
        return queue.popleft() if queue else ""

    def calls_of(self, rpc: str) -> list[Any]:
        with self.lock:
            return [req for _, name, req in self.calls if name == rpc]


class FakeBroker(broker_pb2_grpc.BrokerServicer):
    """One broker's servicer over the shared :class:`FakeCluster`."""

    def __init__(self, cluster: FakeCluster, node_id: int) -> None:
        self.cluster = cluster
        self.node_id = node_id

    def _record(self, rpc: str, request: Any) -> None:
        self.cluster.calls.append((self.node_id, rpc, request))

    def _hold_while_paused(self, context: Any) -> None:
        """Under the lock: a paused broker answers nothing (bounded, 30 s) until unpaused or the call ends."""
        c = self.cluster
        deadline = time.monotonic() + 30
        while self.node_id in c.paused and context.is_active() and time.monotonic() < deadline:
            c.lock.wait(0.05)

    def Metadata(self, request: broker_pb2.MetadataRequest, context: Any) -> broker_pb2.MetadataResponse:
        c = self.cluster
        with c.lock:
            self._hold_while_paused(context)
            self._record("Metadata", request)
            names = list(c.topics) if request.all_topics else list(request.topics)
            topics = []
            for name in names:
                parts = c.topics.get(name)
                if parts is None:
                    topics.append(broker_pb2.TopicMetadata(name=name, error=_error("UNKNOWN_TOPIC_OR_PARTITION")))
                    continue
                topics.append(
                    broker_pb2.TopicMetadata(
                        name=name,
                        topic_id=f"id-{name}",
                        is_internal=name in c.internal_topics,
                        partitions=[
                            broker_pb2.PartitionMetadata(
                                partition=i,
                                leader=p.leader,
                                leader_epoch=p.leader_epoch,
                                replicas=p.replicas,
                                isr=p.replicas,
                                error=_error("LEADER_NOT_AVAILABLE" if p.leader < 0 else ""),
                            )
                            for i, p in enumerate(parts)
                        ],
                    )
                )
            brokers = [
                broker_pb2.BrokerNode(node_id=n, host="127.0.0.1", port=port)
                for n, port in c.ports.items()
                if n in c.servers and n not in c.fenced
            ]
            return broker_pb2.MetadataResponse(
                brokers=brokers, cluster_id=c.cluster_id, controller_id=c.controller_id, topics=topics
            )

    def Produce(self, request: broker_pb2.ProduceRequest, context: Any) -> broker_pb2.ProduceResponse:
        c = self.cluster
        with c.lock:
            c.produce_active += 1
            c.produce_active_max = max(c.produce_active_max, c.produce_active)
            self._hold_while_paused(context)
        c.produce_gate.wait(30)
        with c.lock:
            c.produce_active -= 1
            self._record("Produce", request)
            topics = []
            lose = False  # inject(..., LOSE_RESPONSE): the records are written, the answer never arrives
            for t in request.topics:
                for p in t.partitions:
                    queue = c.injected.get(("Produce", TopicPartition(t.name, p.partition)))
                    if queue and queue[0] == LOSE_RESPONSE:
                        queue.popleft()
                        lose = True
                answers = [self._produce_partition(t.name, p.partition, p.records) for p in t.partitions]
                topics.append(broker_pb2.ProduceTopicResponse(name=t.name, partitions=answers))
        if lose:
            context.abort(grpc.StatusCode.UNAVAILABLE, "the fake broker lost this answer on purpose")
        return broker_pb2.ProduceResponse(topics=topics)

    def InitProducerId(self, request: Any, context: Any) -> broker_pb2.InitProducerIdResponse:
        c = self.cluster
        with c.lock:
            self._record("InitProducerId", request)
            code = c.take_injected("InitProducerId", TopicPartition("", 0))
            if code:
                return broker_pb2.InitProducerIdResponse(error=_error(code, code.lower()), producer_id=-1)
            if request.producer_id >= 0:
                return broker_pb2.InitProducerIdResponse(
                    producer_id=request.producer_id, producer_epoch=request.producer_epoch + 1
                )
            c.next_producer_id += 1
            return broker_pb2.InitProducerIdResponse(producer_id=c.next_producer_id - 1, producer_epoch=0)

    def AddPartitionsToTxn(self, request: Any, context: Any) -> broker_pb2.AddPartitionsToTxnResponse:
        """Adds nothing: answers the next code injected for ("AddPartitionsToTxn", TopicPartition("", 0)), or
        success."""
        c = self.cluster
        with c.lock:
            self._record("AddPartitionsToTxn", request)
            code = c.take_injected("AddPartitionsToTxn", TopicPartition("", 0))
            return broker_pb2.AddPartitionsToTxnResponse(error=_error(code, code.lower() if code else ""))

    def EndTxn(self, request: Any, context: Any) -> broker_pb2.EndTxnResponse:
        with self.cluster.lock:
            self._record("EndTxn", request)
            return broker_pb2.EndTxnResponse()

    def _produce_partition(self, topic: str, partition: int, records: bytes) -> broker_pb2.ProducePartitionResponse:
        c = self.cluster
        tp = TopicPartition(topic, partition)

        def answer(code: str, base: int = -1) -> broker_pb2.ProducePartitionResponse:
            return broker_pb2.ProducePartitionResponse(
                partition=partition,
                error=_error(code, code.lower() if code else ""),
                base_offset=base,
                log_append_time_ms=-1,
            )

        parts = c.topics.get(topic)
        if parts is None or partition >= len(parts):
            return answer("UNKNOWN_TOPIC_OR_PARTITION")
        code = c.take_injected("Produce", tp)
        if code:
            return answer(code)
        part = parts[partition]
        if part.leader != self.node_id:
            return answer("NOT_LEADER_OR_FOLLOWER")
        try:
            headers = [h for _, h in iter_batches(records)]
        except Exception:
            return answer("CORRUPT_MESSAGE")
        try:
            # a transactional batch opening a transaction is taken as verified (S11): no coordinator is asked
            needed = part.producers.needs_verification(headers)
            verified = {pid: part.producers.begin_verification(pid, epoch) for pid, epoch in needed}
            verdict = part.producers.check_append(headers, verified)
        except LogError as exc:
            return answer(exc.code)
        if verdict.duplicate is not None:
            return answer("", verdict.duplicate.first_offset)
        return answer("", c._append(part, records))

    def Fetch(self, request: broker_pb2.FetchRequest, context: Any) -> broker_pb2.FetchResponse:
        c = self.cluster
        deadline = time.monotonic() + request.max_wait_ms / 1000
        with c.lock:
            self._record("Fetch", request)
            while True:
                topics, size = self._fetch_once(request)
                remaining = deadline - time.monotonic()
                if size >= request.min_bytes or remaining <= 0 or self._has_errors(topics):
                    return broker_pb2.FetchResponse(topics=topics)
                c.lock.wait(remaining)

    @staticmethod
    def _has_errors(topics: list[broker_pb2.FetchTopicResponse]) -> bool:
        return any(p.error.code for t in topics for p in t.partitions)

    def _fetch_once(self, request: broker_pb2.FetchRequest) -> tuple[list[broker_pb2.FetchTopicResponse], int]:
        c = self.cluster
        topics = []
        total = 0
        for t in request.topics:
            answers = []
            for fp in t.partitions:
                tp = TopicPartition(t.name, fp.partition)
                parts = c.topics.get(t.name)
                code = c.take_injected("Fetch", tp)
                if parts is None or fp.partition >= len(parts):
                    code = "UNKNOWN_TOPIC_OR_PARTITION"
                elif not code and parts[fp.partition].leader != self.node_id:
                    code = "NOT_LEADER_OR_FOLLOWER"
                part = parts[fp.partition] if not code and parts else None
                if part is not None and not part.log_start_offset <= fp.fetch_offset <= part.log_end_offset:
                    code = "OFFSET_OUT_OF_RANGE"
                records = b""
                if part is not None and not code:
                    limit = min(fp.partition_max_bytes, request.max_bytes - total)
                    records = part.records_from(fp.fetch_offset, limit, c.whole_first_batch)
                    total += len(records)
                answers.append(
                    broker_pb2.FetchPartitionResponse(
                        partition=fp.partition,
                        error=_error(code),
                        high_watermark=part.log_end_offset if part else -1,
                        log_start_offset=part.log_start_offset if part else -1,
                        records=records,
                    )
                )
            topics.append(broker_pb2.FetchTopicResponse(name=t.name, partitions=answers))
        return topics, total

    def ListOffsets(self, request: broker_pb2.ListOffsetsRequest, context: Any) -> broker_pb2.ListOffsetsResponse:
        c = self.cluster
        with c.lock:
            self._record("ListOffsets", request)
            answers = []
            for q in request.partitions:
                tp = TopicPartition(q.topic, q.partition)
                code = c.take_injected("ListOffsets", tp)
                parts = c.topics.get(q.topic)
                if not code and (parts is None or q.partition >= len(parts)):
                    code = "UNKNOWN_TOPIC_OR_PARTITION"
                elif not code and parts is not None and parts[q.partition].leader != self.node_id:
                    code = "NOT_LEADER_OR_FOLLOWER"
                offset, ts = -1, -1
                if not code and parts is not None:
                    offset, ts = self._offset_for(parts[q.partition], q.timestamp)
                answers.append(
                    broker_pb2.ListOffsetsPartitionResponse(
                        topic=q.topic, partition=q.partition, error=_error(code), offset=offset, timestamp=ts
                    )
                )
            return broker_pb2.ListOffsetsResponse(partitions=answers)

    @staticmethod
    def _offset_for(part: FakePartition, timestamp: int) -> tuple[int, int]:
        if timestamp == -2:
            return part.log_start_offset, -1
        if timestamp == -1:
            return part.log_end_offset, -1
        for _, _, max_ts, data in part.batches:
            if max_ts < timestamp:
                continue
            for record in read_batch(data)[1]:
                if record.timestamp >= timestamp:
                    return record.offset, record.timestamp
        return -1, -1

    # ------------------------------------------------------------------------------- groups

    def _group_call(self, rpc: str, request: Any, context: Any) -> Any:
        c = self.cluster
        with c.lock:
            self._record(rpc, request)
            if c.groups is None:
                context.abort(grpc.StatusCode.UNIMPLEMENTED, f"{rpc} needs cluster.groups")
            if rpc == "FindCoordinator":
                return c.groups.FindCoordinator(self.node_id, request, f"127.0.0.1:{c.ports[c.groups.node]}")
            return getattr(c.groups, rpc)(self.node_id, request)

    def FindCoordinator(self, request: Any, context: Any) -> Any:
        return self._group_call("FindCoordinator", request, context)

    def ConsumerGroupHeartbeat(self, request: Any, context: Any) -> Any:
        return self._group_call("ConsumerGroupHeartbeat", request, context)

    def OffsetCommit(self, request: Any, context: Any) -> Any:
        return self._group_call("OffsetCommit", request, context)

    def OffsetFetch(self, request: Any, context: Any) -> Any:
        return self._group_call("OffsetFetch", request, context)

    def ListGroups(self, request: Any, context: Any) -> Any:
        return self._group_call("ListGroups", request, context)

    def ConsumerGroupDescribe(self, request: Any, context: Any) -> Any:
        return self._group_call("ConsumerGroupDescribe", request, context)

    def DeleteGroups(self, request: Any, context: Any) -> Any:
        return self._group_call("DeleteGroups", request, context)

    # -------------------------------------------------------------------------------- admin

    def DescribeCluster(self, request: Any, context: Any) -> broker_pb2.DescribeClusterResponse:
        c = self.cluster
        with c.lock:
            return broker_pb2.DescribeClusterResponse(
                cluster_id=c.cluster_id,
                controller_id=c.controller_id,
                controllers=[controller_pb2.QuorumNode(node_id=c.controller_id, address="127.0.0.1:1", is_leader=True)],
                brokers=[
                    broker_pb2.BrokerNode(node_id=n, host="127.0.0.1", port=port, fenced=n in c.fenced)
                    for n, port in sorted(c.ports.items())
                ],
            )

    def _admin_error(self, rpc: str) -> str:
        queue = self.cluster.admin_errors.get(rpc)
        return queue.popleft() if queue else ""

    def CreateTopics(
        self, request: controller_pb2.CreateTopicsRequest, context: Any
    ) -> controller_pb2.CreateTopicsResponse:
        c = self.cluster
        with c.lock:
            self._record("CreateTopics", request)
            code = self._admin_error("CreateTopics")
            if code:
                return controller_pb2.CreateTopicsResponse(error=_error(code))
            results = []
            for t in request.topics:
                if t.name in c.topics:
                    results.append(
                        controller_pb2.TopicResult(
                            name=t.name, error=_error("TOPIC_ALREADY_EXISTS", f"topic {t.name} exists")
                        )
                    )
                    continue
                if t.num_partitions == 0 or t.replication_factor > len(c.ports):
                    code = "INVALID_PARTITIONS" if t.num_partitions == 0 else "INVALID_REPLICATION_FACTOR"
                    results.append(controller_pb2.TopicResult(name=t.name, error=_error(code)))
                    continue
                count = t.num_partitions if t.num_partitions > 0 else 1
                if not request.validate_only:
                    nodes = sorted(c.ports)
                    c.topics[t.name] = [
                        FakePartition(leader=nodes[p % len(nodes)], replicas=nodes) for p in range(count)
                    ]
                    c.topic_configs[t.name] = dict(t.configs)
                results.append(
                    controller_pb2.TopicResult(
                        name=t.name, topic_id=f"id-{t.name}", num_partitions=count, replication_factor=1
                    )
                )
            return controller_pb2.CreateTopicsResponse(topics=results)

    def DeleteTopics(
        self, request: controller_pb2.DeleteTopicsRequest, context: Any
    ) -> controller_pb2.DeleteTopicsResponse:
        c = self.cluster
        with c.lock:
            self._record("DeleteTopics", request)
            results = []
            for name in request.names:
                code = "" if c.topics.pop(name, None) is not None else "UNKNOWN_TOPIC_OR_PARTITION"
                results.append(controller_pb2.TopicResult(name=name, error=_error(code)))
            return controller_pb2.DeleteTopicsResponse(topics=results)

    def CreatePartitions(
        self, request: controller_pb2.CreatePartitionsRequest, context: Any
    ) -> controller_pb2.CreatePartitionsResponse:
        c = self.cluster
        with c.lock:
            results = []
            for t in request.topics:
                parts = c.topics.get(t.name)
                if parts is None:
                    results.append(controller_pb2.TopicResult(name=t.name, error=_error("UNKNOWN_TOPIC_OR_PARTITION")))
                elif t.count <= len(parts):
                    results.append(
                        controller_pb2.TopicResult(name=t.name, error=_error("INVALID_PARTITIONS", "cannot shrink"))
                    )
                else:
                    nodes = sorted(c.ports)
                    parts.extend(
                        FakePartition(leader=nodes[p % len(nodes)], replicas=nodes) for p in range(len(parts), t.count)
                    )
                    results.append(controller_pb2.TopicResult(name=t.name, num_partitions=t.count))
            return controller_pb2.CreatePartitionsResponse(topics=results)

    def DescribeConfigs(
        self, request: broker_pb2.DescribeConfigsRequest, context: Any
    ) -> broker_pb2.DescribeConfigsResponse:
        c = self.cluster
        with c.lock:
            results = []
            for r in request.resources:
                configs = c.topic_configs.get(r.resource_name)
                if configs is None:
                    results.append(
                        broker_pb2.DescribeConfigsResponse.Result(
                            resource_type=r.resource_type,
                            resource_name=r.resource_name,
                            error=_error("UNKNOWN_TOPIC_OR_PARTITION"),
                        )
                    )
                    continue
                entries = [
                    broker_pb2.ConfigDescription(key=k, value=v, source="DYNAMIC_TOPIC_CONFIG")
                    for k, v in sorted(configs.items())
                    if not r.keys or k in r.keys
                ]
                results.append(
                    broker_pb2.DescribeConfigsResponse.Result(
                        resource_type=r.resource_type, resource_name=r.resource_name, configs=entries
                    )
                )
            return broker_pb2.DescribeConfigsResponse(results=results)

    def AlterConfigs(
        self, request: controller_pb2.AlterConfigsRequest, context: Any
    ) -> controller_pb2.AlterConfigsResponse:
        c = self.cluster
        with c.lock:
            results = []
            for r in request.resources:
                configs = c.topic_configs.get(r.resource_name)
                if configs is None:
                    results.append(
                        controller_pb2.ResourceResult(
                            resource_type=r.resource_type,
                            resource_name=r.resource_name,
                            error=_error("UNKNOWN_TOPIC_OR_PARTITION"),
                        )
                    )
                    continue
                for entry in r.entries:
                    if entry.delete:
                        configs.pop(entry.key, None)
                    else:
                        configs[entry.key] = entry.value
                results.append(
                    controller_pb2.ResourceResult(resource_type=r.resource_type, resource_name=r.resource_name)
                )
            return controller_pb2.AlterConfigsResponse(resources=results)
