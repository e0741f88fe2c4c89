"""Benchmarks: programs that print figures and assert nothing (docs/CONVENTIONS.md §13).

Run from the repository's root, ``python -m bench.<name> [--json]``; each module's docstring says what it
measures and how. Not part of the product: nothing in ``odradek``, ``log``, ``metadata``, ``controller``,
``broker`` or ``replication`` imports ``bench``, and it is not installed with the package. The user's
load tool is ``odradek perf`` (Kafka's ``kafka-producer-perf-test``), which is product code.
"""
