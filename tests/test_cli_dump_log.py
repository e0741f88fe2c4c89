"""``odradek dump-log``: reads segment files the way kafka-dump-log does."""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

import pytest

from log.record import GZIP, build_batch, patch_base_offset


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "odradek.cli", *args], capture_output=True, text=True, timeout=60, check=False
    )


@pytest.fixture
def segment(tmp_path: Path) -> Path:
    first = bytearray(build_batch([b"alpha", b"beta"], keys=[b"k1", None], timestamp_ms=1_000))
    second = bytearray(build_batch([b"gamma"], timestamp_ms=2_000, compression=GZIP))
    patch_base_offset(second, 0, 2)
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(bytes(first + second))
    return path


def test_prints_every_batch_and_record(segment: Path) -> None:
    out = run_cli("dump-log", "--print-data-log", str(segment))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    batches = [line for line in lines if line.startswith("baseOffset:")]
    records = [line for line in lines if line.startswith("| offset:")]
    assert len(batches) == 2
    assert "baseOffset: 0 lastOffset: 1 count: 2" in batches[0]
    assert "baseOffset: 2 lastOffset: 2 count: 1" in batches[1]
    assert "compresscodec: gzip" in batches[1]
    assert [r.split(" payload: ")[1] for r in records] == ["alpha", "beta", "gamma"]
    assert "key: k1" in records[0]
    assert "keySize: -1" in records[1]


def test_torn_tail_is_reported_with_nonzero_status(segment: Path) -> None:
    segment.write_bytes(segment.read_bytes()[:-5])
    out = run_cli("dump-log", str(segment))
    assert out.returncode == 1
    assert out.stdout.count("baseOffset:") == 1
    assert "torn batch" in out.stdout


def test_corrupt_batch_is_reported(segment: Path) -> None:
    data = bytearray(segment.read_bytes())
    data[70] ^= 0xFF  # inside the first batch's records: the CRC no longer matches
    segment.write_bytes(bytes(data))
    out = run_cli("dump-log", str(segment))
    assert out.returncode == 1
    assert "corrupt batch at position 0" in out.stdout
    assert "CRC" in out.stdout


def test_offset_index_entries(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000100.index"
    path.write_bytes(struct.pack(">iI", 5, 4096) + struct.pack(">iI", 9, 8192))
    out = run_cli("dump-log", str(path))
    assert out.returncode == 0, out.stderr
    assert "offset: 105 position: 4096" in out.stdout
    assert "offset: 109 position: 8192" in out.stdout


def test_missing_file_is_one_clear_sentence(tmp_path: Path) -> None:
    out = run_cli("dump-log", str(tmp_path / "nope.log"))
    assert out.returncode == 1
    assert out.stderr.strip() == f"odradek: no such file: {tmp_path / 'nope.log'}"
    assert "Traceback" not in out.stderr
