"""``odradek perf produce|consume|e2e``: the command line of the perf tools.

Progress lines go to stderr every ~5 s, and a live progress line (``odradek.progress``) with the share
done and the time left when stderr is a terminal or with ``--progress``; the Kafka-style summary line goes
to stdout, followed, with ``--json``, by one JSON object as the last stdout line. The exit status is 1
when records failed, were lost, or did not arrive in time (the summary and the JSON are printed all the
same).
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from typing import Any

from log import trace
from odradek.cli_support import (
    add_bootstrap_option,
    bootstrap_servers,
    error_sentence,
    parse_key_values,
    reaching,
    topic_partitions,
)
from odradek.errors import CliError, ConfigError, OdradekError
from odradek.perf.consume import (
    E2E_SWITCH_INTERVAL_S,
    E2EConsumer,
    SendErrors,
    consume,
    e2e_produce,
    new_run_id,
    position_at_end,
)
from odradek.perf.e2e_process import ConsumerProcess
from odradek.perf.produce import LATENCY_SAMPLES, ProduceRun, default_sample_every, produce, producer_config
from odradek.perf.stats import Recorder, latency_summary, result_document, summary_line
from odradek.progress import Progress, add_progress_option, wanted

COMPRESSIONS = ("none", "gzip", "snappy", "lz4", "zstd")
ACKS = ("0", "1", "all", "-1")


def add_perf_parser(commands: Any) -> None:
    perf = commands.add_parser("perf", help="measure throughput and latency",
                               description="Producer, consumer and end-to-end performance tests.")  # fmt: skip
    tools = perf.add_subparsers(dest="tool", metavar="TOOL", required=True)

    p = tools.add_parser("produce", help="producer throughput and latency (kafka-producer-perf-test)",
                         description="Send --num-records records of --record-size bytes, throttled to "
                         "--throughput records/s when given.")  # fmt: skip
    p.add_argument("--topic", required=True)
    p.add_argument("--num-records", type=int, required=True, metavar="N")
    p.add_argument("--record-size", type=int, required=True, metavar="B")
    p.add_argument("--throughput", type=float, default=-1, metavar="R", help="records/s, -1: unthrottled (default)")
    p.add_argument("--acks", choices=ACKS, help="default: the producer's (all)")
    p.add_argument("--batch-size", type=int, metavar="B", help="batch.size")
    p.add_argument("--linger-ms", type=int, metavar="L", help="linger.ms")
    p.add_argument("--compression", choices=COMPRESSIONS, help="compression.type")
    p.add_argument("--producer-config", action="append", metavar="KEY=VALUE", help="any producer config (wins)")
    p.add_argument("--latency-sample-every", type=int, metavar="N",
                   help="time the latency of every N-th record (the first of each run of N); every record is "
                   "counted, delivered or failed, whatever N. 1: every record (a callback per record, which "
                   f"slows the sending). Default: 1 up to {LATENCY_SAMPLES} records, else about "
                   f"{LATENCY_SAMPLES} samples (N = ceil(num-records / {LATENCY_SAMPLES}))")  # fmt: skip
    p.set_defaults(handler=run_produce)

    c = tools.add_parser("consume", help="consumer throughput (kafka-consumer-perf-test)",
                         description="Read --num-records records of --topic from its earliest offsets.")  # fmt: skip
    c.add_argument("--topic", required=True)
    c.add_argument("--num-records", type=int, required=True, metavar="N")
    c.add_argument("--timeout-ms", type=int, default=10000, metavar="T", help="give up after T ms without a record")
    c.add_argument("--consumer-config", action="append", metavar="KEY=VALUE", help="any consumer config")
    c.set_defaults(handler=run_consume)

    e = tools.add_parser("e2e", help="end-to-end latency, producer to consumer (EndToEndLatency)",
                         description="Produce at --rate records/s and time each record until a consumer "
                         "polls it.")  # fmt: skip
    e.add_argument("--topic", required=True)
    e.add_argument("--num-records", type=int, required=True, metavar="N")
    e.add_argument("--rate", type=float, default=1000, metavar="R", help="records/s (default 1000), -1: unthrottled")
    e.add_argument("--acks", choices=ACKS, default="all", help="default all")
    e.add_argument("--record-size", type=int, default=100, metavar="B", help="default 100 (at least 24 are used)")
    e.add_argument("--timeout-ms", type=int, default=10000, metavar="T", help="give up after T ms without a record")
    e.add_argument("--producer-config", action="append", metavar="KEY=VALUE", help="any producer config")
    e.add_argument("--consumer-config", action="append", metavar="KEY=VALUE", help="any consumer config")
    e.add_argument("--consumer-process", action="store_true",
                   help="run the consumer in a process of its own, as a pipeline's consumer is: the producer and "
                   "the consumer then do not share one Python interpreter (docs/LATENCY.md)")  # fmt: skip
    e.set_defaults(handler=run_e2e)

    for sub in (p, c, e):
        sub.add_argument("--json", action="store_true", help="print a JSON object as the last stdout line")
        add_progress_option(sub)
        add_bootstrap_option(sub)


def _positive(value: int, option: str) -> None:
    if value <= 0:
        raise CliError(f"{option} must be at least 1, got {value}")


def _client(kind: str, config: dict[str, object]) -> Any:
    import odradek
    from odradek.cli_support import with_command_config

    try:
        return getattr(odradek, kind)(with_command_config(kind.lower(), config))
    except ConfigError as exc:
        raise CliError(str(exc)) from None


def _recorder(args: argparse.Namespace, verb: str, **options: Any) -> Recorder:
    """The run's Recorder, with a live progress line when wanted (``--progress``, or stderr a terminal)."""
    recorder = Recorder(verb, **options)
    recorder.progress = Progress(verb, args.num_records, enabled=wanted(args.progress), clock=recorder.clock)
    return recorder


