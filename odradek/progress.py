"""Progress of long client work on stderr, redrawn in place: perf runs, large consumes, offset resets.

    consumed 45,000 of 100,000 records (45%), 12,345/s, ETA 4 s

A :class:`Progress` is on when asked (``--progress``) or, by default, when stderr is a terminal (and, for
commands that print records, stdout is not: consuming to a file or a pipe); ``--no-progress`` turns it
off. It never writes to stdout, so ``--json`` output and pipes are unchanged. Redraws are throttled to
``interval_s``; :meth:`Progress.close` leaves the last line in place.

Thread-safety: one thread calls ``update`` (perf runs: the thread that records completions).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import IO, Any

CLEAR = "\r\033[K"


def add_progress_option(parser: Any) -> None:
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                        help="show progress on stderr (default: when stderr is a terminal)")  # fmt: skip


def wanted(flag: bool | None, *, quiet_stdout_tty: bool = False, err: IO[str] | None = None,
           out: IO[Any] | None = None) -> bool:  # fmt: skip
    """Whether to show progress: ``flag`` when given, else whether stderr is a terminal (and, with
    ``quiet_stdout_tty``, stdout is not: the records themselves are on the screen then)."""
    if flag is not None:
        return flag
    err = err or sys.stderr
    if not _isatty(err):
        return False
    return not (quiet_stdout_tty and _isatty(out or sys.stdout))


def _isatty(stream: IO[Any]) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


class Progress:
    """One progress line (see the module docstring). Disabled, every method does nothing."""

    def __init__(
        self, what: str, total: int | None = None, *, unit: str = "records", enabled: bool = True,
        out: IO[str] | None = None, interval_s: float = 0.2, clock: Callable[[], float] = time.monotonic,
    ) -> None:  # fmt: skip
        self.what = what
        self.total = total
        self.unit = unit
        self.enabled = enabled
        self.out = out or sys.stderr
        self.interval_s = interval_s
        self.clock = clock
        self.started = clock()
        self.next_at = self.started  # callers may skip ``update`` until then
        self.done = 0
        self._drawn = False
        self._staged = False  # the line shows a stage, not counts

    def update(self, done: int, now: float | None = None, *, force: bool = False) -> None:
        """``done`` units so far; redrawn when ``interval_s`` has passed since the last redraw."""
        self.done = done
        if not self.enabled:
            return
        now = self.clock() if now is None else now
        if now < self.next_at and not force:
            return
        self.next_at = now + self.interval_s
        self.out.write(CLEAR + self.line(now))
        self.out.flush()
        self._drawn = True
        self._staged = False

    def stage(self, text: str) -> None:
        """Show a step of work whose size is not counted (``what: text``)."""
        if self.enabled:
            self.out.write(f"{CLEAR}{self.what}: {text}")
            self.out.flush()
            self._drawn = self._staged = True

    def clear(self) -> None:
        """Wipe the line (before another line is printed on stderr); the next update draws it again."""
        if self.enabled and self._drawn:
            self.out.write(CLEAR)
            self.out.flush()
            self._drawn = False

    def close(self) -> None:
        """Draw the final counts (or leave the last stage) and end the line."""
        if self.enabled:
            if not self._staged:
                self.update(self.done, force=True)
            self.out.write("\n")
            self.out.flush()
            self.enabled = False

    def line(self, now: float) -> str:
        elapsed = max(now - self.started, 1e-9)
        rate = self.done / elapsed
        if self.total:
            fraction = min(self.done / self.total, 1.0)
            text = f"{self.what} {self.done:,} of {self.total:,} {self.unit} ({fraction:.0%}), {rate:,.0f}/s"
            if 0 < self.done < self.total and rate > 0:
                text += f", ETA {_duration((self.total - self.done) / rate)}"
            return text
        return f"{self.what} {self.done:,} {self.unit}, {rate:,.0f}/s"


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes} min {secs:02d} s" if minutes < 60 else f"{minutes // 60} h {minutes % 60:02d} min"
