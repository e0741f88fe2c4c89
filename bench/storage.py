"""Storage-engine benchmark: ``python -m bench.storage [--json]``.

Figures (records are 100-byte values, no key, 1,000 records a batch, uncompressed):

    append_mb_per_sec          pre-built ~1 MiB batches through ``Log.append`` into a temp dir
    plain_write_mb_per_sec     the same bytes, written with plain unbuffered file writes, same dir
    encode_records_per_sec     our BatchBuilder: append() per record, then build()
    encode_fast_records_per_sec  our build_batch() fast path, same records and bytes
    decode_records_per_sec     our read_batch(), touching offset/timestamp/key/value of each record
    kafka_python_*             kafka-python 3.0.12's DefaultRecordBatchBuilder / DefaultRecordBatch

Neither write path calls fsync; both write the same total volume and keep the best of 3 runs. The
codec timings alternate ours and kafka-python's in short rounds and keep each one's best round, so a
noisy machine slows both alike. Progress goes to stderr; with ``--json`` the last line of stdout is
one JSON object holding every figure and the ratios against kafka-python.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common.clock import SystemClock
from log.config import LogConfig
from log.log import Log
from log.record import HEADER_SIZE, BatchBuilder, build_batch, read_batch

with warnings.catch_warnings():
    # kafka-python's package import calls importlib.resources.read_text, deprecated since Python 3.11.
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

MIB = 1024 * 1024
RECORDS_PER_BATCH = 1000
VALUE_BYTES = 100
TIMESTAMP_MS = 1_700_000_000_000
APPEND_TOTAL_BYTES = 256 * MIB
APPEND_RUNS = 5
APPEND_VALUE_BYTES = 1000
APPEND_DISTINCT_BATCHES = 16
CODEC_ROUNDS = 30
TARGET_ENCODE_RATIO = 3.0
TARGET_DECODE_RATIO = 1.5
TARGET_APPEND_RATIO = 0.7


def progress(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def race(contenders: dict[str, Callable[[], object]], rounds: int, calls_per_round: int) -> dict[str, float]:
    """Best seconds per call of each contender, their rounds interleaved."""
    best = dict.fromkeys(contenders, float("inf"))
    for _ in range(rounds):
        for name, fn in contenders.items():
            start = time.perf_counter()
            for _ in range(calls_per_round):
                fn()
            best[name] = min(best[name], (time.perf_counter() - start) / calls_per_round)
    return best


# ------------------------------------------------------------------------------------------ codecs


def sample_values() -> list[bytes]:
    return [(b"%04d" % i) * (VALUE_BYTES // 4) for i in range(RECORDS_PER_BATCH)]


def encode_ours(values: list[bytes]) -> bytes:
    builder = BatchBuilder()
    append = builder.append
    for value in values:
        append(TIMESTAMP_MS, None, value)
    return builder.build()


def encode_ours_fast(values: list[bytes]) -> bytes:
    return build_batch(values, timestamp_ms=TIMESTAMP_MS)


def encode_kafka_python(values: list[bytes]) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=2**31 - 1,
    )
    append = builder.append
    for offset, value in enumerate(values):
        append(offset, TIMESTAMP_MS, None, value, [])
    return bytes(builder.build())


def decode_ours(batch: bytes) -> int:
    """Decode and touch every record's offset, timestamp, key and value; returns a checksum."""
    _, records = read_batch(batch)
    checksum = 0
    for record in records:
        checksum += record.offset + record.timestamp + len(record.value or b"") + (record.key is None)
    return checksum


def decode_kafka_python(batch: bytes) -> int:
    """The same work through kafka-python, CRC check included."""
    parsed = DefaultRecordBatch(batch)
    if not parsed.validate_crc():
        raise AssertionError("kafka-python rejects the batch's CRC")
    checksum = 0
    for record in parsed:
        checksum += record.offset + record.timestamp + len(record.value or b"") + (record.key is None)
    return checksum


def bench_codecs(rounds: int) -> dict[str, float]:
    values = sample_values()
    batch = encode_ours(values)
    theirs = encode_kafka_python(values)
    # kafka-python writes partitionLeaderEpoch 0 where a producer writes -1 (bytes 12..16, outside the CRC)
    if not batch == encode_ours_fast(values) or batch[:12] + batch[16:] != theirs[:12] + theirs[16:]:
        raise AssertionError("the three encoders disagree on the bytes of the same records")
    if decode_ours(batch) != decode_kafka_python(batch):
        raise AssertionError("the two decoders disagree on the records")
    progress(f"encode: {rounds} interleaved rounds of ours, our fast path and kafka-python")
    encode = race(
        {
            "ours": lambda: encode_ours(values),
            "ours_fast": lambda: encode_ours_fast(values),
            "kafka_python": lambda: encode_kafka_python(values),
        },
        rounds,
        calls_per_round=5,
    )
    progress(f"decode: {rounds} interleaved rounds of ours and kafka-python")
    decode = race(
        {"ours": lambda: decode_ours(batch), "kafka_python": lambda: decode_kafka_python(batch)},
        rounds,
        calls_per_round=5,
    )
    per_sec = {
        "encode_records_per_sec": RECORDS_PER_BATCH / encode["ours"],
        "encode_fast_records_per_sec": RECORDS_PER_BATCH / encode["ours_fast"],
        "decode_records_per_sec": RECORDS_PER_BATCH / decode["ours"],
        "kafka_python_encode_records_per_sec": RECORDS_PER_BATCH / encode["kafka_python"],
        "kafka_python_decode_records_per_sec": RECORDS_PER_BATCH / decode["kafka_python"],
    }
    kafka_encode = per_sec["kafka_python_encode_records_per_sec"]
    per_sec["encode_ratio"] = per_sec["encode_records_per_sec"] / kafka_encode
    per_sec["encode_fast_ratio"] = per_sec["encode_fast_records_per_sec"] / kafka_encode
    kafka_decode = per_sec["kafka_python_decode_records_per_sec"]
    per_sec["decode_ratio"] = per_sec["decode_records_per_sec"] / kafka_decode
    return per_sec


