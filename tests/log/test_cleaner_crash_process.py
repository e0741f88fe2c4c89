"""A broker killed (SIGKILL) while its log cleaner removes transactional data, and started again.

One broker process (``tests.broker.cluster``), a compacted topic of one partition with small segments, written
by two transactional producers whose transactions interleave in the log: every committed transaction writes
keys of its own (each read exactly once, whatever the cleaner does) and a "hot" key that later transactions
overwrite (its latest committed value must be read); an aborted transaction writes the same keys later, so
that an aborted record wrongly put in the cleaner's offset map would remove a committed one (TX1).

The cleaner runs only when the test wants it: the broker runs with ``log.cleaner.enable=false`` while it is
written and read, and is started with ``log.cleaner.enable=true`` (``log.cleaner.backoff.ms=50``) for each
crash, its partition directory watched by a thread that sends SIGKILL at a chosen point of the pass:

* the first group's ``*.log.cleaned`` appears: the kill leaves a group half written (``.cleaned`` files);
* a ``*.log.swap`` appears: the kill leaves a committed swap that recovery must finish;
* the third group's ``*.log.cleaned`` appears: two groups already swapped in, no checkpoint;
* ``cleaner-offset-checkpoint`` is written: right after a complete pass.

The state the kill left on disk is asserted to be the one wanted: a kill that came late was a crash inside the
pass all the same (and is checked as any other), and since no checkpoint was written the next start cleans the
same range again, so the point is tried again (at most 3 times; on this 2-core machine under load every point
was hit at the first try). After each crash the broker is started with the cleaner off and checked: no
``.cleaned`` or ``.swap`` file left, the end offset unchanged, every committed record read by read_committed
and read_uncommitted readers (the hot keys' latest values), no aborted record read by read_committed, offsets
strictly increasing; then more transactions are written for the next crash. At the end the cleaner runs again
to the active segment, and the log below it holds no aborted record and each hot key once.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from log.checkpoint import read_checkpoint
from log.cleaner.manager import CHECKPOINT_FILE, FIRST_DIRTY_KEY
from log.logdir import CLEANED_SUFFIX, SWAP_SUFFIX
from log.segment import LOG_SUFFIX, parse_base_offset
from odradek import Consumer, ConsumerRecord, Producer, TopicPartition
from tests.broker.cluster import Cluster

pytestmark = pytest.mark.slow

TOPIC = "compacted-txn"
TP = TopicPartition(TOPIC, 0)
HOT_KEYS = 4
RECORDS = 12  # per transaction
STEPS = 40  # transactions of each producer per round of writes
PAD = b"." * 150
CLEANER_OFF = "log.cleaner.enable=false"
CLEANER_ON = "log.cleaner.enable=true"
CONFIG = {
    "log.cleaner.enable": "false",
    "log.cleaner.backoff.ms": "50",
    "transaction.state.log.num.partitions": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
}
TOPIC_CONFIG = {"cleanup.policy": "compact", "segment.bytes": "16384", "min.cleanable.dirty.ratio": "0.01",
                "delete.retention.ms": "0", "min.compaction.lag.ms": "0"}  # fmt: skip
WATCH_TIMEOUT_S = 90.0

Point = Callable[[Path, set[str], int | None], bool]
"""A crash point: (partition directory, the .cleaned names seen so far, the checkpoint at the start) -> reached."""


@dataclass
class Written:
    """What the transactions wrote: committed values by key (hot keys: the latest), aborted values."""

    committed: dict[bytes, bytes] = field(default_factory=dict)
    aborted: set[bytes] = field(default_factory=set)
    transactions: int = 0


def write_round(cluster: Cluster, written: Written, steps: int = STEPS) -> None:
    """``steps`` pairs of interleaved transactions; the second of each pair aborts every other step."""
    config = {"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 0, "max.block.ms": 30000}
    first = Producer({**config, "transactional.id": "cleaner-crash-a"})
    second = Producer({**config, "transactional.id": "cleaner-crash-b"})
    try:
        first.init_transactions(30)
        second.init_transactions(30)
        for _ in range(steps):
            n = written.transactions
            written.transactions += 2
            commit_second = n % 4 == 0
            first.begin_transaction()
            second.begin_transaction()
            own = [b"k%05d-%02d" % (n, i) for i in range(RECORDS)]
            keys = [*own, b"hot-%d" % (n % HOT_KEYS)]
            other = [b"k%05d-%02d" % (n + 1, i) for i in range(RECORDS)] if commit_second else own
            other_keys = [*other, b"hot-%d" % ((n + 1) % HOT_KEYS)]
            for i, (key, other_key) in enumerate(zip(keys, other_keys, strict=True)):
                first.send(TOPIC, key=key, value=b"c%d-%d" % (n, i) + PAD, partition=0)
                second.send(TOPIC, key=other_key, value=(b"c" if commit_second else b"a") + b"%d-%d" % (n + 1, i)
                            + PAD, partition=0)  # fmt: skip
            first.flush(30)
            second.flush(30)
            first.commit_transaction(30)
            for i, key in enumerate(keys):
                written.committed[key] = b"c%d-%d" % (n, i) + PAD
            if commit_second:
                second.commit_transaction(30)
                for i, key in enumerate(other_keys):
                    written.committed[key] = b"c%d-%d" % (n + 1, i) + PAD
            else:
                second.abort_transaction(30)
                written.aborted.update(b"a%d-%d" % (n + 1, i) + PAD for i in range(len(other_keys)))
    finally:
        first.close(30)
        second.close(30)


def read_all(cluster: Cluster, isolation: str, timeout_s: float = 60.0) -> tuple[list[ConsumerRecord], int]:
    """Every record of the partition from its start to its end offset, as a reader of ``isolation`` gets them,
    and that end offset."""
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "isolation.level": isolation,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})  # fmt: skip
    try:
        consumer.assign([TP])
        end = consumer.end_offsets([TP], timeout_ms=30000)[TP]
        records: list[ConsumerRecord] = []
        deadline = time.monotonic() + timeout_s
        while consumer.position(TP, timeout_ms=30000) < end:
            assert time.monotonic() < deadline, f"{isolation} reader stuck at {consumer.position(TP)} of {end}"
            records.extend(consumer.poll(200))
        return records, end
    finally:
        consumer.close()


def check_reads(cluster: Cluster, written: Written) -> int:
    """Both isolation levels read every committed value (hot keys: the latest last), offsets increasing;
    read_committed reads no aborted value. Returns the end offset (no transaction is open: the same for both)."""
    ends = set()
    for isolation in ("read_committed", "read_uncommitted"):
        records, end = read_all(cluster, isolation)
        ends.add(end)
        offsets = [r.offset for r in records]
        assert offsets == sorted(set(offsets)), f"{isolation}: offsets not strictly increasing"
        latest: dict[bytes, bytes] = {}
        committed_values = set(written.committed.values())
        for r in records:
            assert r.key is not None
            assert r.value is not None
            if isolation == "read_committed" or r.value not in written.aborted:
                latest[r.key] = r.value
            if isolation == "read_committed":
                assert r.value not in written.aborted, f"read_committed read aborted {r.value[:12]!r} at {r.offset}"
            if not r.key.startswith(b"hot-") and r.value not in written.aborted:
                assert r.value in committed_values, (isolation, r.key, r.value[:12])
        missing = {k for k, v in written.committed.items() if latest.get(k) != v}
        assert not missing, f"{isolation}: {len(missing)} committed keys lack their value: {sorted(missing)[:3]}"
    (end,) = ends
    return end


# ----------------------------------------------------------------------------------------- the crash points


def partition_dir(cluster: Cluster) -> Path:
    return cluster.brokers[0].data_dir / f"{TOPIC}-0"


def cleaner_files(directory: Path) -> list[str]:
    return sorted(n for n in os.listdir(directory) if n.endswith((CLEANED_SUFFIX, SWAP_SUFFIX)))


def checkpointed(directory: Path) -> int | None:
    saved = read_checkpoint(directory / CHECKPOINT_FILE) if (directory / CHECKPOINT_FILE).exists() else None
    return (saved or {}).get(FIRST_DIRTY_KEY)


def segment_files(directory: Path) -> dict[str, int]:
    """Each segment's log file, by name, with its inode: a group swapped in is a new file even where its name (its
    base offset) is an old one's (a group of one segment)."""
    return {n: os.stat(directory / n).st_ino for n in os.listdir(directory) if n.endswith(LOG_SUFFIX)}


