"""One metadata-quorum voter as its own process, driven by JSON lines: for crash tests and the benchmark.

Server (the child)::

    ODRADEK_CLUSTER_SECRET=... python -m tests.support.quorum_node --node-id 1 --data-dir DIR \\
        --voters 0=127.0.0.1:7000,1=127.0.0.1:7001,2=127.0.0.1:7002 [--tuning '{"fsync": false}']

It prints ``{"ready": true}`` once started, then answers one JSON request per stdin line with one JSON
line on stdout. Payloads travel hex-encoded. Requests (``op``): ``status``, ``append`` (payloads,
timeout_s), ``append_when_active`` (waits to become active first; returns the monotonic commit time),
``history`` (every payload from offset 0: the snapshot decoded with :func:`concat_fold`'s layout, then
the records), ``wait_offset`` (offset, timeout_s), ``bench_append`` (count, records), ``close``.

Client (the parent): :class:`NodeProcess`. Every wait is bounded.

The records are test data: :func:`concat_fold` keeps every folded payload (length-prefixed) so a test can
check that nothing was lost, and :func:`marker_payload` is a readable LeaderChange stand-in.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import IO, Any

from controller.raft.errors import NotActiveError
from controller.raft.quorum import MetadataQuorum
from controller.raft.state import NeedsSnapshot
from controller.raft.tuning import QuorumTuning, load_cluster_secret

MARKER_PREFIX = b"LC "


def concat_fold(snapshot: bytes | None, snapshot_end_offset: int, payloads: list[bytes]) -> bytes:
    """Test fold: the snapshot is every folded payload, each prefixed by its 4-byte length."""
    return (snapshot or b"") + b"".join(len(p).to_bytes(4, "big") + p for p in payloads)


def split_concat_snapshot(snapshot: bytes | None) -> list[bytes]:
    out, pos, data = [], 0, snapshot or b""
    while pos < len(data):
        size = int.from_bytes(data[pos : pos + 4], "big")
        out.append(data[pos + 4 : pos + 4 + size])
        pos += 4 + size
    return out


def marker_payload(term: int, node_id: int) -> bytes:
    return MARKER_PREFIX + b"%d %d" % (term, node_id)


def history(quorum: MetadataQuorum) -> list[bytes]:
    """Every payload of the log from offset 0, in offset order (snapshot first, then records)."""
    snap = quorum.snapshot()
    payloads = split_concat_snapshot(snap.data)
    assert len(payloads) == snap.end_offset, (len(payloads), snap.end_offset)
    offset = snap.end_offset
    while True:
        batch = quorum.records_from(offset, max_records=10_000)
        if isinstance(batch, NeedsSnapshot):  # folded meanwhile: start over
            return history(quorum)
        if not batch:
            return payloads
        payloads += [e.payload for e in batch]
        offset = batch[-1].offset + 1


# --- the child -----------------------------------------------------------------------------------


def _handle(quorum: MetadataQuorum, req: dict[str, Any]) -> dict[str, Any]:
    op = req["op"]
    if op == "status":
        st = quorum.status()
        return {
            "active": st.active,
            "leader_id": st.leader_id,
            "end_offset": st.end_offset,
            "term": st.raft_term,
            "connected": sum(1 for v in st.voters if v.connected),
        }
    if op == "append":
        return _append(quorum, req, wait_active=False)
    if op == "append_when_active":
        return _append(quorum, req, wait_active=True)
    if op == "history":
        return {"payloads": [p.hex() for p in history(quorum)]}
    if op == "wait_offset":
        return {
            "ok": quorum.wait_for_offset(req["offset"], req["timeout_s"]),
            "end_offset": quorum.end_offset,
        }
    if op == "bench_append":
        latencies = []
        for i in range(req["count"]):
            batch = [b"bench-%d-%d" % (i, j) for j in range(req["records"])]
            start = time.perf_counter()
            res = quorum.append(batch, timeout_s=10.0)
            latencies.append((time.perf_counter() - start) * 1000)
            if not res.ok:
                return {"error": res.error, "latencies_ms": latencies}
        return {"latencies_ms": latencies}
    raise ValueError(f"unknown op {op!r}")


def _append(quorum: MetadataQuorum, req: dict[str, Any], *, wait_active: bool) -> dict[str, Any]:
    """``append``; with ``wait_active``, first wait to become active, giving up early once another node
    than ``ignore_leader`` (the one just killed) is known to lead."""
    payloads = [bytes.fromhex(p) for p in req["payloads"]]
    deadline = time.monotonic() + req["timeout_s"]
    while True:
        remaining = deadline - time.monotonic()
        if quorum.is_active() or not wait_active:
            try:
                res = quorum.append(payloads, timeout_s=max(0.0, remaining))
            except NotActiveError as e:
                if not wait_active:
                    return {"ok": False, "error": e.code, "leader_id": e.leader_id}
            else:
                return {
                    "ok": res.ok,
                    "error": res.error,
                    "base_offset": res.base_offset,
                    "t_commit": time.monotonic(),
                }
        leader = quorum.leader()
        if leader is not None and leader[0] not in (quorum.node_id, req.get("ignore_leader")):
            return {"ok": False, "error": "NOT_CONTROLLER", "leader_id": leader[0]}
        if remaining <= 0:
            return {"ok": False, "error": "REQUEST_TIMED_OUT"}
        quorum.wait_until_active(min(remaining, 0.005))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.quorum_node")
    parser.add_argument("--node-id", type=int, required=True)
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--voters", required=True, help="id=host:port,id=host:port,...")
    parser.add_argument(
        "--secret-file", help="file whose first line is the cluster secret (else $ODRADEK_CLUSTER_SECRET)"
    )
    parser.add_argument("--insecure", action="store_true", help="run without a cluster secret (tests only)")
    parser.add_argument("--tuning", default="{}", help="QuorumTuning fields as JSON")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=os.environ.get("ODRADEK_LOG_LEVEL", "WARNING"),
        format="%(asctime)s.%(msecs)03d %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    voters = {int(k): v for k, v in (item.split("=", 1) for item in args.voters.split(","))}
    quorum = MetadataQuorum(
        args.node_id,
        voters[args.node_id],
        voters,
        args.data_dir,
        load_cluster_secret(args.secret_file),
        fold=concat_fold,
        leader_change_payload=marker_payload,
        tuning=QuorumTuning(**json.loads(args.tuning)),
        allow_insecure=args.insecure,
    )
    quorum.start()
    _reply({"ready": True})
    try:
        for line in sys.stdin:
            req = json.loads(line)
            if req["op"] == "close":
                break
            try:
                _reply(_handle(quorum, req))
            except Exception as e:  # report, keep serving
                _reply({"error": f"{type(e).__name__}: {e}"})
    finally:
        quorum.close()
    _reply({"closed": True})
    return 0


def _reply(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


# --- the parent ----------------------------------------------------------------------------------


class NodeProcess:
    """A child voter. ``request`` sends one op and waits (bounded) for its answer.

    Not thread-safe: one caller at a time. ``send`` / ``receive`` split a request for overlapping work.
    """

    def __init__(
        self,
        node_id: int,
        voters: dict[int, str],
        data_dir: str,
        secret: str,
        *,
        tuning: dict[str, Any] | None = None,
        cwd: str | None = None,
        start_timeout_s: float = 20.0,
    ) -> None:
        self.node_id = node_id
        os.makedirs(data_dir, exist_ok=True)
        argv = [
            sys.executable, "-m", "tests.support.quorum_node", "--node-id", str(node_id), "--data-dir", data_dir,
            "--voters", ",".join(f"{k}={v}" for k, v in voters.items()), "--tuning", json.dumps(tuning or {}),
        ]  # fmt: skip
        env = dict(os.environ, ODRADEK_CLUSTER_SECRET=secret)
        root = cwd or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
        self._stderr = open(os.path.join(data_dir, f"node-{node_id}.stderr"), "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, cwd=root, env=env
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        assert self.proc.stdout is not None
        self._pump_thread = threading.Thread(target=self._pump, args=(self.proc.stdout,), daemon=True)
        self._pump_thread.start()
        if self.receive(start_timeout_s).get("ready") is not True:
            raise RuntimeError(f"node {node_id} did not start")

    def _pump(self, stream: IO[bytes]) -> None:
        for raw in stream:
            self._lines.put(raw.decode())
        self._lines.put(None)

    def send(self, op: str, **fields: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps({"op": op, **fields}) + "\n").encode())
        self.proc.stdin.flush()

    def receive(self, timeout_s: float) -> dict[str, Any]:
        try:
            line = self._lines.get(timeout=timeout_s)
        except queue.Empty:
            raise TimeoutError(f"node {self.node_id}: no answer within {timeout_s} s") from None
        if line is None:
            self._lines.put(None)
            raise ConnectionError(f"node {self.node_id} exited (code {self.proc.poll()})")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def request(self, op: str, *, wait_s: float = 20.0, **fields: Any) -> dict[str, Any]:
        """Send ``op`` with ``fields`` and wait up to ``wait_s`` for the answer."""
        self.send(op, **fields)
        return self.receive(wait_s)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL: no close, no flush; what the page cache holds survives, as after a process crash."""
        if self.alive():
            self.proc.send_signal(signal.SIGKILL)
        self._reap()

    def close(self, timeout_s: float = 10.0) -> None:
        if self.alive():
            try:
                self.request("close", wait_s=timeout_s)
            except (TimeoutError, ConnectionError, BrokenPipeError):
                self.proc.kill()
        self._reap()

    def _reap(self) -> None:
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self._pump_thread.join(timeout=10)  # it ends at EOF; close stdout only after it
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                with contextlib.suppress(BrokenPipeError):
                    stream.close()
        self._stderr.close()


def find_active(nodes: Sequence[NodeProcess], timeout_s: float) -> NodeProcess:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for node in nodes:
            if node.alive() and node.request("status", wait_s=5)["active"]:
                return node
        time.sleep(0.01)
    raise TimeoutError(f"no active node within {timeout_s} s")


if __name__ == "__main__":
    raise SystemExit(main())
