"""The log cleaner on real Logs with a manual clock: Kafka's compaction rules, one per test.

Batches come from kafka-python's builder; cleaned segments are read back through Log.read and our
reader, and (in ``test_kafka_python_reads_cleaned_segments``) straight from the .log files by
kafka-python's reader.
"""

from __future__ import annotations

import dataclasses
import shutil
import threading
import warnings
from pathlib import Path

import pytest

from common.clock import ManualClock
from log.cleaner.cleaner import Cleaner
from log.cleaner.manager import CHECKPOINT_FILE, CleanerManager, LogCleaner
from log.cleaner.plan import CleanerConfig, cleanable_range
from log.cleaner.retention import delete_horizon_ms
from log.config import LogConfig
from log.errors import InvalidRecordError
from log.log import Log
from log.record.header import ATTR_DELETE_HORIZON, HEADER_SIZE, parse_header
from log.segment import LOG_SUFFIX, Segment, file_stem
from tests.log.conftest import CODEC_GZIP, CODEC_LZ4, CODEC_NONE, CODEC_ZSTD, START_MS, OpenLog, small_config
from tests.log.test_cleaner_support import Rec, clean, keyed_batch, read_all, read_batches
from tests.log.test_record_codec import recrc
from tests.support.launcher import wait_until

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.default_records import DefaultRecordBatch

COMPACT = frozenset({"compact"})
DAY_MS = 86_400_000


def compact_config(**overrides: object) -> LogConfig:
    return small_config(cleanup_policy=COMPACT, **overrides)


def fill(
    log: Log, clock: ManualClock, count: int, keys: int, *, start: int = 0, prefix: bytes = b"k"
) -> dict[bytes, bytes]:
    """Append ``count`` one-record batches cycling over ``keys`` keys; returns each key's latest value."""
    latest: dict[bytes, bytes] = {}
    for i in range(start, start + count):
        key, value = prefix + b"%d" % (i % keys), b"v%d" % i
        log.append(keyed_batch([Rec(key, value, clock.time_ms())]))
        latest[key] = value
    return latest


def latest_by_key(records: list[tuple[int, Rec]]) -> dict[bytes | None, bytes | None]:
    out: dict[bytes | None, bytes | None] = {}
    for _, rec in records:
        out[rec.key] = rec.value
    return out


# --------------------------------------------------------------------------- the core rule


def test_keeps_the_latest_record_per_key_and_their_offsets(open_log: OpenLog, clock: ManualClock) -> None:
    log = open_log(compact_config())
    latest = fill(log, clock, 300, 7)
    before = read_all(log)
    result = clean(log, clock.time_ms())
    after = read_all(log)
    assert result.complete
    assert latest_by_key(after) == latest
    offsets = [offset for offset, _ in after]
    assert offsets == sorted(set(offsets)), "offsets strictly increase"
    assert set(after) <= set(before), "every survivor is an original record at its original offset"
    active_base = log.segments[-1].base_offset
    cleaned_part = [(o, r) for o, r in after if o < result.end_offset]
    assert len({r.key for _, r in cleaned_part}) == len(cleaned_part), "one record per key below the end"
    assert [x for x in after if x[0] >= active_base] == [x for x in before if x[0] >= active_base]
    assert log.log_end_offset == 300


def test_never_touches_records_at_or_above_the_upper_bound(open_log: OpenLog, clock: ManualClock) -> None:
    log = open_log(compact_config())
    fill(log, clock, 300, 5)
    bound = log.segments[2].base_offset + 3  # inside the third segment: it is not cleanable
    before = read_all(log)
    result = clean(log, clock.time_ms(), upper_bound=bound)
    after = read_all(log)
    limit = log.segments[2].base_offset
    assert result.end_offset <= limit
    assert [x for x in after if x[0] >= limit] == [x for x in before if x[0] >= limit]
    assert len(after) < len(before)


