"""AlterPartition (ISR changes from partition leaders) and ElectLeaders (preferred and unclean elections).

AlterPartition rules, checked in Kafka's order (``ReplicationControlManager.alterPartition``):

- A1. The sender's broker epoch is its current registration's (else STALE_BROKER_EPOCH).
- A2. The topic id and partition exist (else UNKNOWN_TOPIC_OR_PARTITION).
- A3. The sender leads the partition (else NOT_LEADER_OR_FOLLOWER).
- A4. Its leader epoch is the partition's (else FENCED_LEADER_EPOCH).
- A5. Its partition epoch is the partition's (else INVALID_UPDATE_VERSION: it acted on a stale state).
- A6. The new ISR lists replicas only, each once, and includes the leader (else INVALID_REQUEST).
- A7. Every member is eligible: registered, unfenced, not in controlled shutdown (else INELIGIBLE_REPLICA);
  a joining member named with a broker epoch is in that registration still (KIP-903: a broker that came back
  with a shorter log is not counted in by what its previous life fetched; else INELIGIBLE_REPLICA).
- A8. The answer is the partition's state after the change (an unchanged ISR writes nothing).
- A9. With eligible leader replicas (KIP-966, ``controller.core.elections`` ELR1): a shrink below
  ``min.insync.replicas`` moves the members it removes to the ELR (the high watermark stops there, so they
  hold it); an expansion takes its joiners out of the ELR, and an ISR at ``min.insync.replicas`` clears it.

ElectLeaders rules (``ReplicationControlManager.electLeaders``):

- L1. Preferred: the first replica leads if it is an eligible ISR member (else
  PREFERRED_LEADER_NOT_AVAILABLE); if it leads already, ELECTION_NOT_NEEDED.
- L2. Unclean: only a partition without a leader is elected (else ELECTION_NOT_NEEDED): an eligible ISR
  member if there is one, else any eligible replica (else ELIGIBLE_LEADERS_NOT_AVAILABLE).
- L3. No topics named: every partition of the cluster, and ELECTION_NOT_NEEDED results are left out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from controller.core.common import ControllerResult, Eligibility, chunk, error
from controller.core.elections import UncleanPolicy, change, elr_min_isr, preferred, reconcile, with_elr
from metadata.image import MetadataImage, PartitionRegistration, TopicIdPartition
from metadata.records import NO_LEADER, MetadataRecord
from proto import common_pb2
from proto import controller_pb2 as pb


def _refuse(code: str, message: str) -> ControllerResult[pb.AlterPartitionResponse]:
    return ControllerResult((), pb.AlterPartitionResponse(error=error(code, message)))


def _isr_error(reg: PartitionRegistration, new_isr: tuple[int, ...], eligible: Eligibility) -> common_pb2.Error | None:
    """Rules A6, A7."""
    if len(set(new_isr)) != len(new_isr):
        return error("INVALID_REQUEST", f"The new ISR {list(new_isr)} lists a broker twice")
    strangers = [b for b in new_isr if b not in reg.replicas]
    if strangers:
        return error("INVALID_REQUEST", f"The new ISR has non-replicas {strangers} (replicas {list(reg.replicas)})")
    if reg.leader not in new_isr:
        return error("INVALID_REQUEST", f"The new ISR {list(new_isr)} does not include the leader {reg.leader}")
    ineligible = [b for b in new_isr if not eligible(b)]
    if ineligible:
        return error("INELIGIBLE_REPLICA", f"Brokers {ineligible} are fenced, in controlled shutdown or not registered")
    return None


def _stale_joiner(image: MetadataImage, request: pb.AlterPartitionRequest) -> common_pb2.Error | None:
    """Rule A7, KIP-903 part."""
    for joining in request.joining:
        broker = image.broker(joining.broker_id)
        if joining.broker_epoch >= 0 and (broker is None or broker.broker_epoch != joining.broker_epoch):
            current = "none" if broker is None else broker.broker_epoch
            return error("INELIGIBLE_REPLICA", f"Broker {joining.broker_id} joins with epoch "
                         f"{joining.broker_epoch}, its registration has {current}")  # fmt: skip
    return None


def alter_partition(
    image: MetadataImage, request: pb.AlterPartitionRequest, min_isr_for: Callable[[str], int] = lambda _: 0
) -> ControllerResult[pb.AlterPartitionResponse]:
    """AlterPartition (rules A1-A9); ``min_isr_for(topic)`` is the ELR rules' ``min.insync.replicas`` (0: off)."""
    broker = image.broker(request.broker_id)
    if broker is None or broker.broker_epoch != request.broker_epoch:
        current = "none" if broker is None else broker.broker_epoch
        return _refuse(
            "STALE_BROKER_EPOCH",
            f"Broker {request.broker_id} has epoch {current}, the request {request.broker_epoch}",
        )
    topic = image.topic_by_id(request.topic_id)
    reg = None if topic is None else topic.partition(request.partition)
    if topic is None or reg is None:
        return _refuse("UNKNOWN_TOPIC_OR_PARTITION", f"No partition {request.partition} of topic id {request.topic_id}")
    where = f"{topic.name}-{request.partition}"
    if reg.leader != request.broker_id:
        return _refuse(
            "NOT_LEADER_OR_FOLLOWER", f"Broker {request.broker_id} does not lead {where} ({reg.leader} does)"
        )
    if request.leader_epoch != reg.leader_epoch:
        return _refuse(
            "FENCED_LEADER_EPOCH", f"{where} has leader epoch {reg.leader_epoch}, the request {request.leader_epoch}"
        )
    if request.partition_epoch != reg.partition_epoch:
        return _refuse(
            "INVALID_UPDATE_VERSION",
            f"{where} has partition epoch {reg.partition_epoch}, the request {request.partition_epoch}",
        )
    new_isr = tuple(request.new_isr)
    problem = _isr_error(reg, new_isr, Eligibility(image)) or _stale_joiner(image, request)
    if problem is not None:
        return ControllerResult((), pb.AlterPartitionResponse(error=problem))
    min_isr = min_isr_for(topic.name)
    elr = with_elr(reg, new_isr, min_isr) if min_isr > 0 else None  # A9
    last = () if min_isr > 0 else None  # the partition has a leader (ELR3)
    tp = TopicIdPartition(topic.topic_id, topic.name, request.partition)
    record = change(tp, reg, reg.leader, new_isr, elr, last)
    bump = 0 if record is None else 1  # Kafka's rule: every change bumps the partition epoch
    response = pb.AlterPartitionResponse(
        leader=reg.leader, leader_epoch=reg.leader_epoch, partition_epoch=reg.partition_epoch + bump, isr=new_isr
    )
    return ControllerResult(() if record is None else ((record,),), response)


