"""Helpers the tests (and the process benchmarks in ``bench/``) use to run real processes on 127.0.0.1.

- ``tests.support.launcher``: ``odradek controller`` processes (``ControllerProcess``, ``LocalQuorum``) and
  ``wait_until``, the bounded wait every test uses.
- ``tests.support.quorum_node``: one Raft voter as its own process, driven by JSON lines (crash tests of
  the metadata quorum, ``bench/raft_quorum.py``).
"""
