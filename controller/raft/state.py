"""The replicated state machine of the ``__cluster_metadata`` log, free of Raft, threads and files.

Every voter applies the same committed commands in the same order to a :class:`MetadataLogState`; the
rules below make the result a pure function of that sequence, so every voter holds the same log.

Commands and their rules
------------------------
``apply_leader_change(term, node_id, payload)`` — the marker a newly elected Raft leader commits first.

- L1. A marker whose ``term`` is greater than the newest applied marker's term is appended as one record
  (its payload, e.g. an encoded LeaderChange record) and makes ``(term, node_id)`` the active epoch.
- L2. Any other marker (same or older term: a retry, or a deposed leader's marker committed late) is a
  no-op answered ``FENCED_LEADER_EPOCH``.

``apply_append(request_id, term, payloads, expected_base_offset=-1)`` — records proposed by the active
controller.

- A1 (exactly once). A request id already in the de-duplication window returns the result its first
  application produced, and changes nothing. The window holds the last ``dedup_window`` request ids in
  apply order: bounded, and identical on every voter.
- A2 (fencing). A command whose ``term`` differs from the newest applied marker's term is a no-op answered
  ``NOT_CONTROLLER``: older means a deposed leader proposed it; newer means its term has no applied
  marker (no voter ever saw that proposer become active). Before any marker every append is rejected.
- A3. Otherwise its payloads become records at ``end_offset ..`` in order, stamped with ``term``.
- A4. Malformed commands (wrong types, empty payload list) are no-ops answered ``INVALID_REQUEST``.
- A5 (atomic append at an expected offset, KRaft's ``scheduleAtomicAppend``). A command that names an
  ``expected_base_offset`` (>= 0) other than ``end_offset`` is a no-op answered ``UNEXPECTED_BASE_OFFSET``:
  the decision behind it was made on an image the log has since moved past.

Trimming (after each command): when more than ``max_records_before_snapshot`` records are held, the oldest
are folded into the snapshot by the caller's deterministic ``fold`` until ``records_kept_after_snapshot``
remain. ``fold(snapshot, snapshot_end_offset, payloads)`` receives the current snapshot (``None`` before the
first fold), the exclusive end offset it covers, and the payloads of the records at
``snapshot_end_offset ..`` in order; it returns the snapshot that covers them too. It must not raise for a
log it produced itself; if it does, the state is left as it was before the fold and the error propagates.

Thread-safety: none. The driver (:class:`controller.raft.quorum.MetadataQuorum`) mutates it from its Raft
thread and guards every read and write with one lock.
"""

from __future__ import annotations

import struct
import zlib
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from controller.raft.errors import StateDecodeError

Fold = Callable[[bytes | None, int, list[bytes]], bytes]
"""``fold(snapshot, snapshot_end_offset, payloads) -> snapshot``: deterministic, supplied by the caller."""

NOT_CONTROLLER = "NOT_CONTROLLER"
FENCED_LEADER_EPOCH = "FENCED_LEADER_EPOCH"
INVALID_REQUEST = "INVALID_REQUEST"
REQUEST_TIMED_OUT = "REQUEST_TIMED_OUT"
UNEXPECTED_BASE_OFFSET = "UNEXPECTED_BASE_OFFSET"

MAX_REQUEST_ID_BYTES = 64


class LogEntry(NamedTuple):
    """One record of the metadata log: its offset, the term that wrote it, its opaque payload."""

    offset: int
    term: int
    payload: bytes


@dataclass(frozen=True, slots=True)
class AppendResult:
    """Outcome of one command. ``ok`` with the offsets it wrote, or an ``error`` (Kafka's name).

    ``base_offset`` / ``last_offset`` are ``-1`` when nothing was written.
    """

    ok: bool
    error: str | None = None
    base_offset: int = -1
    last_offset: int = -1

    @staticmethod
    def failure(error: str) -> AppendResult:
        return AppendResult(ok=False, error=error)


@dataclass(frozen=True, slots=True)
class NeedsSnapshot:
    """``records_from`` answer for an offset that was folded into the snapshot: read the snapshot first.

    ``log_start_offset`` is the first offset still held as a record (the snapshot's exclusive end).
    """

    log_start_offset: int


@dataclass(frozen=True, slots=True)
class SnapshotView:
    """The snapshot: ``data`` covers offsets ``[0, end_offset)``; ``term`` wrote its last record."""

    end_offset: int
    term: int
    data: bytes | None


