"""The compose clusters of ``deploy/docker-compose.yml`` for the docker tests, built and started once per module:
``compose_cluster`` as the file is, ``secured_cluster`` with ``deploy/docker-compose.secured.yml`` laid over it.

Skips (with the reason) where no Docker Engine or no compose command answers. The images are built by
``deploy/build.sh --if-stale`` (offline; a no-op when ``odradek:latest`` was built from the current
sources). Every container and volume is removed at the end (``down -v``), whatever happened.

On a fresh machine that build takes minutes (two debootstrapped base images, the wheels, two images: ~240 s
here), so it begins in the background, at the lowest CPU and I/O priority, as soon as collection has selected
a test of this directory (``tests.support.background``); the tests that run first hide its time, and the
fixtures wait for it. A build still running when the session ends is stopped.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from chaos.backends.compose import ComposeBackend, compose_command
from odradek.security.config import load_properties
from tests.support.background import BackgroundCommand

ROOT = Path(__file__).resolve().parents[2]
BUILD_TIMEOUT_S = 1200.0  # a cold build (debootstrap, wheels, image) on a loaded machine
READY_TIMEOUT_S = 480.0  # every node healthy; minutes only on a very loaded machine
SECURED_OVERLAY = ROOT / "deploy" / "docker-compose.secured.yml"
SECURITY_DIR = "/var/lib/odradek-security"  # the `security` volume, as security-init fills it


def docker_unavailable() -> str | None:
    """Why the docker tests cannot run here, or None."""
    if shutil.which("docker") is None:
        return "no `docker` command on the PATH"
    try:
        info = subprocess.run(["docker", "info"], capture_output=True, text=True, timeout=60, check=False)
    except subprocess.TimeoutExpired:
        return "`docker info` did not answer within 60 s"
    if info.returncode != 0:
        last = (info.stderr.strip().splitlines() or ["no output"])[-1]
        return f"no Docker Engine answers (`docker info`: {last})"
    if compose_command() is None:
        return "neither `docker compose` nor `docker-compose` is installed"
    return None


_image_build: BackgroundCommand | None = None


def pytest_collection_finish(session: pytest.Session) -> None:
    """The head start: the build begins when a test of this directory is selected and a Docker Engine answers."""
    global _image_build
    here = Path(__file__).parent
    if _image_build is None and any(here in item.path.parents for item in session.items) \
            and docker_unavailable() is None:
        _image_build = start_image_build()


def pytest_sessionfinish(session: pytest.Session) -> None:
    if _image_build is not None:
        _image_build.close()


def start_image_build() -> BackgroundCommand:
    return BackgroundCommand([str(ROOT / "deploy" / "build.sh"), "--if-stale"], BUILD_TIMEOUT_S,
                             env={**os.environ, "PYTHON": sys.executable})


def build_images() -> None:
    """The images exist and are built from the current sources: waits for the build begun at collection (begins
    it if none was)."""
    global _image_build
    if _image_build is None:
        _image_build = start_image_build()
    print(_image_build.wait(), end="")


@pytest.fixture(scope="module")
def compose_cluster() -> Iterator[ComposeBackend]:
    reason = docker_unavailable()
    if reason is not None:
        pytest.skip(f"docker tests need a Docker Engine with compose: {reason}")
    build_images()
    project = f"odradek-test-{random.randrange(16**6):06x}"
    backend = ComposeBackend.start(project, timeout_s=READY_TIMEOUT_S)
    try:
        yield backend
    finally:
        backend.close()


@dataclass(frozen=True)
class SecuredCluster:
    """The secured compose cluster, and on the host a copy of what ``security-init`` made (its ``*.properties``
    pointing at the copy), as deploy/README.md tells an operator to take it out."""

    backend: ComposeBackend
    security: Path

    def properties(self, name: str) -> dict[str, str]:
        """``client.properties`` (the admin by SCRAM over SASL_SSL) or ``admin-cert.properties`` as a config."""
        return load_properties(self.security / name)


@pytest.fixture(scope="module")
def secured_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredCluster]:
    reason = docker_unavailable()
    if reason is not None:
        pytest.skip(f"docker tests need a Docker Engine with compose: {reason}")
    build_images()
    project = f"odradek-secured-{random.randrange(16**6):06x}"
    backend = ComposeBackend.start(project, overlays=[SECURED_OVERLAY], timeout_s=READY_TIMEOUT_S)
    try:
        backend.wait_completed("security-admin", READY_TIMEOUT_S)  # the admin's SCRAM user exists
        security = tmp_path_factory.mktemp("secured") / "odradek-security"
        backend.copy_out("security-init", SECURITY_DIR, security)
        for properties in security.glob("*.properties"):
            properties.write_text(properties.read_text().replace(SECURITY_DIR, str(security)))
        yield SecuredCluster(backend, security)
    finally:
        backend.close()
