"""Leader record validation benchmark: ``python -m bench.validator [--json]`` (issue 15's figures).

For batches of ``--records`` (1,000) records of ``--value-bytes`` (100) bytes, null keys, one per codec
(none, gzip, lz4, zstd), prints per codec, best of ``--repeat`` (5) runs of ``--batches`` (200) batches::

    header_crc_records_per_sec   what a leader checked before: header and CRC-32C (validate_batch)
    validate_records_per_sec     what it checks now: that plus every record decoded (log.record.validator,
                                 decompression included)
    columns_records_per_sec      a consumer's full decode (log.record.columns), for scale
    validate_us_per_batch

and, for the gzip decoder, the time to inflate a records section split into ``N`` gzip members (10,000,
25,000 and 50,000 members, ~20 bytes each: linear now; it was quadratic in the number of members)::

    gzip_members_seconds         {members: seconds}

Figures are CPU-bound single-thread numbers: compare them within one run (the machine's speed varies).
With ``--json`` the last line of stdout is one JSON object.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import time
from collections.abc import Callable
from typing import Any

from log.record import HEADER_SIZE, BatchBuilder, build_batch
from log.record.columns import read_batch_columns
from log.record.compression import CODEC_NAMES, GZIP, LZ4, NONE, ZSTD, decompress
from log.record.header import validate_batch
from log.record.validator import RecordPolicy, validate_producer_batch

MEMBER_COUNTS = (10_000, 25_000, 50_000)


def best_rate(run: Callable[[], object], batches: int, repeat: int) -> float:
    """Best seconds per call of ``run`` over ``repeat`` rounds of ``batches`` calls."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(batches):
            run()
        best = min(best, (time.perf_counter() - start) / batches)
    return best


def codec_figures(codec: int, args: argparse.Namespace) -> dict[str, float]:
    now = int(time.time() * 1000)
    values = [os.urandom(args.value_bytes // 2) + b"x" * (args.value_bytes - args.value_bytes // 2)
              for _ in range(args.records)]  # fmt: skip
    batch = build_batch(values, timestamp_ms=now, compression=codec)
    header = validate_batch(batch)
    policy = RecordPolicy(now, timestamp_after_max_ms=3_600_000)
    crc = best_rate(lambda: validate_batch(batch), args.batches, args.repeat)
    full = best_rate(
        lambda: validate_producer_batch(batch, 0, validate_batch(batch), policy), args.batches, args.repeat
    )
    columns = best_rate(lambda: read_batch_columns(batch), args.batches, args.repeat)
    assert validate_producer_batch(batch, 0, header, policy) == now
    return {
        "batch_bytes": len(batch),
        "header_crc_records_per_sec": round(args.records / crc),
        "validate_records_per_sec": round(args.records / full),
        "columns_records_per_sec": round(args.records / columns),
        "validate_us_per_batch": round(full * 1e6, 1),
    }


def gzip_members() -> dict[int, float]:
    out = {}
    builder = BatchBuilder()
    for i in range(20_000):
        builder.append(0, None, b"%d" % i)
    section = builder.build()[HEADER_SIZE:]
    for count in MEMBER_COUNTS:
        step = max(1, len(section) // count)
        members = b"".join(gzip.compress(section[i : i + step], mtime=0) for i in range(0, len(section), step))
        start = time.perf_counter()
        assert decompress(GZIP, members) == section
        out[count] = round(time.perf_counter() - start, 4)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.validator", description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=1000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result: dict[str, Any] = {"python": platform.python_version(), "records_per_batch": args.records,
                              "value_bytes": args.value_bytes}  # fmt: skip
    for codec in (NONE, GZIP, LZ4, ZSTD):
        figures = codec_figures(codec, args)
        result[CODEC_NAMES[codec]] = figures
        print(f"{CODEC_NAMES[codec]:5}  header+CRC {figures['header_crc_records_per_sec']:>12,} records/s   "
              f"validate {figures['validate_records_per_sec']:>10,} records/s ({figures['validate_us_per_batch']} us "
              f"a batch)   columns {figures['columns_records_per_sec']:>10,} records/s")  # fmt: skip
    result["gzip_members_seconds"] = gzip_members()
    print("gzip members -> seconds:", result["gzip_members_seconds"])
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