def _targets(
    image: MetadataImage, request: pb.ElectLeadersRequest, response: pb.ElectLeadersResponse
) -> Iterator[tuple[TopicIdPartition, PartitionRegistration]]:
    """The partitions named by the request (rule L3); unknown ones get their error result here."""
    if not request.topics:
        yield from image.all_partitions()
        return
    seen: set[tuple[str, int]] = set()
    for entry in request.topics:
        topic = image.topic(entry.topic)
        numbers = list(entry.partitions) or (sorted(topic.partitions) if topic is not None else [-1])
        for p in numbers:
            if (entry.topic, p) in seen:
                continue
            seen.add((entry.topic, p))
            reg = None if topic is None else topic.partition(p)
            if topic is None or reg is None:
                response.partitions.add(
                    topic=entry.topic, partition=p, leader=NO_LEADER,
                    error=error("UNKNOWN_TOPIC_OR_PARTITION", f"No partition {entry.topic}-{p}"),
                )  # fmt: skip
                continue
            yield TopicIdPartition(topic.topic_id, topic.name, p), reg


def _elect_one(
    reg: PartitionRegistration, eligible: Eligibility, unclean: bool, min_isr: int = 0
) -> tuple[int, tuple[int, ...], tuple[int, ...] | None, tuple[int, ...] | None] | common_pb2.Error:
    """The new ``(leader, isr, elr, last_known_elr)`` of one partition (rules L1, L2; the ELR parts None when
    unchanged), or why there is none."""
    if not unclean:
        if reg.leader == reg.replicas[0]:
            return error("ELECTION_NOT_NEEDED", "The preferred replica leads already")
        leader = preferred(reg, eligible)
        if leader is None:
            return error("PREFERRED_LEADER_NOT_AVAILABLE", f"Preferred replica {reg.replicas[0]} cannot lead now")
        return leader, reg.isr, None, None
    if reg.leader != NO_LEADER:
        return error("ELECTION_NOT_NEEDED", f"The partition has leader {reg.leader}")
    target = reconcile(reg, eligible, unclean=True, min_isr=min_isr)
    if target.leader == NO_LEADER:
        return error("ELIGIBLE_LEADERS_NOT_AVAILABLE", "No replica is unfenced and out of controlled shutdown")
    if min_isr <= 0:
        return target.leader, target.isr, None, None
    return target.leader, target.isr, target.elr, target.last_known_elr


def elect_leaders(
    image: MetadataImage, request: pb.ElectLeadersRequest, max_records: int,
    policy: UncleanPolicy = lambda _: False,
) -> ControllerResult[pb.ElectLeadersResponse]:  # fmt: skip
    """ElectLeaders (rules L1-L3); ``policy`` gives the ELR rules' ``min.insync.replicas``."""
    response = pb.ElectLeadersResponse()
    eligible = Eligibility(image)
    records: list[MetadataRecord] = []
    for tp, reg in _targets(image, request, response):
        outcome = _elect_one(reg, eligible, request.unclean, elr_min_isr(policy, tp.topic_name))
        if isinstance(outcome, common_pb2.Error):
            if not (outcome.code == "ELECTION_NOT_NEEDED" and not request.topics):
                response.partitions.add(topic=tp.topic_name, partition=tp.partition, leader=reg.leader, error=outcome)
            continue
        leader, isr, elr, last = outcome
        record = change(tp, reg, leader, isr, elr, last)
        if record is not None:
            records.append(record)
        response.partitions.add(topic=tp.topic_name, partition=tp.partition, leader=leader)
    return ControllerResult(chunk(records, max_records), response)