def segment_bases(directory: Path) -> list[int]:
    names = os.listdir(directory)
    return sorted(b for n in names if n.endswith(LOG_SUFFIX) and (b := parse_base_offset(n)) is not None)


def group_seen(count: int) -> Point:
    """The ``count``-th distinct ``.cleaned`` file of the pass appeared."""

    def seen(directory: Path, names: set[str], _checkpoint_at_start: int | None) -> bool:
        names.update(n for n in os.listdir(directory) if n.endswith(LOG_SUFFIX + CLEANED_SUFFIX))
        return len(names) >= count

    return seen


def log_swap_seen(directory: Path, _names: set[str], _at_start: int | None) -> bool:
    """The swap's commit step happened: ``.log.cleaned`` became ``.log.swap`` (the index files become ``.swap``
    just before it, in the step that recovery undoes, so an index ``.swap`` is not this point)."""
    return any(n.endswith(LOG_SUFFIX + SWAP_SUFFIX) for n in os.listdir(directory))


def checkpoint_written(directory: Path, _names: set[str], at_start: int | None) -> bool:
    return checkpointed(directory) != at_start


@contextmanager
def kill_when(cluster: Cluster, point: Point) -> Iterator[threading.Event]:
    """While the block runs, a thread polls the partition directory and SIGKILLs the broker once ``point``
    holds; the event is set when it did. Bounded: the block must wait on the event with a timeout."""
    directory = partition_dir(cluster)
    at_start = checkpointed(directory)
    killed, stop = threading.Event(), threading.Event()
    names: set[str] = set()

    def watch() -> None:
        while not stop.is_set():
            if point(directory, names, at_start):
                cluster.brokers[0].signal(signal.SIGKILL)
                killed.set()
                return
            time.sleep(0.0002)

    watcher = threading.Thread(target=watch, name="cleaner-crash-watcher", daemon=True)
    watcher.start()
    try:
        yield killed
    finally:
        stop.set()
        watcher.join(10)


