"""The source and sink options: Spark's Kafka names, checked on the driver, errors that name the option."""

from __future__ import annotations

import pytest

from odradek.types import TopicPartition
from spark.options import (
    EARLIEST_SPEC,
    LATEST_SPEC,
    OptionError,
    offsets_from_json,
    offsets_to_json,
    parse_duration_ms,
    parse_sink_options,
    parse_source_options,
)

BASE = {"bootstrap.servers": "127.0.0.1:9092", "subscribe": "clicks"}


def lower(options: dict[str, str]) -> dict[str, str]:
    """Spark hands the options over with lowercased keys."""
    return {k.lower(): v for k, v in options.items()}


def test_defaults_follow_spark_kafka_source() -> None:
    streaming = parse_source_options(lower(BASE), streaming=True)
    batch = parse_source_options(lower(BASE), streaming=False)
    assert streaming.starting == LATEST_SPEC
    assert batch.starting == EARLIEST_SPEC
    assert batch.ending == LATEST_SPEC
    assert streaming.fail_on_data_loss is True
    assert streaming.include_headers is False
    assert streaming.max_trigger_delay_ms == 15 * 60 * 1000
    assert streaming.client == {"bootstrap.servers": "127.0.0.1:9092"}
    assert streaming.subscription.topics == ("clicks",)


def test_kafka_prefixed_keys_go_to_the_client() -> None:
    options = {"kafka.bootstrap.servers": "h:1", "subscribe": "a,b", "kafka.fetch.max.wait.ms": "100"}
    parsed = parse_source_options(lower(options), streaming=True)
    assert parsed.client == {"bootstrap.servers": "h:1", "fetch.max.wait.ms": "100"}
    assert parsed.subscription.topics == ("a", "b")


def test_a_misspelled_option_is_named_with_a_suggestion() -> None:
    with pytest.raises(OptionError, match=r"unknown option 'startingoffset'.*did you mean startingOffsets\?"):
        parse_source_options(lower({**BASE, "startingOffset": "earliest"}), streaming=True)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"subscribe": "a"}, "bootstrap.servers"),
        ({"bootstrap.servers": "h:1"}, "exactly one of the options subscribe, subscribePattern, assign"),
        ({**BASE, "assign": '{"a":[0]}'}, "subscribe and assign were"),
        ({**BASE, "startingOffsets": '{"clicks":{"0":1}'}, r"startingOffsets: malformed JSON"),
        ({**BASE, "startingOffsets": '{"clicks":{"zero":1}}'}, r"'zero' of topic 'clicks' is not a partition"),
        ({**BASE, "startingOffsets": '{"clicks":{"0":-3}}'}, r"offset -3 of clicks-0 is not valid"),
        ({**BASE, "endingOffsets": "latest"}, "endingOffsets is only valid in batch queries"),
        ({**BASE, "maxOffsetsPerTrigger": "0"}, "maxOffsetsPerTrigger must be a positive integer"),
        ({**BASE, "minOffsetsPerTrigger": "10", "maxOffsetsPerTrigger": "5"}, "must not exceed"),
        ({**BASE, "maxTriggerDelay": "soon"}, "maxTriggerDelay must be a duration"),
        ({**BASE, "failOnDataLoss": "maybe"}, "failOnDataLoss must be true or false"),
        ({**BASE, "kafka.auto.offset.reset": "earliest"}, "use startingOffsets"),
        ({"bootstrap.servers": "h:1", "assign": "[0, 1]"}, "assign: expected a JSON object"),
        ({"bootstrap.servers": "h:1", "subscribePattern": "(("}, "not a valid regular expression"),
        ({**BASE, "startingTimestamp": "yesterday"}, "startingTimestamp must be a timestamp in milliseconds"),
        ({**BASE, "maxPartitions": "0"}, "maxPartitions must be a positive integer"),
        ({**BASE, "minPartitions": "4", "maxPartitions": "2"}, r"minPartitions \(4\) must not exceed maxPartitions"),
        ({**BASE, "minRecordsPerPartition": "-1"}, "minRecordsPerPartition must be an integer of at least 0, got '-1'"),
        ({**BASE, "minRecordsPerPartition": "many"}, "minRecordsPerPartition must be an integer of at least 0"),
    ],
)
def test_bad_streaming_options_are_errors_that_name_them(options: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError, match=message):
        parse_source_options(lower(options), streaming=True)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({**BASE, "startingOffsets": "latest"}, "latest is not allowed in batch"),
        ({**BASE, "startingOffsets": '{"clicks":{"0":-1}}'}, "offset -1 of clicks-0 is not valid"),
        ({**BASE, "endingOffsets": "earliest"}, "endingOffsets: earliest is not allowed"),
        ({**BASE, "maxOffsetsPerTrigger": "10"}, "only valid in streaming queries"),
    ],
)
def test_bad_batch_options_are_errors_that_name_them(options: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError, match=message):
        parse_source_options(lower(options), streaming=False)


