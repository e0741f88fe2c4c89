"""Log compaction benchmark: ``python -m bench.cleaner [--json]`` (issue 6's figure).

Builds a log of ``--records`` (default 1,000,000) keyed records over ``--keys`` (default 10,000) keys,
``--value-bytes`` (100) values, ``--batch-records`` (100) records a batch, in ``--segment-bytes``
(8 MiB) segments, rolls it, then runs one cleaning pass over everything (Kafka's first pass over a
never-cleaned log) and prints::

    compaction_mb_per_sec   MB of log cleaned / the pass's wall time (Kafka's "MB of log processed in
                            N seconds" line: the map pass is inside the time, not in the bytes)
    compaction_mb_per_cpu_sec  the same over the process's CPU time (steadier on a loaded machine)
    wall_to_cpu             wall time / CPU time: far above 1 means the machine was busy elsewhere
    records_per_sec         records read / wall time
    seconds, log_bytes, cleaned_bytes, records_kept, segments_before, segments_after

Wall time includes both passes over the data (offset map, then filtering and writing) and the fsync
of each cleaned segment. ``--compression`` (none, gzip, lz4, zstd) sets the batches' codec: cleaned
batches are recompressed with it. Progress goes to stderr; with ``--json`` the last line of stdout is
one JSON object.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common.clock import SystemClock
from log.cleaner.cleaner import Cleaner
from log.cleaner.plan import CleanerConfig, cleanable_range
from log.config import LogConfig
from log.log import Log
from log.record import build_batch, codec_from_name

MIB = 1024 * 1024
TIMESTAMP_MS = 1_700_000_000_000


def progress(message: str) -> None:
    print(f"[cleaner-bench] {message}", file=sys.stderr, flush=True)


def build_log(directory: Path, args: argparse.Namespace) -> Log:
    config = LogConfig(
        segment_bytes=args.segment_bytes, cleanup_policy=frozenset({"compact"}), retention_ms=-1, flush_ms=2**63 - 1
    )
    log = Log.open(directory, config, SystemClock())
    codec = codec_from_name(args.compression)
    value = b"v" * args.value_bytes
    keys = [b"key-%08d" % i for i in range(args.keys)]
    written = 0
    while written < args.records:
        count = min(args.batch_records, args.records - written)
        batch_keys = [keys[(written + i) % args.keys] for i in range(count)]
        log.append(build_batch([value] * count, keys=batch_keys, timestamp_ms=TIMESTAMP_MS, compression=codec))
        written += count
    log.roll()
    return log


def run(args: argparse.Namespace) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="cleaner-bench-", dir=args.dir))
    try:
        progress(f"building {args.records:,} records over {args.keys:,} keys in {root}")
        log = build_log(root / "bench-0", args)
        log_bytes = log.size_bytes
        segments_before = len(log.segments)
        config = CleanerConfig(dedupe_buffer_size=args.dedupe_buffer_size)
        now = SystemClock().time_ms()
        cleanable = cleanable_range(
            log.segments,
            log.config,
            checkpointed_dirty_offset=None,
            log_start_offset=log.log_start_offset,
            upper_bound=log.log_end_offset,
            now_ms=now,
        )
        progress(f"cleaning {log_bytes / MIB:.1f} MiB in {segments_before} segments")
        started, cpu_started = time.perf_counter(), time.process_time()
        result = Cleaner(config).clean(log, cleanable, now)
        seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu_started
        figures = {
            "records": result.records_read,
            "keys": args.keys,
            "compression": args.compression,
            "seconds": round(seconds, 3),
            "cpu_seconds": round(cpu_seconds, 3),
            "log_bytes": log_bytes,
            "map_bytes_read": result.map_bytes_read,
            "bytes_read": result.bytes_read,
            "cleaned_bytes": result.bytes_written,
            "records_kept": result.records_retained,
            "segments_before": segments_before,
            "segments_after": len(log.segments),
            "compaction_mb_per_sec": round(result.bytes_read / MIB / seconds, 2),
            "compaction_mb_per_cpu_sec": round(result.bytes_read / MIB / cpu_seconds, 2),
            "wall_to_cpu": round(seconds / cpu_seconds, 2),
            "records_per_sec": round(result.records_read / seconds),
            "python": platform.python_version(),
        }
        log.close()
        return figures
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cleaner", description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--batch-records", type=int, default=100)
    parser.add_argument("--segment-bytes", type=int, default=8 * MIB)
    parser.add_argument("--compression", default="none", choices=["none", "gzip", "lz4", "zstd"])
    parser.add_argument("--dedupe-buffer-size", type=int, default=128 * MIB)
    parser.add_argument("--dir", default=None, help="where to build the log (default: the temp dir)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.records < 1 or args.keys < 1 or args.batch_records < 1:
        parser.error("--records, --keys and --batch-records must be positive")
    figures = run(args)
    print(
        f"compacted {figures['log_bytes'] / MIB:.1f} MiB ({figures['records']:,} records, {args.keys:,} keys) "
        f"in {figures['seconds']:.2f} s: {figures['compaction_mb_per_sec']:.1f} MB/s "
        f"({figures['compaction_mb_per_cpu_sec']:.1f} MB per CPU second), "
        f"{figures['records_per_sec']:,} records/s; kept {figures['records_kept']:,} records, "
        f"{figures['segments_before']} -> {figures['segments_after']} segments"
    )
    if args.json:
        print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
