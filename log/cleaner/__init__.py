"""Log compaction (Kafka's log cleaner): see ``log/cleaner/README.md`` and the module docstrings.

Modules: ``plan`` (what is cleanable, dirty ratio, grouping; pure), ``offset_map`` (key -> latest
offset; pure), ``keyscan`` (keys and offsets of a batch, values skipped; pure), ``retention`` (which
records of a batch survive, rebuilt batches; pure), ``keys`` (the append-time key check), ``swap``
(crash-safe file swap), ``cleaner`` (one pass over one log), ``manager`` (which log next,
first-dirty-offset checkpoints, cleaner threads). This package is imported by ``log.log`` only for
``keys``; import the others from their modules.
"""