class MetadataLogState:
    """The metadata log: records, the active epoch, the de-duplication window, the snapshot.

    ``max_records_before_snapshot``, ``records_kept_after_snapshot`` and ``dedup_window`` are part of the
    state machine's definition: every voter must use the same values, like the same ``fold``.
    """

    def __init__(
        self,
        fold: Fold,
        *,
        max_records_before_snapshot: int = 10_000,
        records_kept_after_snapshot: int | None = None,
        dedup_window: int = 4096,
    ) -> None:
        kept = records_kept_after_snapshot
        if kept is None:
            kept = max_records_before_snapshot // 2
        if max_records_before_snapshot < 1 or not 0 <= kept < max_records_before_snapshot:
            raise ValueError(
                f"need 0 <= records_kept_after_snapshot ({kept}) < max_records_before_snapshot "
                f"({max_records_before_snapshot})"
            )
        if dedup_window < 1:
            raise ValueError(f"dedup_window must be >= 1, got {dedup_window}")
        self._fold = fold
        self.max_records_before_snapshot = max_records_before_snapshot
        self.records_kept_after_snapshot = kept
        self.dedup_window = dedup_window
        self._records: list[LogEntry] = []
        self._batch_end: list[bool] = []  # parallel to _records: True for the last record of a command
        self._log_start_offset = 0
        self._snapshot: bytes | None = None
        self._snapshot_term = 0
        self._term = 0
        self._active_node_id: int | None = None
        self._dedup: OrderedDict[bytes, AppendResult] = OrderedDict()

    # --- queries ---------------------------------------------------------------------------------

    @property
    def end_offset(self) -> int:
        """The offset the next record gets (Kafka's log end offset)."""
        return self._log_start_offset + len(self._records)

    @property
    def log_start_offset(self) -> int:
        """The first offset held as a record; everything before it is in the snapshot."""
        return self._log_start_offset

    @property
    def term(self) -> int:
        """The newest applied marker's term (0 before the first marker): the active controller's epoch."""
        return self._term

    @property
    def active_node_id(self) -> int | None:
        """The node whose marker is the newest applied one (it may since have died)."""
        return self._active_node_id

    @property
    def record_count(self) -> int:
        return len(self._records)

    def snapshot(self) -> SnapshotView:
        return SnapshotView(self._log_start_offset, self._snapshot_term, self._snapshot)

    def dedup_result(self, request_id: bytes) -> AppendResult | None:
        """The remembered result of ``request_id``, if it is still in the window."""
        return self._dedup.get(request_id)

    def records_from(
        self, offset: int, *, max_records: int = 1000, max_bytes: int = 1 << 20
    ) -> list[LogEntry] | NeedsSnapshot:
        """Records at ``offset`` and after, oldest first, in whole batches.

        Below ``log_start_offset`` the answer is :class:`NeedsSnapshot`. At or past ``end_offset`` it is an
        empty list (a reader ahead of this voter only means this voter lags). A batch is the records of one
        command (a marker, or one append: e.g. a topic with all its partitions) and is never cut: a reader
        that publishes what it read never sees part of one (Kafka keeps controller record batches whole).
        At most ``max_records`` records and ``max_bytes`` of payload, except that the first batch (from
        ``offset`` to the end of the batch it falls in) always comes whole, like a Kafka fetch's first
        batch, so a reader always progresses.
        """
        if offset < 0 or max_records < 1 or max_bytes < 0:
            raise ValueError(f"bad read: offset={offset} max_records={max_records} max_bytes={max_bytes}")
        if offset < self._log_start_offset:
            return NeedsSnapshot(self._log_start_offset)
        position, end = offset - self._log_start_offset, len(self._records)
        out: list[LogEntry] = []
        size = 0
        while position < end:
            last = position
            while not self._batch_end[last]:  # the last record of the log always ends a batch
                last += 1
            batch = self._records[position : last + 1]
            batch_size = sum(len(e.payload) for e in batch)
            if out and (len(out) + len(batch) > max_records or size + batch_size > max_bytes):
                break
            out.extend(batch)
            size += batch_size
            position = last + 1
        return out

    # --- commands --------------------------------------------------------------------------------

    def apply_leader_change(self, term: int, node_id: int, payload: bytes) -> AppendResult:
        """Rules L1, L2 (module docstring)."""
        valid = _is_int(term) and term >= 1 and _is_int(node_id) and node_id >= 0
        if not valid or not isinstance(payload, bytes):
            return AppendResult.failure(INVALID_REQUEST)
        if term <= self._term:
            return AppendResult.failure(FENCED_LEADER_EPOCH)
        offset = self.end_offset
        self._records.append(LogEntry(offset, term, payload))
        self._batch_end.append(True)
        self._term = term
        self._active_node_id = node_id
        self._maybe_fold()
        return AppendResult(ok=True, base_offset=offset, last_offset=offset)

    def apply_append(
        self, request_id: bytes, term: int, payloads: Sequence[bytes], expected_base_offset: int = -1
    ) -> AppendResult:
        """Rules A1-A5 (module docstring)."""
        if not isinstance(request_id, bytes) or not 1 <= len(request_id) <= MAX_REQUEST_ID_BYTES:
            return AppendResult.failure(INVALID_REQUEST)
        seen = self._dedup.get(request_id)
        if seen is not None:
            return seen
        result = self._append(term, payloads, expected_base_offset)
        self._remember(request_id, result)
        if result.ok:
            self._maybe_fold()
        return result

    def _append(self, term: int, payloads: Sequence[bytes], expected_base_offset: int) -> AppendResult:
        if not _is_int(term) or not _is_int(expected_base_offset):
            return AppendResult.failure(INVALID_REQUEST)
        if not isinstance(payloads, list | tuple) or not payloads:
            return AppendResult.failure(INVALID_REQUEST)
        if not all(isinstance(p, bytes) for p in payloads):
            return AppendResult.failure(INVALID_REQUEST)
        if self._term == 0 or term != self._term:
            return AppendResult.failure(NOT_CONTROLLER)
        base = self.end_offset
        if expected_base_offset >= 0 and expected_base_offset != base:
            return AppendResult.failure(UNEXPECTED_BASE_OFFSET)
        self._records.extend(LogEntry(base + i, term, p) for i, p in enumerate(payloads))
        self._batch_end.extend(i == len(payloads) - 1 for i in range(len(payloads)))
        return AppendResult(ok=True, base_offset=base, last_offset=base + len(payloads) - 1)

    def _remember(self, request_id: bytes, result: AppendResult) -> None:
        self._dedup[request_id] = result
        while len(self._dedup) > self.dedup_window:
            self._dedup.popitem(last=False)

    def _maybe_fold(self) -> None:
        if len(self._records) <= self.max_records_before_snapshot:
            return
        count = len(self._records) - self.records_kept_after_snapshot
        folded = self._records[:count]
        snapshot = self._fold(self._snapshot, self._log_start_offset, [e.payload for e in folded])
        if not isinstance(snapshot, bytes):
            raise TypeError(f"fold must return bytes, got {type(snapshot).__name__}")
        self._snapshot = snapshot
        self._snapshot_term = folded[-1].term
        del self._records[:count]
        del self._batch_end[:count]
        self._log_start_offset += count
        assert not self._records or self._records[0].offset == self._log_start_offset

    # --- serialization (for the Raft full dump) ---------------------------------------------------

    def to_bytes(self) -> bytes:
        """Everything replicated, in the layout of :func:`decode_state`; never the ``fold`` callable."""
        snap = self._snapshot
        parts = [
            _STATE_HEADER.pack(
                _STATE_MAGIC,
                _STATE_VERSION,
                self._log_start_offset,
                self._snapshot_term,
                self._term,
                -1 if self._active_node_id is None else self._active_node_id,
                -1 if snap is None else len(snap),
                len(self._records),
                len(self._dedup),
            )
        ]
        if snap is not None:
            parts.append(snap)
        for entry, batch_end in zip(self._records, self._batch_end, strict=True):
            parts.append(_RECORD.pack(entry.term, len(entry.payload), batch_end))
            parts.append(entry.payload)
        for request_id, res in self._dedup.items():
            error = (res.error or "").encode("ascii")
            parts.append(_DEDUP.pack(len(request_id), res.ok, res.base_offset, res.last_offset, len(error)))
            parts.append(request_id)
            parts.append(error)
        body = b"".join(parts)
        return body + _CRC.pack(zlib.crc32(body))

    def load_bytes(self, data: bytes) -> None:
        """Replace the whole state with one serialized by :meth:`to_bytes` (all or nothing)."""
        decoded = _decode_state(data)
        (
            self._log_start_offset,
            self._snapshot_term,
            self._term,
            self._active_node_id,
            self._snapshot,
            self._records,
            self._batch_end,
            self._dedup,
        ) = decoded


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


