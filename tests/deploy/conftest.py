"""The compose clusters of ``deploy/docker-compose.yml`` for the docker tests, built and started once per module:
``compose_cluster`` as the file is, ``secured_cluster`` with ``deploy/docker-compose.secured.yml`` laid over it.

Skips (with the reason) where no Docker Engine or no compose command answers. The images are built by
``deploy/build.sh --if-stale`` (offline; a no-op when ``odradek:latest`` was built from the current
sources). Every container and volume is removed at the end (``down -v``), whatever happened.
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


def build_images() -> None:
    done = subprocess.run(
        [str(ROOT / "deploy" / "build.sh"), "--if-stale"],
        capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False,
        env={**os.environ, "PYTHON": sys.executable},
    )  # fmt: skip
    print(done.stderr, end="")
    assert done.returncode == 0, f"deploy/build.sh failed ({done.returncode}):\n{done.stderr[-4000:]}"


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
