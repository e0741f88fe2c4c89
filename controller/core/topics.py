"""CreateTopics, DeleteTopics and CreatePartitions (Kafka's ``ReplicationControlManager``).

Rules, checked in this order for each topic of a request (the tests cite them):

- T1. A name is 1-249 of ``[a-zA-Z0-9._-]`` and not ``.`` or ``..`` (INVALID_TOPIC_EXCEPTION); a name twice
  in one request is INVALID_REQUEST for both.
- T2. An existing name is TOPIC_ALREADY_EXISTS; a name that differs from an existing (or earlier created)
  one only by ``.`` versus ``_`` collides with it (INVALID_TOPIC_EXCEPTION), as in Kafka.
- T3. Every config key is a topic config and every value valid (INVALID_CONFIG naming the key).
- T4. Without an assignment: ``num_partitions`` and ``replication_factor`` of -1 take the cluster
  defaults (``num.partitions``, ``default.replication.factor``); other values below 1 are
  INVALID_PARTITIONS / INVALID_REPLICATION_FACTOR, and so is a replication factor above the number of
  eligible (unfenced, not shutting down) brokers. Replicas are placed by :mod:`controller.core.placement`.
- T5. With an explicit assignment (one replica list per partition), ``num_partitions`` and
  ``replication_factor`` are -1 or match it (else INVALID_REQUEST); every list is non-empty, without
  duplicates, of registered brokers, all of one length, with at least one eligible broker
  (else INVALID_REPLICA_ASSIGNMENT). The ISR is the eligible replicas, the leader the first of them.
- T6. A topic is created by one command (Topic, its Partitions, its Configs) and never split; topics are
  packed into commands of at most ``max_records`` records; a topic that cannot fit is INVALID_PARTITIONS.
  ``validate_only`` checks everything and writes nothing.
- T7. DeleteTopics of an unknown name is UNKNOWN_TOPIC_OR_PARTITION.
- T8. CreatePartitions only grows a topic (INVALID_PARTITIONS otherwise); new partitions keep the
  topic's replication factor; an explicit assignment lists exactly the new partitions (T5's checks).
- T9. No broker holds more than ``max.broker.partitions`` replicas (cluster config, else the controller's;
  the name of KIP-578, which Kafka did not adopt: Kafka has no such limit) after a CreateTopics or
  CreatePartitions, counting the topics created before in the same request: POLICY_VIOLATION naming the
  brokers and the limit. Each replica costs a broker a directory and open files; the limit keeps a request
  from exhausting them.
- T10. A partition's directory name, ``<topic>-<partition>``, fits 255 bytes (the file systems' limit):
  a 249-character topic can have at most 100000 partitions (INVALID_PARTITIONS beyond).
"""

from __future__ import annotations

import random
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from controller.core.alter_configs import EffectiveConfig
from controller.core.common import ControllerResult, Eligibility, chunk, error, pack
from controller.core.placement import assign_replicas
from metadata._validate import INT32_MAX
from metadata.configs import SHORT_MAX, TOPIC_CONFIGS, ConfigError
from metadata.image import MetadataImage
from metadata.records import Config, ConfigResourceType, MetadataRecord, Partition, RemoveTopic, Topic
from proto import controller_pb2 as pb

MAX_TOPIC_NAME = 249
_LEGAL = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


class Refused(Exception):
    """A topic of a request is refused with Kafka error ``code``."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class TopicContext:
    """What topic decisions need besides the request: immutable, one per decision."""

    image: MetadataImage
    effective: EffectiveConfig
    rng: random.Random
    max_records: int

    @property
    def eligible(self) -> Eligibility:
        return Eligibility(self.image)


def check_topic_name(name: str) -> None:
    """Kafka's ``Topic.validate`` (rule T1)."""
    if not name:
        raise Refused("INVALID_TOPIC_EXCEPTION", "Topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise Refused("INVALID_TOPIC_EXCEPTION", 'Topic name cannot be "." or ".."')
    if len(name) > MAX_TOPIC_NAME:
        raise Refused(
            "INVALID_TOPIC_EXCEPTION",
            f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME} characters, topic name: {name}",
        )
    if not set(name) <= _LEGAL:
        raise Refused(
            "INVALID_TOPIC_EXCEPTION",
            f'Topic name "{name}" is illegal, it contains a character other than ASCII alphanumerics, '
            "'.', '_' and '-'",
        )