def test_active_segment_alone_is_never_cleaned(open_log: OpenLog, clock: ManualClock) -> None:
    log = open_log(compact_config())
    fill(log, clock, 20, 2)  # fits in the active segment
    assert len(log.segments) == 1
    cleanable = cleanable_range(
        log.segments, log.config, checkpointed_dirty_offset=None, log_start_offset=0, upper_bound=20, now_ms=START_MS
    )
    assert cleanable.cleanable_count == 0
    before = read_all(log)
    clean(log, clock.time_ms())
    assert read_all(log) == before


def test_keyless_records_are_removed_and_refused_at_append(open_log: OpenLog, clock: ManualClock) -> None:
    plain = open_log(small_config())
    plain.append(keyed_batch([Rec(None, b"no key", START_MS)]))  # a delete-only topic takes it
    plain.close_handlers()
    log = open_log(compact_config(), path=plain.dir.parent / "compacted")
    with pytest.raises(InvalidRecordError, match="Compacted topic cannot accept message without key"):
        log.append(keyed_batch([Rec(b"k", b"v", START_MS), Rec(None, b"x", START_MS)]))
    assert log.log_end_offset == 0, "a refused append writes nothing"
    # A follower (or a topic whose policy changed) may still hold keyless records: the cleaner drops them.
    log.append_as_follower(keyed_batch([Rec(None, b"orphan", START_MS), Rec(b"k", b"v", START_MS)]))
    fill(log, clock, 200, 3, start=2)
    clean(log, clock.time_ms())
    assert all(rec.key is not None for _, rec in read_all(log))


# ------------------------------------------------------------------------------ tombstones


def test_tombstones_stay_delete_retention_ms_after_the_first_cleaning(open_log: OpenLog, clock: ManualClock) -> None:
    log = open_log(compact_config(delete_retention_ms=DAY_MS))
    fill(log, clock, 100, 4)
    log.append(keyed_batch([Rec(b"k1", None, clock.time_ms())]))  # delete k1
    fill(log, clock, 150, 4, prefix=b"m")
    log.append(keyed_batch([Rec(b"gone", None, clock.time_ms())]))  # a tombstone for a key never seen
    fill(log, clock, 100, 3, start=5000, prefix=b"m")  # k1's tombstone stays the latest k1
    first = clean(log, clock.time_ms())
    assert first.tombstone_horizon_ms == clock.time_ms() + DAY_MS
    values = latest_by_key(read_all(log, first.end_offset))
    assert values[b"k1"] is None, "tombstones survive the first cleaning"
    assert values[b"gone"] is None
    stamped = [h for _, h, recs in read_batches(log) if any(r.value is None for _, r in recs)]
    assert stamped
    assert all(h.attributes & ATTR_DELETE_HORIZON for h in stamped)
    assert all(delete_horizon_ms(h) == clock.time_ms() + DAY_MS for h in stamped)
    assert all(r.timestamp >= START_MS for _, r in read_all(log)), "timestamps survive rebasing"

    clock.advance(DAY_MS - 1)
    clean(log, clock.time_ms())
    assert latest_by_key(read_all(log))[b"k1"] is None, "still within delete.retention.ms"

    clock.advance(1)
    clean(log, clock.time_ms())
    keys = {rec.key for o, rec in read_all(log) if o < first.end_offset}
    assert b"k1" not in keys
    assert b"gone" not in keys
    assert b"k3" in keys, "a plain value never expires"


def test_horizon_passing_makes_a_log_due(tmp_path: Path, clock: ManualClock) -> None:
    log = Log.open(tmp_path / "p0", compact_config(delete_retention_ms=1000), clock)
    try:
        fill(log, clock, 100, 4)
        log.append(keyed_batch([Rec(b"k1", None, clock.time_ms())]))
        fill(log, clock, 150, 3, prefix=b"m")
        cleaner = LogCleaner(lambda: {"p0": (log, log.log_end_offset)}, CleanerConfig(), clock)
        assert cleaner.clean_once() is not None
        assert cleaner.clean_once() is None, "nothing dirty, horizon ahead"
        clock.advance(1000)
        result = cleaner.clean_once()
        assert result is not None
        assert result.tombstone_horizon_ms is None
        assert b"k1" not in {rec.key for _, rec in read_all(log)}
    finally:
        log.close()


# --------------------------------------------------------------------------- batch identity


