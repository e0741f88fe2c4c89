"""The quorum's knobs, the pysyncobj configuration they become, and loading the cluster secret.

Why these defaults (figures measured on this project's 2-core machine with pysyncobj 0.3.17):

- ``appendEntriesUseBatch=False``: a proposal is sent to the followers at once instead of at the next
  heartbeat; ~1 ms commits instead of ~100 ms.
- Heartbeat 50 ms, election timeout 0.3-0.6 s (pysyncobj: 0.1 s, 0.4-1.4 s): a dead leader is replaced in
  about half a second instead of one; pysyncobj requires the minimum above 3 heartbeats.
- The Raft thread's tick waits for a message until the node's next timer, at most 50 ms
  (``idle_tick_s``): a follower wakes at its own election deadline, a leader at its next heartbeat.
  pysyncobj checks the election deadline only when it ticks, and with fixed 50 ms ticks the two survivors
  of a dead leader, phase-aligned by its last heartbeat, often became candidates in the same tick and split
  the vote (measured: about 1 failover in 6 took a second election); fixed 10 ms ticks fixed that at 100
  wake-ups a second per idle voter. Waiting until the deadline itself keeps each survivor's random timeout
  whole without them. Measured on an idle ``odradek up`` (3 controllers, 3 brokers), 2026-11-28: a
  follower controller's process 44-47 ms of CPU a second and 152 wake-ups before, 27-32 and 78-81 after;
  commit latency and failover unchanged (``python -m bench.raft_quorum``; docs/LATENCY.md has the figures).
  ``tick_interval_s`` (10 ms) is the wait when a follower's deadline has passed without an election (it is
  connected to no one).
- ``leaderFallbackTimeout`` 1 s (pysyncobj: 30 s): a leader that hears from no majority steps down after
  one second, so it stops calling itself active soon after the others elected someone else. Writes are
  safe regardless: they are fenced by the term in the state machine.
- ``connectionRetryTime`` 0.2 s (pysyncobj: 5 s): a restarted voter is reconnected, and catches up, fast.
- ``connectionTimeout`` 1.5 s: a silent peer is dropped well after a lost heartbeat or two.
- ``appendEntriesBatchSizeBytes`` above the largest entry an append can make (see
  :attr:`QuorumTuning.append_entries_batch_size_bytes`): pysyncobj's path for larger entries is broken.
- In-flight appends are bounded (``max_in_flight_appends``) and the pysyncobj command queue with them, so
  a burst queues in the caller instead of flooding Raft (a 20k-command burst caused elections).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from controller.raft.errors import InsecureConfigError

SECRET_ENV_VAR = "ODRADEK_CLUSTER_SECRET"
MIN_SECRET_BYTES = 8


@dataclass(frozen=True, slots=True)
class QuorumTuning:
    """Timing and limit knobs. Every voter should use the same ``state_*`` values (they define the log)."""

    tick_interval_s: float = 0.01
    idle_tick_s: float = 0.05
    heartbeat_interval_s: float = 0.05
    election_timeout_min_s: float = 0.3
    election_timeout_max_s: float = 0.6
    leader_fallback_timeout_s: float = 1.0
    connection_timeout_s: float = 1.5
    connection_retry_s: float = 0.2
    bind_retries: int = 20
    bind_retry_s: float = 0.1
    # pysyncobj journal compaction: a full dump every this many Raft entries or seconds.
    log_compaction_min_entries: int = 2000
    log_compaction_min_time_s: float = 300.0
    fsync: bool = True
    # appends
    max_in_flight_appends: int = 32
    max_records_per_append: int = 1000
    max_append_bytes: int = 1 << 20
    append_retry_interval_s: float = 1.0
    # the state machine (identical on every voter)
    state_max_records_before_snapshot: int = 10_000
    state_records_kept_after_snapshot: int | None = None
    state_dedup_window: int = 4096

    def __post_init__(self) -> None:
        if not 0 < self.heartbeat_interval_s * 3 < self.election_timeout_min_s < self.election_timeout_max_s:
            raise ValueError("need 0 < 3 * heartbeat_interval_s < election_timeout_min_s < ..._max_s")
        if not 0 < self.tick_interval_s <= self.idle_tick_s:
            raise ValueError("need 0 < tick_interval_s <= idle_tick_s")
        if self.connection_timeout_s < self.election_timeout_max_s:
            raise ValueError("connection_timeout_s must be >= election_timeout_max_s")
        if self.leader_fallback_timeout_s <= self.heartbeat_interval_s:
            raise ValueError("leader_fallback_timeout_s must be > heartbeat_interval_s")
        if min(self.max_in_flight_appends, self.max_records_per_append, self.max_append_bytes) < 1:
            raise ValueError("append limits must be >= 1")
        if self.log_compaction_min_entries < 2 or self.append_retry_interval_s <= 0:
            raise ValueError("log_compaction_min_entries must be >= 2, append_retry_interval_s > 0")

    @property
    def append_entries_batch_size_bytes(self) -> int:
        """pysyncobj's appendEntriesBatchSizeBytes, above the largest Raft entry an append can make.

        pysyncobj 0.3.17 sends an entry at least this large in chunks and labels the last chunk wrongly
        (the follower unpickles a truncated entry). An append's entry is pickled (protocol 2), in which
        bytes >= 0x80 take two bytes, plus a few bytes per record: keep every entry below this size.
        """
        return 2 * self.max_append_bytes + 32 * self.max_records_per_append + (64 << 10)

    @property
    def commands_queue_size(self) -> int:
        """pysyncobj's command queue: every in-flight append may have a few retries queued, plus markers."""
        return 4 * self.max_in_flight_appends + 16