def _collision_key(name: str) -> str:
    return name.replace(".", "_")


def new_topic_id(rng: random.Random, taken: set[str]) -> str:
    """A random (version 4) topic id not in ``taken``, from the injected random source."""
    while True:
        topic_id = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        if topic_id not in taken:
            taken.add(topic_id)
            return topic_id


def check_assignment(
    image: MetadataImage, eligible: Eligibility, lists: Sequence[pb.ReplicaList], first_partition: int,
    replication_factor: int | None,
) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:  # fmt: skip
    """``(replicas, isr)`` for each explicit replica list (rule T5); raises :class:`Refused`."""
    out = []
    rf = replication_factor
    for i, replica_list in enumerate(lists):
        p = first_partition + i
        replicas = tuple(replica_list.broker_ids)
        bad = "INVALID_REPLICA_ASSIGNMENT"
        if not replicas:
            raise Refused(bad, f"The manual partition assignment includes an empty replica list (partition {p})")
        if len(set(replicas)) != len(replicas):
            raise Refused(bad, f"The manual partition assignment of partition {p} lists a broker twice")
        unknown = [b for b in replicas if b not in image.brokers]
        if unknown:
            raise Refused(bad, f"The manual partition assignment of partition {p} names unregistered brokers {unknown}")
        if rf is not None and len(replicas) != rf:
            raise Refused(bad, f"Partition {p} has {len(replicas)} replica(s), not the replication factor of {rf}")
        rf = len(replicas)
        isr = tuple(b for b in replicas if eligible(b))
        if not isr:
            raise Refused(
                bad,
                f"All brokers specified in the manual partition assignment for partition {p} are fenced or in "
                "controlled shutdown",
            )
        out.append((replicas, isr))
    return out


def _placement(ctx: TopicContext, t: pb.TopicToCreate) -> tuple[list[tuple[int, ...]], list[tuple[int, ...]]]:
    """``(replicas, isr)`` per partition of a new topic (rules T4, T5)."""
    eligible = ctx.eligible
    if t.assignments:
        n = len(t.assignments)
        if t.num_partitions not in (-1, n) or t.replication_factor not in (-1, len(t.assignments[0].broker_ids)):
            raise Refused(
                "INVALID_REQUEST",
                "A topic with a manual partition assignment has num_partitions and replication_factor -1",
            )
        pairs = check_assignment(ctx.image, eligible, t.assignments, 0, None)
        return [r for r, _ in pairs], [i for _, i in pairs]
    n = ctx.effective.cluster("num.partitions") if t.num_partitions == -1 else t.num_partitions
    rf = ctx.effective.cluster("default.replication.factor") if t.replication_factor == -1 else t.replication_factor
    if n <= 0:
        raise Refused("INVALID_PARTITIONS", "Number of partitions was set to an invalid non-positive value.")
    if not 0 < rf <= SHORT_MAX:
        raise Refused(
            "INVALID_REPLICATION_FACTOR",
            "Replication factor must be larger than 0, or -1 to use the default value.",
        )
    return _placed(ctx, eligible, n, rf, 0)


MAX_DIR_NAME_BYTES = 255


def replica_load(image: MetadataImage) -> Counter[int]:
    """How many partition replicas each broker holds in ``image``."""
    return Counter(b for _, reg in image.all_partitions() for b in reg.replicas)


def check_capacity(ctx: TopicContext, name: str, replicas: Sequence[tuple[int, ...]], load: Counter[int]) -> None:
    """T9 for adding ``replicas`` to ``load``, then T10 for the last new partition's directory name."""
    limit = int(ctx.effective.cluster("max.broker.partitions"))
    added = Counter(b for reps in replicas for b in reps)
    over = sorted(b for b, n in added.items() if load[b] + n > limit)
    if over:
        detail = ", ".join(f"broker {b} would hold {load[b] + added[b]}" for b in over)
        raise Refused(
            "POLICY_VIOLATION",
            f"Topic {name}: {detail} partition replicas, above max.broker.partitions={limit}",
        )


