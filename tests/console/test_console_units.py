"""The console's pure pieces: value rendering, the SVG chart, the config and properties parsers, the lag
sampler (with fake Admin calls), the browse start from the form, and the formatting filters."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import pytest

from odradek.cli_support import format_size
from odradek.console.app import _start, format_number, format_timestamp
from odradek.console.charts import line_chart
from odradek.console.cli import read_properties
from odradek.console.lag import LagSampler
from odradek.console.messages import hex_dump, render
from odradek.console.model import PartitionView, TopicView, parse_configs
from odradek.errors import CliError, CoordinatorNotAvailableError
from odradek.types import GroupDescription, GroupListing, PartitionLag, TopicPartition


def test_values_render_as_json_text_or_hex() -> None:
    assert render(None).kind == "null"
    pretty = render(b'{"a": [1, 2], "b": "\xc3\xa9"}')
    assert pretty.kind == "json"
    assert json.loads(pretty.text) == {"a": [1, 2], "b": "é"}
    assert "\n" in pretty.text
    assert render(b"42").kind == "text"  # a bare number reads better as text
    assert render(b"hello\tworld\n").text == "hello\tworld\n"
    binary = render(b"\x00\x01\xff")
    assert binary.kind == "hex"
    assert binary.text.startswith("00000000  00 01 ff")
    assert render(b'{"a": 1}', "hex").kind == "hex"
    assert render(b'{"a": 1}', "text").text == '{"a": 1}'
    assert render(b"\xff\xfe", "text").kind == "text"  # asked for text: shown with replacement characters
    assert render(b"{not json", "json").kind == "text"


def test_hex_dump_lines_and_preview_limit() -> None:
    assert hex_dump(b"ABC") == "00000000  " + "41 42 43".ljust(48) + " ABC"
    long = hex_dump(bytes(5000))
    assert long.splitlines()[-1] == "... 904 more bytes"


def test_chart_draws_a_line_per_series_and_says_when_empty() -> None:
    svg = line_chart({"total": [(1000.0, 5), (1010.0, 0), (1020.0, 12)], "<clicks>": [(1000.0, 1), (1020.0, 2)]})
    assert svg.startswith("<svg")
    assert svg.count("<polyline") == 2
    assert "&lt;clicks&gt;" in svg  # names are escaped
    assert ">12<" in svg  # the top of the value axis
    assert "no samples yet" in line_chart({"total": []})
    assert "<circle" in line_chart({"total": [(1000.0, 3)]})


def test_config_lines_parse_and_bad_ones_are_named() -> None:
    assert parse_configs("retention.ms=1000\n\n# comment\n cleanup.policy = compact ") == {
        "retention.ms": "1000", "cleanup.policy": "compact"}  # fmt: skip
    with pytest.raises(ValueError, match="line 2"):
        parse_configs("a=1\nnope")


def test_properties_files(tmp_path: Path) -> None:
    path = tmp_path / "client.properties"
    path.write_text("# comment\n! another\nsecurity.protocol=SASL_SSL\nsasl.username = admin\n")
    assert read_properties(str(path)) == {"security.protocol": "SASL_SSL", "sasl.username": "admin"}
    path.write_text("broken\n")
    with pytest.raises(CliError, match="line 1"):
        read_properties(str(path))
    with pytest.raises(CliError, match="cannot read"):
        read_properties(str(tmp_path / "missing"))


def describe(group_id: str, lags: dict[int, int | None]) -> GroupDescription:
    offsets = [PartitionLag(TopicPartition("t", p), 0, lag, lag) for p, lag in lags.items()]
    return GroupDescription(group_id, "Stable", 1, 1, "uniform", 0, [], offsets)


def test_the_sampler_keeps_a_bounded_history_per_group() -> None:
    groups = [GroupListing("a", "Stable"), GroupListing("b", "Stable")]
    answers = {"a": describe("a", {0: 5, 1: None}), "b": describe("b", {0: 1})}
    failing = {"b"}

    def describe_group(group_id: str) -> GroupDescription:
        if group_id in failing:
            raise CoordinatorNotAvailableError("moving")
        return answers[group_id]

    sampler = LagSampler(lambda: groups, describe_group, interval_s=1, max_samples=3)
    assert sampler.sample_once() == 1  # b's coordinator is moving: no sample for it this round
    failing.clear()
    for _ in range(4):
        sampler.sample_once()
    history = sampler.history("a")
    assert len(history) == 3
    assert history[-1].lags == {TopicPartition("t", 0): 5}  # unknown lags are left out
    assert history[-1].total == 5
    assert [s.total for s in sampler.history("b")] == [1, 1, 1]
    groups.pop()  # b deleted
    sampler.sample_once()
    assert sampler.history("b") == []


def test_topic_views_add_up_their_partitions() -> None:
    partitions = [PartitionView(0, 1, [1, 2], [1, 2], [], 0, 10, 100), PartitionView(1, -1, [2, 3], [2], [3], 5, 7, 50)]
    topic = TopicView("t", False, partitions)
    assert (topic.under_replicated, topic.offline, topic.messages, topic.size_bytes) == (1, 1, 12, 150)
    assert partitions[1].out_of_sync == [3]
    unknown = TopicView("u", False, [PartitionView(0, 1, [1], [1], [])])
    assert (unknown.messages, unknown.size_bytes) == (None, None)


def test_the_browse_start_comes_from_the_form() -> None:
    form = {"mode": "offset", "offset": "42", "timestamp": ""}
    assert _start(form) == {"offset": 42}
    assert _start({**form, "mode": "latest"}) == {}
    moment = datetime.datetime(2026, 11, 26, 8, 0, tzinfo=datetime.UTC)
    assert _start({**form, "mode": "timestamp", "timestamp": "2026-11-26T08:00"}) == {
        "timestamp_ms": int(moment.timestamp() * 1000)}  # fmt: skip
    with pytest.raises(ValueError, match="date and time"):
        _start({**form, "mode": "timestamp"})


def test_formatting_filters() -> None:
    assert [format_size(v) for v in (None, 0, 1023, 2048, 5 << 20)] == ["?", "0 B", "1023 B", "2.0 KiB", "5.0 MiB"]
    assert format_size(3 << 40) == "3.0 TiB"
    assert format_timestamp(1_700_000_000_123) == "2023-11-14 22:13:20.123Z"
    assert format_timestamp(-1) == "-"
    assert format_number(1234567) == "1,234,567"
    assert format_number(None) == "?"