def syncobj_conf_kwargs(
    tuning: QuorumTuning,
    *,
    password: str | bytes | None,
    journal_path: str,
    dump_path: str,
    bind_address: str,
) -> dict[str, Any]:
    """Keyword arguments for ``pysyncobj.SyncObjConf`` (the serializer pair is added by the driver)."""
    return {
        "password": password,
        "autoTick": False,  # the driver runs the ticks, so it can fsync between them
        "appendEntriesUseBatch": False,
        "appendEntriesPeriod": tuning.heartbeat_interval_s,
        "appendEntriesBatchSizeBytes": tuning.append_entries_batch_size_bytes,
        "raftMinTimeout": tuning.election_timeout_min_s,
        "raftMaxTimeout": tuning.election_timeout_max_s,
        "leaderFallbackTimeout": tuning.leader_fallback_timeout_s,
        "connectionTimeout": tuning.connection_timeout_s,
        "connectionRetryTime": tuning.connection_retry_s,
        "commandsQueueSize": tuning.commands_queue_size,
        "commandsWaitLeader": True,
        "journalFile": journal_path,
        "fullDumpFile": dump_path,
        "useFork": False,
        "logCompactionMinEntries": tuning.log_compaction_min_entries,
        "logCompactionMinTime": tuning.log_compaction_min_time_s,
        "logCompactionSplit": False,
        "dynamicMembershipChange": False,
        "bindAddress": bind_address,
        "maxBindRetries": tuning.bind_retries,
        "bindRetryTime": tuning.bind_retry_s,
    }


def check_secret(password: str | bytes | None, *, allow_insecure: bool) -> None:
    """Refuse to run a quorum whose port would unpickle whatever arrives, unless told to explicitly.

    pysyncobj unpickles every message it receives; with a ``password`` every message is authenticated
    (Fernet: AES-CBC + HMAC-SHA256, key derived by PBKDF2) before it is unpickled.
    """
    if password is None:
        if allow_insecure:
            return
        raise InsecureConfigError(
            "no cluster secret: the Raft port would run any pickle sent to it. Set one (a file or "
            f"${SECRET_ENV_VAR}) or pass allow_insecure=True for a throwaway local test"
        )
    raw = password.encode("utf-8") if isinstance(password, str) else password
    if len(raw.strip()) < MIN_SECRET_BYTES:
        raise InsecureConfigError(f"the cluster secret must have at least {MIN_SECRET_BYTES} bytes")


def load_cluster_secret(path: str | None = None, *, env_var: str = SECRET_ENV_VAR) -> str | None:
    """The cluster secret from ``path`` (first line, stripped) or else from the environment variable.

    Returns ``None`` when neither is set; the caller then refuses to start (see :func:`check_secret`).
    """
    if path is not None:
        with open(path, encoding="utf-8") as f:
            secret = f.readline().strip()
        if not secret:
            raise InsecureConfigError(f"the cluster secret file {path} is empty")
        return secret
    value = os.environ.get(env_var, "").strip()
    return value or None
