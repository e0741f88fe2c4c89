"""Fixtures of the console tests: a real cluster, ``odradek console`` as a process, and headless Chromium.

Chromium and its driver are Debian's ``chromium`` and ``chromium-driver``: installed here with
``apt-get update`` + ``apt-get install -y`` when missing (the tests run as root, as CI does); the browser
tests skip, saying why, only when apt cannot install them. Screenshots and page load times go to
``test-artifacts/console/`` at the repository root (kept by CI as artifacts; not committed).
"""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from controller.ports import free_ports
from tests.broker.cluster import Cluster
from tests.support.apt import apt_install
from tests.support.launcher import wait_until

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts" / "console"
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
START_TIMEOUT_S = 60.0
DRIVER_COMMAND_TIMEOUT_S = 90


def install_chromium() -> str | None:
    """Install Debian's chromium and chromium-driver when missing; None when they are there, else why not."""
    if os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER):
        return None
    why = apt_install(["chromium", "chromium-driver"])
    if why is not None:
        return why
    return None if os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER) else "chromium installed nowhere"


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    reason = install_chromium()
    if reason is not None:
        pytest.skip(f"the browser tests need Debian's chromium and chromium-driver: {reason}")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                     "--window-size=1400,1000", "--force-device-scale-factor=1", "--lang=en-US"):  # fmt: skip
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    # every command to the driver is bounded (selenium's default is the socket default: no bound at all)
    driver.command_executor.client_config.timeout = DRIVER_COMMAND_TIMEOUT_S
    driver.set_page_load_timeout(60)
    driver.set_script_timeout(30)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    config = {"offsets.topic.num.partitions": "3", "offsets.topic.replication.factor": "3"}
    with Cluster(tmp_path_factory.mktemp("console"), brokers=3, controllers=1, broker_config=config) as c:
        yield c


class ConsoleProcess:
    """``odradek console`` against a cluster, on a free port; stopped (SIGTERM, then SIGKILL) by ``stop``."""

    def __init__(self, bootstrap_servers: str, log_dir: Path, lag_interval_s: float = 1.0) -> None:
        self.port = free_ports(1)[0]
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_dir / "console.log"
        argv = [sys.executable, "-m", "odradek.cli", "console", "--port", str(self.port),
                "--bootstrap-servers", bootstrap_servers, "--lag-interval", str(lag_interval_s)]  # fmt: skip
        with open(self.log_path, "wb") as log:
            self.popen = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        wait_until(self._answers, START_TIMEOUT_S, f"the console on port {self.port}")

    def _answers(self) -> bool:
        if self.popen.poll() is not None:
            raise AssertionError(f"the console exited ({self.popen.returncode}):\n{self.log_path.read_text()}")
        try:
            with urllib.request.urlopen(f"{self.url}/healthz", timeout=2) as answer:  # noqa: S310
                return bool(answer.read() == b"ok")
        except OSError:
            return False

    def stop(self) -> int:
        self.popen.terminate()
        try:
            return self.popen.wait(20)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            return self.popen.wait(10)


@pytest.fixture(scope="module")
def console(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleProcess]:
    process = ConsoleProcess(cluster.bootstrap_servers, tmp_path_factory.mktemp("console-log"))
    try:
        yield process
    finally:
        assert process.stop() == 0, process.log_path.read_text()
