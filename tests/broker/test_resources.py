"""The broker raises its open files limit at start (issue 15: a request must not exhaust descriptors)."""

from __future__ import annotations

import resource
import subprocess
import sys


def test_the_soft_open_files_limit_goes_up_to_the_hard_one() -> None:
    def low_soft_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 4096))

    code = (
        "import resource; from broker.resources import raise_open_files_limit; "
        "print(*raise_open_files_limit(), *resource.getrlimit(resource.RLIMIT_NOFILE))"
    )
    out = subprocess.run([sys.executable, "-c", code], preexec_fn=low_soft_limit, capture_output=True, text=True,
                         timeout=30, check=True)  # fmt: skip
    soft, hard, now_soft, now_hard = map(int, out.stdout.split())
    assert (soft, hard) == (now_soft, now_hard)
    assert soft == hard >= 4096  # the hard limit itself goes higher where the process may raise it
