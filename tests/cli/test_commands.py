"""The client commands without a cluster: argument parsing, line splitting and output formats (Kafka's
console tools), configs handed to the clients, and errors as one sentence with a non-zero status."""

from __future__ import annotations

import argparse
from concurrent.futures import Future
from pathlib import Path

import pytest

from odradek.cli import build_parser, main
from odradek.cli_cluster import format_cluster
from odradek.cli_consume import consumer_config, format_record
from odradek.cli_produce import producer_config as produce_config
from odradek.cli_produce import split_lines
from odradek.cli_support import error_sentence, parse_key_values
from odradek.cli_topics import format_topic
from odradek.errors import CliError, TopicAlreadyExistsError, UnknownTopicOrPartitionError
from odradek.perf.consume import E2E_HEADER, e2e_payload
from odradek.perf.produce import Completions, make_payload
from odradek.perf.produce import producer_config as perf_producer_config
from odradek.perf.stats import Recorder
from odradek.types import (
    BrokerDescription,
    ClusterDescription,
    ConsumerRecord,
    NodeDescription,
    PartitionDescription,
    RecordMetadata,
    TopicDescription,
)


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


# ----------------------------------------------------------------------------------------- parsing


def test_every_interface_command_parses() -> None:
    assert parse("up").controllers is None
    up = parse("up", "--controllers", "1", "--brokers", "2", "--data-dir", "d", "--base-port", "9000")
    assert (up.controllers, up.brokers, up.data_dir, up.base_port) == (1, 2, "d", 9000)
    assert parse("cluster", "--bootstrap-servers", "h:1").bootstrap_servers == "h:1"
    create = parse("topics", "create", "t", "--partitions", "3", "--replication-factor", "2", "--config", "a=b",
                   "--config", "c=d")  # fmt: skip
    assert (create.name, create.partitions, create.replication_factor, create.config) == (
        "t", 3, 2, ["a=b", "c=d"])  # fmt: skip
    assert parse("topics", "list").action == "list"
    assert parse("topics", "describe").name is None
    assert parse("topics", "describe", "t").name == "t"
    assert parse("topics", "delete", "t").name == "t"
    produce = parse("produce", "t", "--key-separator", ":", "--acks", "1", "--compression", "zstd")
    assert (produce.key_separator, produce.acks, produce.compression) == (":", "1", "zstd")
    consume = parse("consume", "t", "--group", "g", "--from-beginning", "--max-messages", "5", "--timeout-ms", "100",
                    "--print-key", "--print-offset")  # fmt: skip
    assert vars(consume) | {"handler": None} == vars(consume) | {
        "topic": "t", "group": "g", "from_beginning": True, "max_messages": 5, "timeout_ms": 100, "print_key": True,
        "print_offset": True, "handler": None,
    }  # fmt: skip
    perf = parse("perf", "produce", "--topic", "t", "--num-records", "10", "--record-size", "100", "--throughput",
                 "-1", "--acks", "all", "--batch-size", "1000", "--linger-ms", "2", "--compression", "lz4",
                 "--producer-config", "a=b", "--json")  # fmt: skip
    assert (perf.num_records, perf.record_size, perf.throughput, perf.batch_size, perf.json) == (
        10, 100, -1, 1000, True)  # fmt: skip
    assert parse("perf", "consume", "--topic", "t", "--num-records", "3", "--consumer-config", "a=b").json is False
    assert parse("perf", "e2e", "--topic", "t", "--num-records", "3", "--rate", "50", "--acks", "1").rate == 50


@pytest.mark.parametrize(
    "argv",
    [["produce", "t", "--acks", "2"], ["produce", "t", "--compression", "brotli"], ["topics"], ["perf", "produce"],
     ["perf", "e2e", "--topic", "t"], ["topics", "create"]],
)  # fmt: skip
def test_bad_arguments_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(argv)
    assert caught.value.code == 2
    assert "Traceback" not in capsys.readouterr().err


# ------------------------------------------------------------------------------------------- errors


