"""The idempotent producer's bookkeeping: producer id and epoch, sequence numbers per partition, and what
each broker answer means for them (the idempotent part of Kafka's ``TransactionManager``, KIP-98/360).

Pure and single-threaded: the sender thread owns it (no lock). The sender asks the broker for the id
(InitProducerId) when :meth:`IdempotenceState.needs_producer_id` says so and reports every answer.

Rules (the client half of ``log.producer_state``'s S1-S7):

* P1. A batch gets its sequence when first drained: the partition's next sequence, which then moves by
  the batch's record count (wrapping at 2**31). It keeps that sequence, epoch and id on every retry.
* P2. A partition's appends (the batches one request carries for it) from its oldest unanswered one to
  its newest are at most :data:`MAX_APPENDS` (and at most ``max.in.flight.requests.per.connection`` are in
  flight): the broker keeps a producer's last 5 runs, each at least one append, so a retry is always
  recognized as a duplicate, however the answers of concurrent requests are ordered.
* P3. A retry resends exactly the batches its request carried for the partition, once nothing else of the
  partition is in flight; retried batches go back into their queue in sequence order
  (``RecordAccumulator.reenqueue``): the broker sees them in order.
* P4. A retriable error (a lost answer, a timeout, NOT_LEADER_OR_FOLLOWER, ...) resends the batch with the
  same sequence: the broker writes it once, or answers the original offsets of the copy it has.
* P5. OUT_OF_ORDER_SEQUENCE_NUMBER or UNKNOWN_PRODUCER_ID for a batch sent while an earlier batch of its
  partition was unanswered: the earlier one may not have been written yet when the leader gave up holding
  this one (the sender starts a broker's requests in drain order, and the leader holds a batch that is only
  ahead of its turn for a bounded time, ``log.producer_state`` S8; the earlier request may also have been
  lost or refused); it is retried (same sequence), after the earlier one (P3).
* P6. The same errors for a batch sent when every earlier batch of its partition was answered (KIP-360):
  UNKNOWN_PRODUCER_ID (the broker lost the producer's state) resends it under a bumped epoch;
  OUT_OF_ORDER_SEQUENCE_NUMBER (the broker lost batches it had acknowledged) fails it and bumps the epoch.
  Either way it was not written, so no later batch of its partition was: those not in flight lose their
  sequence now, those in flight when their refusal comes back. A batch that fails otherwise after it got a
  sequence (delivery timeout, a non-retriable error) also bumps the epoch: its sequence may now be a gap.
* P7. The bump waits until every batch that has a sequence got its final answer (fresh batches wait, retries
  go on under the old epoch); then InitProducerId with the current id and epoch gives the next epoch (or a
  new id), every partition's sequence starts at 0 again, and batches refused with the old epoch
  that lost their sequence (P6) get new ones. A batch whose fate is unknown is never renumbered, so it can
  never be written twice.
"""

from __future__ import annotations

import logging
from collections import deque
from enum import Enum

from log.record.header import NO_SEQUENCE
from odradek.accumulator import ProducerBatch
from odradek.types import TopicPartition

MAX_APPENDS = 5  # P2: the broker's window (log.producer_state.MAX_BATCHES_PER_PRODUCER runs)
SEQUENCE_MOD = 1 << 31
OUT_OF_ORDER = "OUT_OF_ORDER_SEQUENCE_NUMBER"
UNKNOWN_PRODUCER_ID = "UNKNOWN_PRODUCER_ID"
DUPLICATE_SEQUENCE = "DUPLICATE_SEQUENCE_NUMBER"

_log = logging.getLogger("odradek.producer")


class Verdict(Enum):
    """What the sender does with a batch after an error answer."""

    RETRY = "retry"  # resend, same sequence (P4, P5)
    RESEQUENCE = "resequence"  # resend under the next epoch with a new sequence (P6, P7)
    FAIL = "fail"  # fail the records


class _Append:
    """One request's batches of one partition, until all are answered (P2)."""

    __slots__ = ("append_id", "batches")

    def __init__(self, append_id: int, batch: ProducerBatch) -> None:
        self.append_id = append_id
        self.batches = {batch}


