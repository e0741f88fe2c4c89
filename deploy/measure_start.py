"""How long the compose cluster takes to start, printed as one JSON object (a benchmark, not a test).

    .venv/bin/python deploy/measure_start.py [--runs N]

Each run starts ``deploy/docker-compose.yml`` under a project of its own (free host ports and subnet, the
existing ``odradek:latest``: build it first with ``deploy/build.sh``) and measures, from the start of
``up -d``: ``up_s`` until ``up -d`` returned (containers created and started), ``clients_ready_s`` until
a client on the host sees three alive brokers (DescribeCluster through the published ports), and
``healthy_s`` until Docker reports all six health checks healthy; then ``down_s`` for ``down -v``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run from a checkout

from chaos.backends.compose import ComposeBackend  # noqa: E402
from odradek import Admin  # noqa: E402
from odradek.errors import OdradekError  # noqa: E402

TIMEOUT_S = 600.0


def alive_brokers(bootstrap_servers: str) -> int:
    admin = Admin({"bootstrap.servers": bootstrap_servers, "request.timeout.ms": 5000})
    try:
        return sum(1 for b in admin.describe_cluster().brokers if not b.fenced)
    except OdradekError:
        return 0
    finally:
        admin.close()


def one_run() -> dict[str, float]:
    start = time.monotonic()
    backend = ComposeBackend.start(f"odradek-measure-{os.getpid()}", wait=False)
    try:
        up_s = time.monotonic() - start
        while alive_brokers(backend.bootstrap_servers) < 3:
            if time.monotonic() - start > TIMEOUT_S:
                raise SystemExit(f"the brokers were not all alive within {TIMEOUT_S:.0f} s")
            time.sleep(0.2)
        clients_ready_s = time.monotonic() - start
        backend.wait_healthy(TIMEOUT_S)
        healthy_s = time.monotonic() - start
    finally:
        down = time.monotonic()
        backend.close()
        down_s = time.monotonic() - down
    return {"up_s": up_s, "clients_ready_s": clients_ready_s, "healthy_s": healthy_s, "down_s": down_s}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    runs = [one_run() for _ in range(args.runs)]
    summary = {key: round(statistics.median(r[key] for r in runs), 1) for key in runs[0]}
    print(json.dumps({"runs": [{k: round(v, 1) for k, v in r.items()} for r in runs], "median": summary}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