def check_dir_name(name: str, partitions: int) -> None:
    """T10: ``<name>-<last partition>`` fits a directory name."""
    longest = f"{name}-{partitions - 1}"
    if len(longest.encode()) > MAX_DIR_NAME_BYTES:
        raise Refused(
            "INVALID_PARTITIONS",
            f"Topic {name} cannot have {partitions} partitions: the directory name {longest[:40]}...-{partitions - 1} "
            f"would be longer than {MAX_DIR_NAME_BYTES} bytes",
        )


def _placed(
    ctx: TopicContext, eligible: Eligibility, count: int, rf: int, start: int
) -> tuple[list[tuple[int, ...]], list[tuple[int, ...]]]:
    brokers = eligible.brokers()
    if rf > len(brokers):
        raise Refused(
            "INVALID_REPLICATION_FACTOR",
            f"Unable to replicate the partition {rf} time(s): The target replication factor of {rf} cannot be "
            f"reached because only {len(brokers)} broker(s) are registered and unfenced.",
        )
    if start + count - 1 > INT32_MAX or count > ctx.max_records:
        raise Refused("INVALID_PARTITIONS", f"Cannot create {count} partitions at once")
    replicas = assign_replicas(brokers, count, rf, ctx.rng, start_partition=start)
    return replicas, replicas


def _topic_records(
    ctx: TopicContext, t: pb.TopicToCreate, topic_id: str, load: Counter[int]
) -> tuple[list[MetadataRecord], int, int]:
    """The records creating topic ``t`` (rules T3-T6, T9, T10) and its partition count and replication factor;
    ``load`` gains its replicas."""
    try:
        TOPIC_CONFIGS.validate_all(t.configs)
    except ConfigError as exc:
        raise Refused("INVALID_CONFIG", str(exc)) from None
    replicas, isrs = _placement(ctx, t)
    check_dir_name(t.name, len(replicas))
    check_capacity(ctx, t.name, replicas, load)
    records: list[MetadataRecord] = [Topic(t.name, topic_id)]
    for p, (reps, isr) in enumerate(zip(replicas, isrs, strict=True)):
        leader = next(b for b in reps if b in isr)
        records.append(Partition(topic_id, p, reps, isr, leader))
    records += [Config(ConfigResourceType.TOPIC, t.name, k, t.configs[k]) for k in sorted(t.configs)]
    if len(records) > ctx.max_records:
        raise Refused(
            "INVALID_PARTITIONS",
            f"Topic {t.name} needs {len(records)} metadata records; at most {ctx.max_records} are written at "
            "once (controller.max.records.per.command)",
        )
    load.update(b for reps in replicas for b in reps)
    return records, len(replicas), len(replicas[0])


def create_topics(ctx: TopicContext, request: pb.CreateTopicsRequest) -> ControllerResult[pb.CreateTopicsResponse]:
    """CreateTopics (rules T1-T6): one result per topic, in request order."""
    image = ctx.image
    names = Counter(t.name for t in request.topics)
    taken_ids = set(image.topics_by_id)
    collisions = {_collision_key(name): name for name in image.topics_by_name}
    response = pb.CreateTopicsResponse()
    groups = []
    load = replica_load(image)
    for t in request.topics:
        result = response.topics.add(name=t.name)
        try:
            check_topic_name(t.name)
            if names[t.name] > 1:
                raise Refused("INVALID_REQUEST", f"Topic {t.name} appears twice in the request")
            if image.topic(t.name) is not None:
                raise Refused("TOPIC_ALREADY_EXISTS", f"Topic '{t.name}' already exists.")
            other = collisions.get(_collision_key(t.name))
            if other is not None:
                raise Refused("INVALID_TOPIC_EXCEPTION", f"Topic '{t.name}' collides with existing topic: {other}")
            topic_id = new_topic_id(ctx.rng, taken_ids)
            records, n, rf = _topic_records(ctx, t, topic_id, load)
        except Refused as exc:
            result.error.CopyFrom(error(exc.code, str(exc)))
            continue
        collisions[_collision_key(t.name)] = t.name
        result.num_partitions, result.replication_factor = n, rf
        if not request.validate_only:
            result.topic_id = topic_id
            groups.append(records)
    return ControllerResult(pack(groups, ctx.max_records), response)


