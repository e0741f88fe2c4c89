"""The Controller gRPC service (proto/controller.proto) over a controller node (:class:`ControllerNode`,
``controller.node_api``: ``controller.server.ControllerServer``).

Writes (RegisterBroker ... AllocateProducerIds) go to the controller thread and wait; a node that is not
the active controller answers NOT_CONTROLLER with a :class:`ControllerHint` naming the one it knows.
Reads are served by every node from its own committed state: FetchMetadata (long poll; a snapshot first
when the reader is below the trim point) and DescribeQuorum.

Thread-safety: the servicer holds no state of its own. Writes and DescribeQuorum run on the server's worker
threads; FetchMetadata is a coroutine on its event loop that waits without a thread
(``controller.rpc_server``), so brokers' long polls cannot starve registrations and heartbeats.
"""

from __future__ import annotations

import logging
from concurrent.futures import Executor
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from controller.long_poll import MAX_WAITING_FETCHES, Wakeup, run_blocking
from controller.node_api import ControllerNode, Unanswered
from controller.raft.state import NeedsSnapshot
from controller.rpc_server import RpcServer
from proto import common_pb2, controller_pb2_grpc, security_pb2
from proto import controller_pb2 as pb

if TYPE_CHECKING:
    from controller.health import HealthReporter

log = logging.getLogger("odradek.controller")


class _Response(Protocol):
    """What every Controller response has: ``error`` and the ``controller`` hint."""

    @property
    def error(self) -> common_pb2.Error: ...

    @property
    def controller(self) -> common_pb2.ControllerHint: ...


R = TypeVar("R", bound=_Response)

SERVICE_NAME = "odradek.controller.Controller"  # its name in the gRPC health service
MAX_MESSAGE_BYTES = 64 << 20
"""gRPC message limit of the service (a metadata snapshot travels in one FetchMetadata answer)."""
FETCH_MAX_RECORDS = 10_000
FETCH_DEFAULT_RECORDS = 1000
FETCH_MAX_BYTES = 8 << 20
FETCH_MAX_WAIT_MS = 30_000


class ControllerService(controller_pb2_grpc.ControllerServicer):
    """Every RPC of the Controller service; see the module docstring."""

    def __init__(self, server: ControllerNode, pool: Executor | None = None) -> None:
        self._server = server
        self._pool = pool  # the gRPC server's worker pool: where FetchMetadata reads after its wait

    def _write(self, rpc: str, request: Any, response_type: type[R], timeout_ms: int = 0) -> R:
        try:
            response = self._server.submit(rpc, request, response_type, timeout_ms)
        except Unanswered as exc:
            response = response_type()
            response.error.CopyFrom(exc.to_error())
        if response.error.code:
            response.controller.CopyFrom(self._server.hint())
        return response

    def RegisterBroker(self, request: pb.RegisterBrokerRequest, context: Any) -> pb.RegisterBrokerResponse:
        return self._write("RegisterBroker", request, pb.RegisterBrokerResponse)

    def BrokerHeartbeat(self, request: pb.BrokerHeartbeatRequest, context: Any) -> pb.BrokerHeartbeatResponse:
        return self._write("BrokerHeartbeat", request, pb.BrokerHeartbeatResponse)

    def CreateTopics(self, request: pb.CreateTopicsRequest, context: Any) -> pb.CreateTopicsResponse:
        return self._write("CreateTopics", request, pb.CreateTopicsResponse, request.timeout_ms)

    def DeleteTopics(self, request: pb.DeleteTopicsRequest, context: Any) -> pb.DeleteTopicsResponse:
        return self._write("DeleteTopics", request, pb.DeleteTopicsResponse, request.timeout_ms)

    def CreatePartitions(self, request: pb.CreatePartitionsRequest, context: Any) -> pb.CreatePartitionsResponse:
        return self._write("CreatePartitions", request, pb.CreatePartitionsResponse, request.timeout_ms)

    def AlterPartition(self, request: pb.AlterPartitionRequest, context: Any) -> pb.AlterPartitionResponse:
        return self._write("AlterPartition", request, pb.AlterPartitionResponse)

    def AlterConfigs(self, request: pb.AlterConfigsRequest, context: Any) -> pb.AlterConfigsResponse:
        return self._write("AlterConfigs", request, pb.AlterConfigsResponse)

    def ElectLeaders(self, request: pb.ElectLeadersRequest, context: Any) -> pb.ElectLeadersResponse:
        return self._write("ElectLeaders", request, pb.ElectLeadersResponse)

    def AllocateProducerIds(
        self, request: pb.AllocateProducerIdsRequest, context: Any
    ) -> pb.AllocateProducerIdsResponse:
        return self._write("AllocateProducerIds", request, pb.AllocateProducerIdsResponse)

    def CreateAcls(self, request: security_pb2.CreateAclsRequest, context: Any) -> security_pb2.CreateAclsResponse:
        return self._write("CreateAcls", request, security_pb2.CreateAclsResponse)

    def DeleteAcls(self, request: security_pb2.DeleteAclsRequest, context: Any) -> security_pb2.DeleteAclsResponse:
        return self._write("DeleteAcls", request, security_pb2.DeleteAclsResponse)

    def AlterUserScramCredentials(
        self, request: security_pb2.AlterUserScramCredentialsRequest, context: Any
    ) -> security_pb2.AlterUserScramCredentialsResponse:
        return self._write("AlterUserScramCredentials", request, security_pb2.AlterUserScramCredentialsResponse)

    async def FetchMetadata(self, request: pb.FetchMetadataRequest, context: Any) -> pb.FetchMetadataResponse:
        """A long poll: waits on the event loop for the records (no worker thread), reads on a worker."""
        server = self._server
        wait_s = min(max(request.max_wait_ms, 0), FETCH_MAX_WAIT_MS) / 1000.0
        if request.from_offset >= 0 and wait_s > 0 and server.quorum.end_offset <= request.from_offset:
            waiter = server.fetch_waiters.add(request.from_offset, Wakeup())
            if waiter is not None:
                try:
                    if server.quorum.end_offset <= request.from_offset:  # a record between the check and add
                        await waiter.wait(wait_s)
                finally:
                    server.fetch_waiters.remove(waiter)
        if self._pool is None:
            return fetch_metadata(server, request, wait=False)
        return await run_blocking(self._pool, fetch_metadata, server, request, False)

    def DescribeQuorum(self, request: pb.DescribeQuorumRequest, context: Any) -> pb.DescribeQuorumResponse:
        return describe_quorum(self._server)


