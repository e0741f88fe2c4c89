"""Debian packages the tests install when missing (iptables, kcat, chromium, nats-server, redis-server), one
install at a time: :func:`apt_install`.

``apt-get update`` does not wait for apt's own lock (it fails at once with "Could not get lock
/var/lib/apt/lists/lock"), and installs can run side by side here: the docker suite's image build
(``deploy/build.sh``, which installs debootstrap) begins in the background when collection ends. So every
install of the test suite and of ``deploy/build.sh`` first takes an exclusive ``flock`` on :data:`APT_LOCK`
(the same path in both), waiting at most as long as the install itself may take.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

APT_LOCK = Path("/tmp/odradek-apt.lock")  # deploy/build.sh names it too
APT_TIMEOUT_S = 900.0


def apt_install(packages: Sequence[str], timeout_s: float = APT_TIMEOUT_S) -> str | None:
    """``apt-get update`` then ``apt-get install -y`` of ``packages``, holding :data:`APT_LOCK`; None when both
    succeeded, else why not (the failing command and the last line it wrote)."""
    if shutil.which("apt-get") is None:
        return f"no apt-get to install Debian's {', '.join(packages)}"
    deadline = time.monotonic() + timeout_s
    with open(APT_LOCK, "a") as lock:
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    return f"another install held {APT_LOCK} for {timeout_s:.0f} s"
                time.sleep(0.2)
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        for argv in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", *packages]):
            left = deadline - time.monotonic()
            try:
                done = subprocess.run(argv, capture_output=True, text=True, timeout=max(1.0, left), env=env,
                                      check=False)  # fmt: skip
            except subprocess.TimeoutExpired:
                return f"`{' '.join(argv)}` did not finish within {timeout_s:.0f} s"
            if done.returncode != 0:
                last = (done.stderr.strip().splitlines() or ["no output"])[-1]
                return f"`{' '.join(argv)}` failed ({done.returncode}): {last}"
    return None
