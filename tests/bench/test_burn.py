"""``tests/bench/burn/sitecustomize.py`` (``python -m tests.bench.cpu --burn SITE:US``): with its variable set, a
process spends the asked CPU at each call of the site's functions, and only there; without it nothing changes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.bench.burn.sitecustomize import SITES, parse, wrapped
from tests.bench.cpu import BURN_DIR

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import importlib, sys, time
site = sys.argv[1]
from tests.bench.burn.sitecustomize import SITES
for module, cls, method, before in SITES[site]:
    fn = getattr(getattr(importlib.import_module(module), cls), method)
    started = time.thread_time_ns()
    try:
        fn(None)  # no real object: the wrapped function fails at once (before: after the burn; after: no burn)
    except Exception:
        pass
    print(module, cls, method, hasattr(fn, "__wrapped__"), (time.thread_time_ns() - started) // 1000)
"""


def probe(site: str, burn: str | None) -> list[tuple[str, bool, int]]:
    env = {k: v for k, v in os.environ.items() if k != "ODRADEK_BENCH_BURN"}
    env["PYTHONPATH"] = os.pathsep.join([str(BURN_DIR), str(ROOT)])
    if burn is not None:
        env["ODRADEK_BENCH_BURN"] = burn
    done = subprocess.run([sys.executable, "-c", PROBE, site], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=60, check=True)  # fmt: skip
    rows = []
    for line in done.stdout.splitlines():
        module, cls, method, wrapped, spent_us = line.split()
        rows.append((f"{module}.{cls}.{method}", wrapped == "True", int(spent_us)))
    return rows


@pytest.mark.parametrize("site", sorted(SITES))
def test_a_burn_wraps_its_sites_functions_and_spends_the_cpu_asked(site: str) -> None:
    rows = probe(site, f"{site}:20000")
    assert [name for name, _, _ in rows] == [f"{m}.{c}.{f}" for m, c, f, _ in SITES[site]]
    for (name, is_wrapped, spent_us), (*_, before) in zip(rows, SITES[site], strict=True):
        assert is_wrapped, name
        if before:  # burned before the call, which then fails on its bogus argument
            assert spent_us >= 20000, (name, spent_us)
        else:  # burned after a call that returns: this one raised, so none
            assert spent_us < 20000, (name, spent_us)


@pytest.mark.parametrize("before", [True, False])
def test_a_wrapped_function_returns_its_result_and_spends_the_cpu(before: bool) -> None:
    calls: list[int] = []

    def double(x: int) -> int:
        calls.append(x)
        return x * 2

    fn = wrapped(double, 20_000_000, before)
    started = time.thread_time_ns()
    assert fn(21) == 42
    assert time.thread_time_ns() - started >= 20_000_000
    assert calls == [21]


def test_without_the_variable_nothing_is_wrapped() -> None:
    for site in SITES:
        assert all(not is_wrapped for _, is_wrapped, _ in probe(site, None))


def test_another_sites_burn_leaves_these_functions_alone() -> None:
    assert all(not is_wrapped for _, is_wrapped, _ in probe("leader", "client:100"))


@pytest.mark.parametrize("value", ["leader", "leader:", "leader:0", "leader:-5", "nowhere:10", "leader:1.5"])
def test_a_burn_that_is_not_site_and_microseconds_is_refused(value: str) -> None:
    with pytest.raises(ValueError, match="SITE:US"):
        parse(value)


def test_the_cpu_bench_refuses_a_bad_burn_before_starting_anything() -> None:
    done = subprocess.run([sys.executable, "-m", "tests.bench.cpu", "--burn", "nowhere:10"], capture_output=True,
                          text=True, cwd=ROOT, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "SITE:US" in done.stderr
