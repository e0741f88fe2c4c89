"""The ``/metrics`` HTTP endpoint of a broker or controller (Prometheus text format, ``prometheus-client``).

One :class:`MetricsEndpoint` per process, on the address of ``--metrics-listen HOST:PORT`` (port 0: any free
port; :attr:`MetricsEndpoint.address` says which). Every scrape runs the registry's collectors on the
endpoint's own HTTP thread: what they compute at scrape time (partition states, the metadata image) costs
the servers nothing between scrapes.

:func:`new_registry` makes a registry with the process metrics Prometheus users expect
(``process_cpu_seconds_total``, ``process_resident_memory_bytes``, ``process_open_fds``, ...), the Python
runtime's (``python_info``, ``python_gc_*``), and no ``*_created`` series.

Thread-safety: ``start`` and ``stop`` from one thread; scrapes run on the endpoint's threads.
"""

from __future__ import annotations

import threading
from wsgiref.simple_server import WSGIServer

import prometheus_client
from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector

# one series per counter: no ``*_created`` twins
prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]


def new_registry() -> CollectorRegistry:
    """A registry with the process, platform and GC collectors (and nothing else yet)."""
    registry = CollectorRegistry(auto_describe=True)
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return registry


def split_address(address: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` too) as ``(host, port)``; ``ValueError`` naming the address otherwise."""
    host, sep, port = address.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"a metrics address must be HOST:PORT, got {address!r}")
    return host.strip("[]"), int(port)


class MetricsEndpoint:
    """Serves ``registry`` at ``http://HOST:PORT/metrics`` once started (see the module docstring)."""

    def __init__(self, listen: str, registry: CollectorRegistry) -> None:
        self.host, self.port = split_address(listen)
        self.registry = registry
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Bind and serve; ``RuntimeError`` when the address cannot be bound."""
        try:
            self._server, self._thread = prometheus_client.start_http_server(self.port, self.host, self.registry)
        except OSError as exc:
            raise RuntimeError(f"cannot serve metrics on {self.host}:{self.port}: {exc.strerror or exc}") from None
        self.port = int(self._server.server_address[1])

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def stop(self) -> None:
        """Stop serving (safe to call twice, or before ``start``)."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(5.0)