# ------------------------------------------------------------------------------------------ append


def append_batches(max_batch_bytes: int) -> list[bytes]:
    """Distinct pre-built uncompressed batches of ~1 MiB, each at most ``max_batch_bytes``."""
    value = b"v" * APPEND_VALUE_BYTES
    # the size of a record past offset delta 63 (2-byte offsetDelta varint), as all but the first 64 are
    hundred = len(build_batch([value] * 100, timestamp_ms=0))
    record_bytes = len(build_batch([value] * 101, timestamp_ms=0)) - hundred
    records = (max_batch_bytes - HEADER_SIZE) // record_bytes
    batches = []
    for n in range(APPEND_DISTINCT_BATCHES):
        values = [b"%02d" % n * (APPEND_VALUE_BYTES // 2)] * records
        batches.append(build_batch(values, timestamp_ms=TIMESTAMP_MS + n))
    if len(batches[0]) > max_batch_bytes:
        raise AssertionError(f"a {len(batches[0])}-byte batch exceeds {max_batch_bytes} bytes")
    return batches


def run_log_append(directory: Path, batches: list[bytes], count: int) -> float:
    log = Log.open(directory / "bench-0", LogConfig(), clock=SystemClock())
    try:
        start = time.perf_counter()
        for i in range(count):
            log.append(batches[i % len(batches)])
        elapsed = time.perf_counter() - start
    finally:
        log.close()
    return elapsed


def run_plain_write(directory: Path, batches: list[bytes], count: int) -> float:
    with open(directory / "plain.bin", "wb", buffering=0) as out:
        start = time.perf_counter()
        for i in range(count):
            out.write(batches[i % len(batches)])
        return time.perf_counter() - start


def bench_append(runs: int, total_bytes: int) -> dict[str, float]:
    batches = append_batches(min(LogConfig().max_message_bytes, MIB))
    size = len(batches[0])
    count = max(1, total_bytes // size)
    volume_mb = count * size / MIB
    best_log = best_plain = float("inf")
    for run in range(1, runs + 1):
        with tempfile.TemporaryDirectory(prefix="odradek-bench-") as tmp:
            best_log = min(best_log, run_log_append(Path(tmp), batches, count))
        with tempfile.TemporaryDirectory(prefix="odradek-bench-") as tmp:
            best_plain = min(best_plain, run_plain_write(Path(tmp), batches, count))
        progress(f"append run {run}/{runs}: {count} batches of {size} bytes ({volume_mb:.0f} MiB)")
    return {
        "append_mb_per_sec": volume_mb / best_log,
        "plain_write_mb_per_sec": volume_mb / best_plain,
        "append_vs_plain_ratio": best_plain / best_log,
        "append_batch_bytes": float(size),
        "append_total_mib": volume_mb,
    }


# -------------------------------------------------------------------------------------------- main


def report(figures: dict[str, Any]) -> None:
    where = f"Python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs"
    print(f"odradek bench.storage, {where}")
    print(
        f"  Log.append       {figures['append_mb_per_sec']:10.1f} MiB/s   "
        f"(plain file writes {figures['plain_write_mb_per_sec']:.1f} MiB/s, "
        f"ratio {figures['append_vs_plain_ratio']:.2f}, target {TARGET_APPEND_RATIO}; "
        f"{figures['append_total_mib']:.0f} MiB, best of {APPEND_RUNS})"
    )
    for what, ours, theirs, ratio, target in (
        ("encode", "encode_records_per_sec", "kafka_python_encode_records_per_sec", "encode_ratio", 3.0),
        ("decode", "decode_records_per_sec", "kafka_python_decode_records_per_sec", "decode_ratio", 1.5),
    ):
        verdict = "met" if figures[ratio] >= target else "MISSED"
        print(
            f"  {what}           {figures[ours]:12,.0f} records/s  kafka-python {figures[theirs]:10,.0f}  "
            f"x{figures[ratio]:.2f} (target x{target}: {verdict})"
        )
    print(
        f"  encode fast path {figures['encode_fast_records_per_sec']:12,.0f} records/s  "
        f"x{figures['encode_fast_ratio']:.2f} kafka-python"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.storage", description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true", help="end the output with one JSON line")
    parser.add_argument("--rounds", type=int, default=CODEC_ROUNDS, help="codec rounds (default 30)")
    parser.add_argument("--append-mib", type=int, default=APPEND_TOTAL_BYTES // MIB, help="append volume")
    args = parser.parse_args(argv)
    figures: dict[str, Any] = {}
    figures.update(bench_codecs(args.rounds))
    figures.update(bench_append(APPEND_RUNS, args.append_mib * MIB))
    figures["targets_met"] = (
        figures["encode_ratio"] >= TARGET_ENCODE_RATIO
        and figures["decode_ratio"] >= TARGET_DECODE_RATIO
        and figures["append_vs_plain_ratio"] >= TARGET_APPEND_RATIO
    )
    report(figures)
    if args.json:
        print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in figures.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
