"""The one error every command line of the project raises."""

from __future__ import annotations


class CommandError(Exception):
    """A command's failure worded for its user: ``odradek`` prints ``odradek: <message>`` and exits with
    ``status``. The servers' command lines (``broker/cli.py``, ``controller/cli.py``) raise it; the clients'
    commands raise ``odradek.errors.CliError``, which is one and also an ``OdradekError``."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status
