"""A slow command begun early and waited for later: :class:`BackgroundCommand`.

The test suite uses it to build the compose cluster's images (``deploy/build.sh``, minutes on a fresh machine)
while the tests before the docker tests run. The command runs at the lowest CPU priority and the lowest
best-effort I/O priority, in a session of its own (so that stopping it stops its children too), its output
kept in a temporary file. Every wait is bounded.

Thread-safety: none; one thread drives an instance.
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
from collections.abc import Mapping, Sequence

STOP_TIMEOUT_S = 30.0
MESSAGES_TAIL_CHARS = 4000


class BackgroundFailed(AssertionError):
    """The command failed, or had not finished within its time."""


class BackgroundCommand:
    def __init__(self, argv: Sequence[str], timeout_s: float, env: Mapping[str, str] | None = None) -> None:
        self.argv = list(argv)
        self.timeout_s = timeout_s
        self.log = tempfile.TemporaryFile(mode="w+t")  # noqa: SIM115 (closed by close())
        self.popen = subprocess.Popen(
            ["nice", "-n", "19", "ionice", "-c", "2", "-n", "7", *self.argv],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
            env=None if env is None else dict(env),
        )  # fmt: skip

    def wait(self) -> str:
        """The command's output once it has exited with 0; waits at most ``timeout_s`` (the head start is not
        counted: while others work the command has the lowest priority). Raises :class:`BackgroundFailed` with
        the end of its output if it failed, or stops it and raises if it is still running then."""
        try:
            returncode = self.popen.wait(self.timeout_s)
        except subprocess.TimeoutExpired:
            self.stop()
            raise BackgroundFailed(
                f"{self.argv[0]} did not finish within {self.timeout_s:.0f} s:\n{self.messages()}") from None
        if returncode != 0:
            raise BackgroundFailed(f"{self.argv[0]} failed ({returncode}):\n{self.messages()}")
        return self.messages()

    def messages(self) -> str:
        """The end of the output so far."""
        self.log.seek(0)
        return self.log.read()[-MESSAGES_TAIL_CHARS:]

    def stop(self) -> None:
        """SIGTERM to the command's whole process group if it is still running; SIGKILL if it has not exited
        ``STOP_TIMEOUT_S`` later."""
        if self.popen.poll() is not None:
            return
        os.killpg(self.popen.pid, signal.SIGTERM)
        try:
            self.popen.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait()

    def close(self) -> None:
        self.stop()
        self.log.close()