@pytest.mark.parametrize("codec", [CODEC_NONE, CODEC_GZIP, CODEC_LZ4, CODEC_ZSTD])
def test_rebuilt_batches_keep_offsets_producer_fields_codec_headers(
    open_log: OpenLog, clock: ManualClock, codec: int
) -> None:
    log = open_log(compact_config(segment_bytes=2048))
    sequence = 0
    for round_ in range(12):
        written = [
            Rec(
                b"k%d" % (i % 3),
                b"r%d-%d" % (round_, i) + b"x" * 200,
                START_MS + round_ * 10 + i,
                (("h", b"%d" % i), ("n", None)),
            )
            for i in range(5)
        ]
        batch = keyed_batch(written, compression=codec, producer_id=77, producer_epoch=3, base_sequence=sequence)
        log.append(batch, leader_epoch=round_)
        sequence += 5
    before = {h.base_offset: (h, recs) for _, h, recs in read_batches(log)}
    clean(log, clock.time_ms())
    for _, header, recs in read_batches(log):
        original, original_recs = before[header.base_offset]
        assert header.last_offset_delta == original.last_offset_delta
        assert (header.producer_id, header.producer_epoch, header.base_sequence) == (77, 3, original.base_sequence)
        assert header.partition_leader_epoch == original.partition_leader_epoch
        assert header.compression == codec or header.records_count == 0  # an empty batch has no codec
        assert set(recs) <= set(original_recs), "offset, key, value, timestamp and headers survive"
        if recs:
            assert header.max_timestamp == max(r.timestamp for _, r in recs)


def test_last_batch_of_a_producer_survives_empty(open_log: OpenLog, clock: ManualClock) -> None:
    log = open_log(compact_config(segment_bytes=1024))
    log.append(keyed_batch([Rec(b"a", b"1", START_MS)], producer_id=5, producer_epoch=0, base_sequence=0))
    log.append(keyed_batch([Rec(b"a", b"2", START_MS)], producer_id=5, producer_epoch=0, base_sequence=1))
    fill(log, clock, 60, 1)  # key k0, no producer id; supersedes nothing of producer 5
    log.append(keyed_batch([Rec(b"a", b"3", START_MS)]))  # key a superseded by a non-idempotent write
    fill(log, clock, 60, 1, start=100)
    clean(log, clock.time_ms())
    batches = [(h, recs) for _, h, recs in read_batches(log) if h.producer_id == 5]
    assert [(h.base_offset, h.records_count, h.base_sequence) for h, _ in batches] == [(1, 0, 1)]
    assert latest_by_key(read_all(log))[b"a"] == b"3"


# ------------------------------------------------------------------------- passes and maps


def test_small_offset_map_cleans_in_several_passes(open_log: OpenLog, clock: ManualClock) -> None:
    log = open_log(compact_config())
    latest = fill(log, clock, 240, 40)
    manager = CleanerManager()
    config = CleanerConfig(dedupe_buffer_size=24 * 25, io_buffer_load_factor=1.0)  # 25 keys per pass
    ends: list[int] = []
    cleanable_end = log.segments[-1].base_offset
    while (manager.first_dirty_offset(log) or 0) < cleanable_end and len(ends) < 40:
        result = clean(log, clock.time_ms(), manager=manager, config=config)
        assert result.map_entries <= 40, "a pass stops once the map is full"
        ends.append(result.end_offset)
    assert len(ends) > 1, ends
    assert ends == sorted(set(ends)), "every pass moves the first dirty offset on"
    assert latest_by_key(read_all(log)) == latest


def test_second_pass_merges_small_cleaned_segments(open_log: OpenLog, clock: ManualClock) -> None:
    log = open_log(compact_config())
    latest = fill(log, clock, 400, 5)
    clean(log, clock.time_ms())
    count = len(log.segments)
    clean(log, clock.time_ms())
    assert len(log.segments) < count
    assert latest_by_key(read_all(log)) == latest