def _finish(args: argparse.Namespace, line: str, doc: dict[str, Any], problems: list[str],
            recorder: Recorder | None = None) -> int:  # fmt: skip
    if recorder is not None and recorder.progress is not None:
        recorder.progress.update(recorder.records, force=True)
        recorder.progress.close()
    print(line, flush=True)
    for problem in problems:
        print(f"odradek perf: {problem}", file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps(doc), flush=True)
    return 1 if problems else 0


def _reason(error: BaseException | None) -> str:
    if isinstance(error, OdradekError):
        return error_sentence(error)
    return str(error) or type(error).__name__


# -------------------------------------------------------------------------------------------- produce


def run_produce(args: argparse.Namespace) -> int:
    _positive(args.num_records, "--num-records")
    if args.record_size < 0:
        raise CliError(f"--record-size must not be negative, got {args.record_size}")
    every = args.latency_sample_every
    if every is None:
        every = default_sample_every(args.num_records)
    _positive(every, "--latency-sample-every")
    servers = bootstrap_servers(args)
    options = {"acks": args.acks, "batch.size": args.batch_size, "linger.ms": args.linger_ms,
               "compression.type": args.compression}  # fmt: skip
    config = producer_config(servers, options, parse_key_values(args.producer_config, "--producer-config"))
    recorder = _recorder(args, "sent")
    with reaching(servers):
        topic_partitions(servers, args.topic)  # a clear error for a missing topic, before any timing
        producer = _client("Producer", config)
        try:
            run = ProduceRun(args.topic, args.num_records, args.record_size, args.throughput, every)
            result = produce(producer, run, recorder)
        finally:
            producer.close()
    latency = latency_summary(recorder.latencies_ms)
    nbytes = result.delivered * args.record_size
    problems = []
    if result.failed:
        problems.append(f"{result.failed} of {args.num_records} records failed: {_reason(result.first_error)}")
    doc = result_document(result.delivered, nbytes, result.seconds, latency, record_size=args.record_size,
                          errors=result.failed, latency_sample_every=every,
                          latency_samples=result.latency_samples)  # fmt: skip
    line = summary_line("sent", result.delivered, nbytes, result.seconds, latency, every)
    return _finish(args, line, doc, problems, recorder)


# -------------------------------------------------------------------------------------------- consume


def consumer_config(servers: str, offset_reset: str, overrides: dict[str, str]) -> dict[str, object]:
    config: dict[str, object] = {"bootstrap.servers": servers, "auto.offset.reset": offset_reset,
                                 "enable.auto.commit": False}  # fmt: skip
    config.update(overrides)
    return config


def run_consume(args: argparse.Namespace) -> int:
    _positive(args.num_records, "--num-records")
    servers = bootstrap_servers(args)
    config = consumer_config(servers, "earliest", parse_key_values(args.consumer_config, "--consumer-config"))
    recorder = _recorder(args, "received", keep_latencies=False)
    with reaching(servers):
        partitions = topic_partitions(servers, args.topic)
        consumer = _client("Consumer", config)
        try:
            consumer.assign(partitions)
            result = consume(consumer, args.num_records, args.timeout_ms / 1000, recorder)
        finally:
            consumer.close()
    problems = []
    if result.timed_out:
        problems.append(f"only {result.records} of {args.num_records} records arrived "
                        f"(none for {args.timeout_ms} ms)")  # fmt: skip
    doc = result_document(result.records, result.bytes, result.seconds, None)
    line = summary_line("received", result.records, result.bytes, result.seconds, None)
    return _finish(args, line, doc, problems, recorder)


# ------------------------------------------------------------------------------------------------ e2e


