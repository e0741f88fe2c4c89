"""tests.support.background.BackgroundCommand, as the docker tests use it to build their images early: the
output of a command that succeeded, a failure and a command past its time raised with the end of its output,
the low priority it runs at, and a stop that ends the command's children too. And tests.support.apt's lock,
which keeps that build's install and the tests' own apart."""

from __future__ import annotations

import fcntl
import sys
import time
from pathlib import Path

import pytest

from tests.support.apt import APT_LOCK, apt_install
from tests.support.background import BackgroundCommand, BackgroundFailed

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="nice, ionice and process groups of Linux")


def sh(script: str, timeout_s: float = 30.0) -> BackgroundCommand:
    return BackgroundCommand(["sh", "-c", script], timeout_s)


def test_the_output_of_a_command_that_succeeded() -> None:
    command = sh("echo building; echo built >&2")
    try:
        assert command.wait() == "building\nbuilt\n"
        assert command.wait() == "building\nbuilt\n"  # a second wait: the same answer at once
    finally:
        command.close()


def test_a_failure_is_raised_with_the_end_of_the_output() -> None:
    command = sh("echo the last words; exit 3")
    try:
        with pytest.raises(BackgroundFailed, match=r"sh failed \(3\):\nthe last words"):
            command.wait()
    finally:
        command.close()


def test_it_runs_at_the_lowest_cpu_priority() -> None:
    command = sh("cut -d ' ' -f 19 /proc/self/stat")  # the nice value
    try:
        assert command.wait().strip() == "19"
    finally:
        command.close()


def pid_alive(pid: int) -> bool:
    """Running: a zombie waiting to be reaped by whoever adopted it has ended."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_a_command_past_its_time_is_stopped_with_its_children_and_raised() -> None:
    command = sh("sleep 600 & echo $!; wait", timeout_s=1.0)
    try:
        deadline = time.monotonic() + 10.0
        while not command.messages().strip() and time.monotonic() < deadline:
            time.sleep(0.02)
        child = int(command.messages())
        with pytest.raises(BackgroundFailed, match=r"did not finish within 1 s"):
            command.wait()
        assert command.popen.poll() is not None
        deadline = time.monotonic() + 10.0
        while pid_alive(child) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not pid_alive(child), "the command's child outlived the stop"
    finally:
        command.close()


def test_an_install_waits_for_the_one_holding_the_lock_and_says_so_at_its_bound() -> None:
    with open(APT_LOCK, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        started = time.monotonic()
        why = apt_install(["no-such-package-is-installed"], timeout_s=0.5)
        assert time.monotonic() - started >= 0.5
    assert why == f"another install held {APT_LOCK} for 0 s"