def test_first_dirty_offset_is_checkpointed_in_the_partition(tmp_path: Path, clock: ManualClock) -> None:
    log = Log.open(tmp_path / "p0", compact_config(), clock)
    fill(log, clock, 300, 5)
    cleaner = LogCleaner(lambda: {"p0": (log, log.log_end_offset)}, CleanerConfig(), clock)
    result = cleaner.clean_once()
    assert result is not None
    assert (tmp_path / "p0" / CHECKPOINT_FILE).exists()
    assert CleanerManager().first_dirty_offset(log) == result.end_offset
    assert cleaner.clean_once() is None, "a clean log is not due"
    log.close()


def test_the_filthiest_log_goes_first_and_only_due_logs(tmp_path: Path, clock: ManualClock) -> None:
    manager = CleanerManager()
    cleaned_before = Log.open(tmp_path / "a", compact_config(min_cleanable_dirty_ratio=0.1), clock)
    fill(cleaned_before, clock, 300, 300)  # distinct keys: cleaning keeps everything
    clean(cleaned_before, clock.time_ms(), manager=manager)
    fill(cleaned_before, clock, 150, 300, start=300)
    never_cleaned = Log.open(tmp_path / "b", compact_config(), clock)
    fill(never_cleaned, clock, 300, 3)
    plain = Log.open(tmp_path / "plain", small_config(), clock)
    fill(plain, clock, 300, 2)
    logs = {"a": cleaned_before, "b": never_cleaned, "plain": plain}
    source = {name: (log, log.log_end_offset) for name, log in logs.items()}
    first = manager.grab_filthiest(source, clock.time_ms())
    second = manager.grab_filthiest(source, clock.time_ms())
    assert first is not None
    assert first.name == "b"
    assert first.cleanable.dirty_ratio == 1.0
    assert second is not None
    assert second.name == "a"
    assert 0.1 < second.cleanable.dirty_ratio < 0.5
    assert manager.grab_filthiest(source, clock.time_ms()) is None, "in progress, or delete policy only"
    manager.done_cleaning(first, None)
    again = manager.grab_filthiest(source, clock.time_ms())
    assert again is not None
    assert again.name == "b", "a failed pass releases its log"
    for log in logs.values():
        log.close()


def test_min_compaction_lag_holds_young_segments_back(open_log: OpenLog, clock: ManualClock) -> None:
    log = open_log(compact_config(min_compaction_lag_ms=60_000))
    fill(log, clock, 150, 3)
    clock.advance(120_000)
    fill(log, clock, 150, 3, start=150)
    cleanable = cleanable_range(
        log.segments,
        log.config,
        checkpointed_dirty_offset=None,
        log_start_offset=0,
        upper_bound=log.log_end_offset,
        now_ms=clock.time_ms(),
    )
    old = [s for s in log.segments if s.largest_timestamp <= clock.time_ms() - 60_000]
    assert 0 < cleanable.cleanable_count <= len(old)
    assert cleanable.first_uncleanable_offset <= log.segments[len(old)].base_offset


# ----------------------------------------------------------------------- concurrency, oracle


def test_segments_changed_under_the_cleaner_abort_the_swap(open_log: OpenLog, clock: ManualClock) -> None:
    log = open_log(compact_config())
    fill(log, clock, 300, 5)
    cleanable = cleanable_range(
        log.segments, log.config, checkpointed_dirty_offset=None, log_start_offset=0, upper_bound=300, now_ms=START_MS
    )
    log.delete_records(log.segments[1].base_offset)  # the first segment goes away meanwhile
    result = Cleaner(CleanerConfig()).clean(log, cleanable, clock.time_ms())
    assert not result.complete
    assert result.end_offset == cleanable.first_dirty_offset
    assert not list(log.dir.glob("*.cleaned")), "the aborted output is removed"


def test_appends_and_reads_go_on_while_cleaning(open_log: OpenLog, clock: ManualClock) -> None:
    log = open_log(compact_config())
    latest = fill(log, clock, 600, 10)
    stop = threading.Event()
    errors: list[BaseException] = []

    def reader() -> None:
        try:
            while not stop.is_set():
                records = read_all(log)
                offsets = [o for o, _ in records]
                assert offsets == sorted(set(offsets))
                assert {r.key for _, r in records} >= set(latest)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for _ in range(3):
            clean(log, clock.time_ms())
            latest.update(fill(log, clock, 50, 10, start=10_000))
    finally:
        stop.set()
        thread.join(30)
    assert not errors, errors[0]
    assert latest_by_key(read_all(log)) == latest