class IdempotenceState:
    """See the module docstring. Also the accumulator's :class:`~odradek.accumulator.DrainGate`."""

    def __init__(self) -> None:
        self.producer_id = -1
        self.producer_epoch = -1
        self.bump_requested = False
        self._next_seq: dict[TopicPartition, int] = {}
        self._unresolved: dict[TopicPartition, list[ProducerBatch]] = {}
        self._drains = 0
        self._doomed: set[ProducerBatch] = set()  # in flight behind a refused batch: cannot be written (P6)
        self._appends: dict[TopicPartition, deque[_Append]] = {}  # from the oldest unanswered one (P2)

    # ---------------------------------------------------------------------------- producer id

    def needs_producer_id(self) -> bool:
        """True when InitProducerId should be sent now: no id yet, or a bump whose batches all resolved (P7)."""
        return self.producer_id < 0 or (self.bump_requested and not any(self._unresolved.values()))

    def set_producer_id(self, producer_id: int, producer_epoch: int) -> None:
        """The InitProducerId answer: sequences start over (P7)."""
        if self.producer_id >= 0:
            _log.info("producer id %d epoch %d -> id %d epoch %d: sequences start over", self.producer_id,
                      self.producer_epoch, producer_id, producer_epoch)  # fmt: skip
        self.producer_id, self.producer_epoch = producer_id, producer_epoch
        self.bump_requested = False
        self._next_seq.clear()

    def request_bump(self, tp: TopicPartition, why: str) -> None:
        if not self.bump_requested:
            _log.info("producer id %d: bumping epoch %d after %s on %s", self.producer_id, self.producer_epoch,
                      why, tp)  # fmt: skip
        self.bump_requested = True

    # ---------------------------------------------------------------------------------- gate

    def may_drain(self, batch: ProducerBatch, in_flight: int) -> bool:
        if batch.base_sequence != NO_SEQUENCE:
            return in_flight == 0  # P3
        if self.producer_id < 0 or self.bump_requested:
            return False
        appends = self._appends.get(batch.tp)
        return not appends or len(appends) < MAX_APPENDS or appends[-1].append_id == batch.append_id  # P2

    def on_drain(self, batch: ProducerBatch) -> None:
        if batch.drain_order < 0:
            batch.drain_order = self._drains
            self._drains += 1
        unresolved = self._unresolved.get(batch.tp)
        if batch.base_sequence != NO_SEQUENCE:
            batch.head_when_sent = bool(unresolved) and unresolved is not None and unresolved[0] is batch
            return
        batch.head_when_sent = not unresolved
        tp = batch.tp
        seq = self._next_seq.get(tp, 0)
        batch.producer_id, batch.producer_epoch, batch.base_sequence = self.producer_id, self.producer_epoch, seq
        self._next_seq[tp] = (seq + batch.record_count) % SEQUENCE_MOD  # P1
        self._unresolved.setdefault(tp, []).append(batch)
        appends = self._appends.setdefault(tp, deque())
        if appends and appends[-1].append_id == batch.append_id:
            appends[-1].batches.add(batch)
        else:
            appends.append(_Append(batch.append_id, batch))

    # ------------------------------------------------------------------------------- answers

    def unresolved(self, tp: TopicPartition) -> list[ProducerBatch]:
        return list(self._unresolved.get(tp, ()))

    def resolved(self, batch: ProducerBatch) -> None:
        """``batch`` got its final answer (written, or failed)."""
        self._doomed.discard(batch)
        appends = self._appends.get(batch.tp)
        if appends:
            for append in appends:
                append.batches.discard(batch)
            while appends and not appends[0].batches:
                appends.popleft()
            if not appends:
                del self._appends[batch.tp]
        batches = self._unresolved.get(batch.tp)
        if batches and batch in batches:
            batches.remove(batch)
            if not batches:
                del self._unresolved[batch.tp]

    def on_failed(self, batch: ProducerBatch, why: str) -> None:
        """``batch`` fails for good after it got a sequence (P6: its sequence may leave a gap)."""
        if batch.base_sequence != NO_SEQUENCE and batch.producer_epoch == self.producer_epoch:
            self.request_bump(batch.tp, why)
        self.resolved(batch)

    def on_error(self, batch: ProducerBatch, code: str, retriable: bool) -> Verdict:
        """What to do with ``batch`` after the error ``code`` (P4-P7); the caller also checks retry budgets."""
        refused = code in (OUT_OF_ORDER, UNKNOWN_PRODUCER_ID)
        if batch in self._doomed or (refused and batch.base_sequence == NO_SEQUENCE):
            self.resolved(batch)  # behind a refused batch (P6): not written, whatever the error says
            batch.base_sequence = NO_SEQUENCE
            return Verdict.RESEQUENCE
        if not refused:
            return Verdict.RETRY if retriable else Verdict.FAIL
        stale = batch.producer_epoch != self.producer_epoch or batch.producer_id != self.producer_id
        if not batch.head_when_sent and not stale:
            return Verdict.RETRY  # P5
        # P6: refused with nothing unanswered before it: not written, and no later batch of it either.
        self.request_bump(batch.tp, code)
        self._drop_sequences_after(batch)
        self.resolved(batch)
        if code == OUT_OF_ORDER and not stale:
            return Verdict.FAIL
        batch.base_sequence = NO_SEQUENCE
        return Verdict.RESEQUENCE

    def _drop_sequences_after(self, batch: ProducerBatch) -> None:
        batches = self._unresolved.get(batch.tp, [])
        if batch not in batches:
            return
        for later in batches[batches.index(batch) + 1 :]:
            if later.in_flight:
                self._doomed.add(later)  # resequenced when its answer comes
            else:  # queued: sent again under the next epoch
                later.base_sequence = NO_SEQUENCE
                self.resolved(later)
