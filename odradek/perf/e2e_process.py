"""``odradek perf e2e --consumer-process``: the e2e consumer in a process of its own.

Why: with the producer and the consumer in one Python process their threads share one interpreter lock, and
on a machine of few cores they hand it to each other across cores; on 2 cores that cost ~0.4 ms of the
end-to-end p50 at 1,000 records/s (docs/LATENCY.md, "Where the clients' threads run"). Pipelines whose
producers and consumers are different processes (most) do not pay it; this option measures them. Without it
the tool keeps Kafka's EndToEndLatency shape (one process).

The child (``python -m odradek.perf.e2e_process``) reads one JSON line on stdin (the consumer's config, the
partitions, the run id, the number of records), assigns the partitions at their end and answers ``ready``;
then it runs the same :class:`~odradek.perf.consume.E2EConsumer` as the in-process tool, on the same clock
(``time.perf_counter_ns``: the machine's monotonic clock, shared by its processes), writing the count seen
every half second. After ``produced`` on stdin (every record sent and flushed) it stops once it saw them all
or none came for the timeout, and writes one JSON line: every latency, size and receipt time, the duplicates,
and the error that stopped it, if any. A parent that goes away (stdin closed) stops it as well.
"""

from __future__ import annotations

import contextlib
import json
import queue
import subprocess
import sys
import threading
import time
from typing import Any

from log import trace
from odradek.errors import CliError

READY_TIMEOUT_S = 60.0  # the child's imports, its consumer and its partitions' end offsets
PROGRESS_EVERY_S = 0.5
SILENCE_SLACK_S = 30.0  # a child silent this long past the records' timeout is killed


class Samples:
    """What the child's :class:`~odradek.perf.consume.E2EConsumer` records: each record's latency, size, time."""

    def __init__(self) -> None:
        self.latencies_ms: list[float] = []
        self.sizes: list[int] = []
        self.at: list[float] = []

    @property
    def records(self) -> int:
        return len(self.latencies_ms)

    def record(self, latency_ms: float, nbytes: int, now: float, records: int = 1) -> None:
        self.latencies_ms.append(latency_ms)
        self.sizes.append(nbytes)
        self.at.append(now)


class ConsumerProcess:
    """The parent's side: the child started and ready (``CliError`` otherwise); :meth:`finish` after the
    producing. ``error`` and ``duplicates`` as :class:`~odradek.perf.consume.E2EConsumer`'s."""

    def __init__(
        self, config: dict[str, object], partitions: list[Any], run_id: bytes, num_records: int, idle_s: float
    ) -> None:
        self.error: BaseException | None = None
        self.duplicates = 0
        spec = {"config": config, "partitions": [[tp.topic, tp.partition] for tp in partitions],
                "run_id": run_id.hex(), "num_records": num_records, "idle_s": idle_s}  # fmt: skip
        self._child = subprocess.Popen([sys.executable, "-m", "odradek.perf.e2e_process"], stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, text=True)  # fmt: skip
        assert self._child.stdin is not None
        assert self._child.stdout is not None
        self._stdin, self._stdout = self._child.stdin, self._child.stdout
        self._lines: queue.Queue[str | None] = queue.Queue()  # the child's stdout, line by line (None: its end)
        self._reader = threading.Thread(target=self._read_lines, name="odradek-perf-e2e-child", daemon=True)
        self._reader.start()
        try:
            self._stdin.write(json.dumps(spec, default=str) + "\n")
            self._stdin.flush()
            line = self._next_line(READY_TIMEOUT_S)
        except OSError:
            line = None
        if line != "ready":
            self.close()
            raise CliError(f"the e2e consumer process did not start ({line or 'no answer'}; its errors are above)")

    def finish(self, idle_s: float, recorder: Any) -> None:
        """Tell the child every record was sent; wait for its samples (it stops after ``idle_s`` without a
        record) and put them in ``recorder``. A child silent past that is killed (``error``)."""
        try:
            self._stdin.write("produced\n")
            self._stdin.flush()
            while True:
                line = self._next_line(idle_s + SILENCE_SLACK_S)
                if line is None:
                    self.error = CliError("the e2e consumer process stopped answering")
                    return
                if line.startswith("{"):
                    break
            doc = json.loads(line)
        except (OSError, ValueError) as exc:
            self.error = CliError(f"the e2e consumer process failed: {exc}")
            return
        finally:
            self.close()
        for latency_ms, size, at in zip(doc["latencies_ms"], doc["sizes"], doc["at"], strict=True):
            recorder.record(latency_ms, size, at)
        self.duplicates = int(doc["duplicates"])
        if doc["error"]:
            self.error = CliError(doc["error"])

    def _read_lines(self) -> None:
        try:
            for line in self._stdout:
                self._lines.put(line.strip())
        except (OSError, ValueError):  # closed by close()
            pass
        finally:
            self._lines.put(None)

    def _next_line(self, timeout_s: float) -> str | None:
        """The child's next line within ``timeout_s`` (None: none came, or its output ended)."""
        try:
            return self._lines.get(timeout=timeout_s)
        except queue.Empty:
            return None

    def close(self) -> None:
        """Stop the child (its stdin closed: it stops; killed after 10 s) and close its pipes. Idempotent."""
        with contextlib.suppress(OSError):
            self._stdin.close()
        try:
            self._child.wait(10)
        except subprocess.TimeoutExpired:
            self._child.kill()
            self._child.wait(10)
        self._reader.join(10)  # the child's end of stdout closed with it: the reader saw its end
        with contextlib.suppress(OSError):
            self._stdout.close()


def main() -> int:
    """The child (see the module docstring)."""
    from odradek import Consumer
    from odradek.perf.consume import E2E_SWITCH_INTERVAL_S, E2EConsumer, position_at_end
    from odradek.types import TopicPartition

    trace.set_role("perf-e2e-consumer")
    sys.setswitchinterval(E2E_SWITCH_INTERVAL_S)
    spec = json.loads(sys.stdin.readline())
    consumer = Consumer(spec["config"])
    try:
        position_at_end(consumer, [TopicPartition(topic, partition) for topic, partition in spec["partitions"]])
        samples = Samples()
        thread = E2EConsumer(consumer, bytes.fromhex(spec["run_id"]), int(spec["num_records"]), samples,
                             time.perf_counter_ns)  # fmt: skip
        produced = threading.Event()

        def watch_stdin() -> None:
            for line in sys.stdin:  # "produced", then nothing more; end of input: the parent is gone
                if line.strip() == "produced":
                    produced.set()
            produced.set()
            thread.stop.set()

        threading.Thread(target=watch_stdin, name="odradek-perf-e2e-stdin", daemon=True).start()
        thread.start()
        print("ready", flush=True)
        idle_s = float(spec["idle_s"])
        seen, since = 0, time.monotonic()
        while thread.is_alive():
            thread.join(PROGRESS_EVERY_S)
            print(samples.records, flush=True)
            if samples.records != seen:
                seen, since = samples.records, time.monotonic()
            elif produced.is_set() and time.monotonic() - since >= idle_s:
                break
        thread.stop.set()
        thread.join(5.0)
        error = None if thread.error is None else f"{type(thread.error).__name__}: {thread.error}"
        print(json.dumps({"latencies_ms": samples.latencies_ms, "sizes": samples.sizes, "at": samples.at,
                          "duplicates": thread.duplicates, "error": error}), flush=True)  # fmt: skip
    finally:
        consumer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
