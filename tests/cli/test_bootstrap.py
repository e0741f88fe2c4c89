"""Where client commands find the cluster: --bootstrap-servers, then $ODRADEK_BOOTSTRAP_SERVERS, then the
address ``odradek up`` recorded last (docs/INTERFACE.md, "Command line")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from odradek.bootstrap import (
    NO_BOOTSTRAP_MESSAGE,
    last_up_servers,
    record_last_up,
    resolve_bootstrap_servers,
    state_file,
)
from odradek.errors import CliError


def environ(tmp_path: Path, **values: str) -> dict[str, str]:
    return {"XDG_STATE_HOME": str(tmp_path / "state"), "HOME": str(tmp_path / "home"), **values}


def test_the_option_wins_over_everything(tmp_path: Path) -> None:
    env = environ(tmp_path, ODRADEK_BOOTSTRAP_SERVERS="127.0.0.1:2")
    record_last_up("127.0.0.1:3", str(tmp_path), env)
    assert resolve_bootstrap_servers("127.0.0.1:1", env) == "127.0.0.1:1"


def test_the_environment_comes_before_the_last_up(tmp_path: Path) -> None:
    env = environ(tmp_path, ODRADEK_BOOTSTRAP_SERVERS="127.0.0.1:2")
    record_last_up("127.0.0.1:3", str(tmp_path), env)
    assert resolve_bootstrap_servers(None, env) == "127.0.0.1:2"
    assert resolve_bootstrap_servers("", env) == "127.0.0.1:2"


def test_the_last_up_is_the_fallback(tmp_path: Path) -> None:
    env = environ(tmp_path, ODRADEK_BOOTSTRAP_SERVERS="  ")
    assert record_last_up("127.0.0.1:3,127.0.0.1:4", str(tmp_path / "data"), env) == state_file(env)
    assert resolve_bootstrap_servers(None, env) == "127.0.0.1:3,127.0.0.1:4"
    recorded = json.loads(state_file(env).read_text())
    assert recorded["data_dir"] == str(tmp_path / "data")


def test_the_state_file_lives_under_xdg_state_home_or_local_state(tmp_path: Path) -> None:
    assert state_file({"XDG_STATE_HOME": "/x"}) == Path("/x/odradek/last-up.json")
    assert state_file({"HOME": "/home/u"}) == Path("/home/u/.local/state/odradek/last-up.json")
    assert state_file({"HOME": "/home/u", "XDG_STATE_HOME": ""}) == Path("/home/u/.local/state/odradek/last-up.json")


def test_nothing_set_is_one_sentence_saying_how_to_give_one(tmp_path: Path) -> None:
    with pytest.raises(CliError) as caught:
        resolve_bootstrap_servers(None, environ(tmp_path))
    assert str(caught.value) == NO_BOOTSTRAP_MESSAGE
    assert "--bootstrap-servers" in NO_BOOTSTRAP_MESSAGE
    assert "ODRADEK_BOOTSTRAP_SERVERS" in NO_BOOTSTRAP_MESSAGE
    assert "odradek up" in NO_BOOTSTRAP_MESSAGE


def test_a_corrupt_state_file_is_ignored(tmp_path: Path) -> None:
    env = environ(tmp_path)
    state_file(env).parent.mkdir(parents=True)
    state_file(env).write_text("{not json")
    assert last_up_servers(env) is None
    state_file(env).write_text('{"bootstrap_servers": 7}')
    assert last_up_servers(env) is None


@pytest.mark.parametrize("bad", ["localhost", "host:", ":9092", "h:99999", "h:x", " , "])
def test_malformed_addresses_are_named(tmp_path: Path, bad: str) -> None:
    with pytest.raises(CliError, match="--bootstrap-servers"):
        resolve_bootstrap_servers(bad, environ(tmp_path))


def test_addresses_are_normalised(tmp_path: Path) -> None:
    assert resolve_bootstrap_servers(" 127.0.0.1:1 ,, h:2 ", environ(tmp_path)) == "127.0.0.1:1,h:2"


def test_an_unwritable_state_dir_does_not_fail_up(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert record_last_up("127.0.0.1:1", str(tmp_path), {"XDG_STATE_HOME": str(blocker)}) is None
