"""Fixtures of the security tests: the command-line tests' isolated environment and ``odradek up`` clusters."""

from tests.cli.conftest import env, start_up

__all__ = ["env", "start_up"]
