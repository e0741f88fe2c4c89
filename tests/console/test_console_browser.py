"""The web console in a real headless browser (Debian's Chromium driven by selenium) against a real cluster:
every page loads without an error, the message browser shows the records this test produced (text, JSON,
binary, headers), a topic created through the form shows up in ``odradek topics list``, a config changed
through the form is what the cluster describes, a broker killed makes its partitions show as
under-replicated, and a lagging group gets its lag chart.

Each page is screenshotted into ``test-artifacts/console/``; the page load times (navigation start to the
load event, as the browser measured them) go to ``test-artifacts/console/timings.json``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from odradek import Admin, NewTopic, Producer, TopicPartition
from odradek.types import ConfigResource
from tests.broker.cluster import Cluster
from tests.console.conftest import ARTIFACTS, ConsoleProcess

pytestmark = [pytest.mark.browser, pytest.mark.slow]

WAIT_S = 60.0
TIMINGS: dict[str, list[float]] = {}
ORDER = {"id": 7, "items": [{"sku": "A-1", "qty": 2}], "paid": True}
BINARY = bytes(range(0, 256, 7))


def by() -> Any:
    from selenium.webdriver.common.by import By

    return By


@pytest.fixture(scope="module")
def data(cluster: Cluster) -> Iterator[Admin]:
    """Topics, records and a lagging group for the pages to show."""
    admin = Admin({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic("orders", 3, 3), NewTopic("clicks", 2, 1)])
    for name, count in (("orders", 3), ("clicks", 2)):

        def led(topic: str = name, partitions: int = count) -> bool:
            described = admin.describe_topics([topic])[topic].partitions
            return len(described) == partitions and all(p.leader >= 0 for p in described)

        cluster.wait_for(led, WAIT_S, f"{name} to have leaders")
    with Producer({"bootstrap.servers": cluster.bootstrap_servers}) as producer:
        sent = [
            producer.send("orders", key=b"user-1", value=json.dumps(ORDER).encode(), partition=0,
                          headers=[("source", b"web"), ("trace", b"abc-123")]),
            producer.send("orders", key=b"user-2", value=b"plain text value", partition=0),
            producer.send("orders", key=None, value=BINARY, partition=0),
            producer.send("orders", key=b"user-3", value=None, partition=0),
        ]
        sent += [producer.send("clicks", value=b"click %d" % i, partition=i % 2) for i in range(120)]
        producer.flush(30)
        for future in sent:
            future.result(timeout=30)
    admin.alter_group_offsets("billing", {TopicPartition("clicks", 0): 10, TopicPartition("clicks", 1): 50})
    try:
        yield admin
    finally:
        admin.close()


@pytest.fixture(scope="module", autouse=True)
def write_timings() -> Iterator[None]:
    yield
    if TIMINGS:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        summary = {
            page: {"runs_ms": [round(v, 1) for v in values], "median_ms": round(sorted(values)[len(values) // 2], 1)}
            for page, values in TIMINGS.items()
        }
        (ARTIFACTS / "timings.json").write_text(json.dumps(summary, indent=2) + "\n")


def load(browser: Any, console: ConsoleProcess, path: str, shot: str | None = None) -> float:
    """Open ``path``; checks it rendered without an error; returns the browser's load time in ms."""
    browser.get(console.url + path)
    load_ms = float(browser.execute_script(
        "const n = performance.getEntriesByType('navigation')[0]; return n.loadEventEnd - n.startTime;"))  # fmt: skip
    assert browser.find_elements(by().CSS_SELECTOR, "header.top"), browser.page_source[:2000]
    errors = browser.find_elements(by().ID, "error")
    assert not errors, errors[0].text
    if shot is not None:
        screenshot(browser, shot)
        TIMINGS.setdefault(shot, []).append(load_ms)
    return load_ms


def click(browser: Any, element_id: str) -> None:
    """Click a submit button and wait (bounded) until the page it leads to has loaded: a mark left on this
    page's window is gone with it (the driver may answer with errors while the pages change)."""
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.support.ui import WebDriverWait

    browser.execute_script("window.odradekOldPage = true;")
    browser.find_element(by().ID, element_id).click()
    WebDriverWait(browser, WAIT_S, ignored_exceptions=(WebDriverException,)).until(
        lambda b: b.execute_script("return !window.odradekOldPage && document.readyState === 'complete';")
    )


