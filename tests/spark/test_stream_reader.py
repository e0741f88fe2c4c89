"""The stream reader's trigger logic on the driver, with a fake cluster (no Spark session, no network):
rate limits, minOffsetsPerTrigger pacing, Trigger.AvailableNow, new partitions, data loss at planning."""

from __future__ import annotations

import json

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows

from common.clock import ManualClock
from odradek.types import TopicPartition
from spark.options import parse_source_options
from spark.planning import OffsetRange
from spark.reading import DataLossError, OffsetReader
from spark.source import OdradekStreamReader, OffsetRangePartition, OffsetRangesPartition

A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


class FakeOffsets(OffsetReader):
    """The cluster as two dicts the test changes: earliest and latest offset per partition."""

    def __init__(self, options: object, earliest: dict[TopicPartition, int], latest: dict[TopicPartition, int]):
        super().__init__(options)  # type: ignore[arg-type]
        self.earliest_offsets = earliest
        self.latest_offsets = latest

    def partitions(self) -> list[TopicPartition]:
        return sorted(tp for tp in self.latest_offsets if self.options.subscription.matches(tp.topic))

    def _list(self, specs):  # type: ignore[no-untyped-def]
        out = {}
        for tp, spec in specs.items():
            out[tp] = self.earliest_offsets[tp] if spec == "earliest" else self.latest_offsets[tp]
        return out


def make(
    extra: dict[str, str], earliest: dict, latest: dict, *, one_task_per_range: bool = True
) -> tuple[OdradekStreamReader, FakeOffsets, ManualClock]:
    """A reader over the fake cluster. With ``one_task_per_range`` small batches are not packed into fewer tasks
    unless ``extra`` asks (``minRecordsPerPartition`` 0, as in Spark's Kafka source), so each test's tasks are
    its ranges; the packing has tests of its own below."""
    packing = {"minrecordsperpartition": "0"} if one_task_per_range else {}
    given = {"bootstrap.servers": "h:1", "subscribepattern": "a|b", **packing, **extra}
    options = parse_source_options(given, streaming=True)
    fake = FakeOffsets(options, earliest, latest)
    clock = ManualClock()
    return OdradekStreamReader(options, clock=clock, offsets=fake), fake, clock


def roundtrip(offsets: dict) -> dict:
    """What Spark does with an offset: JSON text, and back."""
    return json.loads(json.dumps(offsets))


def test_offsets_are_json_with_string_keys_and_respect_max_rows() -> None:
    reader, fake, _ = make(
        {"startingoffsets": "earliest", "maxoffsetspertrigger": "10"}, {A0: 0, A1: 0}, {A0: 30, A1: 10}
    )
    start = roundtrip(reader.initialOffset())
    assert json.dumps(start) == '{"a": {"0": 0, "1": 0}}'
    assert reader.getDefaultReadLimit() == ReadMaxRows(10)
    end = reader.latestOffset(start, ReadMaxRows(10))
    assert end == {"a": {"0": 8, "1": 2}}  # 10 shared 3:1 by backlog, largest remainder
    assert reader.latestOffset(start, ReadAllAvailable()) == {"a": {"0": 30, "1": 10}}
    ranges = [p.value for p in reader.partitions(start, end)]
    assert ranges == [OffsetRange("a", 0, 0, 8), OffsetRange("a", 1, 0, 2)]


def test_min_offsets_per_trigger_skips_triggers_until_enough_or_the_delay() -> None:
    extra = {"startingoffsets": "earliest", "minoffsetspertrigger": "100", "maxtriggerdelay": "1m"}
    reader, fake, clock = make(extra, {A0: 0}, {A0: 10})
    assert reader.getDefaultReadLimit() == ReadMinRows(100)
    start = roundtrip(reader.initialOffset())
    first = reader.latestOffset(start, ReadMinRows(100))
    assert first == {"a": {"0": 10}}  # the first trigger runs
    fake.latest_offsets[A0] = 50
    clock.advance(1_000)
    assert reader.latestOffset(first, ReadMinRows(100)) is first  # skipped: 40 < 100, 1 s < 1 m
    clock.advance(59_000)
    assert reader.latestOffset(first, ReadMinRows(100)) == {"a": {"0": 50}}  # maxTriggerDelay passed


