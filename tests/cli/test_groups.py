"""``odradek groups ...`` and ``odradek consume --group`` in-process, against the clients' fake cluster and its
fake coordinator (the same commands against real brokers: tests/groups/)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from odradek.cli import build_parser, main
from odradek.cli_groups import parse_datetime, table
from odradek.types import TopicPartition
from tests.clients.fake_broker import FakeCluster
from tests.clients.fake_coordinator import FakeCoordinator, FakeMember
from tests.clients.test_consumer import fill

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[tuple[FakeCluster, FakeCoordinator]]:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    cluster = FakeCluster((1, 2))
    cluster.groups = coordinator = FakeCoordinator(cluster.topics, node=1)
    cluster.create_topic("t", 2)
    fill(cluster, T0, 6)
    fill(cluster, T1, 2)
    monkeypatch.setenv("ODRADEK_BOOTSTRAP_SERVERS", cluster.bootstrap)
    yield cluster, coordinator
    cluster.stop()


def test_the_groups_commands_parse() -> None:
    parser = build_parser()
    reset = parser.parse_args(["groups", "reset-offsets", "g", "--topic", "t:0,1", "--to-offset", "3", "--execute"])
    assert (reset.group, reset.topic, reset.to_offset, reset.execute) == ("g", ["t:0,1"], 3, True)
    assert parser.parse_args(["groups", "describe", "g", "--members"]).members is True
    with pytest.raises(SystemExit):
        parser.parse_args(["groups", "reset-offsets", "g", "--topic", "t", "--to-earliest", "--to-latest"])
    with pytest.raises(SystemExit):
        parser.parse_args(["groups", "reset-offsets", "g", "--topic", "t"])  # a target is required


def test_list_describe_delete(fake: tuple[FakeCluster, FakeCoordinator], capsys: pytest.CaptureFixture[str]) -> None:
    _, coordinator = fake
    coordinator.group("billing").offsets = {T0: 4, T1: 2}
    coordinator.group("billing").members["m-1"] = FakeMember("m-1", "", 5, topics=("t",), owned=frozenset({T0, T1}))
    coordinator.group("quiet").offsets = {T0: 6}
    assert main(["groups", "list"]) == 0
    assert capsys.readouterr().out == "billing\nquiet\n"
    assert main(["groups", "list", "--state"]) == 0
    assert capsys.readouterr().out.splitlines() == ["GROUP    STATE", "billing  Stable", "quiet    Empty"]
    assert main(["groups", "describe", "billing", "--members"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "Group billing: Stable, 1 member, coordinator 1, assignor uniform, epoch 0"
    assert out[2].split() == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID",
                              "HOST", "CLIENT-ID"]  # fmt: skip
    assert out[3].split() == ["billing", "t", "0", "4", "6", "2", "m-1", "/127.0.0.1", "c"]
    assert out[4].split() == ["billing", "t", "1", "2", "2", "0", "m-1", "/127.0.0.1", "c"]
    assert out[7].split() == ["m-1", "-", "5", "/127.0.0.1", "c", "2", "t-0,t-1"]
    assert main(["groups", "delete", "billing"]) == 1
    assert capsys.readouterr().err == "odradek: group 'billing' still has members: stop its consumers first " \
                                      "(NON_EMPTY_GROUP)\n"  # fmt: skip
    assert main(["groups", "delete", "quiet"]) == 0
    assert capsys.readouterr().out == "Deleted group quiet.\n"
    assert main(["groups", "describe", "quiet"]) == 1
    assert "(GROUP_ID_NOT_FOUND)" in capsys.readouterr().err


def test_reset_offsets_dry_run_then_execute(
    fake: tuple[FakeCluster, FakeCoordinator], capsys: pytest.CaptureFixture[str]
) -> None:
    _, coordinator = fake
    coordinator.group("g").offsets = {T0: 5, T1: 1}
    assert main(["groups", "reset-offsets", "g", "--topic", "t", "--to-earliest"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[:3] == ["GROUP  TOPIC  PARTITION  NEW-OFFSET", "g      t      0          0",
                                    "g      t      1          0"]  # fmt: skip
    assert "Dry run" in out
    assert coordinator.groups["g"].offsets == {T0: 5, T1: 1}
    assert main(["groups", "reset-offsets", "g", "--topic", "t:0", "--to-offset", "99", "--execute"]) == 0
    assert "Dry run" not in capsys.readouterr().out
    assert coordinator.groups["g"].offsets == {T0: 6, T1: 1}  # kept within the log
    assert main(["groups", "reset-offsets", "g", "--all-topics", "--to-latest", "--execute"]) == 0
    assert coordinator.groups["g"].offsets == {T0: 6, T1: 2}
    coordinator.groups["g"].members["m"] = FakeMember("m", "", 1)
    assert main(["groups", "reset-offsets", "g", "--topic", "t:0", "--to-earliest", "--execute"]) == 1
    assert "inactive, but it is Stable" in capsys.readouterr().err
    assert main(["groups", "reset-offsets", "g", "--to-earliest"]) == 1
    assert "--topic" in capsys.readouterr().err
    assert main(["groups", "reset-offsets", "g", "--topic", "t:x", "--to-earliest"]) == 1
    assert "partition numbers" in capsys.readouterr().err


def test_consume_with_a_group_commits_what_it_printed(
    fake: tuple[FakeCluster, FakeCoordinator], capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    _, coordinator = fake
    coordinator.group("readers").offsets = {T0: 2}
    argv = ["consume", "t", "--group", "readers", "--from-beginning", "--max-messages", "6", "--print-offset",
            "--consumer-config", "fetch.max.wait.ms=50"]  # fmt: skip
    assert main(argv) == 0
    lines = capsysbinary.readouterr().out.decode().splitlines()
    assert sorted(lines) == sorted([f"Offset:{i}\t{i}".encode().decode() for i in (0, 1, 2, 3, 4, 5)])
    assert coordinator.groups["readers"].offsets == {T0: 6, T1: 2}  # started at 2 on t-0, at 0 on t-1


def test_helpers() -> None:
    assert parse_datetime("2026-11-26T08:00:00Z").isoformat() == "2026-11-26T08:00:00+00:00"
    assert parse_datetime("2026-11-26T08:00:00").isoformat() == "2026-11-26T08:00:00+00:00"
    assert parse_datetime("2026-11-26T08:00:00+02:00").utcoffset() is not None
    assert table([["A", "BB"], ["ccc", "d"]]) == "A    BB\nccc  d"
