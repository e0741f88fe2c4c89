"""The broker's configuration (``odradek broker --config KEY=VALUE``) and each partition's effective LogConfig.

Keys are Kafka's, with Kafka's defaults; an unknown key or a bad value raises
:class:`~metadata.configs.ConfigError`, whose message names the key. Besides every broker-level synonym
of a topic config (``log.segment.bytes``, ``log.retention.ms``, ``message.max.bytes``, ``min.insync.replicas``,
... :data:`metadata.configs.BROKER_CONFIGS`), the broker reads::

    key                                            default      what
    broker.heartbeat.interval.ms                   500          heartbeat period to the active controller (Kafka: 2000)
    broker.session.timeout.ms                      2000         the controller's (Kafka: 9000); accepted, unused here
    broker.rack                                    ""           registered with the controller
    log.retention.hours / .minutes                 168 / unset  used when log.retention.ms is not set
    log.roll.hours                                 168          used when log.roll.ms is not set
    log.retention.check.interval.ms                300000       how often retention runs
    log.flush.scheduler.interval.ms                LONG_MAX     how often idle logs are checked for flush.ms
    fetch.max.bytes                                57671680     cap of a consumer Fetch response
    replica.fetch.max.bytes                        1048576      per partition, follower fetches
    replica.fetch.response.max.bytes               10485760     cap of a follower Fetch response
    replica.fetch.wait.max.ms                      500          followers' long poll
    replica.fetch.stream.enable                    true         not Kafka's: followers send their fetches on one
                                                                ReplicaFetch stream per leader (no call set-up
                                                                per round); false: one Fetch call per round
    replica.fetch.tcp.enable                       true         not Kafka's: followers fetch over a leader's
                                                                REPLICATION listener (plain TCP frames,
                                                                broker.replication_link) when it has one
                                                                (their own listener.security.protocol.map
                                                                must name REPLICATION if it is given)
    replica.fetch.session.enable                   true         not Kafka's name (Kafka's followers always use
                                                                fetch sessions, KIP-227): over a REPLICATION
                                                                listener, followers name only the partitions
                                                                that changed (broker.fetch_session)
    consumer.fetch.stream.enable                   true         not Kafka's: consumers may send their fetches on
                                                                one FetchStream per broker; false: the broker
                                                                answers it UNIMPLEMENTED (unary Fetch calls)
    produce.stream.enable                          true         not Kafka's: producers may send their requests on
                                                                one ProduceStream per broker; false: the broker
                                                                answers it UNIMPLEMENTED (unary Produce calls)
    replica.fetch.min.bytes                        1
    replica.lag.time.max.ms                        30000        a follower slower than this leaves the ISR
    replica.high.watermark.checkpoint.interval.ms  5000         how often high watermarks are checkpointed
    eligible.leader.replicas.enable                true         KIP-966 (the controllers' key too): the high
                                                                watermark stops below min.insync.replicas
    auto.create.topics.enable                      false        NOT Kafka's default (true): a Metadata request
                                                                for an unknown topic creates it only if set
    socket.request.max.bytes                       104857600    the largest request the broker accepts
    queued.max.requests                            500          concurrent short requests over which gRPC
                                                                refuses (long polls have room of their own:
                                                                2 x purgatory.max.operations)
    num.io.threads                                 128          gRPC worker threads for the short requests
                                                                (Kafka: 8); long polls (Fetch, acks=all Produce)
                                                                wait without one; a batch held for its turn (S8)
                                                                keeps one, at most a quarter of them at once
    controlled.shutdown.enable                     true
    controlled.shutdown.timeout.ms                 30000        not Kafka's: bound on the controlled shutdown
    purgatory.max.operations                       10000        not Kafka's: bound on waiting fetches and
                                                                produces per purgatory; over it, answer at once
    fetch.inline.read.max.bytes                    262144       not Kafka's: a long-polling Fetch woken with at
                                                                most this much to read reads it on the event
                                                                loop (no hop to a worker and back), as does a
                                                                fetch with nothing to read yet; 0: never
    python.switch.interval.ms                      0.5          not Kafka's: the interpreter's thread switch
                                                                interval (sys.setswitchinterval; Python's 5 ms
                                                                lets a busy thread delay a woken request that long)
    offsets.topic.num.partitions                   50           __consumer_offsets partitions (at creation)
    offsets.topic.replication.factor               3            not created with fewer live brokers
    offsets.retention.ms                           604800000    committed offsets of an empty group expire
    offsets.retention.check.interval.ms            600000       how often expired offsets and empty groups go
    offsets.commit.timeout.ms                      5000         a coordinator write waits this long for the ISR
    offsets.load.buffer.size                       5242880      bytes per read when loading groups
    offset.metadata.max.bytes                      4096         longest commit metadata
    group.consumer.session.timeout.ms              45000        default member session timeout
    group.consumer.min/max.session.timeout.ms      45000/60000  bounds of a member's session.timeout.ms
    group.consumer.heartbeat.interval.ms           5000         the interval the coordinator tells members
    group.consumer.assignors                       uniform,range  server assignors; the first is the default
    group.consumer.max.size                        2147483647   members per group
    group.min/max.session.timeout.ms               6000/1800000 bounds of a classic member's session timeout
    group.initial.rebalance.delay.ms               3000         a classic group's first rebalance waits this
    group.max.size                                 2147483647   members per classic group
    max.connections                                10000        Kafka-listener connections per listener
                                                                (Kafka: unbounded); one thread each
    connections.max.idle.ms                        600000       an idle Kafka-listener connection closes
    socket.sendfile.enable                         true         not Kafka's: Kafka-listener fetches send
                                                                segment bytes with sendfile (false: copy)
    producer.id.expiration.ms                      86400000     an idempotent producer's partition state goes
                                                                this long after this broker last wrote one of
                                                                its batches (broker time, not the batch's)
    producer.id.max.per.partition                  1000         not Kafka's: producers remembered per partition;
                                                                a new one beyond it evicts the least recent
    producer.id.expiration.check.interval.ms       600000       how often partitions look for expired producers
    transactional.id.expiration.ms                 604800000    an idle transactional id is forgotten (TC10)
    transaction.state.log.num.partitions           50           __transaction_state partitions (at creation)
    transaction.state.log.replication.factor       3            not created with fewer live brokers
    transaction.state.log.min.isr                  2            its min.insync.replicas (capped at the factor)
    transaction.state.log.segment.bytes            104857600    its segment.bytes
    transaction.max.timeout.ms                     900000       the longest transaction.timeout.ms allowed
    transaction.abort.timed.out.transaction.cleanup.interval.ms  10000  how often expired transactions abort
    transaction.remove.expired.transaction.cleanup.interval.ms   3600000  how often idle ids are expired
    log.cleaner.enable                             true         run the log cleaner (compacted topics)
    log.cleaner.threads                            1            cleaner threads
    log.cleaner.backoff.ms                         15000        a cleaner thread's sleep when no log is due
    log.cleaner.dedupe.buffer.size                 134217728    offset map capacity, all threads (24 B a key)
    log.cleaner.io.buffer.size                     524288       read unit of the cleaner
    log.cleaner.io.buffer.load.factor              0.9          how full the offset map may get

Topic configs: a partition's :class:`~log.config.LogConfig` layers, lowest first, Kafka's defaults, this
broker's static ``--config`` synonyms, the dynamic cluster-wide broker config (``cluster`` resource), the
dynamic config of this broker (``broker``/``<id>``) and the topic's own configs, all from the metadata image
(:func:`effective_log_config`); the broker reacts when any of them changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from controller.security.settings import SECURITY_KEYS, is_listener_override
from log.config import LogConfig
from log.errors import InvalidConfigError
from metadata.configs import (
    BROKER_CONFIGS,
    TOPIC_CONFIGS,
    TOPIC_TO_BROKER_KEY,
    ConfigError,
    ConfigKey,
    ConfigSchema,
    ConfigType,
)
from metadata.image import MetadataImage
from metadata.records import ConfigResourceType

INT_MAX, LONG_MAX = 2**31 - 1, 2**63 - 1
HOUR_MS, MINUTE_MS = 3_600_000, 60_000

_INT, _LONG, _BOOL, _STRING = ConfigType.INT, ConfigType.LONG, ConfigType.BOOLEAN, ConfigType.STRING


def _key(name: str, type_: ConfigType, default: str, low: float | None = None, high: float | None = None) -> ConfigKey:
    return ConfigKey(name, type_, default, low, high)


_BROKER_ONLY = [
    _key("broker.heartbeat.interval.ms", _INT, "500", 1),
    _key("broker.session.timeout.ms", _INT, "2000", 1),
    _key("broker.rack", _STRING, ""),
    _key("log.retention.hours", _INT, "168", -1),
    _key("log.retention.minutes", _INT, "", -1),
    _key("log.roll.hours", _INT, "168", 1),
    _key("log.retention.check.interval.ms", _LONG, "300000", 1),
    _key("log.flush.scheduler.interval.ms", _LONG, str(LONG_MAX), 1),
    _key("fetch.max.bytes", _INT, "57671680", 0),
    _key("replica.fetch.max.bytes", _INT, "1048576", 0),
    _key("replica.fetch.response.max.bytes", _INT, "10485760", 0),
    _key("replica.fetch.wait.max.ms", _INT, "500", 0),
    _key("replica.fetch.min.bytes", _INT, "1", 1),
    _key("replica.fetch.stream.enable", _BOOL, "true"),
    _key("replica.fetch.tcp.enable", _BOOL, "true"),
    _key("replica.fetch.session.enable", _BOOL, "true"),
    _key("consumer.fetch.stream.enable", _BOOL, "true"),
    _key("produce.stream.enable", _BOOL, "true"),
    _key("replica.lag.time.max.ms", _LONG, "30000", 1),
    _key("replica.high.watermark.checkpoint.interval.ms", _LONG, "5000", 1),
    _key("eligible.leader.replicas.enable", _BOOL, "true"),
    _key("auto.create.topics.enable", _BOOL, "false"),
    _key("socket.request.max.bytes", _INT, "104857600", 1),
    _key("queued.max.requests", _INT, "500", 1),
    _key("num.io.threads", _INT, "128", 1, 10_000),
    _key("controlled.shutdown.enable", _BOOL, "true"),
    _key("controlled.shutdown.timeout.ms", _INT, "30000", 0),
    _key("purgatory.max.operations", _INT, "10000", 0),
    _key("fetch.inline.read.max.bytes", _INT, "262144", 0),
    _key("python.switch.interval.ms", ConfigType.DOUBLE, "0.5", 0.05, 100.0),
    # the group coordinator (broker/group/)
    _key("offsets.topic.num.partitions", _INT, "50", 1),
    _key("offsets.topic.replication.factor", _INT, "3", 1, 32767),
    _key("offsets.retention.ms", _LONG, "604800000", 1),
    _key("offsets.retention.check.interval.ms", _LONG, "600000", 1),
    _key("offsets.commit.timeout.ms", _INT, "5000", 1),
    _key("offsets.load.buffer.size", _INT, "5242880", 1),
    _key("offset.metadata.max.bytes", _INT, "4096", 0),
    _key("group.consumer.session.timeout.ms", _INT, "45000", 1),
    _key("group.consumer.min.session.timeout.ms", _INT, "45000", 1),
    _key("group.consumer.max.session.timeout.ms", _INT, "60000", 1),
    _key("group.consumer.heartbeat.interval.ms", _INT, "5000", 1),
    _key("group.consumer.assignors", _STRING, "uniform,range"),
    _key("group.consumer.max.size", _INT, str(INT_MAX), 1),
    # the classic group protocol and the Kafka listener (broker/group/classic.py, broker/kafka/)
    _key("group.min.session.timeout.ms", _INT, "6000", 1),
    _key("group.max.session.timeout.ms", _INT, "1800000", 1),
    _key("group.initial.rebalance.delay.ms", _INT, "3000", 0),
    _key("group.max.size", _INT, str(INT_MAX), 1),
    _key("max.connections", _INT, "10000", 1),
    _key("connections.max.idle.ms", _LONG, "600000", 1),
    _key("socket.sendfile.enable", _BOOL, "true"),
    _key("producer.id.expiration.ms", _INT, "86400000", 1),
    _key("producer.id.expiration.check.interval.ms", _INT, "600000", 1),
    _key("producer.id.max.per.partition", _INT, "1000", 1),
    _key("transactional.id.expiration.ms", _INT, "604800000", 1),
    _key("transaction.state.log.num.partitions", _INT, "50", 1),
    _key("transaction.state.log.replication.factor", _INT, "3", 1, 32767),
    _key("transaction.state.log.min.isr", _INT, "2", 1),
    _key("transaction.state.log.segment.bytes", _INT, "104857600", 14),
    _key("transaction.max.timeout.ms", _INT, "900000", 1),
    _key("transaction.abort.timed.out.transaction.cleanup.interval.ms", _INT, "10000", 1),
    _key("transaction.remove.expired.transaction.cleanup.interval.ms", _INT, "3600000", 1),
    # the log cleaner (log/cleaner/, broker.maintenance.make_log_cleaner)
    _key("log.cleaner.enable", _BOOL, "true"),
    _key("log.cleaner.threads", _INT, "1", 1),
    _key("log.cleaner.backoff.ms", _LONG, "15000", 0),
    _key("log.cleaner.dedupe.buffer.size", _LONG, "134217728", 24),
    _key("log.cleaner.io.buffer.size", _INT, "524288", 1),
    _key("log.cleaner.io.buffer.load.factor", ConfigType.DOUBLE, "0.9", 0.01, 1.0),
]
BROKER_SCHEMA = ConfigSchema("broker", list(BROKER_CONFIGS.keys.values()) + _BROKER_ONLY + SECURITY_KEYS)
"""Every key ``odradek broker --config`` accepts."""

BROKER_TO_TOPIC_KEY: Mapping[str, str] = {b: t for t, b in TOPIC_TO_BROKER_KEY.items()}
_UNSET = ""  # the default of keys Kafka leaves null


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    """The broker's static configuration. Immutable; shared freely between threads.

    ``props`` are the keys given explicitly (as strings); :meth:`get` answers for every key of
    :data:`BROKER_SCHEMA`, falling back to Kafka's default.
    """

    props: Mapping[str, str]
    values: Mapping[str, Any]

    @classmethod
    def from_props(cls, props: Mapping[str, str] | None = None) -> BrokerConfig:
        """Parse ``KEY=VALUE`` strings; :class:`ConfigError` naming the key for unknown keys or bad values."""
        given = dict(props or {})
        values: dict[str, Any] = {}
        for name, key in BROKER_SCHEMA.keys.items():
            text = given.get(name, key.default)
            values[name] = None if text == _UNSET and name not in given else key.parse(text)
        for name in given:
            if not is_listener_override(name):  # listener.name.<name>.ssl.client.auth: checked by NodeSecurity
                BROKER_SCHEMA.key(name)  # unknown keys raise, naming the key
        config = cls(given, values)
        config.log_config()  # a value that no log accepts fails now, not when the first partition opens
        return config

    def get(self, key: str) -> Any:
        if key not in self.values:
            BROKER_SCHEMA.key(key)  # raises ConfigError naming the key
        return self.values[key]

    def is_set(self, key: str) -> bool:
        return key in self.props

    # --- the values the broker reads --------------------------------------------------------------

    @property
    def heartbeat_interval_ms(self) -> int:
        return int(self.get("broker.heartbeat.interval.ms"))

    @property
    def message_max_bytes(self) -> int:
        return int(self.get("message.max.bytes"))

    @property
    def fetch_max_bytes(self) -> int:
        return int(self.get("fetch.max.bytes"))

    @property
    def replica_fetch_response_max_bytes(self) -> int:
        return int(self.get("replica.fetch.response.max.bytes"))

    @property
    def retention_check_interval_ms(self) -> int:
        return int(self.get("log.retention.check.interval.ms"))

    @property
    def rack(self) -> str:
        return str(self.get("broker.rack") or "")

    def log_props(self) -> dict[str, str]:
        """This broker's static log defaults as topic-config props (``log.retention.hours`` -> ``retention.ms``)."""
        props = {BROKER_TO_TOPIC_KEY[k]: v for k, v in self.props.items() if k in BROKER_TO_TOPIC_KEY}
        if "log.retention.ms" not in self.props:
            minutes, hours = self.get("log.retention.minutes"), self.get("log.retention.hours")
            if minutes is not None:
                props["retention.ms"] = str(-1 if minutes < 0 else minutes * MINUTE_MS)
            elif self.is_set("log.retention.hours"):
                props["retention.ms"] = str(-1 if hours < 0 else hours * HOUR_MS)
        if "log.roll.ms" not in self.props and self.is_set("log.roll.hours"):
            props["segment.ms"] = str(self.get("log.roll.hours") * HOUR_MS)
        return props

    def log_config(self) -> LogConfig:
        """The LogConfig of a topic with no configs of its own and no dynamic broker configs."""
        try:
            return LogConfig.from_props(self.log_props())
        except InvalidConfigError as exc:
            raise ConfigError("log", str(exc)) from None