def test_offsets_json_and_timestamps_parse() -> None:
    options = {
        **BASE,
        "startingOffsets": '{"clicks":{"0":23,"1":-2}}',
        "endingOffsets": '{"clicks":{"0":50,"1":-1}}',
    }
    parsed = parse_source_options(lower(options), streaming=False)
    assert parsed.starting.offsets == {TopicPartition("clicks", 0): 23, TopicPartition("clicks", 1): -2}
    assert parsed.ending.offsets == {TopicPartition("clicks", 0): 50, TopicPartition("clicks", 1): -1}
    by_ts = parse_source_options(lower({**BASE, "startingTimestamp": "1700000000000"}), streaming=True)
    assert (by_ts.starting.kind, by_ts.starting.timestamp_ms) == ("timestamp", 1_700_000_000_000)


def test_assign_and_pattern_subscriptions() -> None:
    assigned = parse_source_options(
        lower({"bootstrap.servers": "h:1", "assign": '{"b":[1,0],"a":[2]}'}), streaming=True
    )
    assert assigned.subscription.assigned == (TopicPartition("a", 2), TopicPartition("b", 0), TopicPartition("b", 1))
    pattern = parse_source_options(lower({"bootstrap.servers": "h:1", "subscribePattern": "clicks-.*"}), streaming=True)
    assert pattern.subscription.matches("clicks-eu")
    assert not pattern.subscription.matches("views")


def test_offsets_serialize_with_string_keys_in_sorted_order() -> None:
    offsets = {TopicPartition("b", 10): 5, TopicPartition("b", 2): 7, TopicPartition("a", 0): 1}
    as_json = offsets_to_json(offsets)
    assert list(as_json) == ["a", "b"]
    assert list(as_json["b"]) == ["10", "2"]
    assert offsets_from_json(as_json) == offsets


@pytest.mark.parametrize(
    ("text", "ms"), [("500ms", 500), ("30s", 30_000), ("15m", 900_000), ("2 minutes", 120_000), ("1h", 3_600_000)]
)
def test_durations(text: str, ms: int) -> None:
    assert parse_duration_ms(text) == ms


def test_sink_options() -> None:
    sink = parse_sink_options(lower({"kafka.bootstrap.servers": "h:1", "topic": "out", "kafka.linger.ms": "20"}))
    assert sink.topic == "out"
    assert sink.client == {"bootstrap.servers": "h:1", "linger.ms": "20"}
    with pytest.raises(OptionError, match="unknown option 'topics'"):
        parse_sink_options(lower({"bootstrap.servers": "h:1", "topics": "out"}))
    with pytest.raises(OptionError, match="'kafka.value.serializer' is not supported"):
        parse_sink_options(lower({"bootstrap.servers": "h:1", "kafka.value.serializer": "x"}))
