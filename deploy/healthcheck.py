"""The containers' health check: exit 0 when the node in this container is ready, 1 (with a reason) if not.

    python /opt/odradek/healthcheck.py controller HOST:PORT
        ready: the Controller service answers DescribeQuorum and the quorum has a leader
    python /opt/odradek/healthcheck.py broker HOST:PORT NODE_ID
        ready: the Broker service answers Metadata and lists broker NODE_ID as alive (the controller
        unfenced it: registered and caught up with the metadata log)

Installed into the image as ``/opt/odradek/healthcheck.py``; it runs with the venv interpreter of the image.
"""

from __future__ import annotations

import sys

import grpc

from proto import broker_pb2, broker_pb2_grpc, controller_pb2, controller_pb2_grpc

TIMEOUT_S = 3.0


def controller_ready(address: str) -> str | None:
    """None when ready, else why not."""
    with grpc.insecure_channel(address) as channel:
        stub = controller_pb2_grpc.ControllerStub(channel)  # type: ignore[no-untyped-call]
        answer = stub.DescribeQuorum(controller_pb2.DescribeQuorumRequest(), timeout=TIMEOUT_S)
    if answer.error.code:
        return f"DescribeQuorum: {answer.error.code} {answer.error.message}"
    if answer.leader_id < 0:
        return "the quorum has no leader yet"
    return None


def broker_ready(address: str, node_id: int) -> str | None:
    """None when ready, else why not."""
    with grpc.insecure_channel(address) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)  # type: ignore[no-untyped-call]
        answer = stub.Metadata(broker_pb2.MetadataRequest(), timeout=TIMEOUT_S)
    alive = sorted(b.node_id for b in answer.brokers if not b.fenced)
    if node_id not in alive:
        return f"broker {node_id} is not alive yet (alive: {alive})"
    return None


def main(argv: list[str]) -> int:
    usage = "usage: healthcheck.py controller HOST:PORT | broker HOST:PORT NODE_ID"
    try:
        if len(argv) == 2 and argv[0] == "controller":
            reason = controller_ready(argv[1])
        elif len(argv) == 3 and argv[0] == "broker" and argv[2].isdigit():
            reason = broker_ready(argv[1], int(argv[2]))
        else:
            print(usage, file=sys.stderr)
            return 2
    except grpc.RpcError as exc:
        reason = f"{argv[1]} does not answer: {exc.code().name}"
    if reason is not None:
        print(f"not ready: {reason}")
        return 1
    print("ready")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
