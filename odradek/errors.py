"""Errors raised by the odradek package."""

from __future__ import annotations


class OdradekError(Exception):
    """Base of every error the odradek package raises."""


class CliError(OdradekError):
    """A user-facing command failure: the message is printed as is; the exit status is ``status``."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status