def test_kafka_python_reads_cleaned_segments(tmp_path: Path, clock: ManualClock) -> None:
    log = Log.open(tmp_path / "p0", compact_config(), clock)
    for i in range(200):
        rec = Rec(b"k%d" % (i % 6), None if i == 150 else b"v%d" % i, START_MS + i, (("i", b"%d" % i),))
        log.append(keyed_batch([rec, Rec(b"x%d" % (i % 4), b"w%d" % i, START_MS + i)], compression=CODEC_GZIP))
    clean(log, clock.time_ms())
    expected = read_all(log)
    log.close()
    seen = []
    for base in sorted(int(p.name[:20]) for p in (tmp_path / "p0").glob("*" + LOG_SUFFIX)):
        data = (tmp_path / "p0" / (file_stem(base) + LOG_SUFFIX)).read_bytes()
        pos = 0
        while pos < len(data):
            header = parse_header(data, pos)
            batch = DefaultRecordBatch(data[pos : pos + header.size_bytes])
            assert batch.validate_crc()
            assert batch.base_offset == header.base_offset
            assert batch.last_offset_delta == header.last_offset_delta
            for r in batch:
                seen.append((r.offset, Rec(r.key, r.value, r.timestamp, tuple(r.headers))))
            pos += header.size_bytes
    assert seen == expected


def test_compact_and_delete_policies_work_together(open_log: OpenLog, clock: ManualClock) -> None:
    log = open_log(small_config(cleanup_policy=frozenset({"compact", "delete"}), retention_ms=60_000))
    fill(log, clock, 200, 4)
    clock.advance(120_000)
    latest = fill(log, clock, 300, 4, start=200)
    clean(log, clock.time_ms())
    assert latest_by_key(read_all(log)) == latest
    old_segments = [s for s in log.segments[:-1] if s.largest_timestamp < clock.time_ms() - 60_000]
    assert old_segments
    assert log.delete_retention() == len(old_segments), "retention.ms still deletes old segments"
    assert latest_by_key(read_all(log)) == latest


def test_cleaner_threads_clean_due_logs_and_stop(tmp_path: Path, clock: ManualClock) -> None:
    log = Log.open(tmp_path / "p0", compact_config(), clock)
    latest = fill(log, clock, 300, 5)
    config = CleanerConfig(threads=2, backoff_ms=10)
    cleaner = LogCleaner(lambda: {"p0": (log, log.log_end_offset)}, config, clock)
    cleaner.start()
    try:
        wait_until(lambda: cleaner.passes >= 1, 30.0, "a cleaner thread cleaned the log")
    finally:
        cleaner.stop()
    assert latest_by_key(read_all(log)) == latest
    assert len(read_all(log)) < 300
    log.close()


def test_disabled_cleaner_starts_no_thread(tmp_path: Path, clock: ManualClock) -> None:
    cleaner = LogCleaner(dict, CleanerConfig(enable=False), clock)
    before = threading.active_count()
    cleaner.start()
    assert threading.active_count() == before
    cleaner.stop()


def test_a_recreated_partition_starts_dirty_again(tmp_path: Path, clock: ManualClock) -> None:
    manager = CleanerManager()
    log = Log.open(tmp_path / "p0", compact_config(), clock)
    fill(log, clock, 300, 5)
    result = clean(log, clock.time_ms(), manager=manager)
    assert manager.first_dirty_offset(log) == result.end_offset > 0
    log.close()
    shutil.rmtree(tmp_path / "p0")  # topic deleted, then created again with the same name
    log = Log.open(tmp_path / "p0", compact_config(), clock)
    assert manager.first_dirty_offset(log) is None
    log.close()


