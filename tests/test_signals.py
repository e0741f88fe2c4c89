"""common.signals: a stop requested by signal is a flag set without any lock, seen by the waiting main thread;
SIGQUIT prints every thread's stack and the process goes on; and the test harnesses' stop check
(tests.support.launcher.stop_or_fail): a node still running after SIGTERM's bound fails with its stacks."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from common.signals import StopSignals
from tests.broker.cluster import Proc
from tests.support.launcher import THREAD_DUMP_S, ControllerProcess, NodeHung, stop_every, wait_until

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")


@pytest.fixture
def stop() -> Iterator[StopSignals]:
    """SIGUSR1 stands for SIGTERM here (pytest's own handlers stay); handler and wake-up fd put back after."""
    signals = StopSignals([signal.SIGUSR1])
    try:
        yield signals
    finally:
        signals.close()


def test_a_signal_marks_the_stop_and_wait_reports_it_without_sleeping(stop: StopSignals) -> None:
    assert stop.wait(0.0) is False
    os.kill(os.getpid(), signal.SIGUSR1)
    deadline = time.monotonic() + 5.0
    while not stop.requested and time.monotonic() < deadline:  # delivered at the next bytecodes of this thread
        time.sleep(0.001)
    assert stop.requested
    started = time.monotonic()
    assert stop.wait(30.0) is True
    assert time.monotonic() - started < 5.0  # requested already: no sleep at all


def test_the_handler_runs_while_the_main_thread_holds_a_lock(stop: StopSignals) -> None:
    """The hazard the module avoids: a handler runs between two bytecodes of the main thread, whatever lock that
    thread holds then. Here it holds one (as ``Event.wait`` holds its condition's) and the handler completes."""
    held = threading.Lock()
    with held:
        os.kill(os.getpid(), signal.SIGUSR1)
        deadline = time.monotonic() + 5.0
        while not stop.requested and time.monotonic() < deadline:
            pass  # bytecodes, and the handler among them, with the lock held
        assert stop.requested


def test_a_signal_sent_from_another_thread_ends_a_long_wait_at_once(stop: StopSignals) -> None:
    timer = threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGUSR1))
    timer.start()
    try:
        started = time.monotonic()
        assert stop.wait(30.0) is True  # woken by the wake-up fd, not by the end of its 30 s
        assert time.monotonic() - started < 10.0
    finally:
        timer.cancel()


def test_other_signals_do_not_count_as_a_stop(stop: StopSignals) -> None:
    previous = signal.signal(signal.SIGUSR2, lambda *_: None)  # a handled signal writes to the wake-up fd too
    try:
        os.kill(os.getpid(), signal.SIGUSR2)
        assert stop.wait(0.2) is False
        assert not stop.requested
    finally:
        signal.signal(signal.SIGUSR2, previous)


NODE = """
import signal, sys, threading, time
from common.signals import dump_threads_on_sigquit
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a node that does not stop
dump_threads_on_sigquit()

def parked_in_a_named_function():
    threading.Event().wait(60)

threading.Thread(target=parked_in_a_named_function, name="parked", daemon=True).start()
print("ready", flush=True)
time.sleep(60)
"""


def _hung_node(tmp_path: Any) -> Proc:
    proc = Proc("hung-node", 0, "", tmp_path / "hung-node", [sys.executable, "-c", NODE],
                {**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
    proc.start()
    proc.wait_line("ready", 30.0)
    return proc


def test_sigquit_prints_every_threads_stack_and_the_process_goes_on(tmp_path: Any) -> None:
    proc = _hung_node(tmp_path)
    try:
        proc.signal(signal.SIGQUIT)
        wait_until(lambda: "parked_in_a_named_function" in proc.errors(), 10.0, "the thread dump on stderr")
        assert "in <module>" in proc.errors()  # the main thread's stack too, in its sleep
        assert proc.alive()  # a dump, not an exit (the default action of SIGQUIT would end it with a core)
    finally:
        assert proc.popen is not None
        proc.popen.kill()
        proc.popen.wait(10)


def test_a_node_that_does_not_stop_fails_the_test_with_its_threads_stacks(tmp_path: Any) -> None:
    proc = _hung_node(tmp_path)
    started = time.monotonic()
    with pytest.raises(NodeHung) as failure:
        proc.stop(timeout_s=0.5)
    assert time.monotonic() - started < 0.5 + THREAD_DUMP_S + 10.0  # bounded: killed, not waited for
    assert not proc.alive()
    message = str(failure.value)
    assert "hung-node did not stop within 0.5 s of SIGTERM and was killed" in message
    assert "parked_in_a_named_function" in message  # the stack of the thread it was waiting in


def test_a_controller_of_the_launcher_that_does_not_stop_fails_with_its_stacks(tmp_path: Any) -> None:
    """tests.support.launcher's ControllerProcess goes through the same check (a stand-in child here)."""
    node = ControllerProcess(7, "127.0.0.1:1", "127.0.0.1:2", "7@127.0.0.1:2", str(tmp_path / "c7"))
    node.argv = [sys.executable, "-c", NODE.replace('print("ready"', 'print("listening on x"')]
    node.env = {**os.environ, "PYTHONPATH": str(ROOT)}
    node.start(30.0)
    with pytest.raises(NodeHung) as failure:
        node.stop(timeout_s=0.5)
    assert not node.alive()
    assert "controller 7 did not stop within 0.5 s of SIGTERM and was killed" in str(failure.value)
    assert "parked_in_a_named_function" in str(failure.value)


def test_stop_every_stops_the_rest_after_a_hung_node_then_names_every_hung_one() -> None:
    called: list[str] = []

    def hung(name: str) -> Callable[[], None]:
        def stop() -> None:
            called.append(name)
            raise NodeHung(f"{name} did not stop")

        return stop

    with pytest.raises(NodeHung) as failure:
        stop_every([hung("broker-0"), lambda: called.append("broker-1"), hung("controller-0")])
    assert called == ["broker-0", "broker-1", "controller-0"]
    assert str(failure.value) == "broker-0 did not stop\n\ncontroller-0 did not stop"