_STATE_MAGIC = b"ODRQSTAT"
_STATE_VERSION = 2  # 1: records without the batch_end flag (each read back as a batch of its own)
_STATE_HEADER = struct.Struct(
    ">"
    "8s"  # magic: b"ODRQSTAT"
    "H"  # version: 2 (1 is read too)
    "q"  # log_start_offset: first offset held as a record (= the snapshot's exclusive end)
    "q"  # snapshot_term: term of the last folded record (0 without snapshot)
    "q"  # term: newest applied marker's term
    "q"  # active_node_id: node of that marker, -1 for none
    "q"  # snapshot_len: bytes of snapshot that follow, -1 for no snapshot
    "I"  # record_count: records that follow the snapshot
    "I"  # dedup_count: de-duplication entries that follow the records, oldest first
)
_RECORD = struct.Struct(
    ">"
    "q"  # term: term that wrote the record (its offset is implicit: log_start_offset + index)
    "I"  # payload_len: bytes of payload that follow
    "?"  # batch_end: the last record of its command (version 2 only)
)
_RECORD_V1 = struct.Struct(">qI")
_DEDUP = struct.Struct(
    ">"
    "B"  # id_len: bytes of request id that follow the fixed part
    "?"  # ok: the remembered result's ok flag
    "q"  # base_offset
    "q"  # last_offset
    "B"  # error_len: bytes of ASCII error name that follow the request id
)
_CRC = struct.Struct(">I")  # CRC-32 (zlib) of every byte before it