def delete_topics(ctx: TopicContext, request: pb.DeleteTopicsRequest) -> ControllerResult[pb.DeleteTopicsResponse]:
    """DeleteTopics (rule T7): one RemoveTopic per topic."""
    response = pb.DeleteTopicsResponse()
    names = Counter(request.names)
    records: list[MetadataRecord] = []
    for name in request.names:
        result = response.topics.add(name=name)
        topic = ctx.image.topic(name)
        if names[name] > 1:
            result.error.CopyFrom(error("INVALID_REQUEST", f"Topic {name} appears twice in the request"))
        elif topic is None:
            result.error.CopyFrom(error("UNKNOWN_TOPIC_OR_PARTITION", f"Topic {name} does not exist"))
        else:
            result.topic_id = topic.topic_id
            result.num_partitions = len(topic.partitions)
            records.append(RemoveTopic(topic.topic_id))
    return ControllerResult(chunk(records, ctx.max_records), response)


def _grow(
    ctx: TopicContext, t: pb.CreatePartitionsRequest.Topic, result: pb.TopicResult, load: Counter[int]
) -> list[MetadataRecord]:
    """The Partition records that grow topic ``t`` (rules T8-T10); raises :class:`Refused`; ``load`` gains the
    new replicas."""
    topic = ctx.image.topic(t.name)
    if topic is None:
        raise Refused("UNKNOWN_TOPIC_OR_PARTITION", f"Topic {t.name} does not exist")
    current = len(topic.partitions)
    result.topic_id = topic.topic_id
    if t.count < current:
        raise Refused(
            "INVALID_PARTITIONS",
            f"The topic {t.name} currently has {current} partition(s); {t.count} would not be an increase.",
        )
    if t.count == current:
        raise Refused("INVALID_PARTITIONS", f"Topic already has {current} partition(s).")
    add = t.count - current
    rf = len(topic.partitions[0].replicas)
    if t.assignments:
        if len(t.assignments) != add:
            raise Refused(
                "INVALID_REPLICA_ASSIGNMENT",
                f"Attempted to add {add} additional partition(s), but {len(t.assignments)} assignment(s) were "
                "specified.",
            )
        pairs = check_assignment(ctx.image, ctx.eligible, t.assignments, current, rf)
        replicas, isrs = [r for r, _ in pairs], [i for _, i in pairs]
    else:
        replicas, isrs = _placed(ctx, ctx.eligible, add, rf, current)
    check_dir_name(t.name, t.count)
    check_capacity(ctx, t.name, replicas, load)
    load.update(b for reps in replicas for b in reps)
    records: list[MetadataRecord] = []
    for i, (reps, isr) in enumerate(zip(replicas, isrs, strict=True)):
        leader = next(b for b in reps if b in isr)
        records.append(Partition(topic.topic_id, current + i, reps, isr, leader))
    if len(records) > ctx.max_records:
        raise Refused("INVALID_PARTITIONS", f"Cannot create more than {ctx.max_records} partitions at once")
    result.num_partitions, result.replication_factor = t.count, rf
    return records


def create_partitions(
    ctx: TopicContext, request: pb.CreatePartitionsRequest
) -> ControllerResult[pb.CreatePartitionsResponse]:
    """CreatePartitions (rule T8): each topic grows by one command."""
    response = pb.CreatePartitionsResponse()
    names = Counter(t.name for t in request.topics)
    groups = []
    load = replica_load(ctx.image)
    for t in request.topics:
        result = response.topics.add(name=t.name)
        try:
            if names[t.name] > 1:
                raise Refused("INVALID_REQUEST", f"Topic {t.name} appears twice in the request")
            groups.append(_grow(ctx, t, result, load))
        except Refused as exc:
            result.error.CopyFrom(error(exc.code, str(exc)))
    if request.validate_only:
        return ControllerResult((), response)
    return ControllerResult(pack(groups, ctx.max_records), response)