def set_cleaner(cluster: Cluster, on: bool) -> None:
    argv = cluster.brokers[0].argv
    argv[argv.index(CLEANER_OFF if on else CLEANER_ON)] = CLEANER_ON if on else CLEANER_OFF


def crash_while_cleaning(cluster: Cluster, point: Point) -> str:
    """Start the broker with the cleaner on, kill it at ``point``; returns what the kill left on disk."""
    directory = partition_dir(cluster)
    before = segment_files(directory)
    at_start = checkpointed(directory)
    set_cleaner(cluster, True)
    with kill_when(cluster, point) as killed:
        cluster.start_broker(0, wait=False)
        assert killed.wait(WATCH_TIMEOUT_S), f"no crash point reached:\n{cluster.brokers[0].errors()}"
    cluster.brokers[0].wait(10)
    leftover = cleaner_files(directory)
    if checkpointed(directory) != at_start:
        return "after the pass (checkpoint written)" + "".join(f", then {n}" for n in leftover)
    if leftover:
        return "in a group: " + ",".join(leftover)
    assert segment_files(directory) != before, "the kill came before the pass changed anything"
    return "between groups (some swapped in, no checkpoint)"


def restart_without_cleaner(cluster: Cluster, written: Written) -> int:
    """Start the broker with the cleaner off after a crash: no cleaner file left, every read as it should be;
    returns the end offset."""
    set_cleaner(cluster, False)
    cluster.start_broker(0)
    assert cleaner_files(partition_dir(cluster)) == [], "recovery left a .cleaned or .swap file"
    return check_reads(cluster, written)


# what to watch for, and the state the kill must have left on disk (else the same pass is tried again)
POINTS: list[tuple[str, Point, Callable[[str], bool]]] = [
    ("the first group's .cleaned", group_seen(1), lambda state: ".log.cleaned" in state),
    ("the .log.swap (the swap's commit step)", log_swap_seen, lambda state: ".log.swap" in state),
    ("the third group's .cleaned", group_seen(3), lambda state: not state.startswith("after")),
    ("the checkpoint written", checkpoint_written, lambda state: state.startswith("after")),
]
ATTEMPTS = 3


def test_sigkill_while_the_cleaner_removes_aborted_transactions(tmp_path: Path) -> None:
    with Cluster(tmp_path, brokers=1, broker_config=CONFIG) as cluster:
        cluster.create_topic(TOPIC, partitions=1, replication_factor=1, configs=TOPIC_CONFIG)
        written = Written()
        write_round(cluster, written)
        end = check_reads(cluster, written)
        cluster.stop_broker(0)
        hit: list[list[str]] = []
        for what, point, wanted in POINTS:
            # a kill that came late (past its state) was a crash all the same, inside the pass and checked;
            # without a checkpoint the next start cleans the same range again, so the point comes again
            states: list[str] = []
            while True:
                states.append(crash_while_cleaning(cluster, point))
                assert restart_without_cleaner(cluster, written) == end, "the end offset changed in the crash"
                if wanted(states[-1]) or len(states) == ATTEMPTS:
                    break
                cluster.stop_broker(0)
            hit.append(states)
            assert wanted(states[-1]), f"{ATTEMPTS} kills at {what} missed its window: {states}"
            write_round(cluster, written)
            end = check_reads(cluster, written)
            cluster.stop_broker(0)
        print("crash states:", hit)

        # the cleaner runs again, to the active segment, and leaves no aborted record and each hot key once
        set_cleaner(cluster, True)
        cluster.start_broker(0)
        directory = partition_dir(cluster)
        cluster.wait_for(lambda: (checkpointed(directory) or 0) >= segment_bases(directory)[-1], 60.0,
                         "the cleaner cleaned up to the active segment")  # fmt: skip
        cleaned_end = checkpointed(directory)
        assert cleaned_end is not None
        assert check_reads(cluster, written) == end
        below = [r for r in read_all(cluster, "read_uncommitted")[0] if r.offset < cleaned_end]
        assert not [r.offset for r in below if r.value in written.aborted], "aborted records left below the cleaned end"
        hot = [r.key for r in below if r.key is not None and r.key.startswith(b"hot-")]
        assert len(hot) == len(set(hot)), "a hot key more than once in the cleaned part"
        assert cluster.stop_broker(0) == 0
