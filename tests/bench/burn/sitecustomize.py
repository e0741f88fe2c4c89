"""Added CPU at one place of a record's path, for ``python -m tests.bench.cpu --burn SITE:US``.

This directory goes first on ``PYTHONPATH`` of a benchmark's cluster and client processes, so that Python
imports this module at start-up (``site``'s ``sitecustomize``). When ``ODRADEK_BENCH_BURN`` is ``SITE:US``, it
wraps one function of Odradek's code, once its module is imported, to spend US microseconds of the thread's
CPU (a busy loop holding the GIL, as work would) at each call:

* ``leader``: every request a broker takes on its ``DATA`` and ``REPLICATION`` listeners, before it is
  handled (at RF 3 and 1,000 records/s nearly all of them are the partition's leader's: the Produce, the
  followers' fetches, the consumer's fetch);
* ``follower``: every answer a follower's fetcher gets from the leader's ``REPLICATION`` listener, before it
  is used;
* ``client``: every answer Odradek's client gets on the ``DATA`` listener (the producer's and the consumer's),
  on the connection's reader thread, before it is decoded.

Nothing else changes; without the variable this module does nothing. It is never on the path of a running
cluster outside these benchmarks.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import os
import sys
import time
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

# site -> (module, class, method, burn before the call: True, after it: False)
SITES: dict[str, tuple[tuple[str, str, str, bool], ...]] = {
    "leader": (
        ("broker.data_listener", "DataListener", "_handle", True),
        ("broker.replication_listener", "ReplicationListener", "_answer", True),
    ),
    "follower": (("broker.replication_link", "FollowerLink", "call", False),),
    "client": (("odradek.net.data_link", "DataLink", "_outcome", True),),
}


def parse(value: str) -> tuple[str, int]:
    """``SITE:US`` -> (site, microseconds); ValueError when it is not one."""
    site, _, us = value.partition(":")
    if site not in SITES or not us.isdigit() or int(us) <= 0:
        raise ValueError(f"a burn is SITE:US with SITE one of {', '.join(SITES)} and US > 0, not {value!r}")
    return site, int(us)


def burn(ns: int) -> None:
    """Spend ``ns`` nanoseconds of this thread's CPU."""
    until = time.thread_time_ns() + ns
    while time.thread_time_ns() < until:
        pass


def wrapped(fn: Callable[..., Any], ns: int, before: bool) -> Callable[..., Any]:
    @functools.wraps(fn)
    def with_burn(*args: Any, **kwargs: Any) -> Any:
        if before:
            burn(ns)
            return fn(*args, **kwargs)
        result = fn(*args, **kwargs)
        burn(ns)
        return result

    return with_burn


class _Patcher(importlib.abc.MetaPathFinder):
    """Finds nothing itself: for a target module it lets the other finders find it and patches the module
    once its loader has run it."""

    def __init__(self, targets: Sequence[tuple[str, str, str, bool]], ns: int) -> None:
        self.targets = {module: [t for t in targets if t[0] == module] for module, *_ in targets}
        self.ns = ns

    def find_spec(self, name: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if name not in self.targets:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        exec_module = spec.loader.exec_module
        patches = self.targets[name]

        def exec_and_patch(module: ModuleType) -> None:
            exec_module(module)
            for _, cls_name, method, before in patches:
                cls = getattr(module, cls_name)
                setattr(cls, method, wrapped(getattr(cls, method), self.ns, before))

        spec.loader.exec_module = exec_and_patch  # type: ignore[method-assign]
        return spec


def install(value: str) -> None:
    site, us = parse(value)
    sys.meta_path.insert(0, _Patcher(SITES[site], us * 1000))


if os.environ.get("ODRADEK_BENCH_BURN"):
    install(os.environ["ODRADEK_BENCH_BURN"])
