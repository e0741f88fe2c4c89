"""``odradek dump-log FILE...``: print the contents of segment files, like Kafka's kafka-dump-log.

Reads ``.log`` files (a plain sequence of RecordBatch v2 batches), ``.index`` files (8-byte entries:
relative offset int32, position int32) and ``.timeindex`` files (12-byte entries: timestamp int64,
relative offset int32). The base offset of an index comes from its file name.
"""

from __future__ import annotations

import argparse
import struct
from pathlib import Path
from typing import Any

from log.errors import LogError
from log.record.compression import codec_name
from log.record.header import batch_size_at
from log.record.reader import read_batch
from odradek.errors import CliError

OFFSET_INDEX_ENTRY = struct.Struct(">iI")  # relative offset, file position
TIME_INDEX_ENTRY = struct.Struct(">qi")  # timestamp, relative offset


def add_dump_log_parser(commands: Any) -> None:
    parser = commands.add_parser("dump-log", help="print the batches of .log files and the entries of indexes")
    parser.add_argument("files", nargs="+", metavar="FILE", help=".log, .index or .timeindex files")
    parser.add_argument("--print-data-log", action="store_true", help="print every record, not only batches")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    status = 0
    for name in args.files:
        path = Path(name)
        if not path.is_file():
            raise CliError(f"no such file: {path}")
        print(f"Dumping {path}")
        data = path.read_bytes()
        if path.suffix == ".log":
            status |= dump_segment(data, args.print_data_log)
        elif path.suffix == ".index":
            dump_index(data, base_offset_of(path), OFFSET_INDEX_ENTRY, "offset: {o} position: {v}")
        elif path.suffix == ".timeindex":
            dump_index(data, base_offset_of(path), TIME_INDEX_ENTRY, "timestamp: {v} offset: {o}")
        else:
            raise CliError(f"{path}: not a .log, .index or .timeindex file")
    return status


def base_offset_of(path: Path) -> int:
    try:
        return int(path.stem)
    except ValueError:
        raise CliError(f"{path}: the file name must be the base offset, like 00000000000000000000") from None


def dump_segment(data: bytes, print_records: bool) -> int:
    """Print each batch (and, if asked, each record); returns 1 after a corrupt or torn batch, else 0."""
    pos = 0
    while pos < len(data):
        size = batch_size_at(data, pos)
        if size is None or pos + size > len(data):
            print(f"Found {len(data) - pos} trailing bytes at position {pos}: a torn batch")
            return 1
        try:
            header, records = read_batch(data, pos)
        except LogError as exc:
            print(f"Found a corrupt batch at position {pos}: {exc}")
            return 1
        print(
            f"baseOffset: {header.base_offset} lastOffset: {header.last_offset} count: {header.records_count} "
            f"baseSequence: {header.base_sequence} lastSequence: {header.last_sequence} "
            f"producerId: {header.producer_id} producerEpoch: {header.producer_epoch} "
            f"partitionLeaderEpoch: {header.partition_leader_epoch} isTransactional: {header.is_transactional} "
            f"isControl: {header.is_control} position: {pos} "
            f"{'LogAppendTime' if header.is_log_append_time else 'CreateTime'}: {header.max_timestamp} "
            f"size: {header.size_bytes} magic: {header.magic} compresscodec: {codec_name(header.compression)} "
            f"crc: {header.crc} isvalid: true"
        )
        if print_records:
            for r in records:
                keys = ",".join(k for k, _ in r.headers)
                print(
                    f"| offset: {r.offset} CreateTime: {r.timestamp} "
                    f"keySize: {-1 if r.key is None else len(r.key)} "
                    f"valueSize: {-1 if r.value is None else len(r.value)} headerKeys: [{keys}]"
                    + ("" if r.key is None else f" key: {r.key.decode('utf-8', 'replace')}")
                    + ("" if r.value is None else f" payload: {r.value.decode('utf-8', 'replace')}")
                )
        pos += size
    return 0


def dump_index(data: bytes, base_offset: int, entry: struct.Struct, line: str) -> None:
    usable = len(data) - len(data) % entry.size
    for rel, value in _entries(data[:usable], entry):
        print(line.format(o=base_offset + rel, v=value))
    if usable != len(data):
        print(f"{len(data) - usable} trailing bytes do not make a whole entry")


def _entries(data: bytes, entry: struct.Struct) -> list[tuple[int, int]]:
    out = []
    for a, b in entry.iter_unpack(data):
        # offset index: (relative offset, position); time index: (timestamp, relative offset)
        out.append((a, b) if entry is OFFSET_INDEX_ENTRY else (b, a))
    return out
