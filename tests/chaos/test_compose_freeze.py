"""``ComposeBackend``'s pause against runc's cgroup v1 freezer, at unit level (``docker`` replaced): "unable to
freeze" means runc thawed the container back, so the pause is tried again; any other failure is raised at once."""

from __future__ import annotations

import pytest

from chaos.backends import BackendError, compose
from chaos.backends.compose import FREEZE_ATTEMPTS, ComposeBackend

FREEZE_FAILED = ("`docker pause c1` failed (1): Error response from daemon: Cannot pause container c1: OCI runtime "
                 "pause failed: unable to freeze: unknown")  # fmt: skip


def scripted_docker(monkeypatch: pytest.MonkeyPatch, failures: list[str]) -> list[tuple[str, ...]]:
    """``compose.docker`` raising ``failures`` in turn, then answering; returns the calls made."""
    calls: list[tuple[str, ...]] = []

    def docker(*args: str, **_: object) -> str:
        calls.append(args)
        if failures:
            raise BackendError(failures.pop(0))
        return ""

    monkeypatch.setattr(compose, "docker", docker)
    monkeypatch.setattr("chaos.backends.compose.time.sleep", lambda _s: None)  # the module's time.sleep
    return calls


def test_a_freeze_the_kernel_gave_up_on_is_tried_again(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = scripted_docker(monkeypatch, [FREEZE_FAILED, FREEZE_FAILED])
    ComposeBackend._freeze("c1")
    assert calls == [("pause", "c1")] * 3


def test_the_last_freeze_failure_is_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = scripted_docker(monkeypatch, [FREEZE_FAILED] * FREEZE_ATTEMPTS)
    with pytest.raises(BackendError, match="unable to freeze"):
        ComposeBackend._freeze("c1")
    assert len(calls) == FREEZE_ATTEMPTS


def test_other_pause_failures_are_raised_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = scripted_docker(monkeypatch, ["`docker pause c1` failed (1): No such container: c1"])
    with pytest.raises(BackendError, match="No such container"):
        ComposeBackend._freeze("c1")
    assert len(calls) == 1
