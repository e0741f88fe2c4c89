"""The example pipeline (spark/example.py) against a plain-Python computation over the same events."""

from __future__ import annotations

import json
import random
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from spark import example
from tests.broker.cluster import Cluster
from tests.spark.helpers import consume_all, finish, produce, topic_name

pytestmark = pytest.mark.spark

START = datetime(2026, 11, 26, 10, 0, tzinfo=UTC)
PAGES = ["/home", "/cart", "/search", "/item/7"]


def iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def test_page_views_per_minute_match_a_plain_python_count(spark: Any, cluster: Cluster, tmp_path: Path) -> None:
    source, sink = topic_name("clicks"), topic_name("page-views")
    cluster.create_topic(source, partitions=2)
    cluster.create_topic(sink, partitions=2)
    rng = random.Random(8)
    events = []
    for _ in range(400):  # six minutes of clicks, a little out of order
        moment = START + timedelta(milliseconds=rng.randrange(6 * 60_000))
        events.append({"user": f"user-{rng.randrange(20)}", "page": rng.choice(PAGES), "ts": iso(moment)})
    events.append({"user": "user-0", "page": "/home", "ts": iso(START + timedelta(minutes=10))})  # closes windows
    produce(cluster, source, [json.dumps(e).encode() for e in events] + [b"not json", b'{"page": "/x"}'])

    query = example.start(
        spark,
        bootstrap_servers=cluster.bootstrap_servers,
        checkpoint=str(tmp_path / "checkpoint"),
        source=source,
        sink=sink,
        available_now=True,
    )
    finish(query)

    # Plain Python: count per (minute, page), for the windows the watermark (1 minute behind the latest
    # event) has closed: those ending at or before 10:09.
    watermark = START + timedelta(minutes=9)
    expected: Counter[tuple[str, str]] = Counter()
    for e in events:
        moment = datetime.strptime(e["ts"], "%Y-%m-%dT%H:%M:%S.%f%z")
        window = moment.replace(second=0, microsecond=0)
        if window + timedelta(minutes=1) <= watermark:
            expected[(iso(window), e["page"])] += 1

    records = consume_all(cluster, sink, 2, expected=len(expected))
    got = {}
    for r in records:
        doc = json.loads(r.value)
        assert r.key == doc["page"].encode()
        assert doc["window_end"] == iso(
            datetime.strptime(doc["window_start"], "%Y-%m-%dT%H:%M:%S.%f%z") + timedelta(minutes=1)
        )
        got[(doc["window_start"], doc["page"])] = doc["views"]
    assert got == dict(expected)
    assert len(records) == len(expected)  # each window written once
