"""Kafka's RecordBatch v2, byte for byte: header, builder, reader and compression codecs.

Producers build batches (:class:`BatchBuilder`, or :func:`build_batch` for the common case); the
broker only validates headers and CRCs (:func:`validate_batch`) and patches offsets; consumers decode
(:func:`read_batch`, :func:`iter_records`). Everything here is pure: bytes in, bytes or records out.
"""

from log.record.builder import BatchBuilder, assemble_batch, batch_attributes, build_batch, encode_headers
from log.record.compression import (
    CODEC_NAMES,
    DEFAULT_MAX_DECOMPRESSED_BYTES,
    GZIP,
    LZ4,
    NONE,
    SNAPPY,
    SUPPORTED_CODECS,
    ZSTD,
    codec_from_name,
    codec_name,
    compress,
    decompress,
)
from log.record.header import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    iter_batches,
    parse_header,
    patch_base_offset,
    patch_partition_leader_epoch,
    validate_batch,
)
from log.record.reader import (
    CONTROL_TYPE_ABORT,
    CONTROL_TYPE_COMMIT,
    Record,
    iter_batches_with_records,
    iter_records,
    read_batch,
)

__all__ = [
    "CODEC_NAMES",
    "CONTROL_TYPE_ABORT",
    "CONTROL_TYPE_COMMIT",
    "DEFAULT_MAX_DECOMPRESSED_BYTES",
    "GZIP",
    "HEADER_SIZE",
    "LOG_OVERHEAD",
    "LZ4",
    "NONE",
    "SNAPPY",
    "SUPPORTED_CODECS",
    "ZSTD",
    "BatchBuilder",
    "BatchHeader",
    "Record",
    "assemble_batch",
    "batch_attributes",
    "build_batch",
    "codec_from_name",
    "codec_name",
    "compress",
    "decompress",
    "encode_headers",
    "iter_batches",
    "iter_batches_with_records",
    "iter_records",
    "parse_header",
    "patch_base_offset",
    "patch_partition_leader_epoch",
    "read_batch",
    "validate_batch",
]
