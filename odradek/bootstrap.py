"""Where a client command finds the cluster: ``--bootstrap-servers``, else ``$ODRADEK_BOOTSTRAP_SERVERS``, else
the address that ``odradek up`` wrote last.

``odradek up`` records that address, once its cluster is ready, in a small JSON state file::

    $XDG_STATE_HOME/odradek/last-up.json      ($XDG_STATE_HOME defaults to ~/.local/state)
    {"bootstrap_servers": "127.0.0.1:9092,...", "data_dir": "/abs/odradek-data", "pid": 1234}

The file is kept when ``up`` stops: re-running ``up`` on the same data dir brings the cluster back on the
same ports. Nothing here imports the client library.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

from odradek.errors import CliError

ENV_VAR = "ODRADEK_BOOTSTRAP_SERVERS"
STATE_FILE_NAME = "last-up.json"

NO_BOOTSTRAP_MESSAGE = (
    "no bootstrap servers: give --bootstrap-servers HOST:PORT[,HOST:PORT...], set "
    f"${ENV_VAR}, or start a local cluster with 'odradek up'"
)


def state_dir(environ: Mapping[str, str] | None = None) -> Path:
    """``$XDG_STATE_HOME/odradek`` (``~/.local/state/odradek`` when the variable is unset or empty)."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_STATE_HOME") or os.path.join(env.get("HOME") or os.path.expanduser("~"), ".local", "state")
    return Path(base) / "odradek"


def state_file(environ: Mapping[str, str] | None = None) -> Path:
    return state_dir(environ) / STATE_FILE_NAME


def record_last_up(bootstrap_servers: str, data_dir: str, environ: Mapping[str, str] | None = None) -> Path | None:
    """Remember what ``odradek up`` just started (atomically); the path, or None when it cannot be written
    (a read-only home is no reason to fail ``up``)."""
    path = state_file(environ)
    payload = {"bootstrap_servers": bootstrap_servers, "data_dir": os.path.abspath(data_dir), "pid": os.getpid()}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(payload) + "\n")
        os.replace(tmp, path)
    except OSError:
        return None
    return path


def last_up_servers(environ: Mapping[str, str] | None = None) -> str | None:
    """The bootstrap servers ``odradek up`` recorded last, or None (no file, or one that does not parse)."""
    try:
        data = json.loads(state_file(environ).read_text())
    except (OSError, ValueError):
        return None
    servers = data.get("bootstrap_servers") if isinstance(data, dict) else None
    if not isinstance(servers, str) or not servers.strip():
        return None
    return servers.strip()


def resolve_bootstrap_servers(given: str | None, environ: Mapping[str, str] | None = None) -> str:
    """The first of: ``given`` (the option), ``$ODRADEK_BOOTSTRAP_SERVERS``, the last ``odradek up``'s address.
    Checked as ``HOST:PORT[,...]``; :class:`CliError` when none is set or one is malformed."""
    env = os.environ if environ is None else environ
    for source, value in (
        ("--bootstrap-servers", given),
        (f"${ENV_VAR}", env.get(ENV_VAR)),
        (f"the last 'odradek up' ({state_file(env)})", last_up_servers(env)),
    ):
        if value is not None and value.strip():
            return check_servers(value, source)
    raise CliError(NO_BOOTSTRAP_MESSAGE)


def check_servers(value: str, source: str) -> str:
    """``HOST:PORT[,HOST:PORT...]`` normalised (no blanks); :class:`CliError` naming ``source`` otherwise."""
    servers = [item.strip() for item in value.split(",") if item.strip()]
    for server in servers:
        host, sep, port = server.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise CliError(f"bad address {server!r} in {source}: expected HOST:PORT[,HOST:PORT...]")
    if not servers:
        raise CliError(f"{source} is empty: expected HOST:PORT[,HOST:PORT...]")
    return ",".join(servers)
