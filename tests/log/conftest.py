"""Helpers for the storage-engine tests: batches built by an independent codec, logs with a manual clock.

Batches come from kafka-python's ``DefaultRecordBatchBuilder`` (an implementation of RecordBatch v2
that shares no code with ours), so the log is tested against the format, not against itself.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from common.clock import ManualClock
from log.config import LogConfig
from log.log import Log
from log.record.header import HEADER_SIZE, LOG_OVERHEAD, parse_header

with warnings.catch_warnings():
    # kafka-python 3.0.12 uses importlib.resources.read_text at import time (deprecated on 3.11).
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.default_records import DefaultRecordBatchBuilder

START_MS = 1_700_000_000_000

CODEC_NONE = 0
CODEC_GZIP = 1
CODEC_LZ4 = 3
CODEC_ZSTD = 4


def make_batch(
    values: Sequence[bytes | None] = (b"value",),
    *,
    timestamps: Sequence[int] | None = None,
    base_timestamp: int = START_MS,
    compression: int = CODEC_NONE,
    key: bytes | None = None,
) -> bytes:
    """One producer batch (base offset 0) with a record per value; timestamps default to base + i."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=compression,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=2**31 - 1,
    )
    for i, value in enumerate(values):
        timestamp = timestamps[i] if timestamps is not None else base_timestamp + i
        builder.append(i, timestamp=timestamp, key=key, value=value, headers=[])
    return bytes(builder.build())


def batch_of_size(size_bytes: int, *, timestamp: int = START_MS, key: bytes | None = None) -> bytes:
    """A one-record uncompressed batch of exactly ``size_bytes`` bytes (>= 80 + the key)."""
    overhead = len(make_batch([b""], timestamps=[timestamp], key=key))
    value_len = size_bytes - overhead
    for _ in range(3):  # the value's varint length grows with the value: converge
        batch = make_batch([b"x" * value_len], timestamps=[timestamp], key=key)
        value_len += size_bytes - len(batch)
    assert len(batch) == size_bytes, (len(batch), size_bytes)
    return batch


def split_batches(data: bytes) -> list[bytes]:
    """Cut a buffer of whole batches into the batches."""
    out = []
    pos = 0
    while pos < len(data):
        size = parse_header(data, pos).batch_length + LOG_OVERHEAD
        out.append(data[pos : pos + size])
        pos += size
    assert pos == len(data), "trailing partial batch"
    return out


def base_offset_of(batch: bytes) -> int:
    return parse_header(batch).base_offset


def body_of(batch: bytes) -> bytes:
    """Everything the leader does not patch: the CRC'd part of the header and the records."""
    return batch[16:HEADER_SIZE] + batch[HEADER_SIZE:]


def small_config(**overrides: object) -> LogConfig:
    """Small segments and a dense index, so that tests exercise rolls and index lookups."""
    settings: dict[str, object] = {
        "segment_bytes": 4096,
        "index_interval_bytes": 256,
        "retention_ms": -1,
        "retention_bytes": -1,
    }
    settings.update(overrides)
    return LogConfig(**settings)  # type: ignore[arg-type]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START_MS)


OpenLog = Callable[..., Log]


@pytest.fixture
def open_log(tmp_path: Path, clock: ManualClock) -> Iterator[OpenLog]:
    """``open_log(config=None, path=None, **kw)``: a Log in ``tmp_path/p0``; all are closed at teardown."""
    opened: list[Log] = []

    def _open(config: LogConfig | None = None, path: Path | None = None, **kwargs: object) -> Log:
        log = Log.open(path or tmp_path / "p0", config or small_config(), clock, **kwargs)  # type: ignore[arg-type]
        opened.append(log)
        return log

    yield _open
    for log in opened:
        log.close_handlers()