def test_available_now_stops_at_the_offsets_of_its_start_and_ignores_the_minimum() -> None:
    extra = {"startingoffsets": "earliest", "minoffsetspertrigger": "1000"}
    reader, fake, _ = make(extra, {A0: 0}, {A0: 10})
    start = roundtrip(reader.initialOffset())
    reader.prepareForTriggerAvailableNow()
    fake.latest_offsets[A0] = 99  # arrives after the query started: not read
    end = reader.latestOffset(start, ReadMinRows(1000))
    assert end == {"a": {"0": 10}}
    assert reader.latestOffset(roundtrip(end), ReadMinRows(1000)) == end  # then nothing more: the query ends


def test_new_partitions_and_topics_are_read_from_their_earliest_offset() -> None:
    reader, fake, _ = make({"startingoffsets": "latest"}, {A0: 0}, {A0: 5})
    start = roundtrip(reader.initialOffset())
    assert start == {"a": {"0": 5}}
    fake.earliest_offsets.update({A1: 3, B0: 0})
    fake.latest_offsets.update({A0: 7, A1: 4, B0: 2})
    end = reader.latestOffset(start, ReadAllAvailable())
    assert end == {"a": {"0": 7, "1": 4}, "b": {"0": 2}}
    ranges = [p.value for p in reader.partitions(start, end)]
    assert ranges == [OffsetRange("a", 0, 5, 7), OffsetRange("a", 1, 3, 4), OffsetRange("b", 0, 0, 2)]


def test_offsets_deleted_before_a_batch_is_planned_follow_fail_on_data_loss() -> None:
    reader, fake, _ = make({"startingoffsets": "earliest"}, {A0: 0}, {A0: 10})
    start = roundtrip(reader.initialOffset())
    end = reader.latestOffset(start, ReadAllAvailable())
    fake.earliest_offsets[A0] = 4  # retention deleted 0..3 meanwhile
    with pytest.raises(DataLossError, match=r"a-0: offsets 0 to 3 were lost \(deleted by retention"):
        reader.partitions(start, end)

    lenient, fake, _ = make({"startingoffsets": "earliest", "failondataloss": "false"}, {A0: 4}, {A0: 10})
    ranges = [p.value for p in lenient.partitions({"a": {"0": 0}}, {"a": {"0": 10}})]
    assert ranges == [OffsetRange("a", 0, 4, 10)]


def test_a_log_that_now_ends_before_the_start_is_data_loss_then_reading_goes_on_from_its_end() -> None:
    reader, fake, _ = make({"startingoffsets": "earliest"}, {A0: 0}, {A0: 10})
    start = roundtrip(reader.latestOffset(roundtrip(reader.initialOffset()), ReadAllAvailable()))
    fake.latest_offsets[A0] = 3  # the topic was re-created and holds 3 records
    end = reader.latestOffset(start, ReadMaxRows(100))
    assert end == {"a": {"0": 3}}
    with pytest.raises(DataLossError, match=r"a-0: offsets 3 to 9 were lost \(the log now ends before"):
        reader.partitions(start, end)
    lenient, _, _ = make({"failondataloss": "false"}, {A0: 0}, {A0: 3})
    assert list(lenient.partitions(start, end)) == []


