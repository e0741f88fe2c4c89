"""Helpers for the cleaner tests (no tests here): kafka-python batches, reading a log back, one pass."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass

from log.cleaner.cleaner import Cleaner, CleanResult
from log.cleaner.manager import CleanerManager, Grabbed
from log.cleaner.plan import CleanerConfig, cleanable_range
from log.cleaner.swap import StepHook
from log.log import Log
from log.record.header import BatchHeader
from log.record.reader import read_batch
from tests.log.conftest import split_batches

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.default_records import DefaultRecordBatchBuilder

Header = tuple[str, bytes | None]


@dataclass(frozen=True, slots=True)
class Rec:
    """One record as a test writes or reads it."""

    key: bytes | None
    value: bytes | None
    timestamp: int
    headers: tuple[Header, ...] = ()


def keyed_batch(
    records: Sequence[Rec],
    *,
    compression: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
) -> bytes:
    """A producer batch (base offset 0) built by kafka-python's independent codec."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=compression,
        is_transactional=transactional,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        batch_size=2**31 - 1,
    )
    for i, rec in enumerate(records):
        builder.append(i, timestamp=rec.timestamp, key=rec.key, value=rec.value, headers=list(rec.headers))
    return bytes(builder.build())


def read_all(log: Log, upto: int | None = None) -> list[tuple[int, Rec]]:
    """Every record of the log (control records excluded) as ``(offset, Rec)``, via Log.read."""
    out: list[tuple[int, Rec]] = []
    for _, header, records in read_batches(log, upto):
        del header
        for r in records:
            out.append((r[0], r[1]))
    return out


def read_batches(log: Log, upto: int | None = None) -> list[tuple[bytes, BatchHeader, list[tuple[int, Rec]]]]:
    """Every batch of the log with its decoded records."""
    out: list[tuple[bytes, BatchHeader, list[tuple[int, Rec]]]] = []
    offset = log.log_start_offset
    end = log.log_end_offset if upto is None else upto
    while offset < end:
        data = log.read(offset, 1 << 20).records
        if not data:
            break
        for batch in split_batches(data):
            header, records = read_batch(batch)
            recs = [(r.offset, Rec(r.key, r.value, r.timestamp, r.headers)) for r in records if not r.is_control]
            out.append((batch, header, recs))
            offset = header.next_offset
    return out


def clean(
    log: Log,
    now_ms: int,
    *,
    upper_bound: int | None = None,
    manager: CleanerManager | None = None,
    config: CleanerConfig | None = None,
    on_step: StepHook | None = None,
) -> CleanResult:
    """One cleaning pass over ``log`` regardless of its dirty ratio; checkpoints through ``manager``."""
    manager = manager or CleanerManager()
    cleanable = cleanable_range(
        log.segments,
        log.config,
        checkpointed_dirty_offset=manager.first_dirty_offset(log),
        log_start_offset=log.log_start_offset,
        upper_bound=log.log_end_offset if upper_bound is None else upper_bound,
        now_ms=now_ms,
    )
    result = Cleaner(config or CleanerConfig(), on_step).clean(log, cleanable, now_ms)
    manager.done_cleaning(Grabbed(log.dir.name, log, cleanable), result)
    return result