def test_no_bootstrap_servers_is_one_sentence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    monkeypatch.delenv("ODRADEK_BOOTSTRAP_SERVERS", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    for argv in (["cluster"], ["topics", "list"], ["consume", "t"], ["perf", "consume", "--topic", "t",
                                                                       "--num-records", "1"]):  # fmt: skip
        assert main(argv) == 1
        err = capsys.readouterr().err
        assert err.startswith("odradek: no bootstrap servers: give --bootstrap-servers")
        assert err.count("\n") == 1


def test_kafka_errors_end_with_their_code() -> None:
    assert error_sentence(TopicAlreadyExistsError("topic 'x' already exists")) == (
        "topic 'x' already exists (TOPIC_ALREADY_EXISTS)")  # fmt: skip
    assert error_sentence(UnknownTopicOrPartitionError("UNKNOWN_TOPIC_OR_PARTITION: t.")) == (
        "UNKNOWN_TOPIC_OR_PARTITION: t")  # fmt: skip


def test_main_maps_client_errors(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import odradek.cli_topics as topics

    def fail(args: object) -> int:
        raise TopicAlreadyExistsError("topic 'x' already exists")

    monkeypatch.setattr(topics, "run_list", fail)
    assert main(["topics", "list", "--bootstrap-servers", "127.0.0.1:1"]) == 1
    assert capsys.readouterr().err == "odradek: topic 'x' already exists (TOPIC_ALREADY_EXISTS)\n"


def test_key_values() -> None:
    assert parse_key_values(["a=1", "b = x=y", "a=2"], "--config") == {"a": "2", "b": "x=y"}
    with pytest.raises(CliError, match="--config expects KEY=VALUE, got 'oops'"):
        parse_key_values(["oops"], "--config")


# ------------------------------------------------------------------------------------------ produce


def test_lines_become_values() -> None:
    assert list(split_lines([b"a\n", b"b\r\n", b"\n", b"last"], None)) == [(None, b"a"), (None, b"b"), (None, b""),
                                                                         (None, b"last")]  # fmt: skip


def test_lines_split_at_the_first_separator() -> None:
    assert list(split_lines([b"k:v\n", b"k2:v:w\n", b":v\n"], b":")) == [(b"k", b"v"), (b"k2", b"v:w"), (b"", b"v")]


def test_a_line_without_the_separator_names_its_number() -> None:
    records = split_lines([b"k:v\n", b"k\tv\n"], b":")
    assert next(records) == (b"k", b"v")
    with pytest.raises(CliError, match=r"line 2 has no key separator ':': 'k\\tv'"):
        next(records)


def test_produce_config() -> None:
    args = parse("produce", "t", "--acks", "1", "--compression", "gzip", "--producer-config", "linger.ms=50")
    assert produce_config(args, "h:1") == {"bootstrap.servers": "h:1", "acks": "1", "compression.type": "gzip",
                                           "enable.idempotence": False, "linger.ms": "50"}  # fmt: skip


# ------------------------------------------------------------------------------------------ consume


def record(key: bytes | None, value: bytes | None, offset: int = 7, partition: int = 2) -> ConsumerRecord:
    return ConsumerRecord("t", partition, offset, 0, key, value, ())


def test_console_consumer_format() -> None:
    assert format_record(record(b"k", b"v"), False, False, False) == b"v\n"
    assert format_record(record(b"k", b"v"), True, False, False) == b"k\tv\n"
    assert format_record(record(None, b"v"), True, True, False) == b"Offset:7\tnull\tv\n"
    assert format_record(record(b"k", None), True, True, True) == b"Partition:2\tOffset:7\tk\tnull\n"


def test_consume_config() -> None:
    assert consumer_config(parse("consume", "t"), "h:1") == {
        "bootstrap.servers": "h:1", "auto.offset.reset": "latest", "enable.auto.commit": False}  # fmt: skip
    grouped = consumer_config(parse("consume", "t", "--group", "g", "--from-beginning"), "h:1")
    assert grouped["group.id"] == "g"
    assert grouped["auto.offset.reset"] == "earliest"


# ---------------------------------------------------------------------------------- topics, cluster


def test_describe_is_kafkas_layout() -> None:
    topic = TopicDescription("orders", [PartitionDescription(1, -1, [2, 0], [2], 3),
                                        PartitionDescription(0, 1, [1, 2], [1, 2], 0)], "id-1")  # fmt: skip
    assert format_topic(topic, {"retention.ms": "10", "cleanup.policy": "compact"}) == [
        "Topic: orders\tTopicId: id-1\tPartitionCount: 2\tReplicationFactor: 2\t"
        "Configs: cleanup.policy=compact,retention.ms=10",
        "\tTopic: orders\tPartition: 0\tLeader: 1\tReplicas: 1,2\tIsr: 1,2",
        "\tTopic: orders\tPartition: 1\tLeader: none\tReplicas: 2,0\tIsr: 2",
    ]


def test_cluster_shows_the_active_controller_and_fenced_brokers() -> None:
    cluster = ClusterDescription("cid", 1, [NodeDescription(1, "h:2"), NodeDescription(0, "h:1")],
                                 [BrokerDescription(0, "h:9", False), BrokerDescription(1, "h:10", True)])  # fmt: skip
    assert format_cluster(cluster) == [
        "Cluster id: cid   Active controller: 1", "Controllers:", "  0   h:1   standby", "  1   h:2   active",
        "Brokers:", "  0   h:9   alive", "  1   h:10  fenced",
    ]  # fmt: skip
    assert "Active controller: none" in format_cluster(ClusterDescription("c", -1, [], []))[0]
    health = {"h:1": "SERVING", "h:2": "SERVING", "h:9": "SERVING", "h:10": "UNREACHABLE"}
    assert format_cluster(cluster, health)[2:] == [
        "  0   h:1   standby  SERVING", "  1   h:2   active   SERVING",
        "Brokers:", "  0   h:9   alive    SERVING", "  1   h:10  fenced   UNREACHABLE",
    ]  # fmt: skip


# --------------------------------------------------------------------------------------------- perf


def test_perf_producer_config_precedence() -> None:
    config = perf_producer_config("h:1", {"acks": "1", "linger.ms": 5, "batch.size": None}, {"linger.ms": "9"})
    assert config == {"bootstrap.servers": "h:1", "acks": "1", "linger.ms": "9", "enable.idempotence": False}
    assert perf_producer_config("h:1", {"acks": None}, {}) == {"bootstrap.servers": "h:1"}


def test_perf_payload_is_reproducible_letters() -> None:
    payload = make_payload(1000)
    assert payload == make_payload(1000)
    assert len(payload) == 1000
    assert set(payload) <= set(range(65, 91))


def test_completions_time_each_sampled_run() -> None:
    now = [10.0]
    recorder = Recorder("sent", clock=lambda: now[0])
    completions = Completions(recorder, 100, expected=12, run_records=10)
    ok: Future[RecordMetadata] = Future()
    bad: Future[RecordMetadata] = Future()
    completions.timed(ok, 9.99, 10)  # the first record of a run of 10
    completions.timed(bad, 9.0, 2)  # the first of the last run, of 2
    ok.set_result(RecordMetadata("t", 0, 0, 0))
    assert list(recorder.latencies_ms) == [pytest.approx(10.0)]
    assert (recorder.records, recorder.bytes) == (10, 1000)
    assert not completions.all_done.is_set()
    error = RuntimeError("boom")
    bad.set_exception(error)
    assert recorder.errors == 2
    assert recorder.first_error is error
    assert completions.all_done.wait(0)
    assert not completions.sent_at
    assert not completions.short_runs


def test_e2e_payload_carries_run_sequence_and_time() -> None:
    payload = e2e_payload(b"12345678", 42, 987654321, b"x" * 76)
    assert len(payload) == 100
    assert E2E_HEADER.unpack_from(payload) == (b"12345678", 42, 987654321)


# ------------------------------------------------------------------------------------ the process's end

ENTRY = """
import atexit, sys, threading
atexit.register(lambda: print("exit handler ran", flush=True))
# a thread that would keep a normal interpreter exit waiting for ever (as a native teardown that hangs)
threading.Thread(target=threading.Event().wait, daemon=False).start()
sys.argv = ["odradek", *sys.argv[1:]]
from odradek.cli import entry
entry()
"""


@pytest.mark.parametrize(("argv", "status", "says"), [
    (["--version"], 0, "odradek "),  # argparse's SystemExit(0)
    (["no-such-command"], 2, "invalid choice"),  # a usage error: SystemExit(2)
    (["topics", "list", "--bootstrap-servers", "no-port-here"], 1, "odradek: "),  # a command error
])  # fmt: skip
def test_entry_runs_the_exit_handlers_then_ends_the_process(argv: list[str], status: int, says: str) -> None:
    """``odradek.cli.entry``: the status of ``main``, the exit handlers (logging, trace files) run, and the process
    ends without waiting for the interpreter's teardown (here: a thread that never ends)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", ENTRY, *argv], capture_output=True, timeout=60)
    output = done.stdout.decode() + done.stderr.decode()
    assert done.returncode == status, output
    assert says in output
    assert done.stdout.decode().endswith("exit handler ran\n"), output