def run_e2e(args: argparse.Namespace) -> int:
    _positive(args.num_records, "--num-records")
    trace.set_role("perf-e2e")  # log.trace, with ODRADEK_LATENCY_TRACE set
    sys.setswitchinterval(E2E_SWITCH_INTERVAL_S)  # Python's 5 ms default shows up in the measured latency
    servers = bootstrap_servers(args)
    consumer_cfg = consumer_config(servers, "latest", parse_key_values(args.consumer_config, "--consumer-config"))
    producer_cfg = producer_config(servers, {"acks": args.acks, "linger.ms": 0},
                                   parse_key_values(args.producer_config, "--producer-config"))  # fmt: skip
    recorder = _recorder(args, "received")
    with reaching(servers):
        partitions = topic_partitions(servers, args.topic)
        if args.consumer_process:
            return _e2e_with_consumer_process(args, partitions, consumer_cfg, producer_cfg, recorder)
        consumer = _client("Consumer", consumer_cfg)
        try:
            position_at_end(consumer, partitions)
            producer = _client("Producer", producer_cfg)
            try:
                _warm_up(producer, args.topic, args.timeout_ms / 1000)
                # What the imports and the clients built stays out of the collector's scans, as in the broker: a
                # full collection of it paused the tool ~10 ms about a second into every run (a p99 outlier).
                gc.freeze()
                thread, errors, first = _e2e_run(args, producer, consumer, recorder)
            finally:
                producer.close()
        finally:
            consumer.close()
    return _e2e_report(args, thread, errors, first, recorder)


def _e2e_with_consumer_process(args: argparse.Namespace, partitions: list[Any], consumer_cfg: dict[str, object],
                               producer_cfg: dict[str, object], recorder: Recorder) -> int:  # fmt: skip
    """``--consumer-process``: the consumer positioned at the end in its child first, then the same run."""
    from odradek.cli_support import with_command_config

    run_id = new_run_id()
    child = ConsumerProcess(with_command_config("consumer", consumer_cfg), partitions, run_id, args.num_records,
                            args.timeout_ms / 1000)  # fmt: skip
    errors = SendErrors(time.perf_counter_ns)
    try:
        producer = _client("Producer", producer_cfg)
        try:
            _warm_up(producer, args.topic, args.timeout_ms / 1000)
            gc.freeze()
            first = e2e_produce(producer, args.topic, run_id, args.num_records, args.record_size, args.rate,
                                time.perf_counter_ns, errors)  # fmt: skip
        finally:
            producer.close()
        child.finish(args.timeout_ms / 1000, recorder)
    finally:
        child.close()
    return _e2e_report(args, child, errors, first, recorder)


def _warm_up(producer: Any, topic: str, timeout_s: float) -> None:
    """One untimed record first (the consumer skips it: shorter than the e2e header), so that the metadata
    look-up, the connection to the leader and the producer id are not in the first timed records' latency
    (they made the p99.9 of a 5,000-record run ~100 ms)."""
    try:
        producer.send(topic, b"warm-up").result(timeout=timeout_s)
    except Exception as exc:
        raise CliError(f"the warm-up record could not be sent: {_reason(exc)}") from None


def _e2e_run(args: argparse.Namespace, producer: Any, consumer: Any,
             recorder: Recorder) -> tuple[E2EConsumer, SendErrors, float]:  # fmt: skip
    run_id = new_run_id()
    thread = E2EConsumer(consumer, run_id, args.num_records, recorder, time.perf_counter_ns)
    thread.start()
    errors = SendErrors(time.perf_counter_ns)
    try:
        first = e2e_produce(producer, args.topic, run_id, args.num_records, args.record_size, args.rate,
                            time.perf_counter_ns, errors)  # fmt: skip
        _await_consumer(thread, recorder, args.timeout_ms / 1000)
    finally:
        thread.stop.set()
        thread.join(5.0)
    return thread, errors, first


def _await_consumer(thread: E2EConsumer, recorder: Recorder, idle_s: float) -> None:
    """Wait for the consumer thread to see every record; give up after ``idle_s`` without progress."""
    seen, since = recorder.records, time.monotonic()
    while thread.is_alive():
        thread.join(0.1)
        if recorder.records != seen:
            seen, since = recorder.records, time.monotonic()
        elif time.monotonic() - since >= idle_s:
            return


def _e2e_report(args: argparse.Namespace, thread: E2EConsumer | ConsumerProcess, errors: SendErrors, first: float,
                recorder: Recorder) -> int:  # fmt: skip
    if thread.error is not None:
        raise CliError(f"the e2e consumer failed: {_reason(thread.error)}")
    received = recorder.records
    seconds = max(0.0, recorder.last_at - first) if received else 0.0
    latency = latency_summary(recorder.latencies_ms)
    problems = []
    if errors.count:
        problems.append(f"{errors.count} of {args.num_records} records failed: {_reason(errors.first)}")
    lost = args.num_records - received - errors.count
    if lost > 0:
        problems.append(f"{lost} delivered records never reached the consumer (waited {args.timeout_ms} ms)")
    doc = result_document(received, recorder.bytes, seconds, latency, sent=args.num_records, errors=errors.count,
                          duplicates=thread.duplicates, ack_latency_ms=latency_summary(errors.acks_ms))  # fmt: skip
    return _finish(args, summary_line("received", received, recorder.bytes, seconds, latency), doc, problems, recorder)