def dynamic_log_props(image: MetadataImage, broker_id: int) -> dict[str, str]:
    """The dynamic broker configs (cluster-wide, then this broker's) that are topic-config synonyms."""
    props: dict[str, str] = {}
    for resource_type, name in ((ConfigResourceType.CLUSTER, ""), (ConfigResourceType.BROKER, str(broker_id))):
        for key, value in image.config(resource_type, name).items():
            topic_key = BROKER_TO_TOPIC_KEY.get(key)
            if topic_key is not None:
                props[topic_key] = value
    return props


def effective_log_config(image: MetadataImage, topic: str, broker_id: int, config: BrokerConfig) -> LogConfig:
    """Kafka's defaults < static broker config < dynamic cluster < dynamic broker < the topic's configs.

    A value the log refuses (the controller validated it; this is defence in depth) is skipped, so the
    partition keeps the layer below.
    """
    result = config.log_config()
    layers = (dynamic_log_props(image, broker_id), dict(image.config(ConfigResourceType.TOPIC, topic)))
    for layer in layers:
        for key, value in layer.items():
            try:
                result = LogConfig.from_props({key: value}, result)
            except InvalidConfigError:
                continue
    return result


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One line of DescribeConfigs."""

    key: str
    value: str
    source: str  # DYNAMIC_TOPIC_CONFIG, DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG,
    #              STATIC_BROKER_CONFIG or DEFAULT_CONFIG (Kafka's names)
    read_only: bool = False

    @property
    def is_default(self) -> bool:
        return self.source == "DEFAULT_CONFIG"


def describe_topic_configs(image: MetadataImage, topic: str, broker_id: int, config: BrokerConfig) -> list[ConfigEntry]:
    """Every topic config with its effective value and where that value comes from (Kafka's sources)."""
    effective = effective_log_config(image, topic, broker_id, config).to_props()
    topic_props = image.config(ConfigResourceType.TOPIC, topic)
    cluster = image.config(ConfigResourceType.CLUSTER, "")
    own = image.config(ConfigResourceType.BROKER, str(broker_id))
    static = config.log_props()
    entries = []
    for key in TOPIC_CONFIGS.keys:
        synonym = TOPIC_TO_BROKER_KEY.get(key, key)
        if key in topic_props:
            source = "DYNAMIC_TOPIC_CONFIG"
        elif synonym in own:
            source = "DYNAMIC_BROKER_CONFIG"
        elif synonym in cluster:
            source = "DYNAMIC_DEFAULT_BROKER_CONFIG"
        elif key in static:
            source = "STATIC_BROKER_CONFIG"
        else:
            source = "DEFAULT_CONFIG"
        entries.append(ConfigEntry(key, effective.get(key, TOPIC_CONFIGS.keys[key].default), source))
    return entries


def describe_broker_configs(image: MetadataImage, broker_id: int, config: BrokerConfig) -> list[ConfigEntry]:
    """Every broker key with its value: dynamic (this broker, then cluster-wide), static, or default."""
    cluster = image.config(ConfigResourceType.CLUSTER, "")
    own = image.config(ConfigResourceType.BROKER, str(broker_id))
    entries = []
    for key, spec in BROKER_SCHEMA.keys.items():
        dynamic = key in BROKER_CONFIGS
        if dynamic and key in own:
            entries.append(ConfigEntry(key, own[key], "DYNAMIC_BROKER_CONFIG"))
        elif dynamic and key in cluster:
            entries.append(ConfigEntry(key, cluster[key], "DYNAMIC_DEFAULT_BROKER_CONFIG"))
        elif key in config.props:
            entries.append(ConfigEntry(key, config.props[key], "STATIC_BROKER_CONFIG", read_only=not dynamic))
        else:
            entries.append(ConfigEntry(key, spec.default, "DEFAULT_CONFIG", read_only=not dynamic))
    return entries
