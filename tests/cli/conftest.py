"""Fixtures of the command-line tests: an isolated environment, and ``odradek up`` clusters that are
always stopped (their children included) when the test ends."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.cli.helpers import FAST_BROKER_CONFIG, UpProcess, cli_env, free_base_port


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """The environment of a command: its own XDG_STATE_HOME, no ODRADEK_BOOTSTRAP_SERVERS."""
    return cli_env(tmp_path / "state")


@pytest.fixture
def start_up(tmp_path: Path, env: dict[str, str]) -> Iterator[Callable[..., UpProcess]]:
    """``start_up(controllers=1, brokers=1, data_dir=None, base_port=None, extra=(), restart=False)`` runs
    ``odradek up`` (not waiting; ``restart``: without layout options); every one started is stopped at the
    end of the test, and its children checked gone."""
    started: list[UpProcess] = []

    def start(
        controllers: int = 1, brokers: int = 1, data_dir: Path | None = None, base_port: int | None = None,
        extra: tuple[str, ...] = (), restart: bool = False,
    ) -> UpProcess:  # fmt: skip
        directory = data_dir or tmp_path / "cluster"
        args: list[str] = []
        if not restart:  # a restart takes its layout from cluster.json
            args += ["--controllers", str(controllers), "--brokers", str(brokers)]
            args += ["--base-port", str(base_port or free_base_port(controllers, brokers))]
        for item in FAST_BROKER_CONFIG:
            args += ["--broker-config", item]
        up = UpProcess(directory, env, [*args, *extra]).start()
        started.append(up)
        return up

    yield start
    for up in started:
        up.kill_everything()
    for up in started:
        up.assert_no_orphans()
