"""Loading a ``__transaction_state`` partition (TC11): ``broker.txn.coordinator.read_records`` reads the whole log,
to its end, not only to the high watermark (a new leader's high watermark lags records the previous leader
acknowledged; the chaos harness found an Ongoing transaction lost that way, its records later committed)."""

from __future__ import annotations

from pathlib import Path

from broker.txn.coordinator import read_records
from broker.txn.records import encode_record
from broker.txn.state import TxnMetadata, TxnState
from common.clock import ManualClock
from log.log import Log
from log.record.builder import build_batch
from tests.log.conftest import START_MS, small_config

STATES = [
    TxnMetadata("tx", 7, 0, 60_000, TxnState.COMPLETE_COMMIT, frozenset(), -1, START_MS),
    TxnMetadata("tx", 7, 0, 60_000, TxnState.ONGOING, frozenset({("out", 0), ("out", 1)}), START_MS, START_MS + 1),
    TxnMetadata("other", 8, 2, 60_000, TxnState.EMPTY, frozenset(), -1, START_MS + 2),
]


def test_the_load_reads_every_record_to_the_log_end(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "__transaction_state-0", small_config(segment_bytes=200), ManualClock(START_MS))
    try:
        for metadata in STATES:
            key, value = encode_record(metadata)
            log.append(build_batch([value], keys=[key], timestamp_ms=START_MS))
        assert len(log.segments) > 1  # across segments
        assert list(read_records(log)) == [(m.transactional_id, m) for m in STATES]
    finally:
        log.close()