def fetch_metadata(
    server: ControllerNode, request: pb.FetchMetadataRequest, wait: bool = True
) -> pb.FetchMetadataResponse:
    """Committed records from ``from_offset`` (a snapshot first below the trim point); with ``wait``,
    long-polls up to ``max_wait_ms`` on the calling thread when there are none yet (the service waits on
    its event loop instead, then calls this with ``wait=False``)."""
    quorum = server.quorum
    response = pb.FetchMetadataResponse(controller=server.hint())
    if request.from_offset < 0:
        response.error.code, response.error.message = "INVALID_REQUEST", "from_offset must be >= 0"
        return response
    max_records = min(request.max_records or FETCH_DEFAULT_RECORDS, FETCH_MAX_RECORDS)
    wait_s = min(max(request.max_wait_ms, 0), FETCH_MAX_WAIT_MS) / 1000.0
    if wait and wait_s > 0 and quorum.end_offset <= request.from_offset:
        quorum.wait_for_offset(request.from_offset, wait_s)
    offset = request.from_offset
    for _ in range(5):  # a fold between reading the snapshot and the records: read again
        batch = quorum.records_from(offset, max_records=max(1, max_records), max_bytes=FETCH_MAX_BYTES)
        if isinstance(batch, NeedsSnapshot):
            view = quorum.snapshot()
            if view.data is None:  # cannot be: a trimmed log has a snapshot
                break
            response.snapshot.offset, response.snapshot.payload = view.end_offset - 1, view.data
            offset = view.end_offset
            continue
        response.entries.extend(pb.MetadataLogEntry(offset=e.offset, term=e.term, payload=e.payload) for e in batch)
        response.end_offset = quorum.end_offset
        return response
    response.Clear()
    response.error.code, response.error.message = "REQUEST_TIMED_OUT", "the metadata log kept moving; retry"
    return response


def describe_quorum(server: ControllerNode) -> pb.DescribeQuorumResponse:
    """This node's view of the quorum: Raft leader and term, commit index, metadata end offset, voters."""
    status = server.quorum.status()
    leader_id = -1 if status.leader_id is None else status.leader_id
    response = pb.DescribeQuorumResponse(
        controller=server.hint(),
        leader_id=leader_id,
        term=status.raft_term,
        commit_index=status.commit_index,
        metadata_end_offset=status.end_offset,
        cluster_id=server.options.cluster_id,
    )
    for voter in status.voters:
        response.nodes.add(
            node_id=voter.node_id,
            address=server.publisher.addresses.get(voter.node_id, ""),
            raft_address=voter.address,
            is_leader=voter.node_id == leader_id,
            match_index=-1 if voter.match_index is None else voter.match_index,
        )
    return response


def start_grpc_server(server: ControllerNode, listen: str, *, health: HealthReporter | None = None) -> RpcServer:
    """Serve the Controller service (and ``health``'s) on ``listen`` (``host:port``); raises ``RuntimeError`` if
    it cannot bind.

    Writes and DescribeQuorum run on ``num.io.threads`` workers (a write holds its worker until its records
    commit); FetchMetadata long polls wait on the event loop, at most :data:`MAX_WAITING_FETCHES` of them
    (more answer at once), and ``queued.max.requests`` more calls may be in progress besides them.
    """
    config = server.config
    listener = server.options.security.controller_listener

    def add(grpc_server: Any) -> None:
        add_servicer: Any = controller_pb2_grpc.add_ControllerServicer_to_server  # generated code is untyped
        add_servicer(ControllerService(server, rpc.pool), grpc_server)
        server.guard.add_sasl(grpc_server, listener)
        if health is not None:
            health.add_to(grpc_server)

    rpc = RpcServer(
        f"controller-{server.node_id}",
        listen,
        add,
        workers=config.num_io_threads,
        maximum_concurrent_rpcs=config.queued_max_requests + MAX_WAITING_FETCHES,
        options=[
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.so_reuseport", 0),
        ],
        credentials=server.options.security.server_credentials(listener),
        interceptors=server.guard.interceptors(listener),
    )
    rpc.start()
    return rpc