def test_replace_segments_refuses_the_active_segment_and_changed_runs(open_log: OpenLog, clock: ManualClock) -> None:
    log = open_log(compact_config())
    fill(log, clock, 200, 5)
    segments = log.segments

    def install(replaced: list[Segment]) -> Segment:
        raise AssertionError("must not be called")

    assert not log.replace_segments(segments[-1:], install), "the active segment is never replaced"
    assert not log.replace_segments(segments[-2:], install), "nor a run that includes it"
    stale = dataclasses.replace(segments[0], size_bytes=segments[0].size_bytes - 1)
    assert not log.replace_segments([stale], install), "a segment that changed since the snapshot"
    assert log.segments == segments


def test_a_stopping_cleaner_leaves_the_pass_incomplete(open_log: OpenLog, clock: ManualClock) -> None:
    log = open_log(compact_config())
    fill(log, clock, 300, 5)
    before = read_all(log)
    cleanable = cleanable_range(
        log.segments, log.config, checkpointed_dirty_offset=None, log_start_offset=0, upper_bound=300, now_ms=START_MS
    )
    result = Cleaner(CleanerConfig(), should_stop=lambda: True).clean(log, cleanable, clock.time_ms())
    assert not result.complete
    assert result.end_offset == 0
    assert read_all(log) == before


def test_a_log_closed_under_the_cleaner_ends_the_pass(open_log: OpenLog, clock: ManualClock) -> None:
    log = open_log(compact_config())
    fill(log, clock, 300, 5)
    cleanable = cleanable_range(
        log.segments, log.config, checkpointed_dirty_offset=None, log_start_offset=0, upper_bound=300, now_ms=START_MS
    )
    log.close()  # Partition.update_config closes the Log and opens a new one on the same directory
    result = Cleaner(CleanerConfig()).clean(log, cleanable, clock.time_ms())
    assert not result.complete
    assert not list(log.dir.glob("*.cleaned"))
    reopened = open_log(compact_config(), path=log.dir)
    assert len(read_all(reopened)) == 300


def test_a_log_that_cannot_be_cleaned_is_marked_and_the_others_are_cleaned(tmp_path: Path, clock: ManualClock) -> None:
    """A batch with a valid CRC but records that do not decode (a follower's copy takes it as is) makes its log's
    pass fail: the log is marked uncleanable (Kafka's markPartitionUncleanable) and the cleaner goes on with the
    next filthiest, in the same call; it tries the partition again once its log is opened anew."""
    bad = Log.open(tmp_path / "bad-0", compact_config(), clock)
    fill(bad, clock, 40, 4)
    garbage = bytearray(keyed_batch([Rec(b"k", b"v" * 30, clock.time_ms())]))
    garbage[HEADER_SIZE:] = b"\xff" * (len(garbage) - HEADER_SIZE)  # varints that never end
    garbage[:8] = bad.log_end_offset.to_bytes(8, "big")
    bad.append_as_follower(recrc(garbage))
    fill(bad, clock, 40, 4, start=40)
    good = Log.open(tmp_path / "good-0", compact_config(), clock)
    logs = {"bad-0": bad, "good-0": good}
    cleaner = LogCleaner(lambda: {n: (log, log.log_end_offset) for n, log in logs.items()}, CleanerConfig(), clock)
    fill(good, clock, 200, 5)
    good.roll()
    clean(good, clock.time_ms(), manager=cleaner.manager)
    latest = fill(good, clock, 200, 5, start=200)  # dirty again, but less than the never cleaned bad log
    for log in (bad, good):
        log.roll()
    result = cleaner.clean_once()
    assert result is not None
    assert cleaner.manager.uncleanable() == ["bad-0"]
    assert latest_by_key(read_all(good)) == latest  # the good log was cleaned in the same call
    assert len(read_all(good)) == 5
    assert cleaner.clean_once() is None  # nothing due: the bad log is skipped, the good one is clean
    bad.close()
    logs["bad-0"] = Log.open(tmp_path / "bad-0", compact_config(), clock)
    assert cleaner.manager.uncleanable() == []  # a new Log of the partition is tried again
    assert cleaner.clean_once() is None
    assert cleaner.manager.uncleanable() == ["bad-0"]
    for log in logs.values():
        log.close()
