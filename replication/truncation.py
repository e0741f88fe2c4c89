"""Where a follower truncates after a leader change: OffsetsForLeaderEpoch, both sides (KIP-101, KIP-279).

Never by the high watermark alone (KIP-101's two data-loss and divergence scenarios). Rules; the tests in
``tests/replication/test_truncation.py`` cite them:

* TR1. The follower asks the leader for the end of its own latest epoch ``E``; the leader answers from its
  cache (EC2): the largest epoch ``E' <= E`` it has, and where that epoch ends in its log.
* TR2. ``E' == E``: truncate to ``min(leader end offset, own log end offset)``; done.
* TR3. ``E' < E`` and the follower has ``E'`` too: truncate to ``min(leader end, own end of E')``; done.
* TR4. ``E' < E`` and the follower lacks ``E'``: truncate to ``min(leader end, own end of the largest epoch
  below E')`` and ask again with the follower's (now smaller) latest epoch (KIP-279's extra round trip).
* TR5. The leader has no epoch ``<= E`` (undefined answer), or the follower has no epochs: nothing below is
  known to agree, so the follower drops its whole log (down to its log start) and fetches again; a fetch
  below the leader's log start then restarts the log there (OFFSET_OUT_OF_RANGE handling).
* TR6. A truncation point is never above the follower's log end offset.
* TR7. A truncation point may be below the follower's high watermark: the leader's log is the truth. The
  follower truncates there anyway, lowers its high watermark and warns (records it saw committed are gone:
  an unclean election, or a leader that came back without its unflushed tail; KIP-966's eligible leader
  replicas make the second rarer). Never capped at the high watermark: that kept different records at
  the same offsets, or looped on OFFSET_OUT_OF_RANGE when the leader's log ended below it.
"""

from __future__ import annotations

from dataclasses import dataclass

from replication.epoch_cache import UNDEFINED_EPOCH, EpochEndOffset, LeaderEpochCache


@dataclass(frozen=True, slots=True)
class TruncationDecision:
    """Truncate the log to ``truncate_to``; if ``ask_epoch`` is not None, ask the leader again about it."""

    truncate_to: int
    ask_epoch: int | None = None

    @property
    def done(self) -> bool:
        return self.ask_epoch is None


def leader_answer(cache: LeaderEpochCache, requested_epoch: int, log_end_offset: int) -> EpochEndOffset:
    """TR1, the leader's side: OffsetsForLeaderEpoch for ``requested_epoch`` (Kafka's ``endOffsetForEpoch``)."""
    return cache.end_offset_for(requested_epoch, log_end_offset)


def decide(
    cache: LeaderEpochCache, asked_epoch: int, answer: EpochEndOffset, log_start_offset: int, log_end_offset: int
) -> TruncationDecision:
    """The follower's side: where to truncate given the leader's ``answer`` to ``asked_epoch`` (TR2-TR6).

    ``cache`` is the follower's cache, not yet truncated; the caller truncates log and cache to the answer.
    """
    if answer.undefined or asked_epoch == UNDEFINED_EPOCH:
        return TruncationDecision(min(log_start_offset, log_end_offset))  # TR5
    if answer.leader_epoch > asked_epoch:
        raise ValueError(f"the leader answered epoch {answer.leader_epoch} for a question about {asked_epoch}")
    if answer.leader_epoch == asked_epoch:
        return TruncationDecision(min(answer.end_offset, log_end_offset))  # TR2, TR6
    own = cache.end_offset_for(answer.leader_epoch, log_end_offset)
    if own.undefined:
        return TruncationDecision(min(log_start_offset, log_end_offset))  # TR5: nothing older than E' here
    offset = min(answer.end_offset, own.end_offset, log_end_offset)
    if own.leader_epoch == answer.leader_epoch:
        return TruncationDecision(offset)  # TR3
    return TruncationDecision(offset, ask_epoch=own.leader_epoch)  # TR4