_Decoded = tuple[int, int, int, int | None, bytes | None, list[LogEntry], list[bool], OrderedDict[bytes, AppendResult]]


def _decode_state(data: bytes) -> _Decoded:
    if len(data) < _STATE_HEADER.size + _CRC.size:
        raise StateDecodeError(f"state of {len(data)} bytes is too short")
    body, (crc,) = data[: -_CRC.size], _CRC.unpack_from(data, len(data) - _CRC.size)
    if zlib.crc32(body) != crc:
        raise StateDecodeError("state CRC mismatch")
    header = _STATE_HEADER.unpack_from(body)
    magic, version, start, snap_term, term, active, snap_len, n_records, n_dedup = header
    if magic != _STATE_MAGIC or version not in (1, _STATE_VERSION):
        raise StateDecodeError(f"not a state of version 1..{_STATE_VERSION}: magic={magic!r} version={version}")
    reader = _Reader(body, _STATE_HEADER.size)
    snapshot = None if snap_len < 0 else reader.take(snap_len)
    records: list[LogEntry] = []
    batch_ends: list[bool] = []
    for i in range(n_records):
        if version == 1:
            (rec_term, size), batch_end = reader.unpack(_RECORD_V1), 1
        else:
            rec_term, size, batch_end = reader.unpack(_RECORD)
        records.append(LogEntry(start + i, rec_term, reader.take(size)))
        batch_ends.append(bool(batch_end))
    if batch_ends and not batch_ends[-1]:
        raise StateDecodeError("the last record does not end a batch")
    dedup: OrderedDict[bytes, AppendResult] = OrderedDict()
    for _ in range(n_dedup):
        id_len, ok, base, last, err_len = reader.unpack(_DEDUP)
        request_id = reader.take(id_len)
        error = reader.take(err_len).decode("ascii") or None
        dedup[request_id] = AppendResult(bool(ok), error, base, last)
    if reader.pos != len(body):
        raise StateDecodeError(f"{len(body) - reader.pos} trailing bytes in state")
    return start, snap_term, term, None if active < 0 else active, snapshot, records, batch_ends, dedup


class _Reader:
    def __init__(self, data: bytes, pos: int) -> None:
        self.data = data
        self.pos = pos

    def take(self, size: int) -> bytes:
        if size < 0 or self.pos + size > len(self.data):
            raise StateDecodeError("state truncated")
        out = self.data[self.pos : self.pos + size]
        self.pos += size
        return out

    def unpack(self, layout: struct.Struct) -> tuple[int, ...]:
        return layout.unpack(self.take(layout.size))
