"""AlterConfigs, and the effective value of the cluster-level configs the controller acts on.

Kafka's rules for an AlterConfigs resource (``ConfigurationControlManager``):

- C1. ``resource_type`` is ``topic``, ``broker`` or ``cluster``; a broker's name is its id in decimal,
  the cluster's name is ``""``; anything else is INVALID_REQUEST.
- C2. A topic must exist (UNKNOWN_TOPIC_OR_PARTITION).
- C3. Every key must be a config of the resource's kind and every value valid for it, deletes included
  (INVALID_CONFIG, naming the key); a key twice in one resource, or a resource twice, is INVALID_REQUEST.
- C4. A resource changes all or nothing: its records go in one command. ``validate_only`` writes nothing.
- C5. Setting a key to its current value, or deleting an absent key, writes no record.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from controller.core.common import ControllerResult, error, pack
from controller.core.elections import LeaderPolicy
from metadata._validate import INT32_MAX
from metadata.configs import (
    BROKER_CONFIGS,
    TOPIC_CONFIGS,
    ConfigError,
    ConfigSchema,
    ControllerConfig,
)
from metadata.image import MetadataImage
from metadata.records import Config, ConfigResourceType
from proto import controller_pb2 as pb


class EffectiveConfig:
    """Cluster-level values as the controller must apply them now: cluster config, else static config.

    Immutable view over one image; one per decision.
    """

    __slots__ = ("_image", "_static", "_cluster")

    def __init__(self, image: MetadataImage, static: ControllerConfig) -> None:
        self._image = image
        self._static = static
        self._cluster = image.config(ConfigResourceType.CLUSTER, "")

    def cluster(self, key: str) -> Any:
        """``key`` (``num.partitions``, ``unclean.leader.election.enable``, ...) from the cluster config or
        the controller's static config."""
        text = self._cluster.get(key)
        if text is not None:
            try:
                return BROKER_CONFIGS.validate(key, text)
            except ConfigError:
                pass  # validated when written; a schema change may have narrowed it: use the default
        return self._static.cluster_default(key)

    def unclean(self, topic_name: str) -> bool:
        """``unclean.leader.election.enable`` for the topic: its own config, else the cluster's."""
        text = self._image.config(ConfigResourceType.TOPIC, topic_name).get("unclean.leader.election.enable")
        if text is not None:
            try:
                return bool(TOPIC_CONFIGS.validate("unclean.leader.election.enable", text))
            except ConfigError:
                pass
        return bool(self.cluster("unclean.leader.election.enable"))

    def min_insync_replicas(self, topic_name: str) -> int:
        """``min.insync.replicas`` for the topic: its own config, else the cluster's, else Kafka's default (1)."""
        text = self._image.config(ConfigResourceType.TOPIC, topic_name).get("min.insync.replicas")
        if text is None:
            text = self._cluster.get("min.insync.replicas")
        if text is not None:
            try:
                return int(TOPIC_CONFIGS.validate("min.insync.replicas", text))
            except ConfigError:
                pass
        return int(TOPIC_CONFIGS.key("min.insync.replicas").default)

    def elr_min_isr(self, topic_name: str) -> int:
        """What the eligible-leader-replica rules use (``controller.core.elections``): the topic's
        ``min.insync.replicas`` with ``eligible.leader.replicas.enable``, else 0 (off)."""
        return self.min_insync_replicas(topic_name) if self._static.eligible_leader_replicas_enable else 0

    def leader_policy(self) -> LeaderPolicy:
        return LeaderPolicy(self.unclean, self.elr_min_isr)


def _resource(image: MetadataImage, res: pb.AlterConfigsRequest.Resource) -> tuple[ConfigSchema, Any]:
    """The schema and ConfigResourceType of ``res`` (rules C1, C2); raises ``_Refused``."""
    name = res.resource_name
    if res.resource_type == ConfigResourceType.TOPIC:
        if image.topic(name) is None:
            raise _Refused("UNKNOWN_TOPIC_OR_PARTITION", f"Topic {name!r} does not exist")
        return TOPIC_CONFIGS, ConfigResourceType.TOPIC
    if res.resource_type == ConfigResourceType.BROKER:
        if not (name.isascii() and name.isdecimal() and str(int(name)) == name and int(name) <= INT32_MAX):
            raise _Refused("INVALID_REQUEST", f"A broker resource is named by a broker id, not {name!r}")
        return BROKER_CONFIGS, ConfigResourceType.BROKER
    if res.resource_type == ConfigResourceType.CLUSTER:
        if name != "":
            raise _Refused("INVALID_REQUEST", f"The cluster resource has the empty name, not {name!r}")
        return BROKER_CONFIGS, ConfigResourceType.CLUSTER
    raise _Refused("INVALID_REQUEST", f"Unknown resource type {res.resource_type!r}")


class _Refused(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def resource_records(image: MetadataImage, res: pb.AlterConfigsRequest.Resource) -> list[Config]:
    """The records that apply ``res`` (rules C1-C3, C5); raises ``_Refused``."""
    schema, resource_type = _resource(image, res)
    keys = [entry.key for entry in res.entries]
    if len(set(keys)) != len(keys):
        raise _Refused("INVALID_REQUEST", "Duplicate config keys in one resource")
    current = image.config(resource_type, res.resource_name)
    records = []
    for entry in res.entries:
        try:
            schema.key(entry.key)
            if not entry.delete:
                schema.validate(entry.key, entry.value)
        except ConfigError as exc:
            raise _Refused("INVALID_CONFIG", str(exc)) from None
        value = None if entry.delete else entry.value
        if current.get(entry.key) != value:
            records.append(Config(resource_type, res.resource_name, entry.key, value))
    return records


def alter_configs(
    image: MetadataImage, request: pb.AlterConfigsRequest, max_records: int
) -> ControllerResult[pb.AlterConfigsResponse]:
    """AlterConfigs (rules C1-C5): one result per resource, in request order."""
    seen = [(r.resource_type, r.resource_name) for r in request.resources]
    counts = Counter(seen)
    response = pb.AlterConfigsResponse()
    groups: list[list[Config]] = []
    for res, key in zip(request.resources, seen, strict=True):
        result = response.resources.add(resource_type=res.resource_type, resource_name=res.resource_name)
        if counts[key] > 1:
            result.error.CopyFrom(error("INVALID_REQUEST", "Duplicate resource in one request"))
            continue
        try:
            records = resource_records(image, res)
        except _Refused as exc:
            result.error.CopyFrom(error(exc.code, str(exc)))
            continue
        if len(records) > max_records:
            result.error.CopyFrom(error("POLICY_VIOLATION", f"More than {max_records} config changes at once"))
            continue
        groups.append(records)
    if request.validate_only:
        return ControllerResult((), response)
    return ControllerResult(pack(groups, max_records), response)
