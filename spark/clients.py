"""Odradek clients for the data source, one per configuration and process, created lazily.

Spark pickles readers and writers to its Python workers for every task, and reuses those worker
processes (``spark.python.worker.reuse``). So the data source never holds a client in an attribute that
gets pickled: it asks this module, which keeps one Admin, one Consumer and one Producer per distinct
client configuration in each process and closes them at exit. Not thread-safe beyond that: a Python
worker runs one task at a time, and the driver's stream reader is called from one thread.
"""

from __future__ import annotations

import atexit
import os
import threading
from collections.abc import Mapping

from odradek import Admin, Consumer, Producer
from odradek.security.config import SECURITY_KEYS

# The data source reads ranges of offsets it already knows, so the consumer fetches big and never resets.
# Every offset of a range is below the high watermark when the range is planned, so a fetch has no reason to
# wait at the broker (fetch.max.wait.ms 0): a fetch the consumer sends ahead past the end of a task's range
# would otherwise be parked there, and hold up the next task's first fetch to the same broker, for up to 500 ms.
CONSUMER_DEFAULTS: dict[str, object] = {
    "auto.offset.reset": "none",
    "enable.auto.commit": False,
    "fetch.max.wait.ms": 0,
    "max.poll.records": 20000,
    "max.partition.fetch.bytes": 8 << 20,
    "fetch.max.bytes": 64 << 20,
}
# At-least-once writes: every record acknowledged by all in-sync replicas before a task succeeds.
PRODUCER_DEFAULTS: dict[str, object] = {
    "acks": "all",
    "enable.idempotence": True,
    "linger.ms": 5,
    "batch.size": 256 << 10,
}

_lock = threading.Lock()
_admins: dict[tuple[int, tuple[tuple[str, str], ...]], Admin] = {}
_consumers: dict[tuple[int, tuple[tuple[str, str], ...]], Consumer] = {}
_producers: dict[tuple[int, tuple[tuple[str, str], ...]], Producer] = {}


def _key(config: Mapping[str, object]) -> tuple[int, tuple[tuple[str, str], ...]]:
    # The pid is part of the key: a forked worker must not use its parent's gRPC channels.
    return os.getpid(), tuple(sorted((k, str(v)) for k, v in config.items()))


def admin(config: Mapping[str, object]) -> Admin:
    key = _key(config)
    with _lock:
        client = _admins.get(key)
        if client is None:
            allowed = {k: v for k, v in config.items() if k in _ADMIN_KEYS}
            client = _admins[key] = Admin(allowed)
        return client


def consumer(config: Mapping[str, object]) -> Consumer:
    key = _key(config)
    with _lock:
        client = _consumers.get(key)
        if client is None:
            client = _consumers[key] = Consumer({**CONSUMER_DEFAULTS, **config})
        return client


def producer(config: Mapping[str, object]) -> Producer:
    key = _key(config)
    with _lock:
        client = _producers.get(key)
        if client is None:
            client = _producers[key] = Producer({**PRODUCER_DEFAULTS, **config})
        return client


def discard_consumer(config: Mapping[str, object]) -> None:
    """Close and forget the consumer of ``config`` (after an error left it in an unknown state)."""
    with _lock:
        client = _consumers.pop(_key(config), None)
    if client is not None:
        client.close()


def close_all() -> None:
    """Close every client of this process (flushing producers); called at exit."""
    with _lock:
        clients: list[Producer | Consumer | Admin] = [*_producers.values(), *_consumers.values(), *_admins.values()]
        _producers.clear()
        _consumers.clear()
        _admins.clear()
    for client in clients:
        try:
            client.close()
        except Exception:  # at exit, one client's failure must not keep the others open
            continue


def validate_consumer_config(config: Mapping[str, object]) -> None:
    """Raise the client's own ConfigError (naming the key) for a bad ``kafka.*`` option, on the driver."""
    from odradek.config import ConsumerConfig

    ConsumerConfig.from_mapping({**CONSUMER_DEFAULTS, **config})


def validate_producer_config(config: Mapping[str, object]) -> None:
    from odradek.config import ProducerConfig

    ProducerConfig.from_mapping({**PRODUCER_DEFAULTS, **config})


_ADMIN_KEYS = frozenset(
    {"bootstrap.servers", "client.id", "request.timeout.ms", "retry.backoff.ms", "retry.backoff.max.ms",
     "metadata.max.age.ms", "default.api.timeout.ms", *SECURITY_KEYS}
)  # fmt: skip
# the security keys (kafka.security.protocol, kafka.ssl.*, kafka.sasl.*) reach the admin client too

atexit.register(close_all)