def screenshot(browser: Any, name: str) -> None:
    height = int(browser.execute_script("return document.documentElement.scrollHeight"))
    browser.set_window_size(1400, max(700, min(height + 140, 4000)))
    browser.save_screenshot(str(ARTIFACTS / f"{name}.png"))
    browser.set_window_size(1400, 1000)


def text(browser: Any, element_id: str) -> str:
    return str(browser.find_element(by().ID, element_id).text)


def test_every_page_loads(browser: Any, console: ConsoleProcess, data: Admin, cluster: Cluster) -> None:
    load(browser, console, "/", "overview")
    brokers = text(browser, "brokers")
    assert brokers.count("alive") == 3
    assert brokers.count("SERVING") == 3
    assert "active" in text(browser, "controllers")
    load(browser, console, "/topics", "topics")
    assert "orders" in text(browser, "topics")
    assert "clicks" in text(browser, "topics")
    load(browser, console, "/topics?internal=1", "topics-internal")
    assert "__consumer_offsets" in text(browser, "topics")
    load(browser, console, "/topics/orders", "topic")
    rows = browser.find_elements(by().CSS_SELECTOR, "#partitions tbody tr")
    assert len(rows) == 3
    assert "retention.ms" in text(browser, "config-table")
    load(browser, console, "/groups", "groups")
    assert "billing" in text(browser, "groups")
    load(browser, console, "/groups/billing", "group")
    assert text(browser, "total-lag") == f"{(60 - 10) + (60 - 50)}"
    load(browser, console, "/messages", "messages-form")
    load(browser, console, "/topics/new", "topic-new")
    for _ in range(4):  # a few more timed loads of each page, for the median
        for path, name in (("/", "overview"), ("/topics", "topics"), ("/topics/orders", "topic"),
                           ("/groups", "groups"), ("/groups/billing", "group"),
                           ("/messages?topic=orders&partition=0&mode=offset&offset=0", "messages")):  # fmt: skip
            TIMINGS.setdefault(name, []).append(load(browser, console, path))


def test_unknown_topic_and_group_say_so(browser: Any, console: ConsoleProcess, data: Admin) -> None:
    browser.get(console.url + "/topics/no-such-topic")
    assert "no-such-topic" in text(browser, "error")
    browser.get(console.url + "/groups/no-such-group")
    assert text(browser, "error")


def test_the_message_browser_shows_the_produced_records(browser: Any, console: ConsoleProcess, data: Admin) -> None:
    from selenium.webdriver.support.ui import Select

    load(browser, console, "/messages")
    Select(browser.find_element(by().ID, "topic")).select_by_visible_text("orders")
    partition = browser.find_element(by().ID, "partition")
    partition.clear()
    partition.send_keys("0")
    Select(browser.find_element(by().ID, "mode")).select_by_value("offset")
    offset = browser.find_element(by().ID, "offset")
    offset.clear()
    offset.send_keys("0")
    click(browser, "browse-submit")
    rows = browser.find_elements(by().CSS_SELECTOR, "#records tbody tr")
    screenshot(browser, "messages")
    assert [r.get_attribute("data-offset") for r in rows] == ["0", "1", "2", "3"]
    first, second, third, fourth = (r.text for r in rows)
    assert "user-1" in first
    assert '"sku": "A-1"' in first  # pretty-printed JSON
    assert "source" in first
    assert "web" in first
    assert "abc-123" in first
    assert "plain text value" in second
    assert "hex" in third
    assert BINARY[:8].hex(" ") in third
    assert "null" in fourth  # a tombstone
    # the same records by timestamp, and as hex
    browser.get(console.url + "/messages?topic=orders&partition=0&mode=timestamp&timestamp=2000-01-01T00:00:00"
                "&limit=2&format=hex")  # fmt: skip
    rows = browser.find_elements(by().CSS_SELECTOR, "#records tbody tr")
    assert [r.get_attribute("data-offset") for r in rows] == ["0", "1"]
    assert b"plain".hex(" ") in rows[1].text
    screenshot(browser, "messages-hex")


