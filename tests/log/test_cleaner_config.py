"""The broker's ``log.cleaner.*`` keys reach the cleaner (``broker.maintenance.make_log_cleaner``)."""

from __future__ import annotations

import pytest

from broker.config import BrokerConfig
from broker.maintenance import make_log_cleaner
from common.clock import ManualClock
from metadata.configs import ConfigError


class NoPartitions:
    """The one ReplicaManager method the cleaner's log source uses."""

    def partitions(self) -> dict[object, object]:
        return {}


def test_defaults_are_kafkas() -> None:
    cleaner = make_log_cleaner(NoPartitions(), BrokerConfig.from_props({}), ManualClock())  # type: ignore[arg-type]
    config = cleaner.config
    assert config.enable
    assert (config.threads, config.backoff_ms) == (1, 15_000)
    assert (config.dedupe_buffer_size, config.io_buffer_size, config.io_buffer_load_factor) == (134217728, 524288, 0.9)
    assert cleaner.clean_once() is None, "no partition, nothing to clean"


def test_given_keys_are_used() -> None:
    props = {
        "log.cleaner.enable": "false",
        "log.cleaner.threads": "3",
        "log.cleaner.backoff.ms": "250",
        "log.cleaner.dedupe.buffer.size": "1048576",
        "log.cleaner.io.buffer.size": "65536",
        "log.cleaner.io.buffer.load.factor": "0.5",
    }
    config = make_log_cleaner(NoPartitions(), BrokerConfig.from_props(props), ManualClock()).config  # type: ignore[arg-type]
    assert not config.enable
    assert (config.threads, config.backoff_ms, config.io_buffer_size) == (3, 250, 65536)
    assert config.max_map_entries == int(1048576 // 3 // 24 * 0.5)


@pytest.mark.parametrize(("key", "value"), [("log.cleaner.threads", "0"), ("log.cleaner.io.buffer.load.factor", "2")])
def test_bad_values_name_the_key(key: str, value: str) -> None:
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        BrokerConfig.from_props({key: value})