def test_the_initial_offsets_do_not_move_once_resolved() -> None:
    reader, fake, _ = make({"startingoffsets": "latest"}, {A0: 0}, {A0: 5})
    first = reader.initialOffset()
    fake.latest_offsets[A0] = 9  # Spark asks again when it plans the first batch: the same answer
    assert reader.initialOffset() == first == {"a": {"0": 5}}
    end = reader.latestOffset(roundtrip(first), ReadAllAvailable())
    assert [p.value for p in reader.partitions(roundtrip(reader.initialOffset()), end)] == [OffsetRange("a", 0, 5, 9)]


def test_max_partitions_packs_the_ranges_of_a_micro_batch_into_fewer_tasks() -> None:
    latest = {A0: 30, A1: 10, B0: 25}
    reader, _, _ = make({"startingoffsets": "earliest", "maxpartitions": "2"}, dict.fromkeys(latest, 0), latest)
    start = roundtrip(reader.initialOffset())
    parts = list(reader.partitions(start, reader.latestOffset(start, ReadAllAvailable())))
    assert [type(p) for p in parts] == [OffsetRangePartition, OffsetRangesPartition]
    assert parts[0].value == OffsetRange("a", 0, 0, 30)
    assert parts[1].value == (OffsetRange("a", 1, 0, 10), OffsetRange("b", 0, 0, 25))


def plan(extra: dict[str, str], latest: dict[TopicPartition, int]) -> list[object]:
    """The tasks of a first micro-batch reading every partition from 0 to ``latest``, with the source's
    defaults but for ``extra`` (no ``minRecordsPerPartition`` unless given)."""
    given = {"startingoffsets": "earliest", **extra}
    reader, _, _ = make(given, dict.fromkeys(latest, 0), latest, one_task_per_range=False)
    start = roundtrip(reader.initialOffset())
    return list(reader.partitions(start, reader.latestOffset(start, ReadAllAvailable())))


def test_a_small_micro_batch_is_read_by_one_task_by_default() -> None:
    parts = plan({}, {A0: 300, A1: 100, B0: 250})
    assert len(parts) == 1
    assert isinstance(parts[0], OffsetRangesPartition)
    assert parts[0].value == (OffsetRange("a", 0, 0, 300), OffsetRange("a", 1, 0, 100), OffsetRange("b", 0, 0, 250))


def test_a_batch_is_packed_into_one_task_per_min_records_per_partition_records() -> None:
    parts = plan({}, {A0: 12_000, A1: 5_000, B0: 4_000})  # 21,000 records: at most 2 tasks of 10,000
    assert [type(p) for p in parts] == [OffsetRangePartition, OffsetRangesPartition]
    assert parts[0].value == OffsetRange("a", 0, 0, 12_000)
    assert parts[1].value == (OffsetRange("a", 1, 0, 5_000), OffsetRange("b", 0, 0, 4_000))
    large = plan({}, {A0: 30_000, A1: 10_000, B0: 25_000})  # every range large enough: one task each
    assert [p.value for p in large] == [OffsetRange("a", 0, 0, 30_000), OffsetRange("a", 1, 0, 10_000),
                                        OffsetRange("b", 0, 0, 25_000)]  # fmt: skip
    assert len(plan({"minrecordsperpartition": "100"}, {A0: 300, A1: 100, B0: 250})) == 3
    assert len(plan({"minrecordsperpartition": "0"}, {A0: 3, A1: 1, B0: 2})) == 3  # 0: one task per range


def test_min_partitions_and_max_partitions_bound_the_packing() -> None:
    parts = plan({"minpartitions": "2"}, {A0: 300, A1: 100, B0: 250})
    assert sorted(len(p.value) if isinstance(p, OffsetRangesPartition) else 1 for p in parts) == [1, 2]
    split = plan({"minpartitions": "4"}, {A0: 300})  # one partition split into four ranges, kept as four tasks
    assert [p.value for p in split] == [OffsetRange("a", 0, 75 * i, 75 * (i + 1)) for i in range(4)]
    assert len(plan({"maxpartitions": "2"}, {A0: 30_000, A1: 10_000, B0: 25_000})) == 2