def test_a_topic_created_in_the_form_is_listed_by_the_cli(browser: Any, console: ConsoleProcess, data: Admin,
                                                          cluster: Cluster) -> None:  # fmt: skip
    load(browser, console, "/topics")
    click(browser, "create-topic")
    browser.find_element(by().ID, "name").send_keys("made-in-the-browser")
    for field, value in (("partitions", "4"), ("replication_factor", "2")):
        element = browser.find_element(by().ID, field)
        element.clear()
        element.send_keys(value)
    browser.find_element(by().ID, "configs").send_keys("retention.ms=3600000\ncleanup.policy=delete")
    click(browser, "submit")
    assert browser.current_url.endswith("/topics/made-in-the-browser")
    assert "Created topic made-in-the-browser" in browser.find_element(by().CSS_SELECTOR, ".flash").text
    screenshot(browser, "topic-created")
    command = [sys.executable, "-m", "odradek.cli", "topics", "list", "--bootstrap-servers", cluster.bootstrap_servers]
    listed = subprocess.run(command, capture_output=True, text=True, timeout=60, check=True)
    assert "made-in-the-browser" in listed.stdout.split()
    described = data.describe_topics(["made-in-the-browser"])["made-in-the-browser"]
    assert len(described.partitions) == 4
    assert all(len(p.replicas) == 2 for p in described.partitions)
    configs = data.describe_configs([ConfigResource("topic", "made-in-the-browser")])
    assert configs[ConfigResource("topic", "made-in-the-browser")]["retention.ms"].value == "3600000"
    # a bad form says why and creates nothing
    load(browser, console, "/topics/new")
    browser.find_element(by().ID, "name").send_keys("made-in-the-browser")
    click(browser, "submit")
    assert "already exists" in text(browser, "error")


def test_a_config_changed_in_the_form_is_the_clusters(browser: Any, console: ConsoleProcess, data: Admin) -> None:
    load(browser, console, "/topics/clicks")
    browser.find_element(by().ID, "config-key").send_keys("retention.bytes")
    browser.find_element(by().ID, "config-value").send_keys("1048576")
    click(browser, "config-set")
    assert "retention.bytes set to 1048576" in browser.find_element(by().CSS_SELECTOR, ".flash").text
    resource = ConfigResource("topic", "clicks")
    entry = data.describe_configs([resource])[resource]["retention.bytes"]
    assert (entry.value, entry.source) == ("1048576", "DYNAMIC_TOPIC_CONFIG")
    assert "1048576" in text(browser, "config-table")
    screenshot(browser, "topic-config")
    browser.find_element(by().ID, "config-key").send_keys("retention.bytes")
    click(browser, "config-delete")
    assert data.describe_configs([resource])[resource]["retention.bytes"].source == "DEFAULT_CONFIG"
    browser.find_element(by().ID, "config-key").send_keys("no.such.key")
    browser.find_element(by().ID, "config-value").send_keys("1")
    click(browser, "config-set")
    assert "no.such.key" in browser.find_element(by().CSS_SELECTOR, ".flash.error").text


def test_the_lag_chart_draws_the_sampled_lag(browser: Any, console: ConsoleProcess, data: Admin) -> None:
    def sampled() -> bool:
        load(browser, console, "/groups/billing")
        return len(browser.find_elements(by().CSS_SELECTOR, "#lag-chart svg polyline")) >= 1

    from tests.support.launcher import wait_until

    wait_until(sampled, WAIT_S, "two lag samples in the chart")
    data.alter_group_offsets("billing", {TopicPartition("clicks", 0): 60})  # lag of partition 0 goes to 0
    time.sleep(2.5)  # the sampler's interval is 1 s: a few samples at the new lag (a chart, not an assertion)
    load(browser, console, "/groups/billing", "group-lag")
    assert text(browser, "total-lag") == "10"
    assert "samples" in browser.find_element(by().CSS_SELECTOR, "#lag-chart figcaption").text


def test_under_replicated_partitions_are_highlighted(browser: Any, console: ConsoleProcess, data: Admin,
                                                     cluster: Cluster) -> None:  # fmt: skip
    victim = next(i for i, b in enumerate(cluster.brokers) if b.node_id != cluster.leader("orders", 0))
    cluster.kill_broker(victim)
    try:
        def highlighted() -> bool:
            load(browser, console, "/topics/orders")
            return len(browser.find_elements(by().CSS_SELECTOR, "#partitions tr.bad")) == 3

        from tests.support.launcher import wait_until

        wait_until(highlighted, WAIT_S, "every orders partition highlighted as under-replicated")
        assert "under-replicated" in text(browser, "partitions")
        screenshot(browser, "topic-under-replicated")
        load(browser, console, "/", "overview-broker-down")
        assert "fenced" in text(browser, "brokers")
        assert "UNREACHABLE" in text(browser, "brokers")
        assert int(browser.find_element(by().CSS_SELECTOR, "#card-urp b").text) >= 3
    finally:
        cluster.start_broker(victim)
