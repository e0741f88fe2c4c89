"""The ``odradek`` data source: Spark batch and Structured Streaming reads and writes of Odradek topics.

    df = (spark.readStream.format("odradek").option("bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "clicks").option("startingOffsets", "earliest").load())

Options and columns are those of Spark's Kafka source and sink (see ``spark/README.md``). Offsets live in
Spark's checkpoint, as ``{"topic": {"partition": offset}}`` (the next offset to read; keys are strings,
in sorted order, because Spark compares offsets as JSON text). Each Spark task reads one range of one
partition, or with ``maxPartitions`` the ranges of several together (:mod:`spark.reading`); the planning
rules are in :mod:`spark.planning`.

Thread-safety: Spark calls a reader's planning methods from one thread of the driver's Python runner,
and each task's ``read`` in its own worker process.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from common.clock import SYSTEM_CLOCK, Clock
from odradek.errors import ConfigError
from spark import clients
from spark.options import (
    OptionError,
    SourceOptions,
    offsets_from_json,
    offsets_to_json,
    parse_sink_options,
    parse_source_options,
)
from spark.planning import (
    DataLoss,
    OffsetRange,
    Offsets,
    TriggerPacer,
    count_offsets,
    pack_ranges,
    plan_ranges,
    rate_limit,
    task_count,
)
from spark.reading import OffsetReader, read_range, read_ranges, report_data_loss
from spark.schema import source_schema


class OffsetRangePartition(InputPartition):
    """One Spark task of a read: an :class:`OffsetRange` (``value``)."""

    def __init__(self, value: OffsetRange) -> None:
        super().__init__(value)
        self.value: OffsetRange = value

    def __repr__(self) -> str:
        r = self.value
        return f"OffsetRangePartition({r.topic}-{r.partition} [{r.start}, {r.end}))"


class OffsetRangesPartition(InputPartition):
    """One Spark task reading several ranges (``maxPartitions``; those of different partitions together): ``value``."""

    def __init__(self, value: tuple[OffsetRange, ...]) -> None:
        super().__init__(value)
        self.value: tuple[OffsetRange, ...] = value

    def __repr__(self) -> str:
        return (
            "OffsetRangesPartition("
            + ", ".join(f"{r.topic}-{r.partition} [{r.start}, {r.end})" for r in self.value)
            + ")"
        )


class OdradekDataSource(DataSource):
    """``format("odradek")``: see the module docstring."""

    @classmethod
    def name(cls) -> str:
        return "odradek"

    def schema(self) -> StructType:
        value = str(dict(self.options).get("includeheaders", "false")).strip().lower()
        return source_schema(value == "true")

    def reader(self, schema: StructType) -> DataSourceReader:
        return OdradekBatchReader(_source_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return OdradekStreamReader(_source_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from spark.sink import OdradekBatchWriter

        return OdradekBatchWriter(parse_sink_options(self.options), schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from spark.sink import OdradekStreamWriter

        return OdradekStreamWriter(parse_sink_options(self.options), schema, overwrite)


def _source_options(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    parsed = parse_source_options(options, streaming=streaming)
    try:
        clients.validate_consumer_config(parsed.client)
    except ConfigError as exc:
        raise OptionError(f"a kafka.* option of the odradek source is invalid: {exc}") from None
    return parsed


def _plan(
    options: SourceOptions, reader: OffsetReader, start: Offsets, end: Offsets, *, known_start: bool
) -> list[InputPartition]:
    """The tasks reading ``[start, end)``: lost offsets reported (``failOnDataLoss``) and skipped,
    partitions only in ``end`` (new ones) read from their earliest offset."""
    current = sorted(end)
    earliest = reader.earliest(current)
    losses = [DataLoss(tp, o, -1, "the partition no longer exists; was its topic deleted?")
              for tp, o in sorted(start.items()) if tp not in end]  # fmt: skip
    begin: Offsets = {}
    for tp in current:
        if tp not in start:
            begin[tp] = min(earliest[tp], end[tp])
            continue
        offset = start[tp]
        if offset < earliest[tp] and offset < end[tp]:
            what = "deleted by retention before they were read"
            losses.append(DataLoss(tp, offset, min(earliest[tp], end[tp]), what))
            offset = earliest[tp]
        elif known_start and offset > end[tp]:
            losses.append(DataLoss(tp, end[tp], offset, "the log now ends before offsets already read; "
                                   "was the topic re-created, or an unclean leader elected?"))  # fmt: skip
            offset = end[tp]
        begin[tp] = offset
    report_data_loss(losses, options.fail_on_data_loss)
    ranges = plan_ranges(
        begin, end, min_partitions=options.min_partitions, max_records_per_partition=options.max_records_per_partition
    )
    tasks = task_count(
        ranges,
        min_records_per_task=options.min_records_per_partition,
        min_partitions=options.min_partitions,
        max_partitions=options.max_partitions,
    )
    if tasks >= len(ranges):
        return [OffsetRangePartition(r) for r in ranges]
    groups = pack_ranges(ranges, tasks, options.max_records_per_partition)
    return [OffsetRangePartition(g[0]) if len(g) == 1 else OffsetRangesPartition(g) for g in groups]


def _read(options: SourceOptions, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    if isinstance(partition, OffsetRangesPartition):
        return read_ranges(options, partition.value)
    assert isinstance(partition, OffsetRangePartition)
    return read_range(options, partition.value)


class OdradekBatchReader(DataSourceReader):
    """``spark.read.format("odradek")``: the offsets between startingOffsets and endingOffsets, fixed
    when the query is planned."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        reader = OffsetReader(self.options)
        tps = reader.partitions()
        if not tps:
            return []
        start = reader.resolve(self.options.starting, tps, "starting")
        end = reader.resolve(self.options.ending, tps, "ending")
        backwards = sorted(tp for tp in tps if end[tp] < start[tp])
        if backwards:
            raise OptionError("the ending offset is before the starting offset for " + ", ".join(
                f"{tp} ({start[tp]} > {end[tp]})" for tp in backwards))  # fmt: skip
        return _plan(self.options, reader, start, end, known_start=False)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.options, partition)


class OdradekStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("odradek")``: micro-batches of the offsets that arrived since the last one.

    ``maxOffsetsPerTrigger`` is Spark's ReadMaxRows limit; ``minOffsetsPerTrigger`` and
    ``maxTriggerDelay`` are applied here (a skipped trigger returns its start offsets unchanged), and
    ignored under ``Trigger.AvailableNow``, which reads up to the latest offsets of the moment it starts
    and then stops. New partitions, and new topics matching ``subscribePattern``, are read from their
    earliest offset. Nothing past the high watermark is read.
    """

    def __init__(
        self, options: SourceOptions, clock: Clock = SYSTEM_CLOCK, offsets: OffsetReader | None = None
    ) -> None:
        self.options = options
        self._offsets = offsets or OffsetReader(options)
        self._pacer = None
        if options.min_offsets_per_trigger is not None:
            self._pacer = TriggerPacer(options.min_offsets_per_trigger, options.max_trigger_delay_ms, clock)
        self._target: Offsets | None = None  # Trigger.AvailableNow: the latest offsets when it started
        self._latest: Offsets = {}
        self._initial: dict[str, Any] | None = None

    def initialOffset(self) -> dict[str, Any]:
        """Resolved once per run and kept: Spark asks again (to plan the first batch, and at every trigger
        until one has data), and ``latest`` must not move between those calls, or the first batch would
        start after its own end."""
        if self._initial is None:
            reader = self._offsets
            self._initial = offsets_to_json(reader.resolve(self.options.starting, reader.partitions(), "starting"))
        return self._initial

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        if self.options.min_offsets_per_trigger is not None:
            return ReadMinRows(self.options.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        reader = self._offsets
        self._target = reader.latest(reader.partitions())

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        reader = self._offsets
        begin = offsets_from_json(start)
        latest = dict(self._target) if self._target is not None else reader.latest(reader.partitions())
        self._latest = latest
        new = [tp for tp in latest if tp not in begin]
        full_start = {**reader.earliest(new), **{tp: o for tp, o in begin.items() if tp in latest}}
        # A partition whose log now ends before its start (re-created topic, unclean election) ends at
        # that smaller offset, as in Spark's Kafka source: the planning of the batch reports the loss.
        paced = self._pacer is not None and self._target is None and not isinstance(limit, ReadAllAvailable)
        if paced and self._pacer is not None and not self._pacer.should_run(count_offsets(full_start, latest)):
            return start  # minOffsetsPerTrigger not reached and maxTriggerDelay not passed: skip this trigger
        end = rate_limit(full_start, latest, limit.max_rows) if isinstance(limit, ReadMaxRows) else latest
        return offsets_to_json(end)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return offsets_to_json(self._latest) if self._latest else None

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin, finish = offsets_from_json(start), offsets_from_json(end)
        if begin == finish:
            return []
        return _plan(self.options, self._offsets, begin, finish, known_start=True)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.options, partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: the offsets are in Spark's checkpoint, not in a consumer group."""

    def stop(self) -> None:
        """The clients of this process are closed when it exits (:mod:`spark.clients`)."""
