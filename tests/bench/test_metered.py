"""``tests.bench.compare.metered``: the client's CPU per record beyond its start-up, from two real child
processes whose CPU is known (each burns a fixed CPU time at start-up and a fixed CPU time per record)."""

from __future__ import annotations

import subprocess
import sys

from tests.bench.compare import STARTUP_SHARE, metered

STARTUP_S = 0.3
PER_RECORD_S = 0.002
BURN = """
import sys, time
def burn(seconds):
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass
burn({startup})
burn({per_record} * int(sys.argv[1]))
"""


def client(records: int, short: bool) -> subprocess.CompletedProcess[bytes]:
    code = BURN.format(startup=STARTUP_S, per_record=PER_RECORD_S)
    return subprocess.run([sys.executable, "-c", code, str(records)], capture_output=True, timeout=60, check=False)


def test_the_client_cpu_leaves_out_its_start_up() -> None:
    records = 5 * STARTUP_SHARE  # 0.5 s of records after 0.3 s of start-up; the short run: 5 records
    done, cpu = metered([], records, client)
    assert done.returncode == 0, done.stderr
    # the interpreter's own start-up (tens of ms) is in both runs and cancels out, as the burnt start-up does
    assert 0.8 * PER_RECORD_S * 1e6 < cpu["client_us"] < 1.2 * PER_RECORD_S * 1e6, cpu
    assert cpu["server_us"] == 0  # no server given


def test_no_client_figure_without_a_short_run() -> None:
    done, cpu = metered([], STARTUP_SHARE - 1, client)  # too few records for a run of 1/STARTUP_SHARE of them
    assert done.returncode == 0, done.stderr
    assert "client_us" not in cpu
    assert cpu["server_us"] == 0
