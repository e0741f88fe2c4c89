"""A node's stop request by signal (SIGTERM, SIGINT), safe to take at any moment.

A signal handler runs on the main thread between two bytecodes, possibly while that thread holds a lock;
a handler that takes the same lock waits for itself forever. ``threading.Event.set`` does (the event's
condition lock, which ``Event.wait`` holds around its own wait): a broker whose main thread was in
``stop.wait(0.1)`` when SIGTERM came could hang there for good, never starting its controlled shutdown (seen
in tests as a broker that needed SIGKILL after 40 s, about once in thirty stops; ``py-spy dump`` showed the
main thread in the handler's ``Event.set``, inside ``Event.wait``).

So the handler here only sets a flag, and the main thread waits on ``signal.set_wakeup_fd``'s socket: the
interpreter's C-level handler writes the signal's number there the moment it arrives (on any thread), which
ends the main thread's ``select`` at once; no lock is taken on either side.

And a thread dump on request, as a JVM gives for ``kill -3``: :func:`dump_threads_on_sigquit` makes SIGQUIT
print every thread's stack to the node's stderr (``faulthandler``, in C: no lock, no Python code runs) and
the node goes on. A node that does not stop, or stops answering, says where each of its threads is.
"""

from __future__ import annotations

import faulthandler
import select
import signal
import socket
from collections.abc import Iterable
from types import FrameType
from typing import Any


class StopSignals:
    """Install on the main thread (``set_wakeup_fd`` refuses any other): each of ``signums`` then marks the stop
    as requested and wakes :meth:`wait`. ``close`` puts back the handlers and wake-up fd found."""

    def __init__(self, signums: Iterable[int] = (signal.SIGTERM, signal.SIGINT)) -> None:
        self.requested = False
        self._signums = frozenset(int(s) for s in signums)
        self._reader, self._writer = socket.socketpair()
        self._reader.setblocking(False)
        self._writer.setblocking(False)
        self._previous_fd = signal.set_wakeup_fd(self._writer.fileno(), warn_on_full_buffer=False)
        self._previous: dict[int, Any] = {s: signal.signal(s, self._on_signal) for s in self._signums}

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.requested = True  # no lock, no I/O: see the module docstring

    def wait(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for a stop signal unless one came already; whether one came."""
        if not self.requested:
            select.select([self._reader], [], [], max(0.0, timeout_s))
            try:
                woken_by = self._reader.recv(256)
            except BlockingIOError:
                woken_by = b""
            if self._signums.intersection(woken_by):  # the handler itself may not have run yet
                self.requested = True
        return self.requested

    def close(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        signal.set_wakeup_fd(self._previous_fd)
        self._reader.close()
        self._writer.close()


def dump_threads_on_sigquit() -> None:
    """SIGQUIT (``kill -QUIT <pid>``, Ctrl-\\) prints every thread's stack to stderr; the process goes on."""
    faulthandler.register(signal.SIGQUIT, all_threads=True, chain=False)
